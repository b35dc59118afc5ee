package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/opledger/opledger/internal/benchkit"
	"github.com/opledger/opledger/pkg/registry"
	"github.com/opledger/opledger/pkg/wire"
)

// preloadSpan is how far back the preloaded operations' creation times
// reach: they are spread evenly over the week before the hour before the
// run, as a ledger's history is.
const preloadSpan = 7 * 24 * time.Hour

// preloadWorkflowSize is how many operations share a preloaded workflow (a
// conversation with a few tool calls).
const preloadWorkflowSize = 4

// preloadReport says what -preload built and how long it took.
type preloadReport struct {
	Ops int `json:"ops"`
	// Prefix starts every workflow, event and order id of the preload.
	Prefix   string `json:"prefix"`
	Template string `json:"template_operation_id"`
	// RowsPerOp is how many rows each operation has in each table: the
	// template's, which the pipeline wrote.
	RowsPerOp        map[string]int `json:"rows_per_op"`
	Rows             int64          `json:"rows"`
	Workers          int            `json:"workers"`
	Chunk            int            `json:"chunk"`
	ForeignKeyChecks bool           `json:"foreign_key_checks"`
	CopySeconds      float64        `json:"copy_seconds"`
	VacuumSeconds    float64        `json:"vacuum_analyze_seconds"`
	// CheckpointSeconds is 0 when CHECKPOINT was not allowed.
	CheckpointSeconds float64     `json:"checkpoint_seconds"`
	TotalSeconds      float64     `json:"total_seconds"`
	RowsPerSec        float64     `json:"rows_per_sec"`
	OpsPerSec         float64     `json:"ops_per_sec"`
	Tables            []tableStat `json:"tables"`
}

// preloadIntent is intent i of the preload with prefix: what an agent would
// have sent for the operation the preload writes.
func preloadIntent(prefix string, i int) wire.Intent {
	wf := fmt.Sprintf("%s_w%d", prefix, i/preloadWorkflowSize)
	return wire.Intent{Spec: wire.SpecIntent, EventID: fmt.Sprintf("%s:call_%d", wf, i), WorkflowID: wf, Tool: benchTool,
		Args: benchArgs(orderID(prefix, i), i)}
}

