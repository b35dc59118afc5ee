package compensate_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/compensate"
	"github.com/opledger/opledger/internal/dispatch"
	"github.com/opledger/opledger/internal/outbox"
	"github.com/opledger/opledger/internal/pipetest"
	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/telemetry"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

func TestMain(m *testing.M) { testdb.Main(m) }

type bundle struct {
	*pipetest.Env
	dispatcher *dispatch.Service
	svc        *compensate.Service
}

func setup(t *testing.T) bundle {
	t.Helper()
	e := pipetest.Start(t, pipetest.Options{})
	return bundle{
		Env:        e,
		dispatcher: dispatch.New(dispatch.Config{Name: "dispatcher-1"}, e.Store, e.Bus, e.Registry, e.Adapters, nil, e.Log),
		svc:        compensate.New(compensate.Config{}, e.Store, e.Bus, e.Registry, nil, e.Log),
	}
}

// completed submits an intent and dispatches it to completed_success at the
// local vendor.
func (b bundle) completed(t *testing.T, in wire.Intent) *op.Operation {
	t.Helper()
	o := b.Submit(t, in)
	require.NoError(t, b.dispatcher.Handle(b.Ctx, b.LastCommand(t, o, wire.KindDispatch).Delivery(1)))
	o = b.Operation(t, o.ID)
	require.Equal(t, op.StateCompletedSuccess, o.State)
	return o
}

func (b bundle) completedCapture(t *testing.T, orderID string) *op.Operation {
	t.Helper()
	return b.completed(t, wire.Intent{EventID: "evt_" + orderID, WorkflowID: "wf_1", Tool: "capture_payment",
		Args: pipetest.CaptureArgs(orderID, "cust_1", 4900)})
}

// approve is what an approver does to an operation awaiting approval: it
// moves to pending_dispatch and its dispatch command is written, in one
// transaction. (No service in the repository owns approval yet.)
func (b bundle) approve(t *testing.T, o *op.Operation) {
	t.Helper()
	require.NoError(t, b.Store.InTx(b.Ctx, func(tx *store.Tx) error {
		cur, err := tx.Transition(b.Ctx, store.Change{OperationID: o.ID, From: op.StateAwaitingApproval,
			LeaseEpoch: o.LeaseEpoch, Events: []op.Event{op.EventApprove}, Actor: "operator:test"})
		if err != nil {
			return err
		}
		return tx.Enqueue(b.Ctx, outbox.Command(wire.KindDispatch, cur, "approve:"+o.ID, telemetry.FromTraceID(o.TraceID), 0))
	}))
}

func (b bundle) refundOps(t *testing.T, workflowID string) []*op.Operation {
	t.Helper()
	ops, err := b.Store.OperationsByWorkflow(b.Ctx, workflowID)
	require.NoError(t, err)
	var out []*op.Operation
	for _, o := range ops {
		if o.Tool == "refund_payment" {
			out = append(out, o)
		}
	}
	return out
}

// Compensating a completed capture creates one refund_payment operation from
// the registry's playbook, linked to the capture, waiting for approval
// (refund approval is "always"), and moves the capture to compensating.
// Asking again — also concurrently — finds the same refund.
//
// Breaking it: a second request that did not recognise the first (the
// inbox key "compensate:<id>", backed by the refund's own idempotency key)
// would create another refund or fail moving the original to compensating
// again; ignoring the playbook's approval rule would write a dispatch
// command and refund unreviewed.
func TestRequestCreatesOneRefund(t *testing.T) {
	t.Parallel()
	b := setup(t)
	orig := b.completedCapture(t, "order_1")
	require.NotEmpty(t, orig.ExternalObjectID)

	comp, err := compensate.Request(b.Ctx, b.Store, b.Registry, orig.ID, "operator:alice", "customer asked")
	require.NoError(t, err)
	require.Equal(t, "refund_payment", comp.Tool)
	require.Equal(t, op.StateAwaitingApproval, comp.State)
	require.Equal(t, orig.ID, comp.CompensatesID)
	require.JSONEq(t, fmt.Sprintf(`{"charge_id":%q,"customer_id":"cust_1","amount_cents":4900,"reason":%q}`, orig.ExternalObjectID, orig.ID), string(comp.Args))
	require.Empty(t, b.OutboxOf(t, comp.ID), "no dispatch before approval")

	afterFirst := b.Operation(t, orig.ID)
	require.Equal(t, op.StateCompensating, afterFirst.State)

	const n = 4
	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			again, err := compensate.Request(b.Ctx, b.Store, b.Registry, orig.ID, "operator:bob", "asked again")
			errs[i] = err
			if err == nil {
				ids[i] = again.ID
			}
		}()
	}
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i])
		require.Equal(t, comp.ID, ids[i], "the same compensation stands")
	}

	require.Len(t, b.refundOps(t, "wf_1"), 1, "one refund operation")
	require.Equal(t, afterFirst, b.Operation(t, orig.ID), "asking again does not touch the original")
	events, err := b.Store.Events(b.Ctx, orig.ID)
	require.NoError(t, err)
	compensates := 0
	for _, e := range events {
		if e.Event == op.EventCompensate {
			compensates++
		}
	}
	require.Equal(t, 1, compensates)
	require.Zero(t, b.Vendors.Stats().Refunds)
}

