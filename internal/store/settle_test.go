package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/testclock"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/pkg/op"
)

// claimed submits an operation and claims it for an attempt.
func (b bundle) claimed(t *testing.T, key string) (*op.Operation, *op.Attempt) {
	t.Helper()
	res, err := b.store.Submit(b.ctx, submission("evt_"+key, newOp(key, "x")))
	require.NoError(t, err)
	o, att, err := b.store.BeginAttempt(b.ctx, res.Operation.ID, 0, "w1", 2*time.Second)
	require.NoError(t, err)
	return o, att
}

func msg(id, opID string, delay time.Duration) store.Message {
	return store.Message{Subject: "opledger.ops.dispatch.t." + opID, MsgID: id, Payload: []byte(id), OperationID: opID, Delay: delay}
}

// One decision, one statement: a retryable failure that is retried at once
// writes the attempt's outcome, both events, the new state and the delayed
// dispatch command together. The command is due Delay after the database's
// now(), and the attempt's deadline is the database's claim time plus the
// tool's timeout.
func TestTransitionWritesTheWholeDecision(t *testing.T) {
	t.Parallel()
	b := setup(t)
	o, att := b.claimed(t, "k1")
	require.WithinDuration(t, att.StartedAt.Add(2*time.Second), att.DeadlineAt, time.Millisecond)
	var deadline time.Time
	var twoSeconds bool
	require.NoError(t, b.db.QueryRow(b.ctx, `SELECT deadline_at - started_at = interval '2 seconds', deadline_at FROM attempts WHERE id = $1`, att.ID).Scan(&twoSeconds, &deadline))
	require.True(t, twoSeconds, "the stored deadline is the claim time plus the tool's timeout, in SQL")

	a := *att
	a.Outcome, a.ErrorCategory, a.Error = op.OutcomeRetryable, "rate_limited", "vendor answered HTTP 429"
	after, err := b.store.Transition(b.ctx, store.Change{OperationID: o.ID, From: op.StateDispatched, LeaseEpoch: o.LeaseEpoch,
		Events: []op.Event{op.EventFailRetryable, op.EventRetry}, ErrorCategory: a.ErrorCategory, Error: a.Error,
		AttemptID: att.ID, Actor: "w1", Finish: &a, Operation: o,
		Outbox: func(after *op.Operation) []store.Message {
			require.Equal(t, op.StatePendingDispatch, after.State)
			require.Equal(t, o.Version+2, after.Version)
			return []store.Message{msg("retry-1", o.ID, 90*time.Second)}
		}})
	require.NoError(t, err)
	require.Equal(t, op.StatePendingDispatch, after.State)
	require.Equal(t, o.Version+2, after.Version)

	evs, err := b.store.Events(b.ctx, o.ID)
	require.NoError(t, err)
	var names []op.Event
	for _, e := range evs {
		names = append(names, e.Event)
	}
	require.Equal(t, []op.Event{op.EventCreate, op.EventEnqueue, op.EventDispatch, op.EventFailRetryable, op.EventRetry}, names)
	require.Equal(t, op.StateFailedRetryable, evs[3].To)
	require.Equal(t, op.StateFailedRetryable, evs[4].From)
	atts, err := b.store.Attempts(b.ctx, o.ID)
	require.NoError(t, err)
	require.Equal(t, op.OutcomeRetryable, atts[0].Outcome)
	require.False(t, atts[0].FinishedAt.IsZero())
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM outbox_messages WHERE msg_id = 'retry-1'
		AND available_at - now() BETWEEN interval '85 seconds' AND interval '90 seconds'`), "due 90 s after the database's now()")
}

// The decision commits whole or not at all: when any part of the statement
// fails (here an outbox row whose msg id is taken), the attempt is not
// finished and the operation does not move. Before, a retryable outcome
// finished the attempt in one commit and transitioned in another, and a
// failure in between stranded the operation in dispatched.
func TestTransitionIsAllOrNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// fail makes the statement's last write fail for message m.
		fail func(t *testing.T, b bundle) store.Message
		want error
	}{
		{"a row of outbox", func(t *testing.T, b bundle) store.Message {
			// A message due later is a row of outbox; its msg id is taken.
			_, err := b.db.Exec(b.ctx, `INSERT INTO outbox (subject, msg_id, payload) VALUES ('s', 'taken', 'x')`)
			require.NoError(t, err)
			return msg("taken", "", time.Minute)
		}, op.ErrConflict},
		{"the batch", func(t *testing.T, b bundle) store.Message {
			// A message due at once is in the statement's row of
			// outbox_batches, which this database refuses.
			_, err := b.db.Exec(b.ctx, `CREATE FUNCTION refuse_batches() RETURNS trigger LANGUAGE plpgsql AS
				$$BEGIN RAISE EXCEPTION 'no batches here' USING ERRCODE = 'invalid_parameter_value'; END$$;
				CREATE TRIGGER refuse_batches BEFORE INSERT ON outbox_batches FOR EACH ROW EXECUTE FUNCTION refuse_batches()`)
			require.NoError(t, err)
			return msg("result", "", 0)
		}, op.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			o, att := b.claimed(t, "k1")
			m := tc.fail(t, b)
			m.OperationID = o.ID
			a := *att
			a.Outcome = op.OutcomeRetryable
			_, err := b.store.Transition(b.ctx, store.Change{OperationID: o.ID, From: op.StateDispatched, LeaseEpoch: o.LeaseEpoch,
				Events: []op.Event{op.EventFailRetryable, op.EventRetry}, AttemptID: att.ID, Finish: &a, Operation: o,
				Outbox: func(*op.Operation) []store.Message { return []store.Message{m} }})
			require.ErrorIs(t, err, tc.want)
			cur, err := b.store.Operation(b.ctx, o.ID)
			require.NoError(t, err)
			require.Equal(t, o, cur, "nothing moved")
			atts, err := b.store.Attempts(b.ctx, o.ID)
			require.NoError(t, err)
			require.True(t, atts[0].FinishedAt.IsZero(), "the attempt is still open, for the sweeper")
			require.Equal(t, 3, b.count(t, `SELECT count(*) FROM operation_events WHERE operation_id = $1`, o.ID))
		})
	}
}

// A fenced-off writer changes nothing but keeps what the vendor said on its
// attempt row: the evidence survives for the reconciler.
func TestFencedWriterKeepsTheVendorsAnswer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	o, att := b.claimed(t, "k1")
	// The sweeper took the lease.
	swept, err := b.store.Transition(b.ctx, store.Change{OperationID: o.ID, From: op.StateDispatched, LeaseEpoch: o.LeaseEpoch,
		Events: []op.Event{op.EventOutcomeUnknown}, BumpEpoch: true, ErrorCategory: "stuck", Error: "late"})
	require.NoError(t, err)
	a := *att
	a.Outcome, a.HTTPStatus, a.ExternalObjectID = op.OutcomeSuccess, 200, "ch_1"
	_, err = b.store.Transition(b.ctx, store.Change{OperationID: o.ID, From: op.StateDispatched, LeaseEpoch: o.LeaseEpoch,
		Events: []op.Event{op.EventSucceed}, ExternalObjectID: "ch_1", AttemptID: att.ID, Finish: &a, Operation: o,
		Outbox: func(*op.Operation) []store.Message { return []store.Message{msg("result", o.ID, 0)} }})
	var stale *op.StaleError
	require.ErrorAs(t, err, &stale)
	require.Equal(t, op.StateUnknownOutcome, stale.GotState)
	cur, err := b.store.Operation(b.ctx, o.ID)
	require.NoError(t, err)
	require.Equal(t, swept, cur)
	atts, err := b.store.Attempts(b.ctx, o.ID)
	require.NoError(t, err)
	require.Equal(t, op.OutcomeSuccess, atts[0].Outcome)
	require.Equal(t, "ch_1", atts[0].ExternalObjectID)
	require.Zero(t, b.count(t, `SELECT count(*) FROM outbox_messages WHERE msg_id = 'result'`))
}

// A message NATS refuses (too large, say) is retried a bounded number of
// times and then parked, visible and no longer claimed; a transport failure
// (NATS down) does not count toward parking. Mark and release are fenced
// by the claim.
func TestOutboxParksWhatNATSRefuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := testclock.New(time.Date(2026, 12, 1, 2, 13, 0, 0, time.UTC))
	tick := func() { clock.Advance(time.Minute) }
	st, err := store.Open(ctx, testdb.New(t), store.Options{Clock: clock.Now})
	require.NoError(t, err)
	defer st.Close()
	require.NoError(t, st.InTx(ctx, func(tx *store.Tx) error {
		return tx.Enqueue(ctx, msg("huge", "", 0), msg("fine", "", 0))
	}))
	claimOne := func(id string) int64 {
		rows, err := st.OutboxClaim(ctx, "relay-a", 10, 30*time.Second)
		require.NoError(t, err)
		for _, r := range rows {
			if r.Message.MsgID == id {
				return r.ID
			}
		}
		return 0
	}
	// Transport failures: never parked.
	for range 10 {
		id := claimOne("huge")
		require.NotZero(t, id)
		require.NoError(t, st.OutboxRelease(ctx, store.Release{Relay: "relay-a", IDs: []int64{id}, Reason: "nats: connection closed", MaxFailures: 3}))
		tick()
	}
	_, n, err := st.OutboxParked(ctx, 10)
	require.NoError(t, err)
	require.Zero(t, n)
	// The message's own fault: parked at the third.
	for range 3 {
		id := claimOne("huge")
		require.NotZero(t, id)
		require.NoError(t, st.OutboxRelease(ctx, store.Release{Relay: "relay-a", IDs: []int64{id}, Reason: "nats: maximum payload exceeded",
			MessageFault: true, MaxFailures: 3}))
		tick()
	}
	parked, n, err := st.OutboxParked(ctx, 10)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Equal(t, "huge", parked[0].MsgID)
	require.Equal(t, 3, parked[0].Failures)
	require.Equal(t, "nats: maximum payload exceeded", parked[0].LastError)
	require.Zero(t, claimOne("huge"), "a parked row is not claimed again")

	// Fencing: another relay cannot mark or release relay-a's claim.
	tick()
	id := claimOne("fine")
	require.NotZero(t, id)
	marked, err := st.OutboxSent(ctx, "relay-b", []int64{id})
	require.NoError(t, err)
	require.Zero(t, marked)
	marked, err = st.OutboxSent(ctx, "relay-a", []int64{id})
	require.NoError(t, err)
	require.EqualValues(t, 1, marked)
}

// Retention deletes rejected inbox rows past their period, and nothing
// else.
func TestRetentionDeletesOnlyWhatIsDue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := testclock.New(time.Date(2026, 12, 1, 2, 13, 0, 0, time.UTC))
	advance := clock.Advance
	url := testdb.New(t)
	st, err := store.Open(ctx, url, store.Options{Clock: clock.Now})
	require.NoError(t, err)
	defer st.Close()

	res, err := st.Submit(ctx, submission("evt_ok", newOp("k1", "x")))
	require.NoError(t, err)
	_, err = st.Submit(ctx, store.Submission{Source: "nats:intents", EventID: "evt_bad", Payload: []byte("garbage"), RejectReason: "not JSON"})
	require.NoError(t, err)
	require.NoError(t, st.InTx(ctx, func(tx *store.Tx) error { return tx.Enqueue(ctx, msg("unsent", res.Operation.ID, time.Hour)) }))

	n, err := st.DeleteRejectedInbox(ctx, 24*time.Hour, 100)
	require.NoError(t, err)
	require.Zero(t, n, "too young")

	advance(25 * time.Hour)
	n, err = st.DeleteRejectedInbox(ctx, 24*time.Hour, 100)
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "the rejected row")
	unsent, err := st.OutboxUnsent(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, unsent, "an unsent row is never deleted")
	_, err = st.InboxEntry(ctx, "nats:intents", "evt_ok")
	require.NoError(t, err, "an accepted event is kept")
	_, err = st.InboxEntry(ctx, "nats:intents", "evt_bad")
	require.ErrorIs(t, err, op.ErrNotFound)
}

// One leader at a time. The lock lives with its connection: a leader whose
// connection dies (a crashed process) loses it, and another takes over.
func TestOneMaintenanceLeader(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testdb.New(t)
	open := func() *store.Store {
		st, err := store.Open(ctx, url, store.Options{MaxConns: 4})
		require.NoError(t, err)
		t.Cleanup(st.Close)
		return st
	}
	a, b := open(), open()
	la, err := a.TryLead(ctx, "a", 10*time.Second)
	require.NoError(t, err)
	require.NotNil(t, la)
	released := false
	t.Cleanup(func() {
		if !released {
			la.Release() // a's pool cannot close while the lock's connection is out
		}
	})
	lb, err := b.TryLead(ctx, "b", 10*time.Second)
	require.NoError(t, err)
	require.Nil(t, lb, "a leads")
	holder, _, err := b.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, "a", holder)

	again, err := a.TryLead(ctx, "a-again", 10*time.Second)
	require.NoError(t, err)
	require.Nil(t, again, "the lock is the session's: another connection of the same process does not get it")

	// a's process dies: the session holding the lock is killed from outside.
	db, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	defer db.Close()
	var killed int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid))::int FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&killed))
	require.Equal(t, 1, killed)
	require.Error(t, la.Heartbeat(ctx), "the dead leader learns it")
	la.Release()
	released = true
	// The killed backend releases its locks as it exits, a moment later.
	require.Eventually(t, func() bool {
		lb, err = b.TryLead(ctx, "b", 10*time.Second)
		return err == nil && lb != nil
	}, 5*time.Second, 10*time.Millisecond, "b takes over once a's session is gone")
	holder, _, err = b.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, "b", holder)
	lb.Release()
}
