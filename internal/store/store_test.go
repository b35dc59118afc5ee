package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/testclock"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/pkg/op"
)

func TestMain(m *testing.M) { testdb.Main(m) }

type bundle struct {
	ctx   context.Context
	store *store.Store
	db    *pgxpool.Pool // for counting rows behind the store's back
	url   string
}

func setup(t *testing.T) bundle {
	t.Helper()
	ctx := context.Background()
	url := testdb.New(t)
	st, err := store.Open(ctx, url, store.Options{MaxConns: 60})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	db, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	return bundle{ctx: ctx, store: st, db: db, url: url}
}

func (b bundle) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.QueryRow(b.ctx, sql, args...).Scan(&n))
	return n
}

// newOp is a factory for a prepared operation envelope.
func newOp(key, argsHashSeed string) *op.Operation {
	return &op.Operation{
		ID: op.NewID("op"), WorkflowID: "wf_1", Tool: "capture_payment", ToolVersion: 1, Intent: "collect_payment",
		EntityType: "order", EntityID: "order_123", Args: []byte(`{"a":"` + argsHashSeed + `"}`),
		ArgsHash: fmt.Sprintf("%064x", len(argsHashSeed)) /* distinct per seed length */, Class: op.ClassExternalIrreversible,
		IdempotencyKey: key,
	}
}

func submission(eventID string, o *op.Operation) store.Submission {
	return store.Submission{
		Source: "nats:intents", EventID: eventID, Payload: []byte(`{"event":"` + eventID + `"}`), WorkflowID: o.WorkflowID,
		Operation: o, Initial: op.EventEnqueue,
		Outbox: func(*op.Operation) []store.Message {
			return []store.Message{{Subject: "opledger.ops.dispatch." + o.Tool, MsgID: "dispatch:" + o.ID, Payload: []byte(o.ID), OperationID: o.ID}}
		},
	}
}

