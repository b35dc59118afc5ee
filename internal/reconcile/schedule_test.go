package reconcile_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/bus"
	"github.com/opledger/opledger/internal/dispatch"
	"github.com/opledger/opledger/internal/pipetest"
	"github.com/opledger/opledger/internal/reconcile"
	"github.com/opledger/opledger/internal/regedit"
	"github.com/opledger/opledger/internal/testclock"
	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/pkg/adapter"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// escalation returns the event that escalated o and the last result
// published about it.
func escalation(t *testing.T, e *pipetest.Env, o *op.Operation) (op.EventRecord, wire.Result) {
	t.Helper()
	events, err := e.Store.Events(e.Ctx, o.ID)
	require.NoError(t, err)
	last := events[len(events)-1]
	require.Equal(t, op.EventEscalate, last.Event)
	require.Equal(t, op.StateEscalated, last.To)
	var res wire.Result
	for _, r := range e.Results(t) {
		if r.OperationID == o.ID {
			res = r
		}
	}
	require.Equal(t, string(op.StateEscalated), res.Status)
	return last, res
}

// detailReason is the "reason" of an event's detail.
func detailReason(t *testing.T, ev op.EventRecord) string {
	t.Helper()
	var d struct {
		Reason string `json:"reason"`
	}
	require.NoError(t, json.Unmarshal(ev.Detail, &d), "%s", ev.Detail)
	return d.Reason
}

// The tool's reconciliation schedule decides: lookups that fail are tried
// again at the tool's interval (not the reconciler's default), an
// operation past the tool's deadline is escalated on the next look
// however few lookups it had, and one that ran out of max_lookups is
// escalated too; each escalation says why in its event and its result.
// The clock is the database's, injected.
//
// Breaking it: a reconciler that used the registry defaults (10 s, 10 min,
// 20 lookups) asks for the wrong delay and looks again instead of
// escalating; one that measured the deadline on the host's clock never
// sees the injected hour pass.
func TestReconcileScheduleIntervalAndDeadline(t *testing.T) {
	t.Parallel()
	clock := testclock.New(time.Now())
	e := pipetest.Start(t, pipetest.Options{Clock: clock.Now, EditRegistry: func(data []byte) ([]byte, error) {
		only := func(tl regedit.Tool) bool { return tl.Name == "capture_payment" }
		for field, v := range map[string]string{"reconcile.interval": "7s", "reconcile.deadline": "1m", "reconcile.max_lookups": "3"} {
			var err error
			if data, err = regedit.Set(data, field, v, only); err != nil {
				return nil, err
			}
		}
		return data, nil
	}})
	d := dispatch.New(dispatch.Config{Name: "dispatcher-1"}, e.Store, e.Bus, e.Registry, e.Adapters, nil, e.Log)
	rc := reconcile.New(reconcile.Config{Name: "reconciler-1", SettleDelay: settleDelay}, e.Store, e.Bus, e.Registry, e.Adapters, nil, e.Log)
	unknown := func(order string) (*op.Operation, pipetest.Row) {
		t.Helper()
		require.NoError(t, e.Vendors.InjectFault(vendors.Fault{Route: vendors.RouteCapture, Kind: vendors.FaultTimeoutAfterCommit}))
		o := e.SubmitCapture(t, "wf_1", order)
		require.NoError(t, d.Handle(e.Ctx, e.LastCommand(t, o, wire.KindDispatch).Delivery(1)))
		o = e.Operation(t, o.ID)
		require.Equal(t, op.StateUnknownOutcome, o.State)
		return o, e.LastCommand(t, o, wire.KindUnknown)
	}
	// Every lookup fails for as long as this test runs.
	require.NoError(t, e.Vendors.InjectFault(vendors.Fault{Route: vendors.RouteCaptureLookup, Kind: vendors.FaultError500BeforeCommit, Times: 100}))

	late, cmd := unknown("order_late")
	err := rc.Handle(e.Ctx, cmd.Delivery(1))
	delay, ok := bus.RetryDelay(err)
	require.True(t, ok, "a failed lookup asks to be redelivered: %v", err)
	require.Equal(t, 7*time.Second, delay, "at the tool's interval")
	require.Equal(t, late, e.Operation(t, late.ID), "nothing changed")

	clock.Advance(61 * time.Second)
	require.NoError(t, rc.Handle(e.Ctx, cmd.Delivery(2)), "the second look is past the deadline: it decides")
	ev, res := escalation(t, e, late)
	require.Contains(t, detailReason(t, ev), "past the tool's reconciliation deadline (1m0s)")
	require.Contains(t, detailReason(t, ev), "lookups keep failing")
	require.Equal(t, detailReason(t, ev), res.Reason, "the event and the result say the same")

	// Close to the deadline, the next look is due at the deadline, not a
	// whole interval later.
	near, cmd := unknown("order_near")
	clock.Advance(56 * time.Second)
	delay, ok = bus.RetryDelay(rc.Handle(e.Ctx, cmd.Delivery(1)))
	require.True(t, ok)
	require.Equal(t, 4*time.Second, delay.Round(time.Second), "the deadline is 4 s away")
	require.Equal(t, op.StateUnknownOutcome, e.Operation(t, near.ID).State)

	// max_lookups counts failed lookups in the ledger, whatever JetStream's
	// delivery count says.
	many, cmd := unknown("order_many")
	for i := uint64(1); i < 3; i++ {
		_, ok = bus.RetryDelay(rc.Handle(e.Ctx, cmd.Delivery(i)))
		require.True(t, ok, "failed lookup %d asks to look again", i)
	}
	require.NoError(t, rc.Handle(e.Ctx, cmd.Delivery(1)), "the third failed lookup is the last of max_lookups: 3")
	ev, res = escalation(t, e, many)
	require.Contains(t, detailReason(t, ev), "after 3 lookups")
	require.Equal(t, detailReason(t, ev), res.Reason)
}