// preload builds a ledger of -preload completed operations, as the
// pipeline leaves them, with COPY from -preload-workers connections in
// transactions of -preload-chunk operations; then VACUUM (ANALYZE) and
// CHECKPOINT, so that the measurements after it meet neither a table
// autovacuum must first scan nor a checkpoint flushing the load.
//
// The rows are not written by hand: one real operation goes through the
// pipeline first (the template), and every preloaded operation is a copy
// of each of its rows in operations and in every table with an
// operation_id column (its events, its attempt, its inbox row; not the
// outbox, whose rows the relay deletes once they are published), with
// what identifies it replaced: the workflow, event and order ids; the
// arguments, their hash, the business key and entity id as the registry
// prepares them; the hash of the intent's bytes; the trace id; every
// ULID-shaped id (operation, attempt, the vendor's request and charge
// ids); and every time moved to the copy's creation time. So columns,
// states, versions, key formats and tenants are the pipeline's, also after
// the schema changes.
func (b *bench) preload(ctx context.Context) error {
	began := time.Now()
	prefix := benchkit.RunID(began) + "_pre"
	tpl, err := b.template(ctx)
	if err != nil {
		return err
	}
	tool, err := b.d.Registry.Tool(benchTool)
	if err != nil {
		return err
	}
	p := &preloader{tpl: tpl, tool: tool, prefix: prefix, n: b.cfg.Preload,
		end: began.Add(-time.Hour), spacing: preloadSpan / time.Duration(b.cfg.Preload)}
	p.start = p.end.Add(-time.Duration(b.cfg.Preload) * p.spacing)
	rep := &preloadReport{Ops: b.cfg.Preload, Prefix: prefix, Template: tpl.opID, RowsPerOp: map[string]int{},
		Workers: b.cfg.PreloadWorkers, Chunk: b.cfg.PreloadChunk}
	for _, t := range tpl.tables {
		rep.RowsPerOp[t.name] = len(t.rows)
		rep.Rows += int64(len(t.rows)) * int64(b.cfg.Preload)
	}
	b.rep.Preload = rep
	fmt.Fprintf(b.out, "preload: %d operations with prefix %s, copies of operation %s (%s each) ...\n",
		b.cfg.Preload, prefix, tpl.opID, tpl.describe())

	copyStart := time.Now()
	fk, err := p.copyAll(ctx, b.d.Infra.DatabaseURL, b.cfg.PreloadWorkers, b.cfg.PreloadChunk, b.out)
	if err != nil {
		return err
	}
	rep.ForeignKeyChecks = fk
	rep.CopySeconds = time.Since(copyStart).Seconds()

	vacStart := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, len(tpl.tables))
	for i, t := range tpl.tables {
		wg.Go(func() {
			c, err := pgx.Connect(ctx, b.d.Infra.DatabaseURL)
			if err != nil {
				errs[i] = err
				return
			}
			defer c.Close(context.WithoutCancel(ctx))
			_, errs[i] = c.Exec(ctx, benchTag+`VACUUM (ANALYZE) `+pgx.Identifier{t.name}.Sanitize())
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("bench: preload: vacuum: %w", err)
	}
	rep.VacuumSeconds = time.Since(vacStart).Seconds()
	cpStart := time.Now()
	cpNote := ""
	if _, err := b.db.Exec(ctx, benchTag+`CHECKPOINT`); err != nil {
		cpNote = fmt.Sprintf(", no CHECKPOINT (%v)", err)
	} else {
		rep.CheckpointSeconds = time.Since(cpStart).Seconds()
		cpNote = fmt.Sprintf(", CHECKPOINT %s", time.Since(cpStart).Round(time.Millisecond))
	}
	rep.TotalSeconds = time.Since(began).Seconds()
	rep.RowsPerSec = float64(rep.Rows) / rep.CopySeconds
	rep.OpsPerSec = float64(rep.Ops) / rep.CopySeconds
	fkNote := "foreign keys not checked row by row (session_replication_role = replica: the copies are consistent by construction)"
	if fk {
		fkNote = "foreign keys checked row by row (session_replication_role needs a superuser)"
	}
	fmt.Fprintf(b.out, "preload: %d operations, %d rows in %s: COPY %s (%.0f rows/s, %.0f ops/s, %d connections, %s), VACUUM (ANALYZE) %s%s\n",
		rep.Ops, rep.Rows, time.Since(began).Round(time.Millisecond), time.Duration(rep.CopySeconds*float64(time.Second)).Round(time.Millisecond),
		rep.RowsPerSec, rep.OpsPerSec, rep.Workers, fkNote, time.Duration(rep.VacuumSeconds*float64(time.Second)).Round(time.Millisecond), cpNote)
	if rep.Tables, err = b.tableStats(ctx, hotTables); err != nil {
		return err
	}
	printTables(b.out, "  ", rep.Tables)
	return nil
}

// template is one operation the pipeline completed, every row of it.
type template struct {
	opID    string
	created time.Time
	tables  []*cloneTable // operations first
	// tokens are the values the copies replace, longest first within a
	// cell; new values come from cloneVals in the same order.
	tokens []token
}

func (t *template) describe() string {
	var parts []string
	for _, c := range t.tables {
		parts = append(parts, fmt.Sprintf("%d %s", len(c.rows), c.name))
	}
	return strings.Join(parts, ", ")
}

// cloneTable is one table's rows of the template and how to copy them.
type cloneTable struct {
	name  string
	cols  []string
	rows  [][]any
	plans [][]cell
}

type tokenKind int

const (
	tokEventID tokenKind = iota
	tokWorkflow
	tokOrder
	tokArgs
	tokArgsHash
	tokKey
	tokEntity
	tokDedupe
	tokPayloadHash
	tokTrace
	tokID // a ULID-shaped id: a new one, at the same offset from creation
)

type token struct {
	old  string
	kind tokenKind
	// prefix and at of a tokID.
	prefix string
	at     time.Time
}

// template runs one intent through the pipeline and reads its rows.
func (b *bench) template(ctx context.Context) (*template, error) {
	wf := b.wf("tpl")
	if _, err := benchRun(ctx, b.cl, wf, 1, 1); err != nil {
		return nil, fmt.Errorf("bench: preload template: %w", err)
	}
	in := benchIntent(wf, 0)
	t := &template{}
	if err := b.db.QueryRow(ctx, benchTag+`SELECT id, created_at FROM operations WHERE workflow_id = $1`, wf).Scan(&t.opID, &t.created); err != nil {
		return nil, fmt.Errorf("bench: preload template: %w", err)
	}
	rows, err := b.db.Query(ctx, benchTag+`
		SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_attribute a ON a.attrelid = c.oid
		WHERE n.nspname = 'public' AND c.relkind = 'r' AND a.attname = 'operation_id' AND NOT a.attisdropped AND c.relname <> 'outbox'
		ORDER BY c.relname`)
	if err != nil {
		return nil, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	for _, name := range append([]string{"operations"}, names...) {
		ct, err := b.templateRows(ctx, name, t.opID)
		if err != nil {
			return nil, err
		}
		if len(ct.rows) > 0 {
			t.tables = append(t.tables, ct)
		}
	}

	// What identifies the operation, from its own row and its inbox row.
	add := func(old string, k tokenKind) {
		if old != "" && !slices.ContainsFunc(t.tokens, func(x token) bool { return x.old == old }) {
			t.tokens = append(t.tokens, token{old: old, kind: k})
		}
	}
	ops := t.tables[0]
	col := func(ct *cloneTable, name string) string {
		if i := slices.Index(ct.cols, name); i >= 0 && len(ct.rows) > 0 {
			s, _ := ct.rows[0][i].(string)
			return s
		}
		return ""
	}
	add(in.EventID, tokEventID)
	add(col(ops, "args_canonical"), tokArgs)
	add(col(ops, "args_hash"), tokArgsHash)
	add(col(ops, "idempotency_key"), tokKey)
	add(col(ops, "entity_id"), tokEntity)
	add(col(ops, "dedupe_key"), tokDedupe)
	add(col(ops, "trace_id"), tokTrace)
	add(orderID(wf, 0), tokOrder)
	add(wf, tokWorkflow)
	for _, ct := range t.tables {
		add(col(ct, "payload_hash"), tokPayloadHash)
	}
	for _, ct := range t.tables {
		for _, r := range ct.rows {
			for _, v := range r {
				if s, ok := textOf(v); ok {
					for _, id := range benchkit.FindIDs(s) {
						add(id, tokID)
					}
				}
			}
		}
	}
	for i := range t.tokens {
		if tk := &t.tokens[i]; tk.kind == tokID {
			tk.prefix = tk.old[:strings.LastIndexByte(tk.old, '_')]
			tk.at, _ = benchkit.IDTime(tk.old)
		}
	}
	for _, ct := range t.tables {
		ct.plans = make([][]cell, len(ct.rows))
		for i, r := range ct.rows {
			for _, v := range r {
				ct.plans[i] = append(ct.plans[i], t.plan(v))
			}
		}
	}
	return t, nil
}

// templateRows reads table's rows of operation id, every column a COPY can
// set (not identity or generated ones), json as text.
func (b *bench) templateRows(ctx context.Context, table, id string) (*cloneTable, error) {
	rows, err := b.db.Query(ctx, benchTag+`
		SELECT a.attname, t.typname FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
		WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped AND a.attidentity = '' AND a.attgenerated = ''
		ORDER BY a.attnum`, pgx.Identifier{"public", table}.Sanitize())
	if err != nil {
		return nil, fmt.Errorf("bench: preload: columns of %s: %w", table, err)
	}
	ct := &cloneTable{name: table}
	var sel []string
	for rows.Next() {
		var name, typ string
		if err := rows.Scan(&name, &typ); err != nil {
			return nil, err
		}
		ct.cols = append(ct.cols, name)
		expr := pgx.Identifier{name}.Sanitize()
		if typ == "json" || typ == "jsonb" {
			expr += "::text"
		}
		sel = append(sel, expr)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	key := "operation_id"
	if table == "operations" {
		key = "id"
	}
	rows, err = b.db.Query(ctx, benchTag+`SELECT `+strings.Join(sel, ", ")+` FROM `+pgx.Identifier{"public", table}.Sanitize()+
		` WHERE `+pgx.Identifier{key}.Sanitize()+` = $1 ORDER BY ctid`, id)
	if err != nil {
		return nil, fmt.Errorf("bench: preload: rows of %s: %w", table, err)
	}
	defer rows.Close()
	for rows.Next() {
		v, err := rows.Values()
		if err != nil {
			return nil, err
		}
		ct.rows = append(ct.rows, v)
	}
	return ct, rows.Err()
}

// textOf is a cell's text, for text and bytea cells.
func textOf(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case []byte:
		return string(x), true
	}
	return "", false
}

type cellKind int

const (
	cellConst  cellKind = iota // the template's value
	cellTime                   // moved by the copy's offset
	cellToken                  // a token's new value
	cellPieces                 // text with tokens inside
)

type cell struct {
	kind  cellKind
	value any
	tok   int
	segs  []seg
	bytes bool // a bytea cell
}

// seg is a literal (tok < 0) or a token of a text cell.
type seg struct {
	lit string
	tok int
}

// plan says how to copy one template cell.
func (t *template) plan(v any) cell {
	if tm, ok := v.(time.Time); ok {
		return cell{kind: cellTime, value: tm}
	}
	s, ok := textOf(v)
	_, isBytes := v.([]byte)
	if !ok || s == "" {
		return cell{kind: cellConst, value: v}
	}
	for k, tk := range t.tokens {
		if s == tk.old && !isBytes {
			return cell{kind: cellToken, tok: k}
		}
	}
	order := make([]int, len(t.tokens))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return len(t.tokens[b].old) - len(t.tokens[a].old) })
	var segs []seg
	lit := 0
	found := false
	for i := 0; i < len(s); {
		k := slices.IndexFunc(order, func(k int) bool { return strings.HasPrefix(s[i:], t.tokens[k].old) })
		if k < 0 {
			i++
			continue
		}
		if lit < i {
			segs = append(segs, seg{lit: s[lit:i], tok: -1})
		}
		segs = append(segs, seg{tok: order[k]})
		found = true
		i += len(t.tokens[order[k]].old)
		lit = i
	}
	if !found {
		return cell{kind: cellConst, value: v}
	}
	if lit < len(s) {
		segs = append(segs, seg{lit: s[lit:], tok: -1})
	}
	return cell{kind: cellPieces, segs: segs, bytes: isBytes}
}

