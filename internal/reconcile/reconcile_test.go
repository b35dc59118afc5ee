package reconcile_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/dispatch"
	"github.com/opledger/opledger/internal/pipetest"
	"github.com/opledger/opledger/internal/reconcile"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

func TestMain(m *testing.M) { testdb.Main(m) }

const settleDelay = 300 * time.Millisecond

type bundle struct {
	*pipetest.Env
	dispatcher *dispatch.Service
	svc        *reconcile.Service
}

func setup(t *testing.T) bundle {
	t.Helper()
	e := pipetest.Start(t, pipetest.Options{})
	return bundle{
		Env:        e,
		dispatcher: dispatch.New(dispatch.Config{Name: "dispatcher-1"}, e.Store, e.Bus, e.Registry, e.Adapters, nil, e.Log),
		svc: reconcile.New(reconcile.Config{Name: "reconciler-1", SettleDelay: settleDelay},
			e.Store, e.Bus, e.Registry, e.Adapters, nil, e.Log),
	}
}

// unknownCapture submits a capture and dispatches it into the vendor fault
// kind, which must leave it in unknown_outcome; it returns the operation and
// the reconcile command the dispatcher wrote.
func (b bundle) unknownCapture(t *testing.T, orderID string, fault vendors.FaultKind) (*op.Operation, pipetest.Row) {
	t.Helper()
	require.NoError(t, b.Vendors.InjectFault(vendors.Fault{Route: vendors.RouteCapture, Kind: fault}))
	o := b.SubmitCapture(t, "wf_1", orderID)
	require.NoError(t, b.dispatcher.Handle(b.Ctx, b.LastCommand(t, o, wire.KindDispatch).Delivery(1)))
	o = b.Operation(t, o.ID)
	require.Equal(t, op.StateUnknownOutcome, o.State, "after %s", fault)
	return o, b.LastCommand(t, o, wire.KindUnknown)
}

