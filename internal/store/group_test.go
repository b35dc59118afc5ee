package store_test

import (
	"errors"
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
	st := b.store.GroupStats().Submits
	require.EqualValues(t, n, st.Writes)
	require.LessOrEqual(t, st.Statements, int64(n/store.DefaultGroupCommit+2), "%+v", st)
	require.EqualValues(t, store.DefaultGroupCommit, st.Largest, "%+v", st)
	require.Zero(t, st.Fallbacks)

	require.Equal(t, n, b.count(t, `SELECT count(*) FROM operations WHERE state = 'pending_dispatch' AND version = 2`))
	require.Equal(t, n, b.count(t, `SELECT count(*) FROM inbox i JOIN operations o ON o.id = i.operation_id AND o.origin_event_id = i.event_id WHERE i.decision = 'new'`))
	require.Equal(t, n, b.count(t, `SELECT count(*) FROM operation_events WHERE seq = 1 AND event = 'create' AND to_state = 'planned' AND detail->>'event_id' LIKE 'evt_%'`))
	require.Equal(t, n, b.count(t, `SELECT count(*) FROM operation_events WHERE seq = 2 AND event = 'enqueue' AND from_state = 'planned' AND to_state = 'pending_dispatch'`))
	require.Equal(t, n, b.count(t, `SELECT count(*) FROM outbox_messages x JOIN operations o ON o.id = x.operation_id AND x.msg_id = 'dispatch:' || o.id`))
}

// A batch holding a known event id and a repeated key writes nothing; each
// of its intents is then written on its own and decided as it would have
// been alone.
func TestGroupCommitBatchWithKnownIDsFallsBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var mu sync.Mutex
	var fell []string
	st, err := store.Open(b.ctx, b.url, store.Options{MaxConns: 8, OnGroupFallback: func(kind string, writes int, err error) {
		mu.Lock()
		defer mu.Unlock()
		fell = append(fell, fmt.Sprintf("%s %d %v", kind, writes, errors.Is(err, op.ErrConflict)))
	}})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	b.store = st
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
	results := submitTogether(t, b, subs)
	require.Equal(t, op.DecisionNew, results[0].Decision)
	require.Equal(t, op.DecisionDuplicateEvent, results[1].Decision)
	require.Equal(t, first.Operation.ID, results[1].Operation.ID)
	require.Equal(t, op.DecisionDuplicateOperation, results[2].Decision)
	require.Equal(t, first.Operation.ID, results[2].Operation.ID)
	c, d := results[3], results[4]
	require.ElementsMatch(t, []op.Decision{op.DecisionNew, op.DecisionDuplicateOperation}, []op.Decision{c.Decision, d.Decision})
	require.Equal(t, c.Operation.ID, d.Operation.ID)
	require.Equal(t, op.DecisionConflict, results[5].Decision)

	gs := b.store.GroupStats().Submits
	require.EqualValues(t, 1, gs.Fallbacks, "%+v", gs)
	require.EqualValues(t, len(subs), gs.Largest, "%+v", gs)
	mu.Lock()
	require.Equal(t, []string{fmt.Sprintf("submit %d true", len(subs))}, fell, "the fallback is reported, caused by a unique violation")
	mu.Unlock()
	require.Equal(t, 3, b.count(t, `SELECT count(*) FROM operations`))
	require.Equal(t, 6, b.count(t, `SELECT count(*) FROM inbox`))
	require.Equal(t, 6, b.count(t, `SELECT count(*) FROM operation_events`))
}