// preloader makes the copies.
type preloader struct {
	tpl    *template
	tool   *registry.Tool
	prefix string
	n      int
	// Copy i is created at start + i × spacing; the last before end.
	start, end time.Time
	spacing    time.Duration
}

// cloneVals are one copy's new token values and time offset.
type cloneVals struct {
	news  []string
	delta time.Duration
}

func (p *preloader) clone(i int, rng *mrand.Rand) (cloneVals, error) {
	in := preloadIntent(p.prefix, i)
	pr, err := p.tool.Prepare(registry.Proposal{WorkflowID: in.WorkflowID, Tenant: wire.DefaultTenant, Args: in.Args})
	if err != nil {
		return cloneVals{}, fmt.Errorf("bench: preload: prepare %s: %w", in.EventID, err)
	}
	body, err := json.Marshal(in) // the bytes client.Publish sends
	if err != nil {
		return cloneVals{}, err
	}
	created := p.start.Add(time.Duration(i) * p.spacing)
	cv := cloneVals{news: make([]string, len(p.tpl.tokens)), delta: created.Sub(p.tpl.created)}
	o := pr.Operation
	for k, tk := range p.tpl.tokens {
		var v string
		switch tk.kind {
		case tokEventID:
			v = in.EventID
		case tokWorkflow:
			v = in.WorkflowID
		case tokOrder:
			v = orderID(p.prefix, i)
		case tokArgs:
			v = string(o.Args)
		case tokArgsHash:
			v = o.ArgsHash
		case tokKey:
			v = o.IdempotencyKey
		case tokEntity:
			v = o.EntityID
		case tokDedupe:
			v = pr.DedupeKey
		case tokPayloadHash:
			sum := sha256.Sum256(body)
			v = hex.EncodeToString(sum[:])
		case tokTrace:
			var b [16]byte
			for j := range 2 {
				u := rng.Uint64()
				for k := range 8 {
					b[j*8+k] = byte(u >> (8 * k))
				}
			}
			v = hex.EncodeToString(b[:])[:min(32, len(tk.old))]
		case tokID:
			v = benchkit.IDAt(tk.prefix, tk.at.Add(cv.delta), rng)
		}
		cv.news[k] = v
	}
	return cv, nil
}

