package ops_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/compensate"
	"github.com/opledger/opledger/internal/maintain"
	"github.com/opledger/opledger/internal/ops"
	"github.com/opledger/opledger/internal/outbox"
	"github.com/opledger/opledger/internal/pipetest"
	"github.com/opledger/opledger/internal/regedit"
	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/telemetry"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// Compensating is idempotent for an operator: asking to compensate the same
// operation twice (a double click, a retried HTTP call, two operators)
// returns the same compensation operation, and the original is moved to
// compensating once.
//
// Breaking it: checking that the original may still be compensated before
// looking for its compensation refuses the second request (the original is
// compensating by then); creating a second refund would pay it back twice.
func TestCompensateTwiceReturnsTheSameCompensation(t *testing.T) {
	t.Parallel()
	b := setup(t, pipetest.Options{})
	o := b.SubmitCapture(t, "wf_comp", "order_comp")
	require.NoError(t, b.d.Handle(b.Ctx, b.LastCommand(t, o, wire.KindDispatch).Delivery(1)))
	require.Equal(t, op.StateCompletedSuccess, b.Operation(t, o.ID).State)

	first, err := b.ops.Compensate(b.Ctx, oscar, o.ID, "the customer returned the goods")
	require.NoError(t, err)
	require.Equal(t, o.ID, first.CompensatesID)
	afterFirst := b.Operation(t, o.ID)
	require.Equal(t, op.StateCompensating, afterFirst.State)

	second, err := b.ops.Compensate(b.Ctx, oscar, o.ID, "asked again")
	require.NoError(t, err, "a second request is answered with the compensation that stands")
	require.Equal(t, first.ID, second.ID)
	require.Equal(t, afterFirst.Version, b.Operation(t, o.ID).Version, "the original is not touched again")

	// A viewer may not compensate, even what is already compensated.
	_, err = b.ops.Compensate(b.Ctx, vera, o.ID, "me too")
	require.Error(t, err)

	events, err := b.Store.Events(b.Ctx, o.ID)
	require.NoError(t, err)
	n := 0
	for _, e := range events {
		if e.Event == op.EventCompensate {
			n++
		}
	}
	require.Equal(t, 1, n, "one compensate event")
}

// completedCapture captures an order at the local vendor.
func (b bundle) completedCapture(t *testing.T, order string) *op.Operation {
	t.Helper()
	o := b.SubmitCapture(t, "wf_comp", order)
	require.NoError(t, b.d.Handle(b.Ctx, b.LastCommand(t, o, wire.KindDispatch).Delivery(1)))
	o = b.Operation(t, o.ID)
	require.Equal(t, op.StateCompletedSuccess, o.State)
	return o
}

// lastEvent is the latest event of an operation's history.
func (b bundle) lastEvent(t *testing.T, id string) op.EventRecord {
	t.Helper()
	events, err := b.Store.Events(b.Ctx, id)
	require.NoError(t, err)
	return events[len(events)-1]
}

