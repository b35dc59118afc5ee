package store

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/db/dbsqlc"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/pkg/op"
)

// The hot statements run a cached generic plan once Postgres has tried a
// few custom ones: planning OperationTransitionFinishing took as long as
// executing it while a generate_series over a parameter (guessed at 1,000
// rows) made its generic plan look costlier, so every outcome was planned
// again (docs/architecture.md, "Where the time goes"). On one connection,
// a dozen claims and completions must leave both statements
// with generic plans in pg_prepared_statements.
//
// Breaking it: put the generate_series back beside the unnests in the
// events CTE; OperationTransitionFinishing then shows only custom plans.
func TestHotStatementsRunCachedGenericPlans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := oneConnStore(t)

	for i := range 12 {
		res := submitPlanned(t, st, "plan", i, nil)
		claimed, att, err := st.BeginAttempt(ctx, res.Operation.ID, 0, "w1", 2*time.Second)
		require.NoError(t, err)
		done := *att
		done.Outcome, done.ExternalObjectID = op.OutcomeSuccess, fmt.Sprintf("ch_%d", i)
		_, err = st.Transition(ctx, Change{OperationID: claimed.ID, From: op.StateDispatched, LeaseEpoch: claimed.LeaseEpoch,
			Events: []op.Event{op.EventSucceed}, AttemptID: att.ID, Actor: "w1", Finish: &done, Operation: claimed,
			ExternalObjectID: done.ExternalObjectID,
			Outbox: func(after *op.Operation) []Message {
				return []Message{{Subject: "opledger.results.wf_plan", MsgID: "result:" + after.ID, Payload: []byte(after.ID), OperationID: after.ID}}
			}})
		require.NoError(t, err)
	}

	rows, err := st.pool.Query(ctx, `SELECT substring(statement FROM '-- name: (\w+)'), generic_plans, custom_plans
		FROM pg_prepared_statements WHERE statement LIKE '-- name: %'`)
	require.NoError(t, err)
	plans := map[string][2]int64{}
	for rows.Next() {
		var name string
		var generic, custom int64
		require.NoError(t, rows.Scan(&name, &generic, &custom))
		plans[name] = [2]int64{generic, custom}
	}
	require.NoError(t, rows.Err())
	for _, name := range []string{"OperationDispatch", "OperationTransitionFinishing"} {
		p, ok := plans[name]
		require.True(t, ok, "%s was not run as a prepared statement on the connection (have %v)", name, plans)
		require.Positive(t, p[0], "%s: %d generic, %d custom plans: planned again at every execution", name, p[0], p[1])
	}
}

// planOperation is operation i of a plan test's workflow wf_<name>, with
// key <name>-<i>.
func planOperation(name string, i int) *op.Operation {
	return &op.Operation{
		ID: op.NewID("op"), WorkflowID: "wf_" + name, Tool: "capture_payment", ToolVersion: 1, Intent: "collect_payment",
		Args: []byte(`{"i":1}`), ArgsHash: fmt.Sprintf("%064x", i), Class: op.ClassExternalIrreversible,
		IdempotencyKey: fmt.Sprintf("%s-%d", name, i),
	}
}

// oneConnStore opens a store on a database of its own with one connection,
// so that every statement is prepared on the connection the test inspects.
func oneConnStore(t *testing.T) *Store {
	t.Helper()
	st, err := Open(context.Background(), testdb.New(t), Options{MaxConns: 1})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	return st
}

// submitPlanned submits planOperation(name, i) as a new intent, enqueued
// for dispatch, with outbox's messages (nil: none).
func submitPlanned(t *testing.T, st *Store, name string, i int, outbox func(*op.Operation) []Message) *SubmitResult {
	t.Helper()
	o := planOperation(name, i)
	res, err := st.Submit(context.Background(), Submission{Source: "nats:intents", EventID: fmt.Sprintf("evt_%s_%d", name, i), Payload: []byte(`{}`),
		WorkflowID: o.WorkflowID, Operation: o, Initial: op.EventEnqueue, Outbox: outbox})
	require.NoError(t, err)
	return res
}

// genericPlan returns the generic plan of the named query, prepared on conn
// (whose plan_cache_mode must be force_generic_plan).
func genericPlan(t *testing.T, conn *pgxpool.Conn, name string) map[string]any {
	t.Helper()
	ctx := context.Background()
	var stmt string
	var params int
	err := conn.QueryRow(ctx, `SELECT name, cardinality(parameter_types) FROM pg_prepared_statements
		WHERE statement LIKE '-- name: ' || $1 || ' %'`, name).Scan(&stmt, &params)
	require.NoError(t, err, "%s was not run as a prepared statement on the connection", name)
	args := strings.TrimSuffix(strings.Repeat("NULL, ", params), ", ")
	var plan []map[string]any
	require.NoError(t, conn.QueryRow(ctx, fmt.Sprintf(`EXPLAIN (FORMAT JSON) EXECUTE %q (%s)`, stmt, args)).Scan(&plan))
	return plan[0]["Plan"].(map[string]any)
}