// Only tools with a playbook can be compensated: anything else is
// op.ErrInvalid and changes nothing. A capture that was never sent has no
// charge to refund and is refused the same way, creating nothing.
//
// Breaking it: inventing a compensation for a tool without a playbook, or
// creating a refund with an empty charge id, would leave an operation behind.
func TestRequestRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ticket := b.completed(t, wire.Intent{EventID: "evt_ticket", WorkflowID: "wf_2", Tool: "create_ticket",
		Args: json.RawMessage(`{"conversation_id":"conv_1","queue":"billing","summary":"help"}`)})

	_, err := compensate.Request(b.Ctx, b.Store, b.Registry, ticket.ID, "operator:alice", "undo")
	require.ErrorIs(t, err, op.ErrInvalid)
	require.Equal(t, ticket, b.Operation(t, ticket.ID))
	ops, err := b.Store.OperationsByWorkflow(b.Ctx, "wf_2")
	require.NoError(t, err)
	require.Len(t, ops, 1)

	// A capture not yet sent has no charge to refund: the playbook's
	// charge_id renders empty and fails refund_payment's schema.
	pending := b.SubmitCapture(t, "wf_1", "order_pending")
	_, err = compensate.Request(b.Ctx, b.Store, b.Registry, pending.ID, "operator:alice", "undo")
	require.ErrorIs(t, err, op.ErrInvalid)
	require.ErrorContains(t, err, "charge_id")
	require.Equal(t, pending, b.Operation(t, pending.ID))
	require.Empty(t, b.refundOps(t, "wf_1"))

	_, err = compensate.Request(b.Ctx, b.Store, b.Registry, "op_missing", "operator:alice", "undo")
	require.ErrorIs(t, err, op.ErrNotFound)
}

// The refund is approved and dispatched, but the charge was already refunded
// in the vendor's dashboard, so the vendor refuses it (400,
// amount_exceeds_remaining): the refund fails permanently and its failed
// command reaches the compensator, which escalates the original capture to a
// person. A redelivery of the failed command changes nothing more.
//
// Breaking it: a compensator that ignored failed compensations would leave
// the capture in compensating forever; one that did not check the
// original's state would fail on the redelivery or write another result.
func TestFailedCompensationEscalatesOriginal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	orig := b.completedCapture(t, "order_1")
	comp, err := compensate.Request(b.Ctx, b.Store, b.Registry, orig.ID, "operator:alice", "customer asked")
	require.NoError(t, err)
	b.approve(t, comp)

	// Someone refunds the whole charge in the vendor's dashboard first.
	resp, err := http.Post(b.Vendors.URL()+"/v1/refunds", "application/json",
		bytes.NewReader([]byte(fmt.Sprintf(`{"charge_id":%q,"amount_cents":4900}`, orig.ExternalObjectID))))
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)

	require.NoError(t, b.dispatcher.Handle(b.Ctx, b.LastCommand(t, comp, wire.KindDispatch).Delivery(1)))
	failedComp := b.Operation(t, comp.ID)
	require.Equal(t, op.StateFailedPermanent, failedComp.State)
	require.Equal(t, op.StateCompensating, b.Operation(t, orig.ID).State, "not escalated until the compensator hears of it")
	failed := b.LastCommand(t, comp, wire.KindFailed)

	require.NoError(t, b.svc.Handle(b.Ctx, failed.Delivery(1)))
	escalated := b.Operation(t, orig.ID)
	require.Equal(t, op.StateEscalated, escalated.State)
	require.Equal(t, "compensation_failed", escalated.LastErrorCategory)
	require.Contains(t, escalated.LastError, comp.ID)
	outboxAfter := len(b.Outbox(t))

	require.NoError(t, b.svc.Handle(b.Ctx, failed.Delivery(2)))
	require.Equal(t, escalated, b.Operation(t, orig.ID))
	require.Len(t, b.Outbox(t), outboxAfter)

	st := b.Vendors.Stats()
	require.Equal(t, 1, st.Refunds, "only the dashboard refund happened")
	require.Equal(t, 2, st.Requests[vendors.RouteRefund])
}

// The happy path of a compensation: approved, dispatched, refunded once,
// and the original capture moves to compensated.
//
// Breaking it: without followup.CompleteCompensation in the refund's
// follow-up, the capture would stay in compensating.
func TestCompletedCompensationCompensatesOriginal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	orig := b.completedCapture(t, "order_1")
	comp, err := compensate.Request(b.Ctx, b.Store, b.Registry, orig.ID, "operator:alice", "customer asked")
	require.NoError(t, err)
	b.approve(t, comp)

	require.NoError(t, b.dispatcher.Handle(b.Ctx, b.LastCommand(t, comp, wire.KindDispatch).Delivery(1)))
	require.Equal(t, op.StateCompletedSuccess, b.Operation(t, comp.ID).State)
	require.Equal(t, op.StateCompensated, b.Operation(t, orig.ID).State)
	st := b.Vendors.Stats()
	require.Equal(t, 1, st.Refunds)
	require.Equal(t, 1, b.Vendors.EffectsByKey(vendors.KindRefund)[comp.IdempotencyKey])
}