func TestSubmitConcurrentSameIntent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 50
	var wg sync.WaitGroup
	results := make([]*store.SubmitResult, n)
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			// Each goroutine prepares its own envelope (own operation id), as
			// separate planner-ingest instances would.
			results[i], errs[i] = b.store.Submit(b.ctx, submission(fmt.Sprintf("evt_%d", i), newOp("payment:order_123:capture:4900:USD:v1", "same")))
		}()
	}
	close(start)
	wg.Wait()
	decisions := map[op.Decision]int{}
	ids := map[string]bool{}
	for i := range n {
		require.NoError(t, errs[i])
		decisions[results[i].Decision]++
		ids[results[i].Operation.ID] = true
	}
	require.Equal(t, map[op.Decision]int{op.DecisionNew: 1, op.DecisionDuplicateOperation: n - 1}, decisions)
	require.Len(t, ids, 1, "every submitter must be told about the same operation")

	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM operations`))
	require.Equal(t, n, b.count(t, `SELECT count(*) FROM inbox`))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM inbox WHERE decision = 'new'`))
	require.Equal(t, n-1, b.count(t, `SELECT count(*) FROM inbox WHERE decision = 'duplicate_operation'`))
	require.Equal(t, n, b.count(t, `SELECT count(*) FROM inbox WHERE operation_id IS NOT NULL`))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM outbox_messages`), "one dispatch command, not one per submitter")
	require.Equal(t, 2, b.count(t, `SELECT count(*) FROM operation_events`), "create + enqueue")
}

func TestSubmitDuplicateEventAndConflicts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := newOp("payment:order_9:capture:100:USD:v1", "x")
	res, err := b.store.Submit(b.ctx, submission("evt_1", first))
	require.NoError(t, err)
	require.Equal(t, op.DecisionNew, res.Decision)
	require.Equal(t, op.StatePendingDispatch, res.Operation.State)

	// The same event again (a redelivery) changes nothing and names the operation.
	again, err := b.store.Submit(b.ctx, submission("evt_1", newOp("payment:order_9:capture:100:USD:v1", "x")))
	require.NoError(t, err)
	require.Equal(t, op.DecisionDuplicateEvent, again.Decision)
	require.Equal(t, op.DecisionNew, again.FirstDecision)
	require.Equal(t, res.Operation.ID, again.Operation.ID)

	// The same event id with another payload is a conflict.
	sub := submission("evt_1", newOp("payment:order_9:capture:100:USD:v1", "x"))
	sub.Payload = []byte(`{"tampered":true}`)
	tampered, err := b.store.Submit(b.ctx, sub)
	require.NoError(t, err)
	require.Equal(t, op.DecisionConflict, tampered.Decision)
	require.Contains(t, tampered.Reason, "different payload")

	// The same key with other canonical args is a conflict, not a duplicate.
	conflict, err := b.store.Submit(b.ctx, submission("evt_2", newOp("payment:order_9:capture:100:USD:v1", "other args")))
	require.NoError(t, err)
	require.Equal(t, op.DecisionConflict, conflict.Decision)
	require.Equal(t, res.Operation.ID, conflict.Operation.ID)
	require.Contains(t, conflict.Reason, "different arguments")

	in, err := b.store.InboxEntry(b.ctx, "nats:intents", "evt_2")
	require.NoError(t, err)
	require.Equal(t, op.DecisionConflict, in.Decision)
	require.Contains(t, in.Reason, "different arguments")
	in1, err := b.store.InboxEntry(b.ctx, "nats:intents", "evt_1")
	require.NoError(t, err)
	require.Equal(t, 2, in1.DuplicateCount)

	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM operations`))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM outbox_messages`))
	require.Equal(t, 2, b.count(t, `SELECT count(*) FROM inbox`))
	counts, err := b.store.DecisionCounts(b.ctx)
	require.NoError(t, err)
	require.Equal(t, map[op.Decision]int64{op.DecisionNew: 1, op.DecisionConflict: 1, op.DecisionDuplicateEvent: 2}, counts)
}

func TestSubmitRejectedKeepsRawPayload(t *testing.T) {
	t.Parallel()
	b := setup(t)
	raw := []byte(`{"spec": "opledger.intent.v1", "tool": `)
	res, err := b.store.Submit(b.ctx, store.Submission{Source: "nats:intents", EventID: "evt_bad", Payload: raw, RejectReason: "intent is not valid JSON"})
	require.NoError(t, err)
	require.Equal(t, op.DecisionRejected, res.Decision)
	require.Nil(t, res.Operation)
	in, err := b.store.InboxEntry(b.ctx, "nats:intents", "evt_bad")
	require.NoError(t, err)
	require.Equal(t, raw, in.Payload)
	require.Equal(t, "intent is not valid JSON", in.Reason)
	again, err := b.store.Submit(b.ctx, store.Submission{Source: "nats:intents", EventID: "evt_bad", Payload: raw, RejectReason: "intent is not valid JSON"})
	require.NoError(t, err)
	require.Equal(t, op.DecisionDuplicateEvent, again.Decision)
	require.Equal(t, op.DecisionRejected, again.FirstDecision)
	require.Equal(t, 0, b.count(t, `SELECT count(*) FROM operations`))

	_, err = b.store.Submit(b.ctx, store.Submission{Source: "nats:intents", Payload: raw})
	require.ErrorIs(t, err, op.ErrInvalid)
}

func TestTransitionIsConditional(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res, err := b.store.Submit(b.ctx, submission("evt_1", newOp("k1", "x")))
	require.NoError(t, err)
	o := res.Operation

	// Illegal by the state machine: nothing is written.
	_, err = b.store.Transition(b.ctx, store.Change{OperationID: o.ID, From: op.StatePendingDispatch, Events: []op.Event{op.EventSucceed}})
	var te *op.TransitionError
	require.ErrorAs(t, err, &te)

	// Wrong expected state: stale.
	_, err = b.store.Transition(b.ctx, store.Change{OperationID: o.ID, From: op.StateDispatched, Events: []op.Event{op.EventSucceed}})
	var se *op.StaleError
	require.ErrorAs(t, err, &se)
	require.Equal(t, op.StatePendingDispatch, se.GotState)

	// Wrong epoch: stale.
	_, err = b.store.Transition(b.ctx, store.Change{OperationID: o.ID, From: op.StatePendingDispatch, LeaseEpoch: 7, Events: []op.Event{op.EventDispatch}})
	require.ErrorAs(t, err, &se)
	require.Equal(t, int64(0), se.GotEpoch)

	// Unknown operation.
	_, err = b.store.Transition(b.ctx, store.Change{OperationID: "op_missing", From: op.StatePendingDispatch, Events: []op.Event{op.EventDispatch}})
	require.ErrorIs(t, err, op.ErrNotFound)

	require.Equal(t, 2, b.count(t, `SELECT count(*) FROM operation_events WHERE operation_id = $1`, o.ID))

	require.Equal(t, int64(2), o.Version, "create + enqueue")
	// Claim: epoch 0 → 1, attempt 1.
	claimed, att, err := b.store.BeginAttempt(b.ctx, o.ID, 0, "w1", time.Second)
	require.NoError(t, err)
	require.Equal(t, int64(3), claimed.Version)
	require.Equal(t, op.StateDispatched, claimed.State)
	require.Equal(t, int64(1), claimed.LeaseEpoch)
	require.Equal(t, 1, att.Number)

	// A late writer at the old epoch changes nothing.
	_, err = b.store.Transition(b.ctx, store.Change{OperationID: o.ID, From: op.StateDispatched, LeaseEpoch: 0, Events: []op.Event{op.EventSucceed}})
	require.ErrorAs(t, err, &se)
	done, err := b.store.Transition(b.ctx, store.Change{OperationID: o.ID, From: op.StateDispatched, LeaseEpoch: 1,
		Events: []op.Event{op.EventSucceed}, ExternalObjectID: "ch_1", ExternalRequestID: "req_1", AttemptID: att.ID, Detail: map[string]int{"http_status": 200}})
	require.NoError(t, err)
	require.Equal(t, op.StateCompletedSuccess, done.State)
	require.Equal(t, "ch_1", done.ExternalObjectID)
	require.Equal(t, int64(4), done.Version, "one more per change; refused writes count nothing")

	// A duplicate of the same write is stale too.
	_, err = b.store.Transition(b.ctx, store.Change{OperationID: o.ID, From: op.StateDispatched, LeaseEpoch: 1, Events: []op.Event{op.EventSucceed}})
	require.ErrorAs(t, err, &se)

	evs, err := b.store.Events(b.ctx, o.ID)
	require.NoError(t, err)
	var got []string
	for i, e := range evs {
		require.Equal(t, i+1, e.Seq)
		got = append(got, string(e.Event)+":"+string(e.To))
	}
	require.Equal(t, []string{"create:planned", "enqueue:pending_dispatch", "dispatch:dispatched", "succeed:completed_success"}, got)
	require.JSONEq(t, `{"http_status":200}`, string(evs[3].Detail))
}

func TestBeginAttemptOnlyOneWinner(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res, err := b.store.Submit(b.ctx, submission("evt_1", newOp("k1", "x")))
	require.NoError(t, err)
	const n = 10
	var wg sync.WaitGroup
	var mu sync.Mutex
	won, stale := 0, 0
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, err := b.store.BeginAttempt(b.ctx, res.Operation.ID, 0, fmt.Sprintf("w%d", i), time.Second)
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				won++
			} else if errors.Is(err, op.ErrStale) {
				stale++
			} else {
				t.Errorf("unexpected error: %v", err)
			}
		}()
	}
	wg.Wait()
	require.Equal(t, 1, won)
	require.Equal(t, n-1, stale)
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM attempts`))
	atts, err := b.store.Attempts(b.ctx, res.Operation.ID)
	require.NoError(t, err)
	require.Len(t, atts, 1)
}

func TestEventsAreAppendOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.store.Submit(b.ctx, submission("evt_1", newOp("k1", "x")))
	require.NoError(t, err)
	_, err = b.db.Exec(b.ctx, `UPDATE operation_events SET to_state = 'completed_success'`)
	require.ErrorContains(t, err, "append-only")
	_, err = b.db.Exec(b.ctx, `DELETE FROM operation_events`)
	require.ErrorContains(t, err, "append-only")
}

func TestOutboxClaimsAreDisjointAndLeased(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testdb.New(t)
	clock := testclock.New(time.Date(2026, 7, 7, 2, 13, 0, 0, time.UTC))
	st, err := store.Open(ctx, url, store.Options{Clock: clock.Now})
	require.NoError(t, err)
	defer st.Close()
	require.NoError(t, st.InTx(ctx, func(tx *store.Tx) error {
		for i := range 10 {
			if err := tx.Enqueue(ctx, store.Message{Subject: "s", MsgID: fmt.Sprintf("m%d", i), Payload: []byte("p")}); err != nil {
				return err
			}
		}
		return nil
	}))
	a, err := st.OutboxClaim(ctx, "relay-a", 6, time.Minute)
	require.NoError(t, err)
	bb, err := st.OutboxClaim(ctx, "relay-b", 6, time.Minute)
	require.NoError(t, err)
	require.Len(t, a, 6)
	require.Len(t, bb, 4)
	seen := map[string]bool{}
	for _, c := range append(a, bb...) {
		require.False(t, seen[c.Message.MsgID], "claimed twice: %s", c.Message.MsgID)
		seen[c.Message.MsgID] = true
	}
	none, err := st.OutboxClaim(ctx, "relay-c", 10, time.Minute)
	require.NoError(t, err)
	require.Empty(t, none, "claimed rows are leased")

	// relay-a publishes and marks; relay-b dies. After the lease, b's rows come back.
	ids := make([]int64, len(a))
	for i, c := range a {
		ids[i] = c.ID
	}
	n, err := st.OutboxSent(ctx, "relay-a", ids)
	require.NoError(t, err)
	require.Equal(t, int64(6), n)
	clock.Advance(2 * time.Minute)
	again, err := st.OutboxClaim(ctx, "relay-c", 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, again, 4)
	require.Equal(t, 2, again[0].PublishCount)
	unsent, err := st.OutboxUnsent(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(4), unsent)
}