// A batch holding repeats of known keys (and a key twice) writes the new
// ones and skips the repeats, without failing: no fallback, no unique
// violation in Postgres's log. Each repeat is decided as it would have been
// alone, and no message of a skipped intent is written.
func TestGroupCommitBatchSkipsRepeatedKeys(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first, err := b.store.Submit(b.ctx, answering(submission("evt_known", newOp("key_known", "args")), 0))
	require.NoError(t, err)
	require.Equal(t, op.DecisionNew, first.Decision)

	subs := []store.Submission{
		submission("evt_a", newOp("key_a", "args")),
		submission("evt_known", newOp("key_known", "args")), // a known event id, its key
		submission("evt_b", newOp("key_known", "args")),     // known key, same args
		submission("evt_c", newOp("key_c", "args")),
		submission("evt_d", newOp("key_c", "args")), // the same key twice in the batch
		submission("evt_e", newOp("key_known", "different")),
	}
	for i := range subs {
		subs[i] = answering(subs[i], i+1)
	}
	results := submitTogether(t, b, subs)
	require.Equal(t, op.DecisionNew, results[0].Decision)
	require.Equal(t, op.DecisionDuplicateEvent, results[1].Decision)
	require.Equal(t, first.Operation.ID, results[1].Operation.ID)
	require.Equal(t, op.DecisionDuplicateOperation, results[2].Decision)
	require.Equal(t, first.Operation.ID, results[2].Operation.ID)
	c, d := results[3], results[4]
	require.Equal(t, op.DecisionNew, c.Decision, "the first of a key in the batch is written")
	require.Equal(t, op.DecisionDuplicateOperation, d.Decision)
	require.Equal(t, c.Operation.ID, d.Operation.ID)
	require.Equal(t, op.DecisionConflict, results[5].Decision)

	gs := b.store.GroupStats().Submits
	require.Zero(t, gs.Fallbacks, "%+v", gs)
	require.EqualValues(t, len(subs), gs.Largest, "%+v", gs)
	require.Equal(t, 3, b.count(t, `SELECT count(*) FROM operations`))
	require.Equal(t, 6, b.count(t, `SELECT count(*) FROM inbox`))
	require.Equal(t, 6, b.count(t, `SELECT count(*) FROM operation_events`))
	require.Equal(t, 3, b.count(t, `SELECT count(*) FROM outbox_messages WHERE subject LIKE 'opledger.ops.dispatch.%'`),
		"one dispatch command per operation created, none for a skipped intent")
	for i, res := range results {
		// A repeat under a new event id answers under a msg id made from
		// the event id (firstAnswers), every other under the caller's.
		require.Equal(t, 1, b.count(t, `SELECT count(*) FROM outbox_messages WHERE (msg_id = $1 OR msg_id LIKE 'answer\_%') AND payload = $2`,
			fmt.Sprintf("result:%d", i+1), fmt.Sprintf("%s|%s|%s|%s", res.Decision, res.FirstDecision, res.Operation.ID, res.Reason)),
			"%s: one answer, with the decision taken", subs[i].EventID)
	}
	require.Equal(t, 1+len(subs), b.count(t, `SELECT count(*) FROM outbox_messages WHERE subject LIKE 'opledger.results.%'`))
}

// submitTogether submits subs at once: held until all of them are queued,
// so that one group statement takes them all. Each is queued before the
// next is submitted, so that the batch holds them in the order given (the
// first of a key in a batch is the one written).
func submitTogether(t *testing.T, b bundle, subs []store.Submission) []*store.SubmitResult {
	t.Helper()
	queued, release := store.HoldGroup(b.store)
	results := make([]*store.SubmitResult, len(subs))
	errs := make([]error, len(subs))
	var wg sync.WaitGroup
	for i, s := range subs {
		wg.Go(func() { results[i], errs[i] = b.store.Submit(b.ctx, s) })
		require.Eventually(t, func() bool { return queued() == i+1 }, 10*time.Second, time.Millisecond)
	}
	release()
	wg.Wait()
	for i := range subs {
		require.NoError(t, errs[i], subs[i].EventID)
	}
	return results
}