// Every way automation escalates says why in the event and in the agent's
// result: here a write the vendor deduplicates by our key but cannot look
// up (update_crm_record), whose answers stay ambiguous (500s) until the
// retry budget is spent, and an acknowledgement the vendor's lookup
// cannot find.
//
// Breaking it: the escalation that followup.Decide chains after a resend
// once carried only the reconciler's verdict ("sent again under the same
// key") in its event, and the reason in a log line.
func TestEscalationsSayWhy(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, b.Vendors.InjectFault(vendors.Fault{Route: vendors.RouteCRM, Kind: vendors.FaultError500BeforeCommit, Times: 100}))
	o := b.Submit(t, wire.Intent{EventID: "evt_crm", WorkflowID: "wf_1", Tool: "update_crm_record",
		Args: json.RawMessage(`{"record_id":"rec_1","field":"status","value":"active"}`)})
	for n := 1; n <= 20 && o.State != op.StateEscalated; n++ {
		switch o.State {
		case op.StatePendingDispatch:
			require.NoError(t, b.dispatcher.Handle(b.Ctx, b.LastCommand(t, o, wire.KindDispatch).Delivery(1)))
		case op.StateUnknownOutcome:
			require.NoError(t, b.svc.Handle(b.Ctx, b.LastCommand(t, o, wire.KindUnknown).Delivery(1)))
		default:
			t.Fatalf("unexpected state %s", o.State)
		}
		o = b.Operation(t, o.ID)
	}
	require.Equal(t, op.StateEscalated, o.State)
	require.Equal(t, b.Tool(t, "update_crm_record").Retry.MaxAttempts, o.AttemptCount)
	ev, res := escalation(t, b.Env, o)
	require.Contains(t, detailReason(t, ev), "the retry budget ran out")
	require.Contains(t, detailReason(t, ev), "a person must check")
	require.Equal(t, detailReason(t, ev), res.Reason)
	require.Equal(t, o.LastError, res.Reason)

	ack := b.recordFor(t, "order_ack_why", adapterAcknowledged)
	require.NoError(t, b.svc.Handle(b.Ctx, b.LastCommand(t, ack, wire.KindUnknown).Delivery(1)))
	ev, res = escalation(t, b.Env, ack)
	require.Equal(t, "the vendor acknowledged the request but its lookup has no record of it", detailReason(t, ev))
	require.Equal(t, detailReason(t, ev), res.Reason)
}

var adapterAcknowledged = adapter.Result{Outcome: op.OutcomeAcknowledged, HTTPStatus: 202}