func TestOutboxDoesNotSkipLateCommits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Transaction A takes a lower id but commits after B: a relay polling
	// "id > last seen" would skip it forever.
	txA, err := b.db.Begin(b.ctx)
	require.NoError(t, err)
	_, err = txA.Exec(b.ctx, `INSERT INTO outbox (subject, msg_id, payload) VALUES ('s', 'late', 'a')`)
	require.NoError(t, err)
	require.NoError(t, b.store.InTx(b.ctx, func(tx *store.Tx) error {
		return tx.Enqueue(b.ctx, store.Message{Subject: "s", MsgID: "early", Payload: []byte("b")})
	}))
	first, err := b.store.OutboxClaim(b.ctx, "r", 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, first, 1)
	require.Equal(t, "early", first[0].Message.MsgID)
	_, err = b.store.OutboxSent(b.ctx, "r", []int64{first[0].ID})
	require.NoError(t, err)
	require.NoError(t, txA.Commit(b.ctx))
	second, err := b.store.OutboxClaim(b.ctx, "r", 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, second, 1)
	require.Equal(t, "late", second[0].Message.MsgID)
	require.Less(t, second[0].ID, first[0].ID)
}

func TestLookups(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res, err := b.store.Submit(b.ctx, submission("evt_1", newOp("k1", "x")))
	require.NoError(t, err)
	byKey, err := b.store.OperationByKey(b.ctx, "k1")
	require.NoError(t, err)
	require.Equal(t, res.Operation.ID, byKey.ID)
	_, err = b.store.OperationByKey(b.ctx, "nope")
	require.ErrorIs(t, err, op.ErrNotFound)
	in, err := b.store.InboxEntry(b.ctx, "nats:intents", "evt_1")
	require.NoError(t, err)
	require.Equal(t, res.Operation.ID, in.OperationID)
	wf, err := b.store.OperationsByWorkflow(b.ctx, "wf_1")
	require.NoError(t, err)
	require.Len(t, wf, 1)
	states, err := b.store.CountByState(b.ctx)
	require.NoError(t, err)
	require.Equal(t, map[op.State]int64{op.StatePendingDispatch: 1}, states)
	msgs, err := b.store.OutboxByOperation(b.ctx, res.Operation.ID)
	require.NoError(t, err)
	require.Len(t, msgs, 1)
}