// Outcomes recorded at once share a statement and each is written as it
// would be alone: the changed operations with their events, results and
// finished attempts; a stale one changes nothing but its attempt; a second
// outcome for the same operation goes after the statement and finds it
// moved on.
func TestGroupCommitOfOutcomes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 12
	type claimed struct {
		o   *op.Operation
		att *op.Attempt
	}
	cs := make([]claimed, n)
	for i := range n {
		o := newOp(fmt.Sprintf("key_%d", i), "args")
		o.EntityID = fmt.Sprintf("order_%d", i)
		res, err := b.store.Submit(b.ctx, submission(fmt.Sprintf("evt_%d", i), o))
		require.NoError(t, err)
		got, att, err := b.store.BeginAttempt(b.ctx, res.Operation.ID, res.Operation.LeaseEpoch, "w1", time.Minute)
		require.NoError(t, err)
		cs[i] = claimed{got, att}
	}
	success := func(c claimed, from op.State, epoch int64) store.Change {
		a := *c.att
		a.Outcome, a.HTTPStatus, a.ExternalObjectID = op.OutcomeSuccess, 200, "ch_"+c.o.ID
		return store.Change{OperationID: c.o.ID, From: from, LeaseEpoch: epoch, Events: []op.Event{op.EventSucceed},
			AttemptID: a.ID, Actor: "w1", Finish: &a, ExternalObjectID: a.ExternalObjectID, Detail: map[string]string{"n": c.o.ID},
			Operation: c.o, Outbox: func(after *op.Operation) []store.Message {
				return []store.Message{{Subject: "opledger.results.wf_1", MsgID: fmt.Sprintf("result:%s:%d", after.ID, after.Version),
					Payload: []byte(after.State), OperationID: after.ID}}
			}}
	}
	changes := make([]store.Change, 0, n+1)
	for i, c := range cs {
		switch i {
		case 3: // a writer holding an old epoch is fenced off
			changes = append(changes, success(c, op.StateDispatched, c.o.LeaseEpoch-1))
		default:
			changes = append(changes, success(c, op.StateDispatched, c.o.LeaseEpoch))
		}
	}
	// The same outcome twice (a redelivered command's worker): the second
	// finds the operation completed.
	changes = append(changes, success(cs[5], op.StateDispatched, cs[5].o.LeaseEpoch))

	queued, release := store.HoldOutcomes(b.store)
	afters := make([]*op.Operation, len(changes))
	errs := make([]error, len(changes))
	var wg sync.WaitGroup
	for i, c := range changes {
		wg.Go(func() { afters[i], errs[i] = b.store.Transition(b.ctx, c) })
		if i == 5 {
			// The first of the two for operation 5 queues first.
			require.Eventually(t, func() bool { return queued() == i+1 }, 10*time.Second, time.Millisecond)
		}
	}
	require.Eventually(t, func() bool { return queued() == len(changes) }, 10*time.Second, time.Millisecond)
	release()
	wg.Wait()

	for i := range n {
		if i == 3 {
			var stale *op.StaleError
			require.ErrorAs(t, errs[i], &stale)
			require.Equal(t, op.StateDispatched, stale.GotState)
			continue
		}
		require.NoError(t, errs[i], i)
		require.Equal(t, op.StateCompletedSuccess, afters[i].State)
		require.Equal(t, cs[i].o.Version+1, afters[i].Version)
		require.Equal(t, "ch_"+cs[i].o.ID, afters[i].ExternalObjectID)
	}
	var stale *op.StaleError
	require.ErrorAs(t, errs[n], &stale, "the second outcome for one operation")
	require.Equal(t, op.StateCompletedSuccess, stale.GotState)

	st := b.store.GroupStats().Outcomes
	require.EqualValues(t, len(changes), st.Writes, "%+v", st)
	require.EqualValues(t, len(changes), st.Largest, "one batch took them all (the repeat then went alone): %+v", st)
	require.Zero(t, st.Fallbacks)

	require.Equal(t, n-1, b.count(t, `SELECT count(*) FROM operations WHERE state = 'completed_success' AND external_object_id = 'ch_' || id`))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM operations WHERE state = 'dispatched'`))
	require.Equal(t, n-1, b.count(t, `SELECT count(*) FROM operation_events e JOIN operations o ON o.id = e.operation_id
		WHERE e.event = 'succeed' AND e.seq = 4 AND e.from_state = 'dispatched' AND e.to_state = 'completed_success'
		AND e.lease_epoch = o.lease_epoch AND e.attempt_id <> '' AND e.actor = 'w1' AND e.detail->>'n' = o.id`))
	require.Equal(t, n-1, b.count(t, `SELECT count(*) FROM outbox_messages WHERE msg_id LIKE 'result:%'`))
	require.Zero(t, b.count(t, `SELECT count(*) FROM outbox_messages x JOIN operations o ON o.id = x.operation_id
		WHERE x.msg_id LIKE 'result:%' AND o.state <> 'completed_success'`), "no result for the fenced-off writer")
	// Every attempt took its answer, the fenced-off one too.
	require.Equal(t, n, b.count(t, `SELECT count(*) FROM attempts WHERE finished_at IS NOT NULL AND outcome = 'success' AND http_status = 200`))
}

// Leased claims made at once share a statement, and each ends as it would
// alone: distinct entities are claimed, of two operations on one entity
// the older is claimed and the younger finds the lease busy, a stale epoch
// is stale, and an operation with no entity is claimed without a lease.
func TestGroupCommitOfLeasedClaims(t *testing.T) {
	t.Parallel()
	b := setup(t)
	submit := func(i int, entity string) *op.Operation {
		o := newOp(fmt.Sprintf("key_%d", i), "args")
		o.EntityID = entity
		res, err := b.store.Submit(b.ctx, submission(fmt.Sprintf("evt_%d", i), o))
		require.NoError(t, err)
		return res.Operation
	}
	var ops []*op.Operation
	for i := range 6 {
		ops = append(ops, submit(i, fmt.Sprintf("order_%d", i)))
	}
	older, younger := submit(6, "order_shared"), submit(7, "order_shared")
	stale, noEntity := submit(8, "order_stale"), submit(9, "")
	ops = append(ops, younger, older, stale, noEntity) // the younger queues first

	lease := store.EntityLease{TTL: time.Minute, Tools: []string{"capture_payment"}}
	queued, release := store.HoldClaims(b.store)
	got := make([]*op.Operation, len(ops))
	atts := make([]*op.Attempt, len(ops))
	errs := make([]error, len(ops))
	var wg sync.WaitGroup
	for i, o := range ops {
		epoch := o.LeaseEpoch
		if o.ID == stale.ID {
			epoch++
		}
		wg.Go(func() {
			got[i], atts[i], errs[i] = b.store.BeginLeasedAttempt(b.ctx, o.ID, epoch, "w1", time.Minute, lease)
		})
		require.Eventually(t, func() bool { return queued() == i+1 }, 10*time.Second, time.Millisecond)
	}
	release()
	wg.Wait()

	for i, o := range ops {
		switch o.ID {
		case younger.ID:
			require.ErrorIs(t, errs[i], store.ErrLeaseBusy)
		case stale.ID:
			require.ErrorIs(t, errs[i], op.ErrStale)
		default:
			require.NoError(t, errs[i], i)
			require.Equal(t, op.StateDispatched, got[i].State)
			require.Equal(t, o.LeaseEpoch+1, got[i].LeaseEpoch)
			require.Equal(t, got[i].LeaseEpoch, atts[i].LeaseEpoch)
			require.Equal(t, 1, atts[i].Number)
		}
	}
	st := b.store.GroupStats().Claims
	require.EqualValues(t, len(ops), st.Largest, "%+v", st)
	require.Zero(t, st.Fallbacks, "%+v", st)
	require.Equal(t, 8, b.count(t, `SELECT count(*) FROM operations WHERE state = 'dispatched'`))
	require.Equal(t, 8, b.count(t, `SELECT count(*) FROM attempts a JOIN operations o ON o.id = a.operation_id
		AND a.lease_epoch = o.lease_epoch AND a.number = 1 AND a.worker = 'w1' AND a.deadline_at > a.started_at`))
	require.Equal(t, 8, b.count(t, `SELECT count(*) FROM operation_events e JOIN attempts a ON a.id = e.attempt_id
		WHERE e.event = 'dispatch' AND e.seq = 3 AND e.actor = 'w1'`))
	require.Equal(t, 7, b.count(t, `SELECT count(*) FROM entity_leases l JOIN operations o ON o.id = l.operation_id AND o.state = 'dispatched'`))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM entity_leases WHERE entity_id = 'order_shared' AND operation_id = $1`, older.ID))
}