// vendorChargeID asks the payments stand-in, as an operator would, which
// charge it holds under key.
func (b bundle) vendorChargeID(t *testing.T, key string) string {
	t.Helper()
	resp, err := http.Get(b.Vendors.URL() + "/v1/payments?idempotency_key=" + url.QueryEscape(key))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var ch struct {
		ID string `json:"id"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&ch))
	require.NotEmpty(t, ch.ID)
	return ch.ID
}

// The vendor captured and the answer was lost (timeout_after_commit, through
// the real dispatcher). The reconciler looks the charge up by idempotency key
// and completes the operation with the vendor's charge id, without sending
// the capture again.
//
// Breaking it: a reconciler that re-sent instead of looking up would make a
// second capture request (the vendor's key replay would hide it from
// Captures, not from Requests); one that trusted "no answer" as "not applied"
// would retry an irreversible capture.
func TestReconcileFindsEffectAtVendor(t *testing.T) {
	t.Parallel()
	b := setup(t)
	o, cmd := b.unknownCapture(t, "order_1", vendors.FaultTimeoutAfterCommit)
	require.Equal(t, 1, b.Vendors.Stats().Captures)

	require.NoError(t, b.svc.Handle(b.Ctx, cmd.Delivery(1)))
	st := b.Vendors.Stats() // before the test's own lookup below, which the vendor counts too
	require.Equal(t, 1, st.Captures, "exactly one capture")
	require.Equal(t, 1, st.Requests[vendors.RouteCapture], "the capture was sent once")
	require.Equal(t, 1, st.Requests[vendors.RouteCaptureLookup])

	got := b.Operation(t, o.ID)
	require.Equal(t, op.StateCompletedSuccess, got.State)
	require.Equal(t, b.vendorChargeID(t, o.IdempotencyKey), got.ExternalObjectID)
	require.Empty(t, got.LastErrorCategory, "success clears the error")
	require.Len(t, b.Commands(t, o, wire.KindDispatch), 1, "nothing re-sent")

	var final *wire.Result
	for _, r := range b.Results(t) {
		if r.OperationID == o.ID {
			final = &r
		}
	}
	require.NotNil(t, final)
	require.Equal(t, string(op.StateCompletedSuccess), final.Status)
	require.Equal(t, got.ExternalObjectID, final.ExternalObjectID)
}

// The vendor never applied the capture (timeout_before_commit). The
// reconciler does not trust "not found" until SettleDelay has passed since
// the last change; after it, the operation is failed_retryable (confirmed
// not applied) and, within the retry budget, back to pending_dispatch with a
// dispatch command. Sending it is safe: the vendor ends with one capture.
//
// Breaking it: trusting "not found" at once (no settle delay) fails the
// first Handle check; a verdict that escalated or failed permanently
// instead would write no dispatch command; a resend of something actually
// applied would show up as two captures.
func TestReconcileNotFoundResendsAfterSettleDelay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	o, cmd := b.unknownCapture(t, "order_1", vendors.FaultTimeoutBeforeCommit)
	require.Zero(t, b.Vendors.Stats().Captures)

	// Too soon: a reconciler whose vendor needs a minute to settle does not
	// trust "not found" yet and asks for the command to come back later.
	patient := reconcile.New(reconcile.Config{Name: "reconciler-patient", SettleDelay: time.Minute},
		b.Store, b.Bus, b.Registry, b.Adapters, nil, b.Log)
	require.Error(t, patient.Handle(b.Ctx, cmd.Delivery(1)), "too soon to trust not found: look again later")
	require.Equal(t, o, b.Operation(t, o.ID), "nothing changed")
	require.Len(t, b.Commands(t, o, wire.KindDispatch), 1)

	time.Sleep(time.Until(o.UpdatedAt.Add(settleDelay + 50*time.Millisecond)))
	require.NoError(t, b.svc.Handle(b.Ctx, cmd.Delivery(2)))
	got := b.Operation(t, o.ID)
	require.Equal(t, op.StatePendingDispatch, got.State)
	require.Equal(t, "not_applied", got.LastErrorCategory)
	events, err := b.Store.Events(b.Ctx, o.ID)
	require.NoError(t, err)
	require.Equal(t, op.EventFailRetryable, events[len(events)-2].Event)
	require.Equal(t, op.EventRetry, events[len(events)-1].Event)

	retry := b.LastCommand(t, o, wire.KindDispatch)
	c := retry.Command(t)
	require.Equal(t, got.LeaseEpoch, c.LeaseEpoch)
	require.Len(t, b.Commands(t, o, wire.KindDispatch), 2)

	require.NoError(t, b.dispatcher.Handle(b.Ctx, retry.Delivery(1)))
	require.Equal(t, op.StateCompletedSuccess, b.Operation(t, o.ID).State)
	st := b.Vendors.Stats()
	require.Equal(t, 1, st.Captures)
	require.Equal(t, 2, st.Requests[vendors.RouteCapture])
}

// A reconcile command redelivered after the operation completed changes
// nothing and does not even ask the vendor.
//
// Breaking it: a handler that skipped the state check would look up again
// and try to complete an already completed operation (or worse, fail it).
func TestStaleReconcileCommandChangesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	o, cmd := b.unknownCapture(t, "order_1", vendors.FaultTimeoutAfterCommit)
	require.NoError(t, b.svc.Handle(b.Ctx, cmd.Delivery(1)))
	done := b.Operation(t, o.ID)
	require.Equal(t, op.StateCompletedSuccess, done.State)
	outboxBefore := len(b.Outbox(t))
	eventsBefore, err := b.Store.Events(b.Ctx, o.ID)
	require.NoError(t, err)

	require.NoError(t, b.svc.Handle(b.Ctx, cmd.Delivery(2)))

	after := b.Operation(t, o.ID)
	require.Equal(t, done, after)
	events, err := b.Store.Events(b.Ctx, o.ID)
	require.NoError(t, err)
	require.Len(t, events, len(eventsBefore))
	require.Len(t, b.Outbox(t), outboxBefore)
	st := b.Vendors.Stats()
	require.Equal(t, 1, st.Requests[vendors.RouteCaptureLookup], "no second lookup")
	require.Equal(t, 1, st.Requests[vendors.RouteCapture])
}