// The maintenance leader's scans by state read only the operations that
// have not settled: on a ledger of ten million operations a sequential scan
// of operations took about 5 s a pass, every 5 s, and cost a third of the
// throughput. The test runs both queries on one connection, then asks
// Postgres for their generic plans with sequential scans disabled: each must
// read operations through operations_unsettled_idx, not a sequential scan
// nor a full scan of another index (both of which grow with the ledger).
//
// The sweeper's stranded scan reads the index only up to its cutoff: the
// newest entries, those the claims and outcomes leave until vacuum, took
// 15-146 ms a pass at 1,000 ops/s.
//
// Breaking it: drop operations_unsettled_idx (migration 0019), or filter
// the sweeper's query on a state the index's predicate does not cover;
// drop the bound on updated_at from OperationListDispatchedUnclaimed.
func TestMaintenanceScansReadOnlyUnsettledOperations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := Open(ctx, testdb.New(t), Options{MaxConns: 1})
	require.NoError(t, err)
	t.Cleanup(st.Close)

	_, err = st.OperationsDispatchedUnclaimed(ctx, time.Second, 10)
	require.NoError(t, err)
	_, err = st.OperationsUnattended(ctx, time.Second, nil, 10)
	require.NoError(t, err)

	conn, err := st.pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan; SET enable_seqscan = off`)
	require.NoError(t, err)
	for _, name := range []string{"OperationListDispatchedUnclaimed", "OperationListUnattended"} {
		scans := scansOf(genericPlan(t, conn, name), "operations")
		require.NotEmpty(t, scans, "%s: no scan of operations in its plan", name)
		for _, s := range scans {
			require.Equal(t, []any{"operations_unsettled_idx"}, indexesOf(s),
				"%s reads operations by a %v: it grows with the ledger", name, s["Node Type"])
			if name == "OperationListDispatchedUnclaimed" {
				cond, _ := s["Index Cond"].(string)
				require.Contains(t, cond, "updated_at", "%s reads the index past its cutoff: %v", name, s)
			}
		}
	}
}

// scansOf returns the plan nodes (at any depth) that read relation.
func scansOf(node map[string]any, relation string) []map[string]any {
	var out []map[string]any
	if node["Relation Name"] == relation {
		out = append(out, node)
	}
	if kids, ok := node["Plans"].([]any); ok {
		for _, k := range kids {
			out = append(out, scansOf(k.(map[string]any), relation)...)
		}
	}
	return out
}

// indexesOf returns the indexes a scan node reads: its own, or those of the
// bitmap index scans under a bitmap heap scan (not those of its subplans).
// A sequential scan has none.
func indexesOf(node map[string]any) []any {
	if name, ok := node["Index Name"]; ok {
		return []any{name}
	}
	var out []any
	if kids, ok := node["Plans"].([]any); ok {
		for _, k := range kids {
			if kid := k.(map[string]any); strings.HasPrefix(kid["Node Type"].(string), "Bitmap") {
				out = append(out, indexesOf(kid)...)
			}
		}
	}
	return out
}

// On a young ledger the group statements' generic plans must still probe
// their tables by key. A connection makes a statement's generic plan at its
// sixth execution and keeps it until autovacuum next analyzes a table it
// reads; made while attempts held a few hundred rows, the outcome
// statement's plan hashed a sequential scan of all of attempts against its
// batch, and as the ledger grew by thousands of rows a second each outcome
// statement read all of it (20-91 ms each in the first minute of a steady
// run, which then fell behind). The store's connections take
// enable_seqscan=off unless the connection string sets it. The test makes
// the three group statements' generic plans on an empty ledger and finds
// no sequential scan in them; the same on a connection that keeps
// Postgres's default must show the outcome statement scanning a table
// (operations, on an empty ledger), or the fixture no longer shows what the
// setting is for.
//
// Breaking it: drop the enable_seqscan default from Open.
func TestGroupStatementsProbeByKeyOnAYoungLedger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testdb.New(t)
	seqScans := func(t *testing.T, connString string) map[string][]string {
		st, err := Open(ctx, connString, Options{MaxConns: 1})
		require.NoError(t, err)
		t.Cleanup(st.Close)
		conn, err := st.pool.Acquire(ctx)
		require.NoError(t, err)
		defer conn.Release()
		q := dbsqlc.New(conn)
		for range 6 {
			_, err := q.OperationTransitionFinishingBatch(ctx, dbsqlc.OperationTransitionFinishingBatchParams{BatchID: op.NewID("batch")})
			require.NoError(t, err)
			_, err = q.OperationDispatchLeasedBatch(ctx, dbsqlc.OperationDispatchLeasedBatchParams{})
			require.NoError(t, err)
			_, err = q.OperationSubmitNewBatch(ctx, dbsqlc.OperationSubmitNewBatchParams{BatchID: op.NewID("batch")})
			require.NoError(t, err)
		}
		_, err = conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan")
		require.NoError(t, err)
		found := map[string][]string{}
		for _, name := range []string{"OperationTransitionFinishingBatch", "OperationDispatchLeasedBatch", "OperationSubmitNewBatch"} {
			var walk func(n map[string]any)
			walk = func(n map[string]any) {
				if n["Node Type"] == "Seq Scan" {
					found[name] = append(found[name], fmt.Sprint(n["Relation Name"]))
				}
				kids, _ := n["Plans"].([]any)
				for _, k := range kids {
					walk(k.(map[string]any))
				}
			}
			walk(genericPlan(t, conn, name))
		}
		return found
	}
	require.Empty(t, seqScans(t, url), "sequential scans in the group statements' generic plans")
	stock := seqScans(t, withParam(url, "enable_seqscan", "on"))
	require.NotEmpty(t, stock["OperationTransitionFinishingBatch"],
		"with Postgres's default the outcome statement's generic plan no longer scans a table on an empty ledger (%v): the test shows nothing", stock)
}

// withParam adds a run-time parameter to a connection string, a URL or
// keyword/value pairs.
func withParam(connString, name, value string) string {
	switch {
	case !strings.HasPrefix(connString, "postgres://") && !strings.HasPrefix(connString, "postgresql://"):
		return connString + " " + name + "=" + value
	case strings.Contains(connString, "?"):
		return connString + "&" + name + "=" + value
	}
	return connString + "?" + name + "=" + value
}

// The re-drive's candidates are the pending operations older than its
// cutoff that have no message waiting; during a NATS outage that is every
// pending operation, and every batch of outbox_batches still waits. The
// operations named in outbox_batches must be read once for the whole pass,
// as a set, not searched batch by batch for each candidate (a scan of the
// table per candidate: candidates × batches). The test queues 30
// operations, each in a batch of its own, and runs the statement under
// EXPLAIN ANALYZE: it must find none of them unattended and read
// outbox_batches in one loop.
//
// Breaking it: put back NOT EXISTS (… WHERE o.id = ANY(bb.operation_ids)):
// outbox_batches is then scanned 30 times.
func TestUnattendedReadsQueuedOperationsOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := oneConnStore(t)
	const n = 30
	for i := range n {
		submitPlanned(t, st, "unattended", i, func(o *op.Operation) []Message {
			return []Message{{Subject: "opledger.ops.dispatch.capture_payment", MsgID: "dispatch:" + o.ID, Payload: []byte(o.ID), OperationID: o.ID}}
		})
	}
	var batches, pending int
	require.NoError(t, st.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM outbox_batches), (SELECT count(*) FROM operations WHERE state = 'pending_dispatch')`).
		Scan(&batches, &pending))
	require.Equal(t, [2]int{n, n}, [2]int{batches, pending}, "the fixture: one waiting batch per pending operation")

	got, err := st.OperationsUnattended(ctx, 0, nil, 100)
	require.NoError(t, err)
	require.Empty(t, got, "an operation whose command waits in outbox_batches is attended")

	// The statement as the store prepared it on its one connection, with
	// the pass's arguments (now, older than, after, after id, rows).
	var stmt string
	require.NoError(t, st.pool.QueryRow(ctx, `SELECT name FROM pg_prepared_statements
		WHERE statement LIKE '-- name: OperationListUnattended %'`).Scan(&stmt))
	var plan []map[string]any
	require.NoError(t, st.pool.QueryRow(ctx, fmt.Sprintf(`EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE %q (NULL, 0, NULL, '', 100)`, stmt)).Scan(&plan))
	scans := scansOf(plan[0]["Plan"].(map[string]any), "outbox_batches")
	require.NotEmpty(t, scans, "no scan of outbox_batches in the plan")
	for _, s := range scans {
		require.EqualValues(t, 1, s["Actual Loops"], "outbox_batches read %v times in one pass (%v)", s["Actual Loops"], s["Node Type"])
	}
}
