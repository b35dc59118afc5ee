package dispatch_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/dispatch"
	"github.com/opledger/opledger/internal/maintain"
	"github.com/opledger/opledger/internal/pipetest"
	"github.com/opledger/opledger/internal/reconcile"
	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/telemetry"
	"github.com/opledger/opledger/internal/testclock"
	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/pkg/adapter"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// An entity lease that expires fences its holder: a dispatcher whose
// lease expired on the database's clock while its vendor call ran cannot
// record the outcome as a decision, whether or not another operation took
// the entity meanwhile. Its attempt keeps what the vendor said, and the
// operation goes to unknown_outcome for the reconciler, which confirms the
// capture with the vendor. The operation that took the lease runs as its
// holder. The clock is the database's, injected: no test waits for the
// 30 s TTL.
//
// Breaking it: fencing writes by the operation's own lease epoch only (the
// old behaviour) lets the first capture write completed_success while the
// second holds the lease on the same order; comparing expiry with a host's
// clock would not see the injected database time at all.
func TestExpiredLeaseFencesItsHolder(t *testing.T) {
	t.Parallel()
	clock := testclock.New(time.Now())
	advance := clock.Advance
	e := pipetest.Start(t, pipetest.Options{Clock: clock.Now})
	tool := e.Tool(t, "capture_payment")
	require.True(t, tool.Lease.Required)
	lease := store.EntityLease{TTL: tool.Lease.TTL, Tools: []string{"capture_payment"}}
	call := func(o *op.Operation, att *op.Attempt) adapter.Result {
		t.Helper()
		res := e.Adapters["capture_payment"].Call(e.Ctx, adapter.Request{OperationID: o.ID, AttemptID: att.ID, Tool: o.Tool,
			IdempotencyKey: o.IdempotencyKey, Args: o.Args})
		require.Equal(t, op.OutcomeSuccess, res.Outcome, res.Error)
		return res
	}
	record := func(o *op.Operation, att *op.Attempt, res adapter.Result) *op.Operation {
		t.Helper()
		cur, err := dispatch.Record(e.Ctx, e.Store, tool, o, att, res, o.OriginEventID, telemetry.Traceparent{})
		require.NoError(t, err)
		return cur
	}

	// The operation that will take the lease is the older one: it waited
	// for a person's approval while the younger one was claimed. (A younger
	// operation waits for an older one that may still be sent, however
	// long ago its lease expired: TestSetBackWaitsForAnOlderUnknownOutcome.)
	second := e.Submit(t, wire.Intent{EventID: "evt_second", WorkflowID: "wf_1", Tool: "capture_payment",
		Args: pipetest.CaptureArgs("order_leased", "cust_1", 2_000_000), Actor: &wire.Actor{Type: "agent", ID: "agent-1"}})
	require.Equal(t, op.StateAwaitingApproval, second.State)
	advance(time.Millisecond) // the order of creation is the database clock's, not the ids' chance
	first := e.Submit(t, wire.Intent{EventID: "evt_first", WorkflowID: "wf_1", Tool: "capture_payment",
		Args: pipetest.CaptureArgs("order_leased", "cust_1", 4900)})
	held, att, err := e.Store.BeginLeasedAttempt(e.Ctx, first.ID, first.LeaseEpoch, "dispatcher-a", tool.Timeout, lease)
	require.NoError(t, err, "an older operation awaiting approval does not hold the entity")
	res := call(held, att) // the vendor captured; the answer is slow to be recorded

	second, err = e.Store.Transition(e.Ctx, store.Change{OperationID: second.ID, From: op.StateAwaitingApproval,
		LeaseEpoch: second.LeaseEpoch, Events: []op.Event{op.EventApprove}, Actor: "approver-1"})
	require.NoError(t, err)
	_, _, err = e.Store.BeginLeasedAttempt(e.Ctx, second.ID, second.LeaseEpoch, "dispatcher-b", tool.Timeout, lease)
	require.ErrorIs(t, err, store.ErrLeaseBusy, "the lease holds")
	advance(tool.Lease.TTL + time.Second)
	taken, takenAtt, err := e.Store.BeginLeasedAttempt(e.Ctx, second.ID, second.LeaseEpoch, "dispatcher-b", tool.Timeout, lease)
	require.NoError(t, err, "an expired lease may be taken")

	got := record(held, att, res)
	require.Equal(t, op.StateUnknownOutcome, got.State, "the late holder does not decide")
	require.Equal(t, dispatch.CategoryLeaseExpired, got.LastErrorCategory)
	require.Empty(t, got.ExternalObjectID, "nothing from the fenced answer on the operation")
	atts, err := e.Store.Attempts(e.Ctx, first.ID)
	require.NoError(t, err)
	require.Equal(t, op.OutcomeSuccess, atts[0].Outcome, "the attempt keeps what the vendor said, as evidence")
	require.Equal(t, res.ExternalObjectID, atts[0].ExternalObjectID)
	events, err := e.Store.Events(e.Ctx, first.ID)
	require.NoError(t, err)
	require.Equal(t, op.EventOutcomeUnknown, events[len(events)-1].Event)
	reconcileCmd := e.LastCommand(t, got, wire.KindUnknown)

	// The operation that took the lease holds it: its answer is its decision.
	require.Equal(t, op.StateCompletedSuccess, record(taken, takenAtt, call(taken, takenAtt)).State)

	// The reconciler confirms the first capture with the vendor.
	rc := reconcile.New(reconcile.Config{Name: "reconciler-1", SettleDelay: time.Millisecond}, e.Store, e.Bus, e.Registry, e.Adapters, nil, e.Log)
	require.NoError(t, rc.Handle(e.Ctx, reconcileCmd.Delivery(1)))
	done := e.Operation(t, first.ID)
	require.Equal(t, op.StateCompletedSuccess, done.State)
	require.Equal(t, res.ExternalObjectID, done.ExternalObjectID)
	require.Equal(t, 2, e.Vendors.Stats().Captures)

	// Expired but taken by nobody: still fenced. The database's clock
	// decides, not whether someone was quick.
	alone := e.SubmitCapture(t, "wf_1", "order_alone")
	held, att, err = e.Store.BeginLeasedAttempt(e.Ctx, alone.ID, alone.LeaseEpoch, "dispatcher-a", tool.Timeout, lease)
	require.NoError(t, err)
	res = call(held, att)
	advance(tool.Lease.TTL + time.Second)
	require.Equal(t, op.StateUnknownOutcome, record(held, att, res).State)

	// Within the TTL, the holder decides.
	inTime := e.SubmitCapture(t, "wf_1", "order_in_time")
	held, att, err = e.Store.BeginLeasedAttempt(e.Ctx, inTime.ID, inTime.LeaseEpoch, "dispatcher-a", tool.Timeout, lease)
	require.NoError(t, err)
	res = call(held, att)
	advance(tool.Lease.TTL - time.Second)
	require.Equal(t, op.StateCompletedSuccess, record(held, att, res).State)
}

