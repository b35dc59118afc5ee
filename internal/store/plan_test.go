package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
	st, err := Open(ctx, testdb.New(t), Options{MaxConns: 1})
	require.NoError(t, err)
	t.Cleanup(st.Close)

	for i := range 12 {
		o := &op.Operation{
			ID: op.NewID("op"), WorkflowID: "wf_plan", Tool: "capture_payment", ToolVersion: 1, Intent: "collect_payment",
			Args: []byte(`{"i":1}`), ArgsHash: fmt.Sprintf("%064x", i), Class: op.ClassExternalIrreversible,
			IdempotencyKey: fmt.Sprintf("plan-%d", i),
		}
		res, err := st.Submit(ctx, Submission{Source: "nats:intents", EventID: fmt.Sprintf("evt_plan_%d", i), Payload: []byte(`{}`),
			WorkflowID: o.WorkflowID, Operation: o, Initial: op.EventEnqueue})
		require.NoError(t, err)
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
