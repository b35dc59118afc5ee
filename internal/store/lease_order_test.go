package store_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/testclock"
	"github.com/opledger/opledger/pkg/op"
)

// A leased claim waits for every older operation of the leased tools on its
// entity that the system may still send, not only for one waiting in
// pending_dispatch: an older operation whose outcome is unknown (its
// dispatcher died after the claim; the reconciler may send it again under
// its key) or that is still in dispatched keeps the younger ones waiting
// after its lease's TTL has passed, or its re-send would land after them
// (a status set active, suspended, active again would end suspended).
// Only an older operation a person owns (escalated) lets the younger ones
// by once its lease has expired, as lease.ttl says. Alone and in one group
// statement alike; the database's clock (injected) decides the expiry.
//
// Breaking it: the claim's "older waiting" probe counting only
// pending_dispatch (as it did) claims the younger operations on
// order_unknown and order_dispatched as soon as the older one's lease
// expired.
func TestLeasedClaimWaitsForOlderOperationsInFlight(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name  string
		group int
	}{{"alone", 1}, {"together", 0}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			clock := testclock.New(time.Now())
			advance := clock.Advance
			st, err := store.Open(b.ctx, b.url, store.Options{MaxConns: 8, Clock: clock.Now, GroupCommit: mode.group})
			require.NoError(t, err)
			t.Cleanup(st.Close)
			lease := store.EntityLease{TTL: time.Minute, Tools: []string{"capture_payment"}}

			n := 0
			submit := func(entity string) *op.Operation {
				t.Helper()
				n++
				advance(time.Millisecond) // created in this order on the database's clock
				o := newOp(entity+"_"+string(rune('a'+n)), "args")
				o.EntityID = entity
				res, err := st.Submit(b.ctx, submission("evt_"+o.IdempotencyKey, o))
				require.NoError(t, err)
				require.Equal(t, op.DecisionNew, res.Decision)
				return res.Operation
			}
			claim := func(o *op.Operation) (*op.Operation, *op.Attempt) {
				t.Helper()
				got, att, err := st.BeginLeasedAttempt(b.ctx, o.ID, o.LeaseEpoch, "w-dead", time.Second, lease)
				require.NoError(t, err)
				return got, att
			}
			// As the sweeper fences off an attempt whose dispatcher died:
			// unknown_outcome at a new epoch, the lease kept.
			sweep := func(o *op.Operation, att *op.Attempt) *op.Operation {
				t.Helper()
				got, err := st.Transition(b.ctx, store.Change{OperationID: o.ID, From: op.StateDispatched, LeaseEpoch: o.LeaseEpoch,
					Events: []op.Event{op.EventOutcomeUnknown}, BumpEpoch: true, Actor: "sweeper", AttemptID: att.ID,
					Finish: &op.Attempt{ID: att.ID, Outcome: op.OutcomeUnknown, ErrorCategory: "swept", Error: "no answer"}})
				require.NoError(t, err)
				require.Equal(t, op.StateUnknownOutcome, got.State)
				return got
			}

			unknownOlder, unknownYounger := submit("order_unknown"), submit("order_unknown")
			dispatchedOlder, dispatchedYounger := submit("order_dispatched"), submit("order_dispatched")
			escalatedOlder, escalatedYounger := submit("order_escalated"), submit("order_escalated")

			sweep(claim(unknownOlder))
			claim(dispatchedOlder)
			swept := sweep(claim(escalatedOlder))
			_, err = st.Transition(b.ctx, store.Change{OperationID: swept.ID, From: op.StateUnknownOutcome, LeaseEpoch: swept.LeaseEpoch,
				Events: []op.Event{op.EventEscalate}, Actor: "reconciler"})
			require.NoError(t, err)

			advance(2 * time.Minute) // every lease has expired
			younger := []*op.Operation{unknownYounger, dispatchedYounger, escalatedYounger}
			errs := make([]error, len(younger))
			if mode.group == 0 {
				queued, release := store.HoldClaims(st)
				var wg sync.WaitGroup
				for i, o := range younger {
					wg.Go(func() { _, _, errs[i] = st.BeginLeasedAttempt(b.ctx, o.ID, o.LeaseEpoch, "w1", time.Second, lease) })
				}
				require.Eventually(t, func() bool { return queued() == len(younger) }, 10*time.Second, time.Millisecond)
				release()
				wg.Wait()
				gs := st.GroupStats().Claims
				require.EqualValues(t, len(younger), gs.Largest, "one statement: %+v", gs)
				require.Zero(t, gs.Fallbacks, "%+v", gs)
			} else {
				for i, o := range younger {
					_, _, errs[i] = st.BeginLeasedAttempt(b.ctx, o.ID, o.LeaseEpoch, "w1", time.Second, lease)
				}
			}
			require.ErrorIs(t, errs[0], store.ErrLeaseBusy, "an older operation whose outcome is unknown may be sent again: the younger one waits")
			require.ErrorIs(t, errs[1], store.ErrLeaseBusy, "an older operation still in dispatched: the younger one waits")
			require.NoError(t, errs[2], "an older operation a person owns, whose lease expired, lets the younger one by")
			require.Equal(t, 2, b.count(t, `SELECT count(*) FROM operations WHERE id = ANY($1) AND state = 'pending_dispatch' AND attempt_count = 0`,
				[]string{unknownYounger.ID, dispatchedYounger.ID}))
			require.Equal(t, 1, b.count(t, `SELECT count(*) FROM entity_leases WHERE entity_id = 'order_escalated' AND operation_id = $1`, escalatedYounger.ID))
		})
	}
}

