package dispatch_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/dispatch"
	"github.com/opledger/opledger/internal/pipetest"
	"github.com/opledger/opledger/internal/reconcile"
	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/telemetry"
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
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }
	e := pipetest.Start(t, pipetest.Options{Clock: clock})
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

	first := e.Submit(t, wire.Intent{EventID: "evt_first", WorkflowID: "wf_1", Tool: "capture_payment",
		Args: pipetest.CaptureArgs("order_leased", "cust_1", 4900)})
	second := e.Submit(t, wire.Intent{EventID: "evt_second", WorkflowID: "wf_1", Tool: "capture_payment",
		Args: pipetest.CaptureArgs("order_leased", "cust_1", 5100)})
	held, att, err := e.Store.BeginLeasedAttempt(e.Ctx, first.ID, first.LeaseEpoch, "dispatcher-a", tool.Timeout, lease)
	require.NoError(t, err)
	res := call(held, att) // the vendor captured; the answer is slow to be recorded

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
