package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// benchSchema holds the bench's own tables (the commit-rate table, the
// baseline's idempotency keys), out of schema public, whose every table
// the migrator wants a grant decision for.
const benchSchema = "opledger_bench"

// createScratchTable creates table, of single-row writes (id, v), in the
// bench's schema.
func createScratchTable(ctx context.Context, db interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, table string) error {
	if _, err := db.Exec(ctx, benchTag+`CREATE SCHEMA IF NOT EXISTS `+benchSchema); err != nil {
		return err
	}
	_, err := db.Exec(ctx, benchTag+`CREATE TABLE `+table+` (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v text NOT NULL)`)
	return err
}

// pgCommitRate measures single-row INSERT commits per second with conns
// connections, each in autocommit, for d, into a table of this run that it
// drops afterwards.
func pgCommitRate(ctx context.Context, url string, conns int, d time.Duration) (float64, error) {
	setup, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, err
	}
	defer setup.Close(context.WithoutCancel(ctx))
	table := benchSchema + ".commits_" + strings.ToLower(strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "_"))
	if err := createScratchTable(ctx, setup, table); err != nil {
		return 0, fmt.Errorf("bench: commit rate: %w", err)
	}
	defer func() { _, _ = setup.Exec(context.WithoutCancel(ctx), benchTag+`DROP TABLE `+table) }()
	// Every connection is opened before the window starts, so that a slow
	// machine's connection set-up is not counted as time without commits,
	// and each commits at least once, so that the rate is never zero.
	conn := make([]*pgx.Conn, max(conns, 1))
	defer func() {
		for _, c := range conn {
			if c != nil {
				_ = c.Close(context.WithoutCancel(ctx))
			}
		}
	}()
	for i := range conn {
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			return 0, fmt.Errorf("bench: commit rate: %w", err)
		}
		conn[i] = c
	}
	var total atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, len(conn))
	start := time.Now()
	deadline := start.Add(d)
	for _, c := range conn {
		wg.Go(func() {
			for {
				if _, err := c.Exec(ctx, benchTag+`INSERT INTO `+table+` (v) VALUES ($1)`, "x"); err != nil {
					errs <- err
					return
				}
				total.Add(1)
				if !time.Now().Before(deadline) {
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, fmt.Errorf("bench: commit rate: %w", err)
	}
	return float64(total.Load()) / time.Since(start).Seconds(), nil
}

// stageBreakdown reads, from the ledger's own event times, how long the
// operations of a workflow spent between recording and the dispatcher's
// claim (ingest commit → relay → JetStream → dispatcher) and between the
// claim and the recorded outcome (vendor call + recording).
func (b *bench) stageBreakdown(ctx context.Context, wf string) (*stageReport, error) {
	var s stageReport
	err := b.db.QueryRow(ctx, benchTag+`
		WITH t AS (
			SELECT o.id,
			       max(e.at) FILTER (WHERE e.event = 'create')   AS created,
			       max(e.at) FILTER (WHERE e.event = 'dispatch') AS claimed,
			       max(e.at) FILTER (WHERE e.event = 'succeed')  AS done
			FROM operations o JOIN operation_events e ON e.operation_id = o.id
			WHERE o.workflow_id = $1 GROUP BY o.id)
		SELECT coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM claimed - created)) * 1000, 0),
		       coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM claimed - created)) * 1000, 0),
		       coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM done - claimed)) * 1000, 0),
		       coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM done - claimed)) * 1000, 0),
		       coalesce(extract(epoch FROM max(created) - min(created)) * 1000, 0)
		FROM t`, wf).Scan(&s.RecordedToClaimedP50, &s.RecordedToClaimedP99, &s.ClaimedToOutcomeP50, &s.ClaimedToOutcomeP99, &s.RecordedOverMs)
	if err != nil {
		return nil, fmt.Errorf("bench: stage breakdown: %w", err)
	}
	return &s, nil
}

// clusterCounters are cluster-wide counters that are exact at once (no
// statistics flush delay): the WAL position and the next transaction id.
type clusterCounters struct {
	walBytes int64
	nextXID  int64
	at       time.Time
}

func (b *bench) clusterCounters(ctx context.Context) (clusterCounters, error) {
	c := clusterCounters{at: time.Now()}
	err := b.db.QueryRow(ctx, benchTag+`SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint,
		pg_snapshot_xmax(pg_current_snapshot())::text::bigint`).Scan(&c.walBytes, &c.nextXID)
	if err != nil {
		return c, fmt.Errorf("bench: WAL position and transaction ids: %w", err)
	}
	return c, nil
}

// clusterCost divides what the cluster wrote since before by ops.
func (b *bench) clusterCost(ctx context.Context, before clusterCounters, ops int) (*clusterCostReport, error) {
	after, err := b.clusterCounters(ctx)
	if err != nil {
		return nil, err
	}
	secs := after.at.Sub(before.at).Seconds()
	return &clusterCostReport{Ops: ops,
		WriteTransactionsPerOp: float64(after.nextXID-before.nextXID) / float64(ops),
		WALBytesPerOp:          float64(after.walBytes-before.walBytes) / float64(ops),
		WALBytesPerSec:         float64(after.walBytes-before.walBytes) / secs}, nil
}

// hotTables are the ledger's tables that every operation writes.
var hotTables = []string{"operations", "outbox", "outbox_batches", "inbox", "operation_events", "attempts", "entity_leases"}

// tableStat is one table's size and tuple counts (pg_stat_user_tables).
type tableStat struct {
	Table      string `json:"table"`
	LiveTuples int64  `json:"n_live_tup"`
	DeadTuples int64  `json:"n_dead_tup"`
	TotalBytes int64  `json:"total_bytes"`
	HeapBytes  int64  `json:"heap_bytes"`
	IndexBytes int64  `json:"index_bytes"`
	Vacuums    int64  `json:"vacuums"`
}

// tableStats reads size and tuple counts of tables (those that exist).
func (b *bench) tableStats(ctx context.Context, tables []string) ([]tableStat, error) {
	rows, err := b.db.Query(ctx, benchTag+`
		SELECT s.relname, s.n_live_tup, s.n_dead_tup, pg_total_relation_size(s.relid), pg_relation_size(s.relid),
		       pg_indexes_size(s.relid), s.autovacuum_count + s.vacuum_count
		FROM pg_stat_user_tables s
		WHERE s.schemaname = 'public' AND s.relname = ANY($1)
		ORDER BY array_position($1, s.relname::text)`, tables)
	if err != nil {
		return nil, fmt.Errorf("bench: table statistics: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (tableStat, error) {
		var t tableStat
		err := r.Scan(&t.Table, &t.LiveTuples, &t.DeadTuples, &t.TotalBytes, &t.HeapBytes, &t.IndexBytes, &t.Vacuums)
		return t, err
	})
}

func printTables(w io.Writer, indent string, ts []tableStat) {
	for _, t := range ts {
		fmt.Fprintf(w, "%s%-17s %12d live %10d dead (%4.1f%%)  %9s total = %9s heap + %9s indexes + toast, %d vacuums\n", indent, t.Table,
			t.LiveTuples, t.DeadTuples, pct(t.DeadTuples, t.LiveTuples+t.DeadTuples), bytesIEC(t.TotalBytes), bytesIEC(t.HeapBytes),
			bytesIEC(t.IndexBytes), t.Vacuums)
	}
}

func pct(part, whole int64) float64 {
	if whole == 0 {
		return 0
	}
	return 100 * float64(part) / float64(whole)
}

// bytesIEC prints a size as people read it: 512 B, 1.5 kB, 12.0 MB, 3.2 GB
// (powers of 1024).
func bytesIEC(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, suffix := float64(n), []string{"kB", "MB", "GB", "TB"}
	i := -1
	for v >= unit && i < len(suffix)-1 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %s", v, suffix[i])
}