// copyAll copies every chunk of the preload, workers at a time; fk says
// whether foreign keys were checked.
func (p *preloader) copyAll(ctx context.Context, url string, workers, chunk int, progress io.Writer) (fk bool, err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	chunks := (p.n + chunk - 1) / chunk
	var next, done atomic.Int64
	var fkChecked atomic.Bool
	var wg sync.WaitGroup
	began := time.Now()
	lastReport := atomic.Int64{}
	lastReport.Store(began.UnixNano())
	for w := range min(workers, chunks) {
		wg.Go(func() {
			conn, err := pgx.Connect(ctx, url)
			if err != nil {
				cancel(err)
				return
			}
			defer conn.Close(context.WithoutCancel(ctx))
			// Foreign keys are checked by triggers, one lookup per row;
			// replica mode skips them (a superuser's privilege).
			if _, err := conn.Exec(ctx, benchTag+`SET session_replication_role = replica`); err != nil {
				fkChecked.Store(true)
			}
			rng := mrand.New(mrand.NewPCG(uint64(began.UnixNano()), uint64(w)))
			for {
				c := int(next.Add(1) - 1)
				if c >= chunks || ctx.Err() != nil {
					return
				}
				lo, hi := c*chunk, min((c+1)*chunk, p.n)
				if err := p.copyChunk(ctx, conn, lo, hi, rng); err != nil {
					cancel(err)
					return
				}
				d := done.Add(int64(hi - lo))
				if now := time.Now().UnixNano(); now-lastReport.Load() > int64(30*time.Second) {
					lastReport.Store(now)
					el := time.Since(began)
					fmt.Fprintf(progress, "  preload: %d of %d operations after %s (%.0f ops/s)\n", d, p.n, el.Round(time.Second), float64(d)/el.Seconds())
				}
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return false, fmt.Errorf("bench: preload: %w", err)
	}
	return fkChecked.Load(), nil
}

// copyChunk copies operations lo..hi-1 in one transaction, a COPY per table.
func (p *preloader) copyChunk(ctx context.Context, conn *pgx.Conn, lo, hi int, rng *mrand.Rand) error {
	vals := make([]cloneVals, hi-lo)
	for i := range vals {
		cv, err := p.clone(lo+i, rng)
		if err != nil {
			return err
		}
		vals[i] = cv
	}
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for _, t := range p.tpl.tables {
			src := &cloneSource{t: t, vals: vals, row: make([]any, len(t.cols))}
			n, err := tx.CopyFrom(ctx, pgx.Identifier{"public", t.name}, t.cols, src)
			if err != nil {
				return fmt.Errorf("copy %s (operations %d..%d): %w", t.name, lo, hi-1, err)
			}
			if want := int64(len(vals) * len(t.rows)); n != want {
				return fmt.Errorf("copy %s: %d rows, want %d", t.name, n, want)
			}
		}
		return nil
	})
}

// cloneSource streams one table's rows of a chunk's copies to COPY.
type cloneSource struct {
	t      *cloneTable
	vals   []cloneVals
	ci, ri int
	row    []any
	sb     strings.Builder
}

func (s *cloneSource) Next() bool {
	if s.ci >= len(s.vals) {
		return false
	}
	cv := &s.vals[s.ci]
	for j, c := range s.t.plans[s.ri] {
		switch c.kind {
		case cellConst:
			s.row[j] = c.value
		case cellTime:
			s.row[j] = c.value.(time.Time).Add(cv.delta)
		case cellToken:
			s.row[j] = cv.news[c.tok]
		case cellPieces:
			s.sb.Reset()
			for _, g := range c.segs {
				if g.tok < 0 {
					s.sb.WriteString(g.lit)
				} else {
					s.sb.WriteString(cv.news[g.tok])
				}
			}
			if c.bytes {
				s.row[j] = []byte(s.sb.String())
			} else {
				s.row[j] = s.sb.String()
			}
		}
	}
	if s.ri++; s.ri == len(s.t.rows) {
		s.ri, s.ci = 0, s.ci+1
	}
	return true
}

func (s *cloneSource) Values() ([]any, error) { return s.row, nil }
func (s *cloneSource) Err() error             { return nil }
