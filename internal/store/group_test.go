package store_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/pkg/op"
)

// Intents submitted at once are written by a few statements, each whole:
// every operation with its inbox row, two events and outbox row, every
// answer naming the operation as the database created it.
func TestGroupCommitWritesConcurrentIntentsTogether(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 150
	queued, release := store.HoldGroup(b.store)
	results := make([]*store.SubmitResult, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			results[i], errs[i] = b.store.Submit(b.ctx, submission(fmt.Sprintf("evt_%d", i), newOp(fmt.Sprintf("key_%d", i), "args")))
		})
	}
	require.Eventually(t, func() bool { return queued() == n }, 10*time.Second, time.Millisecond)
	release()
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i])
		require.Equal(t, op.DecisionNew, results[i].Decision)
		o := results[i].Operation
		require.Equal(t, fmt.Sprintf("key_%d", i), o.IdempotencyKey)
		require.Equal(t, op.StatePendingDispatch, o.State)
		require.EqualValues(t, 2, o.Version)
		require.False(t, o.CreatedAt.IsZero())
	}
	st := b.store.GroupStats()
	require.EqualValues(t, n, st.Submissions)
	require.LessOrEqual(t, st.Statements, int64(n/store.DefaultGroupCommit+2), "%+v", st)
	require.EqualValues(t, store.DefaultGroupCommit, st.Largest, "%+v", st)
	require.Zero(t, st.Fallbacks)

	require.Equal(t, n, b.count(t, `SELECT count(*) FROM operations WHERE state = 'pending_dispatch' AND version = 2`))
	require.Equal(t, n, b.count(t, `SELECT count(*) FROM inbox i JOIN operations o ON o.id = i.operation_id AND o.origin_event_id = i.event_id WHERE i.decision = 'new'`))
	require.Equal(t, n, b.count(t, `SELECT count(*) FROM operation_events WHERE seq = 1 AND event = 'create' AND to_state = 'planned' AND detail->>'event_id' LIKE 'evt_%'`))
	require.Equal(t, n, b.count(t, `SELECT count(*) FROM operation_events WHERE seq = 2 AND event = 'enqueue' AND from_state = 'planned' AND to_state = 'pending_dispatch'`))
	require.Equal(t, n, b.count(t, `SELECT count(*) FROM outbox x JOIN operations o ON o.id = x.operation_id AND x.msg_id = 'dispatch:' || o.id`))
}

// A batch holding a known event id and a repeated key writes nothing; each
// of its intents is then written on its own and decided as it would have
// been alone.
func TestGroupCommitBatchWithKnownIDsFallsBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first, err := b.store.Submit(b.ctx, submission("evt_known", newOp("key_known", "args")))
	require.NoError(t, err)
	require.Equal(t, op.DecisionNew, first.Decision)

	subs := []store.Submission{
		submission("evt_a", newOp("key_a", "args")),
		submission("evt_known", newOp("key_other", "args")), // a known event id, the same bytes
		submission("evt_b", newOp("key_known", "args")),     // known key, same args
		submission("evt_c", newOp("key_c", "args")),
		submission("evt_d", newOp("key_c", "args")), // the same key twice in the batch
		submission("evt_e", newOp("key_known", "different")),
	}
	queued, release := store.HoldGroup(b.store)
	results := make([]*store.SubmitResult, len(subs))
	errs := make([]error, len(subs))
	var wg sync.WaitGroup
	for i, s := range subs {
		wg.Go(func() { results[i], errs[i] = b.store.Submit(b.ctx, s) })
	}
	require.Eventually(t, func() bool { return queued() == len(subs) }, 10*time.Second, time.Millisecond)
	release()
	wg.Wait()
	for i := range subs {
		require.NoError(t, errs[i], subs[i].EventID)
	}
	require.Equal(t, op.DecisionNew, results[0].Decision)
	require.Equal(t, op.DecisionDuplicateEvent, results[1].Decision)
	require.Equal(t, first.Operation.ID, results[1].Operation.ID)
	require.Equal(t, op.DecisionDuplicateOperation, results[2].Decision)
	require.Equal(t, first.Operation.ID, results[2].Operation.ID)
	c, d := results[3], results[4]
	require.ElementsMatch(t, []op.Decision{op.DecisionNew, op.DecisionDuplicateOperation}, []op.Decision{c.Decision, d.Decision})
	require.Equal(t, c.Operation.ID, d.Operation.ID)
	require.Equal(t, op.DecisionConflict, results[5].Decision)

	st := b.store.GroupStats()
	require.EqualValues(t, 1, st.Fallbacks, "%+v", st)
	require.EqualValues(t, len(subs), st.Largest, "%+v", st)
	require.Equal(t, 3, b.count(t, `SELECT count(*) FROM operations`))
	require.Equal(t, 6, b.count(t, `SELECT count(*) FROM inbox`))
	require.Equal(t, 6, b.count(t, `SELECT count(*) FROM operation_events`))
}