// A relay limited to subject prefixes (its NATS user's) claims only the rows
// it may publish, even when others are due before them, and leaves the
// rest to relays that may. Breaking it: a filter applied after LIMIT (the
// limited relay claims nothing while the first rows are not its own), or
// none (a planner-ingest relay claiming an unknown command its user may
// not publish).
func TestOutboxClaimBySubject(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := store.Open(ctx, testdb.New(t), store.Options{})
	require.NoError(t, err)
	defer st.Close()
	subjects := []string{"opledger.ops.unknown.t.op_1", "opledger.ops.unknown.t.op_2", "opledger.ops.dispatch.t.op_3",
		"opledger.results.wf_1", "opledger.ops.failed.t.op_4", "opledger.ops.dispatch_x.t.op_5"}
	require.NoError(t, st.InTx(ctx, func(tx *store.Tx) error {
		for i, s := range subjects {
			if err := tx.Enqueue(ctx, store.Message{Subject: s, MsgID: fmt.Sprintf("m%d", i), Payload: []byte("p")}); err != nil {
				return err
			}
		}
		return nil
	}))
	got, err := st.OutboxClaimSubjects(ctx, "compensator", []string{"opledger.ops.dispatch.", "opledger.results."}, 2, time.Minute)
	require.NoError(t, err)
	var claimed []string
	for _, c := range got {
		claimed = append(claimed, c.Message.Subject)
	}
	require.Equal(t, []string{"opledger.ops.dispatch.t.op_3", "opledger.results.wf_1"}, claimed)
	rest, err := st.OutboxClaim(ctx, "any", 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, rest, 4, "the other rows wait for a relay that may publish them")
}

// A known event id arriving with a new key (a replan that kept the event id)
// must not leave the new key's operation behind without its inbox row: the
// one-statement path undoes what it wrote and the transaction answers
// duplicate_event with the first operation. Repeats of a known event id or
// key are not errors there: nothing is written and the transaction decides.
func TestSubmitKnownEventIDUnderANewKeyWritesNothingNew(t *testing.T) {
	t.Parallel()
	for _, group := range []int{1, 0} {
		t.Run(fmt.Sprintf("group=%d", group), func(t *testing.T) {
			b := setup(t)
			st, err := store.Open(b.ctx, b.url, store.Options{MaxConns: 4, GroupCommit: group})
			require.NoError(t, err)
			t.Cleanup(st.Close)
			first, err := st.Submit(b.ctx, submission("evt_1", newOp("payment:order_1:capture:100:USD:v1", "x")))
			require.NoError(t, err)
			require.Equal(t, op.DecisionNew, first.Decision)

			other := newOp("payment:order_1:capture:200:USD:v1", "x")
			res, err := st.Submit(b.ctx, submission("evt_1", other))
			require.NoError(t, err)
			require.Equal(t, op.DecisionDuplicateEvent, res.Decision)
			require.Equal(t, first.Operation.ID, res.Operation.ID)
			require.Zero(t, b.count(t, `SELECT count(*) FROM operations WHERE id = $1 OR idempotency_key = $2`, other.ID, other.IdempotencyKey),
				"the new key's operation must be undone with the statement")
			require.Zero(t, b.count(t, `SELECT count(*) FROM operation_events WHERE operation_id = $1`, other.ID))
			require.Zero(t, b.count(t, `SELECT count(*) FROM outbox_messages WHERE operation_id = $1`, other.ID))

			// A new event id for the known key: a duplicate operation, its
			// inbox row written by the transaction, nothing else.
			dup, err := st.Submit(b.ctx, submission("evt_2", newOp("payment:order_1:capture:100:USD:v1", "x")))
			require.NoError(t, err)
			require.Equal(t, op.DecisionDuplicateOperation, dup.Decision)
			require.Equal(t, first.Operation.ID, dup.Operation.ID)

			require.Equal(t, 1, b.count(t, `SELECT count(*) FROM operations`))
			require.Equal(t, 2, b.count(t, `SELECT count(*) FROM operation_events`), "create + enqueue")
			require.Equal(t, 1, b.count(t, `SELECT count(*) FROM outbox_messages WHERE subject LIKE 'opledger.ops.%'`))
			require.Equal(t, 2, b.count(t, `SELECT count(*) FROM inbox`))
		})
	}
}