// A compensation that ends without doing anything (denied by an approver,
// cancelled by an operator, its approval expired) hands the original back:
// the capture is completed_success again, with an event and a result that
// say why, links to the compensation it had, and may be compensated again,
// each time with a compensation of its own. The one that is approved
// refunds once and the capture ends compensated.
//
// Breaking it: without followup.WithdrawCompensation in Deny, Cancel and
// ExpireApprovals the capture stays compensating forever; without
// Existing skipping compensations that ended without effect, compensating
// again returns the rejected refund; without the numbered inbox id and key
// the second refund collides with the first (duplicate event, or the
// rejected refund's key).
func TestCompensationEndedWithoutEffectHandsTheOriginalBack(t *testing.T) {
	t.Parallel()
	now := time.Now()
	clock := func() time.Time { return now }
	b := setup(t, pipetest.Options{Clock: func() time.Time { return clock() }})
	orig := b.completedCapture(t, "order_back")

	compensated := func(why string) *op.Operation {
		t.Helper()
		comp, err := b.ops.Compensate(b.Ctx, oscar, orig.ID, why)
		require.NoError(t, err)
		require.Equal(t, op.StateAwaitingApproval, comp.State, "refund_payment always needs approval")
		require.Equal(t, orig.ID, comp.CompensatesID)
		cur := b.Operation(t, orig.ID)
		require.Equal(t, op.StateCompensating, cur.State)
		require.Equal(t, comp.ID, cur.CompensationID, "the original links to its compensation")
		return comp
	}
	handedBack := func(comp *op.Operation, why string) {
		t.Helper()
		cur := b.Operation(t, orig.ID)
		require.Equal(t, op.StateCompletedSuccess, cur.State, "back where it was compensated from")
		require.Equal(t, comp.ID, cur.CompensationID, "still names the compensation it had")
		ev := b.lastEvent(t, orig.ID)
		require.Equal(t, op.EventSucceed, ev.Event)
		require.Equal(t, op.StateCompensating, ev.From)
		require.Contains(t, string(ev.Detail), comp.ID)
		require.Contains(t, string(ev.Detail), why)
		res := b.Results(t)
		last := res[len(res)-1]
		require.Equal(t, orig.ID, last.OperationID)
		require.Equal(t, string(op.StateCompletedSuccess), last.Status)
		require.Contains(t, last.Reason, why)
	}

	first := compensated("goods returned")
	_, err := b.ops.Deny(b.Ctx, alice, first.ID, "the goods never arrived back")
	require.NoError(t, err)
	require.Equal(t, op.StateRejected, b.Operation(t, first.ID).State)
	handedBack(first, "the goods never arrived back")

	second := compensated("goods arrived after all")
	require.NotEqual(t, first.ID, second.ID, "a new compensation, not the rejected one")
	require.NotEqual(t, first.IdempotencyKey, second.IdempotencyKey)
	require.True(t, strings.HasPrefix(second.IdempotencyKey, first.IdempotencyKey), "derived from the same playbook key: %s", second.IdempotencyKey)
	_, err = b.ops.Cancel(b.Ctx, oscar, second.ID, "asked twice by mistake")
	require.NoError(t, err)
	handedBack(second, "asked twice by mistake")

	third := compensated("third time")
	clock = func() time.Time { return now.Add(25 * time.Hour) } // refund_payment's approval expires after 24 h
	n, err := maintain.New(maintain.Config{Name: "m"}, b.Store, b.Registry, nil, nil, b.Log).ExpireApprovals(b.Ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, op.StateCancelled, b.Operation(t, third.ID).State)
	handedBack(third, "its approval request expired")

	fourth := compensated("approved this time")
	again, err := b.ops.Compensate(b.Ctx, oscar, orig.ID, "double click")
	require.NoError(t, err)
	require.Equal(t, fourth.ID, again.ID, "asking again while one stands returns it")
	released, err := b.ops.Approve(b.Ctx, alice, fourth.ID, fourth.ArgsHash, "refund confirmed with the customer")
	require.NoError(t, err)
	require.NoError(t, b.d.Handle(b.Ctx, b.LastCommand(t, released, wire.KindDispatch).Delivery(1)))
	require.Equal(t, op.StateCompletedSuccess, b.Operation(t, fourth.ID).State)
	require.Equal(t, op.StateCompensated, b.Operation(t, orig.ID).State)
	require.Equal(t, 1, b.Vendors.Stats().Refunds, "one refund, of the approved compensation")

	refunds := 0
	ops, err := b.Store.OperationsByWorkflow(b.Ctx, "wf_comp")
	require.NoError(t, err)
	for _, o := range ops {
		if o.CompensatesID == orig.ID {
			refunds++
		}
	}
	require.Equal(t, 4, refunds)
}

// An operator gives up on an escalated capture whose charge id is known:
// the compensator runs its playbook once (the refund, proposed by the
// operator who gave up, so that they cannot approve it too), a redelivered
// failed command changes nothing, and a denied refund hands the capture
// back to failed_permanent without a new trigger.
//
// Breaking it: a compensator that ignored failures of operations that are
// not compensations (the old behaviour) leaves the capture failed with no
// refund; one that triggered again on redelivery, or after the refund was
// denied, would loop.
func TestGiveUpRunsThePlaybookOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, pipetest.Options{})
	esc := b.escalatedWith(t, "order_gu", "ch_gu_1")
	cur, err := b.ops.Resolve(b.Ctx, oscar, esc.ID, ops.VerdictGiveUp, "", "cannot confirm the capture")
	require.NoError(t, err)
	failed := b.LastCommand(t, cur, wire.KindFailed)

	svc := compensate.New(compensate.Config{}, b.Store, b.Bus, b.Registry, nil, b.Log)
	require.NoError(t, svc.Handle(b.Ctx, failed.Delivery(1)))
	orig := b.Operation(t, esc.ID)
	require.Equal(t, op.StateCompensating, orig.State)
	require.NotEmpty(t, orig.CompensationID)
	comp := b.Operation(t, orig.CompensationID)
	require.Equal(t, "refund_payment", comp.Tool)
	require.Equal(t, "oscar", comp.ProposedBy, "proposed by the operator who gave up")
	require.Contains(t, string(comp.Args), "ch_gu_1")
	_, err = b.ops.Approve(b.Ctx, ops.Actor{ID: "oscar", Role: ops.RoleAdmin}, comp.ID, comp.ArgsHash, "my own give-up")
	require.ErrorIs(t, err, ops.ErrForbidden)

	require.NoError(t, svc.Handle(b.Ctx, failed.Delivery(2)))
	require.Equal(t, orig, b.Operation(t, esc.ID), "a redelivery changes nothing")

	_, err = b.ops.Deny(b.Ctx, alice, comp.ID, "the charge never happened")
	require.NoError(t, err)
	back := b.Operation(t, esc.ID)
	require.Equal(t, op.StateFailedPermanent, back.State, "back to where it was compensated from")
	require.Equal(t, "given_up", back.LastErrorCategory)
	require.Len(t, b.Commands(t, back, wire.KindFailed), 1, "no new trigger")
	require.NoError(t, svc.Handle(b.Ctx, failed.Delivery(3)))
	require.Equal(t, back, b.Operation(t, esc.ID), "a trigger runs once; only an operator asks again")
	require.Zero(t, b.Vendors.Stats().Refunds)
}