// A set-back sequence survives a dispatcher that dies between its claim and
// its call: update_crm_record sets a record active, suspended, then active
// again (its key scoped by the record's version, so the third step is a new
// action), each step sent once the one before was answered, as
// `opledger eval -kill`'s set_back_sequences does. The dispatcher that
// claimed "suspended" dies before calling the CRM; the sweeper moves the
// operation to unknown_outcome, and the reconciler is slow to look at it
// (it was killed too: its command comes back after the ack wait), so the
// entity's lease expires first. The third step must still wait: the
// reconciler sends "suspended" again under its key (the tool has no lookup,
// and its vendor deduplicates by key), so letting "active" run first
// would end the record suspended, with one change fewer than steps. The
// clock is the database's, injected.
//
// Breaking it: the leased claim's "older waiting" probe counting only
// operations in pending_dispatch (as it did when eval -kill lost a
// set-back) claims the third step once the lease expired; the CRM then
// sees active, active (no change), suspended.
func TestSetBackWaitsForAnOlderUnknownOutcome(t *testing.T) {
	t.Parallel()
	clock := testclock.New(time.Now())
	advance := clock.Advance
	e := pipetest.Start(t, pipetest.Options{Clock: clock.Now})
	tool := e.Tool(t, "update_crm_record")
	require.True(t, tool.Lease.Required)
	require.True(t, tool.KeyUsesEntityVersion())
	d := dispatch.New(dispatch.Config{Name: "dispatcher-1"}, e.Store, e.Bus, e.Registry, e.Adapters, nil, e.Log)
	const grace = time.Second
	mt := maintain.New(maintain.Config{Name: "maintainer-1", DispatchedGrace: grace}, e.Store, e.Registry, nil, nil, e.Log)
	rc := reconcile.New(reconcile.Config{Name: "reconciler-1", SettleDelay: time.Millisecond}, e.Store, e.Bus, e.Registry, e.Adapters, nil, e.Log)
	step := func(i int, value string) *op.Operation {
		t.Helper()
		advance(time.Millisecond) // each step is created after the one before, on the database's clock
		return e.Submit(t, wire.Intent{EventID: fmt.Sprintf("evt_step_%d", i), WorkflowID: "wf_1", Tool: "update_crm_record",
			Args: json.RawMessage(fmt.Sprintf(`{"record_id":"rec_1","field":"status","value":%q}`, value))})
	}
	handle := func(o *op.Operation) error {
		t.Helper()
		return d.Handle(e.Ctx, e.LastCommand(t, e.Operation(t, o.ID), wire.KindDispatch).Delivery(1))
	}
	record := func() vendors.CRMRecord {
		t.Helper()
		rec, ok := e.Vendors.CRMRecord("rec_1")
		require.True(t, ok)
		return rec
	}

	first := step(1, "active")
	require.NoError(t, handle(first))
	require.Equal(t, op.StateCompletedSuccess, e.Operation(t, first.ID).State)
	second, third := step(2, "suspended"), step(3, "active")
	require.Equal(t, "crm:rec_1:status:suspended:e2:v1", second.IdempotencyKey)
	require.Equal(t, "crm:rec_1:status:active:e3:v1", third.IdempotencyKey, "setting the status back is a new action")

	// A dispatcher claims "suspended" and dies before the call.
	e.Claim(t, second, "dispatcher-dead")
	require.ErrorIs(t, handle(third), store.ErrLeaseBusy)
	advance(tool.Timeout + 2*grace)
	moved, err := mt.Sweep(e.Ctx)
	require.NoError(t, err)
	require.Equal(t, 1, moved)
	require.Equal(t, op.StateUnknownOutcome, e.Operation(t, second.ID).State)

	// The reconciler has not looked yet when the lease expires.
	advance(tool.Lease.TTL)
	err = handle(third)
	assert.ErrorIs(t, err, store.ErrLeaseBusy, "an older step whose outcome is unknown goes first, lease or not")
	assert.Equal(t, op.StatePendingDispatch, e.Operation(t, third.ID).State)

	// The reconciler sends "suspended" again under its key; then "active".
	require.NoError(t, rc.Handle(e.Ctx, e.LastCommand(t, e.Operation(t, second.ID), wire.KindUnknown).Delivery(1)))
	require.Equal(t, op.StatePendingDispatch, e.Operation(t, second.ID).State)
	require.NoError(t, handle(second))
	require.Equal(t, op.StateCompletedSuccess, e.Operation(t, second.ID).State)
	if e.Operation(t, third.ID).State == op.StatePendingDispatch {
		require.NoError(t, handle(third))
	}
	require.Equal(t, op.StateCompletedSuccess, e.Operation(t, third.ID).State)

	rec := record()
	require.Equal(t, `"active"`, string(rec.Fields["status"]), "the last step's value stands")
	require.Equal(t, 3, rec.Version, "each of the three steps changed the record")
}
