package reconcile_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/dispatch"
	"github.com/opledger/opledger/internal/telemetry"
	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/pkg/adapter"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// recordFor claims a new capture and records res for its attempt, as a
// dispatcher would after the vendor answered; the vendor itself is never
// called, so its lookup has no record of the charge.
func (b bundle) recordFor(t *testing.T, orderID string, res adapter.Result) *op.Operation {
	t.Helper()
	o := b.SubmitCapture(t, "wf_1", orderID)
	claimed, att := b.Claim(t, o, "dispatcher-1")
	_, err := dispatch.Record(b.Ctx, b.Store, b.Tool(t, "capture_payment"), claimed, att, res, "evt_"+orderID, telemetry.FromTraceID(o.TraceID))
	require.NoError(t, err)
	return b.Operation(t, o.ID)
}

// A vendor that acknowledged a request (202) has it, whatever its lookup
// says later. Treating "not found" as "never applied" would re-send it: for
// a tool without vendor-side dedupe, a second effect. Breaking the rule shows
// up as the operation back in pending_dispatch with a second dispatch command.
func TestAcknowledgedButNotFoundEscalates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	o := b.recordFor(t, "order_ack", adapter.Result{Outcome: op.OutcomeAcknowledged, HTTPStatus: 202})
	require.Equal(t, op.StateAcknowledged, o.State)
	check := b.LastCommand(t, o, wire.KindUnknown)
	require.True(t, check.AvailableAt.After(time.Now().Add(30*time.Second)), "the acknowledgement is checked later, not at once")

	require.NoError(t, b.svc.Handle(b.Ctx, check.Delivery(1)))
	got := b.Operation(t, o.ID)
	require.Equal(t, op.StateEscalated, got.State)
	require.Equal(t, 1, b.countCommands(t, o, wire.KindDispatch), "never re-dispatched")
	require.Zero(t, b.Vendors.Stats().Requests[vendors.RouteCapture])
}

// Same rule for an answer the adapter could not read: a 200 whose body was
// malformed means the vendor acted, so a later "not found" is escalated.
func TestAnsweredButNotFoundEscalates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	o := b.recordFor(t, "order_malformed", adapter.Result{Outcome: op.OutcomeUnknown, HTTPStatus: 200, ErrorCategory: "malformed_response"})
	require.Equal(t, op.StateUnknownOutcome, o.State)
	time.Sleep(time.Until(o.UpdatedAt.Add(settleDelay + 50*time.Millisecond)))

	require.NoError(t, b.svc.Handle(b.Ctx, b.LastCommand(t, o, wire.KindUnknown).Delivery(1)))
	got := b.Operation(t, o.ID)
	require.Equal(t, op.StateEscalated, got.State)
	require.Equal(t, 1, b.countCommands(t, o, wire.KindDispatch), "never re-dispatched")
}

func (b bundle) countCommands(t *testing.T, o *op.Operation, kind string) int {
	t.Helper()
	n := 0
	for _, r := range b.Outbox(t) {
		if r.OperationID == o.ID && r.Subject == wire.OpsSubject(kind, o.Tool, o.ID) {
			n++
		}
	}
	return n
}