// compensation.on_failure: a capture that failed for good after it may
// have reached the vendor gets its refund from the compensator, proposed
// by no person; a failure that did nothing does not; a playbook that
// cannot run escalates to a person, once.
//
// Breaking it: ignoring on_failure leaves the failed capture alone;
// ignoring the retries_exhausted exception compensates what never
// happened (and makes it impossible to reopen); escalating a given-up
// operation whose playbook cannot run would bounce it between a person
// and the compensator.
func TestOnFailurePlaybook(t *testing.T) {
	t.Parallel()
	b := setup(t, pipetest.Options{EditRegistry: func(data []byte) ([]byte, error) {
		return regedit.Set(data, "compensation.on_failure", "true", func(tl regedit.Tool) bool { return tl.Name == "capture_payment" })
	}})
	svc := compensate.New(compensate.Config{}, b.Store, b.Bus, b.Registry, nil, b.Log)
	failWith := func(order, category, objectID string) *op.Operation {
		t.Helper()
		o := b.SubmitCapture(t, "wf_1", order)
		claimed, _, err := b.Store.BeginAttempt(b.Ctx, o.ID, o.LeaseEpoch, "w", time.Second)
		require.NoError(t, err)
		cur, err := b.Store.Transition(b.Ctx, store.Change{OperationID: o.ID, From: op.StateDispatched, LeaseEpoch: claimed.LeaseEpoch,
			Events: []op.Event{op.EventFailPermanent}, ErrorCategory: category, Error: "vendor reports the charge failed",
			ExternalObjectID: objectID, Operation: claimed, Outbox: func(after *op.Operation) []store.Message {
				return []store.Message{outbox.Command(wire.KindFailed, after, after.OriginEventID, telemetry.Traceparent{}, 0)}
			}})
		require.NoError(t, err)
		require.NoError(t, svc.Handle(b.Ctx, b.LastCommand(t, cur, wire.KindFailed).Delivery(1)))
		return b.Operation(t, o.ID)
	}

	partial := failWith("order_partial", "vendor_failed", "ch_partial_1")
	require.Equal(t, op.StateCompensating, partial.State)
	comp := b.Operation(t, partial.CompensationID)
	require.Equal(t, compensate.Automatic, comp.ProposedBy)
	require.Equal(t, op.StateAwaitingApproval, comp.State)

	nothing := failWith("order_nothing", op.CategoryRetriesExhausted, "")
	require.Equal(t, op.StateFailedPermanent, nothing.State, "nothing was done: nothing to compensate")
	require.Empty(t, nothing.CompensationID)

	stuck := failWith("order_nocharge", "vendor_failed", "")
	require.Equal(t, op.StateEscalated, stuck.State, "the playbook cannot run: a person must look")
	require.Equal(t, "compensation_not_started", stuck.LastErrorCategory)
	require.Contains(t, string(b.lastEvent(t, stuck.ID).Detail), "charge_id")
	given, err := b.ops.Resolve(b.Ctx, oscar, stuck.ID, ops.VerdictGiveUp, "", "nothing to refund")
	require.NoError(t, err)
	require.Equal(t, op.StateFailedPermanent, given.State)
	require.Empty(t, b.Commands(t, given, wire.KindFailed)[1:], "the playbook cannot run; no command for it")
}
