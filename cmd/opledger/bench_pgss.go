package main

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// setupPGSS makes pg_stat_statements usable when -pgss asks for it: the
// server must load it (shared_preload_libraries; a private cluster is
// started so), and the extension is created if absent and allowed.
// Without it, the bench says so and goes on.
func (b *bench) setupPGSS(ctx context.Context) error {
	var libs string
	var version int
	if err := b.db.QueryRow(ctx, benchTag+`SELECT current_setting('shared_preload_libraries'), current_setting('server_version_num')::int`).Scan(&libs, &version); err != nil {
		return fmt.Errorf("bench: settings: %w", err)
	}
	loaded := slices.ContainsFunc(strings.Split(libs, ","), func(s string) bool { return strings.TrimSpace(s) == "pg_stat_statements" })
	note := func(s string) {
		b.rep.PGSSNote = s
		fmt.Fprintf(b.out, "# pg_stat_statements: %s\n", s)
	}
	switch {
	case !b.cfg.PGSS:
		if loaded {
			note("loaded by this server; pass -pgss for statements, rows, execution time and WAL per operation")
		}
		return nil
	case !loaded:
		note("not loaded by this server (shared_preload_libraries), no per-statement figures; a private cluster (no DATABASE_URL) loads it with -pgss")
		return nil
	case version < 130000:
		note("needs PostgreSQL 13 or later for its WAL columns, skipped")
		return nil
	}
	if _, err := b.db.Exec(ctx, benchTag+`CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
		note(fmt.Sprintf("the extension cannot be created here (%v), skipped", err))
		return nil
	}
	if _, err := b.db.Exec(ctx, benchTag+`SELECT 1 FROM pg_stat_statements LIMIT 1`); err != nil {
		note(fmt.Sprintf("cannot be read here (%v), skipped", err))
		return nil
	}
	b.pgss = true
	return nil
}

// resetPGSS forgets what pg_stat_statements counted so far.
func (b *bench) resetPGSS(ctx context.Context) error {
	if !b.pgss {
		return nil
	}
	if _, err := b.db.Exec(ctx, benchTag+`SELECT pg_stat_statements_reset()`); err != nil {
		b.pgss = false
		b.rep.PGSSNote = fmt.Sprintf("cannot be reset here (%v), skipped", err)
		fmt.Fprintf(b.out, "# pg_stat_statements: %s\n", b.rep.PGSSNote)
	}
	return nil
}

// snapshotPGSS reads what pg_stat_statements counted in this database
// since the reset, except the bench's own statements, per operation.
func (b *bench) snapshotPGSS(ctx context.Context, ops int) (*pgssReport, error) {
	if !b.pgss {
		return nil, nil
	}
	rows, err := b.db.Query(ctx, benchTag+`
		SELECT s.calls, s.rows, s.total_exec_time, s.total_plan_time, s.plans, s.wal_records, s.wal_fpi, s.wal_bytes::float8, s.query
		FROM pg_stat_statements s
		WHERE s.dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND s.query NOT LIKE $1
		ORDER BY s.total_exec_time DESC`, strings.TrimSpace(benchTag)+"%")
	if err != nil {
		return nil, fmt.Errorf("bench: pg_stat_statements: %w", err)
	}
	type stmt struct {
		calls, rows, plans, walRecords, walFPI int64
		execMs, planMs, walBytes               float64
		query                                  string
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (stmt, error) {
		var s stmt
		err := r.Scan(&s.calls, &s.rows, &s.execMs, &s.planMs, &s.plans, &s.walRecords, &s.walFPI, &s.walBytes, &s.query)
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("bench: pg_stat_statements: %w", err)
	}
	n := float64(ops)
	p := &pgssReport{Ops: ops}
	var totalMs float64
	for _, s := range all {
		totalMs += s.execMs
	}
	for i, s := range all {
		p.StatementsPerOp += float64(s.calls) / n
		if txControl.MatchString(s.query) {
			p.TransactionControlPerOp += float64(s.calls) / n
		}
		p.RowsPerOp += float64(s.rows) / n
		p.ExecMsPerOp += s.execMs / n
		p.PlanMsPerOp += s.planMs / n
		p.PlansPerOp += float64(s.plans) / n
		p.WALRecordsPerOp += float64(s.walRecords) / n
		p.WALFPIPerOp += float64(s.walFPI) / n
		p.WALBytesPerOp += s.walBytes / n
		if i < 10 {
			p.Top = append(p.Top, pgssStatement{Query: oneLine(s.query), Calls: s.calls, CallsPerOp: float64(s.calls) / n,
				TotalMs: s.execMs, MsPerOp: s.execMs / n, MeanMs: s.execMs / float64(max(s.calls, 1)), MeanPlanMs: s.planMs / float64(max(s.plans, 1)), PlansPerCall: float64(s.plans) / float64(max(s.calls, 1)), RowsPerOp: float64(s.rows) / n,
				WALRecordsPerOp: float64(s.walRecords) / n, WALBytesPerOp: s.walBytes / n, SharePercent: 100 * s.execMs / max(totalMs, 1e-9)})
		}
	}
	return p, nil
}

var (
	txControl  = regexp.MustCompile(`(?i)^\s*(BEGIN|COMMIT|ROLLBACK|START TRANSACTION|SAVEPOINT|RELEASE|END)\b`)
	whitespace = regexp.MustCompile(`\s+`)
)

// oneLine is a statement on one line, cut at 200 bytes.
func oneLine(q string) string {
	q = strings.TrimSpace(whitespace.ReplaceAllString(q, " "))
	if len(q) > 200 {
		q = q[:200] + "…"
	}
	return q
}

// pgssReport is pg_stat_statements' count of one run, per operation.
type pgssReport struct {
	Ops                     int     `json:"ops"`
	StatementsPerOp         float64 `json:"statements_per_op"`
	TransactionControlPerOp float64 `json:"transaction_control_per_op"`
	RowsPerOp               float64 `json:"rows_per_op"`
	ExecMsPerOp             float64 `json:"exec_ms_per_op"`
	// PlanMsPerOp and PlansPerOp count planning, when the server tracks it
	// (pg_stat_statements.track_planning, set by -pgss in a private
	// cluster; 0 otherwise). A cached plan is not planned again.
	PlanMsPerOp     float64         `json:"plan_ms_per_op"`
	PlansPerOp      float64         `json:"plans_per_op"`
	WALRecordsPerOp float64         `json:"wal_records_per_op"`
	WALFPIPerOp     float64         `json:"wal_fpi_per_op"`
	WALBytesPerOp   float64         `json:"wal_bytes_per_op"`
	Top             []pgssStatement `json:"top"`
}

type pgssStatement struct {
	Query           string  `json:"query"`
	Calls           int64   `json:"calls"`
	CallsPerOp      float64 `json:"calls_per_op"`
	TotalMs         float64 `json:"total_ms"`
	MsPerOp         float64 `json:"ms_per_op"`
	MeanMs          float64 `json:"mean_ms"`
	MeanPlanMs      float64 `json:"mean_plan_ms"`
	PlansPerCall    float64 `json:"plans_per_call"`
	RowsPerOp       float64 `json:"rows_per_op"`
	WALRecordsPerOp float64 `json:"wal_records_per_op"`
	WALBytesPerOp   float64 `json:"wal_bytes_per_op"`
	SharePercent    float64 `json:"share_percent"`
}

func (p *pgssReport) print(w io.Writer, indent string) {
	if p == nil {
		return
	}
	fmt.Fprintf(w, "%spg_stat_statements per operation: %.1f statements (%.1f of them BEGIN/COMMIT), %.1f rows, %.3f ms execution, %.3f ms planning (%.2f plans), %.1f WAL records (%.2f full-page images), %s WAL\n",
		indent, p.StatementsPerOp, p.TransactionControlPerOp, p.RowsPerOp, p.ExecMsPerOp, p.PlanMsPerOp, p.PlansPerOp, p.WALRecordsPerOp, p.WALFPIPerOp, bytesIEC(int64(p.WALBytesPerOp)))
	fmt.Fprintf(w, "%stop statements by total execution time:  calls/op   ms/op  mean ms  plans/call  plan ms  rows/op  WAL rec/op  WAL B/op  share  statement\n", indent)
	for _, s := range p.Top {
		fmt.Fprintf(w, "%s  %47.2f %7.3f %8.3f %11.2f %8.3f %8.2f %11.2f %9.0f %5.1f%%  %s\n", indent, s.CallsPerOp, s.MsPerOp, s.MeanMs, s.PlansPerCall, s.MeanPlanMs, s.RowsPerOp,
			s.WALRecordsPerOp, s.WALBytesPerOp, s.SharePercent, clip(s.Query, 110))
	}
}

// printShort is print for a steady interval: the figures per operation
// and the top statements by execution time per operation.
func (p *pgssReport) printShort(w io.Writer, indent string, top int) {
	fmt.Fprintf(w, "%spg_stat_statements per operation: %.2f statements, %.1f rows, %.3f ms execution, %.1f WAL records, %s WAL\n",
		indent, p.StatementsPerOp, p.RowsPerOp, p.ExecMsPerOp, p.WALRecordsPerOp, bytesIEC(int64(p.WALBytesPerOp)))
	for _, s := range p.Top[:min(top, len(p.Top))] {
		fmt.Fprintf(w, "%s  %.2f calls/op, %.3f ms/op (mean %.3f ms), %.2f rows/op  %s\n", indent, s.CallsPerOp, s.MsPerOp, s.MeanMs, s.RowsPerOp, clip(s.Query, 90))
	}
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