// The same order holds when the older operation moves while the younger
// one's claim runs: the reconciler sends an older operation whose outcome
// was unknown again (unknown_outcome → pending_dispatch, its lease given
// back) while a younger claim's statement, which read the older one as
// unknown_outcome, waits for the lease row the reconciler is deleting. The
// younger one must not take the lease when the reconciler commits: the
// older one is pending again and goes first. The test holds the
// reconciler's transaction open until the claim waits on its lock (or has
// answered), then commits. Alone and in one group statement alike.
//
// Breaking it: the probe counting only pending_dispatch (as it did) lets
// the waiting claim insert the lease the moment the delete commits, so the
// younger operation is dispatched ahead of the older one's retry, lease
// unexpired (seen in eval -kill: a younger set-back step claimed 9 ms after
// the older one went back to pending_dispatch).
func TestLeasedClaimDoesNotOvertakeAnOlderOneSentAgain(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name  string
		group int
	}{{"alone", 1}, {"together", 0}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			st, err := store.Open(b.ctx, b.url, store.Options{MaxConns: 8, GroupCommit: mode.group})
			require.NoError(t, err)
			t.Cleanup(st.Close)
			lease := store.EntityLease{TTL: time.Minute, Tools: []string{"capture_payment"}}
			submit := func(key, entity string) *op.Operation {
				t.Helper()
				o := newOp(key, "args")
				o.EntityID = entity
				res, err := st.Submit(b.ctx, submission("evt_"+key, o))
				require.NoError(t, err)
				return res.Operation
			}
			older := submit("key_older", "order_shared")
			younger := submit("key_younger", "order_shared")
			other := submit("key_other", "order_other")
			require.True(t, older.CreatedAt.Before(younger.CreatedAt))

			held, att, err := st.BeginLeasedAttempt(b.ctx, older.ID, older.LeaseEpoch, "w-dead", time.Second, lease)
			require.NoError(t, err)
			swept, err := st.Transition(b.ctx, store.Change{OperationID: held.ID, From: op.StateDispatched, LeaseEpoch: held.LeaseEpoch,
				Events: []op.Event{op.EventOutcomeUnknown}, BumpEpoch: true, Actor: "sweeper", AttemptID: att.ID,
				Finish: &op.Attempt{ID: att.ID, Outcome: op.OutcomeUnknown, ErrorCategory: "swept", Error: "no answer"}})
			require.NoError(t, err)
			require.Equal(t, 1, b.count(t, `SELECT count(*) FROM entity_leases WHERE operation_id = $1`, older.ID), "unknown_outcome keeps the lease")

			var wg sync.WaitGroup
			claimed := make(chan struct{})
			var youngerErr, otherErr error
			err = st.InTx(b.ctx, func(tx *store.Tx) error {
				// The reconciler's verdict: send it again under its key.
				again, err := tx.Transition(b.ctx, store.Change{OperationID: swept.ID, From: op.StateUnknownOutcome, LeaseEpoch: swept.LeaseEpoch,
					Events: []op.Event{op.EventFailRetryable, op.EventRetry}, Actor: "reconciler"})
				if err != nil {
					return err
				}
				require.Equal(t, op.StatePendingDispatch, again.State)
				var release func()
				queued := func() int { return 0 }
				if mode.group == 0 {
					queued, release = store.HoldClaims(st)
				}
				wg.Go(func() {
					_, _, youngerErr = st.BeginLeasedAttempt(b.ctx, younger.ID, younger.LeaseEpoch, "w1", time.Second, lease)
				})
				if mode.group == 0 {
					wg.Go(func() {
						_, _, otherErr = st.BeginLeasedAttempt(b.ctx, other.ID, other.LeaseEpoch, "w1", time.Second, lease)
					})
					require.Eventually(t, func() bool { return queued() == 2 }, 10*time.Second, time.Millisecond)
					release()
				}
				go func() { wg.Wait(); close(claimed) }()
				require.Eventually(t, func() bool {
					select {
					case <-claimed:
						return true
					default:
					}
					return b.count(t, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`) > 0
				}, 10*time.Second, time.Millisecond, "the claim answers or waits for the lease row")
				return nil
			})
			require.NoError(t, err)
			<-claimed
			require.ErrorIs(t, youngerErr, store.ErrLeaseBusy, "the older operation, pending again, goes first")
			require.NoError(t, otherErr)
			cur, err := st.Operation(b.ctx, younger.ID)
			require.NoError(t, err)
			require.Equal(t, op.StatePendingDispatch, cur.State)
			if mode.group == 0 {
				gs := st.GroupStats().Claims
				require.EqualValues(t, 2, gs.Largest, "one statement: %+v", gs)
			}
			_, _, err = st.BeginLeasedAttempt(b.ctx, older.ID, swept.LeaseEpoch, "w1", time.Second, lease)
			require.NoError(t, err, "the older one takes the lease for its retry")
		})
	}
}
