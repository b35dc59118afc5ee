package ops_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/dispatch"
	"github.com/opledger/opledger/internal/maintain"
	"github.com/opledger/opledger/internal/ops"
	"github.com/opledger/opledger/internal/pipetest"
	"github.com/opledger/opledger/internal/regedit"
	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

func TestMain(m *testing.M) { testdb.Main(m) }

var (
	alice = ops.Actor{ID: "alice", Role: ops.RoleApprover}
	bob   = ops.Actor{ID: "bob", Role: ops.RoleApprover}
	carol = ops.Actor{ID: "carol", Role: ops.RoleApprover}
	oscar = ops.Actor{ID: "oscar", Role: ops.RoleOperator}
	vera  = ops.Actor{ID: "vera", Role: ops.RoleViewer}
)

type bundle struct {
	*pipetest.Env
	ops *ops.Service
	d   *dispatch.Service
}

// setup runs the pipeline with capture_payment needing two approvers above
// its threshold, whose requests expire after a minute.
func setup(t *testing.T, opts pipetest.Options) bundle {
	t.Helper()
	edit := opts.EditRegistry
	opts.EditRegistry = func(data []byte) ([]byte, error) {
		only := func(tl regedit.Tool) bool { return tl.Name == "capture_payment" }
		data, err := regedit.Set(data, "approval.approvals_required", "2", only)
		if err != nil {
			return nil, err
		}
		if data, err = regedit.Set(data, "approval.expires_after", "1m", only); err != nil || edit == nil {
			return data, err
		}
		return edit(data)
	}
	e := pipetest.Start(t, opts)
	return bundle{Env: e, ops: ops.New(e.Store, e.Registry),
		d: dispatch.New(dispatch.Config{Name: "dispatcher-1"}, e.Store, e.Bus, e.Registry, e.Adapters, nil, e.Log)}
}

// bigCapture submits a capture above the approval threshold, proposed by the agent "agent-7".
func (b bundle) bigCapture(t *testing.T, order string) *op.Operation {
	t.Helper()
	subject, header, body := pipetest.IntentMsg(t, wire.Intent{EventID: "evt_" + order, WorkflowID: "wf_1", Tool: "capture_payment",
		Args:  json.RawMessage(fmt.Sprintf(`{"order_id":%q,"customer_id":"c","amount_cents":2000000,"currency":"USD"}`, order)),
		Actor: &wire.Actor{Type: "agent", ID: "agent-7"}})
	ans, err := b.Ingester().Ingest(b.Ctx, subject, header, body)
	require.NoError(t, err)
	require.NotEmpty(t, ans.Result.OperationID, ans.Result.Reason)
	o := b.Operation(t, ans.Result.OperationID)
	require.Equal(t, op.StateAwaitingApproval, o.State)
	require.Equal(t, "agent-7", o.ProposedBy)
	return o
}

// Dual control: two distinct approvers, never the proposer, each once,
// each approving the exact arguments; the approval is consumed once the
// operation is released, and every refusal is audited.
func TestApprovalsAreDualControlBoundAndSingleUse(t *testing.T) {
	t.Parallel()
	b := setup(t, pipetest.Options{})
	o := b.bigCapture(t, "order_big")

	_, err := b.ops.Approve(b.Ctx, ops.Actor{ID: "agent-7", Role: ops.RoleApprover}, o.ID, o.ArgsHash, "looks fine")
	require.ErrorIs(t, err, ops.ErrForbidden, "the proposer cannot approve their own call")
	_, err = b.ops.Approve(b.Ctx, vera, o.ID, o.ArgsHash, "ok")
	require.ErrorIs(t, err, ops.ErrForbidden, "a viewer cannot approve")
	_, err = b.ops.Approve(b.Ctx, alice, o.ID, o.ArgsHash, "")
	require.ErrorIs(t, err, op.ErrInvalid, "a reason is required")

	cur, err := b.ops.Approve(b.Ctx, alice, o.ID, o.ArgsHash, "customer confirmed by phone")
	require.NoError(t, err)
	require.Equal(t, op.StateAwaitingApproval, cur.State, "one of two")
	res := b.Results(t)
	require.Contains(t, res[len(res)-1].Reason, "1 of 2 approvals")

	_, err = b.ops.Approve(b.Ctx, alice, o.ID, o.ArgsHash, "again")
	require.ErrorIs(t, err, op.ErrConflict, "one vote per approver")
	_, err = b.ops.Approve(b.Ctx, bob, o.ID, "0000"+o.ArgsHash[4:], "other args")
	require.ErrorIs(t, err, op.ErrConflict, "an approval is bound to the arguments it saw")

	cur, err = b.ops.Approve(b.Ctx, bob, o.ID, o.ArgsHash, "second pair of eyes")
	require.NoError(t, err)
	require.Equal(t, op.StatePendingDispatch, cur.State)
	require.Len(t, b.Commands(t, cur, wire.KindDispatch), 1, "released with its dispatch command")

	_, err = b.ops.Approve(b.Ctx, carol, o.ID, o.ArgsHash, "late")
	require.ErrorIs(t, err, ops.ErrState, "the approval was consumed")

	require.NoError(t, b.d.Handle(b.Ctx, b.LastCommand(t, cur, wire.KindDispatch).Delivery(1)))
	require.Equal(t, op.StateCompletedSuccess, b.Operation(t, o.ID).State)

	d, err := b.ops.Show(b.Ctx, vera, o.ID)
	require.NoError(t, err)
	require.Equal(t, "approved", d.Approval.Status)
	require.Len(t, d.Approval.Votes, 2)
	refused, ok := 0, 0
	for _, a := range d.Audit {
		if a.Outcome == "ok" {
			ok++
		} else {
			refused++
		}
	}
	require.Equal(t, 2, ok)
	require.Equal(t, 6, refused, "refused writes are audited too")
	var events []op.Event
	for _, e := range d.Events {
		events = append(events, e.Event)
	}
	require.Equal(t, []op.Event{op.EventCreate, op.EventRequireApproval, op.EventVote, op.EventApprove, op.EventDispatch, op.EventSucceed}, events)
	require.Equal(t, "bob", d.Events[3].Actor)
}

// Denied: rejected, nothing sent, the agent told.
func TestDenyRejects(t *testing.T) {
	t.Parallel()
	b := setup(t, pipetest.Options{})
	o := b.bigCapture(t, "order_no")
	cur, err := b.ops.Deny(b.Ctx, alice, o.ID, "amount looks wrong")
	require.NoError(t, err)
	require.Equal(t, op.StateRejected, cur.State)
	res := b.Results(t)
	last := res[len(res)-1]
	require.Equal(t, "The request was not approved and nothing was done.", last.SafeUserMessage)
	require.Contains(t, last.Reason, "amount looks wrong")
	require.Empty(t, b.Commands(t, cur, wire.KindDispatch))
}

// An approval request expires on the database's clock: the operation is
// cancelled, the agent told, and a late approval refused.
func TestApprovalExpires(t *testing.T) {
	t.Parallel()
	now := time.Now()
	var clock = func() time.Time { return now }
	b := setup(t, pipetest.Options{Clock: func() time.Time { return clock() }})
	o := b.bigCapture(t, "order_late")
	mt := maintain.New(maintain.Config{Name: "m"}, b.Store, b.Registry, nil, nil, b.Log)
	n, err := mt.ExpireApprovals(b.Ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	later := now.Add(61 * time.Second)
	clock = func() time.Time { return later }
	_, err = b.ops.Approve(b.Ctx, alice, o.ID, o.ArgsHash, "too late")
	require.ErrorIs(t, err, ops.ErrState)
	n, err = mt.ExpireApprovals(b.Ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	cur := b.Operation(t, o.ID)
	require.Equal(t, op.StateCancelled, cur.State)
	res := b.Results(t)
	require.Contains(t, res[len(res)-1].Reason, "expired")
	a, err := b.Store.Approval(b.Ctx, o.ID)
	require.NoError(t, err)
	require.Equal(t, "expired", a.Status)
}

// escalated claims an operation and escalates it, as the reconciler does
// when it cannot decide.
func (b bundle) escalated(t *testing.T, order string) *op.Operation {
	t.Helper()
	return b.escalatedWith(t, order, "")
}

// escalatedWith is escalated with the vendor's object id known (an
// acknowledgement named the charge, but it was never confirmed).
func (b bundle) escalatedWith(t *testing.T, order, objectID string) *op.Operation {
	t.Helper()
	o := b.SubmitCapture(t, "wf_1", order)
	claimed, _, err := b.Store.BeginAttempt(b.Ctx, o.ID, o.LeaseEpoch, "w", time.Second)
	require.NoError(t, err)
	cur, err := b.Store.Transition(b.Ctx, store.Change{OperationID: o.ID, From: op.StateDispatched, LeaseEpoch: claimed.LeaseEpoch,
		Events: []op.Event{op.EventOutcomeUnknown, op.EventEscalate}, BumpEpoch: true, ErrorCategory: "escalated", Error: "the vendor has no lookup",
		ExternalObjectID: objectID})
	require.NoError(t, err)
	require.Equal(t, op.StateEscalated, cur.State)
	return cur
}

// A person resolves an escalation with evidence, and each verdict does
// what it says.
func TestResolveEscalations(t *testing.T) {
	t.Parallel()
	b := setup(t, pipetest.Options{})

	applied := b.escalated(t, "order_a")
	_, err := b.ops.Resolve(b.Ctx, oscar, applied.ID, ops.VerdictApplied, "", "found in the dashboard")
	require.ErrorIs(t, err, op.ErrInvalid, "applied needs the vendor's object id")
	_, err = b.ops.Resolve(b.Ctx, alice, applied.ID, ops.VerdictApplied, "ch_1", "found")
	require.ErrorIs(t, err, ops.ErrForbidden, "an approver is not an operator")
	cur, err := b.ops.Resolve(b.Ctx, oscar, applied.ID, ops.VerdictApplied, "ch_dashboard_1", "found in the vendor's dashboard")
	require.NoError(t, err)
	require.Equal(t, op.StateCompletedSuccess, cur.State)
	require.Equal(t, "ch_dashboard_1", cur.ExternalObjectID)

	again := b.escalated(t, "order_b")
	cur, err = b.ops.Resolve(b.Ctx, oscar, again.ID, ops.VerdictNotApplied, "", "vendor support confirmed nothing arrived")
	require.NoError(t, err)
	require.Equal(t, op.StatePendingDispatch, cur.State)
	require.Equal(t, 2, cur.Generation, "a new generation with its own budget")
	require.NoError(t, b.d.Handle(b.Ctx, b.LastCommand(t, cur, wire.KindDispatch).Delivery(1)))
	require.Equal(t, op.StateCompletedSuccess, b.Operation(t, again.ID).State)

	// Given up on a capture that never got a charge id: its playbook (a
	// refund of the charge) cannot run, and the result says so rather
	// than promise a refund.
	gone := b.escalated(t, "order_c")
	cur, err = b.ops.Resolve(b.Ctx, oscar, gone.ID, ops.VerdictGiveUp, "", "customer withdrew")
	require.NoError(t, err)
	require.Equal(t, op.StateFailedPermanent, cur.State)
	require.Equal(t, "given_up", cur.LastErrorCategory)
	require.Empty(t, b.Commands(t, cur, wire.KindFailed), "no compensation can follow")
	res := b.Results(t)
	require.Contains(t, res[len(res)-1].Reason, "its compensation playbook cannot run")
	require.Contains(t, res[len(res)-1].Reason, "charge_id")

	// Given up on a capture the vendor may have charged (its charge id is
	// known): the compensator is told, and the result says a refund follows.
	charged := b.escalatedWith(t, "order_d", "ch_maybe_1")
	cur, err = b.ops.Resolve(b.Ctx, oscar, charged.ID, ops.VerdictGiveUp, "", "cannot confirm; refund to be safe")
	require.NoError(t, err)
	require.Len(t, b.Commands(t, cur, wire.KindFailed), 1, "the compensator is told")
	res = b.Results(t)
	require.Contains(t, res[len(res)-1].Reason, "its compensation playbook (refund_payment) follows")

	_, err = b.ops.Resolve(b.Ctx, oscar, gone.ID, ops.VerdictApplied, "ch_x", "changed my mind")
	require.ErrorIs(t, err, ops.ErrState, "only an escalated operation is resolved")
}

// Cancelling withdraws what was not sent; a command already on its way
// then changes nothing.
func TestCancel(t *testing.T) {
	t.Parallel()
	b := setup(t, pipetest.Options{})
	o := b.SubmitCapture(t, "wf_1", "order_cancel")
	cur, err := b.ops.Cancel(b.Ctx, oscar, o.ID, "duplicate order")
	require.NoError(t, err)
	require.Equal(t, op.StateCancelled, cur.State)
	require.NoError(t, b.d.Handle(b.Ctx, b.LastCommand(t, o, wire.KindDispatch).Delivery(1)))
	require.Equal(t, op.StateCancelled, b.Operation(t, o.ID).State)
	require.Zero(t, b.Vendors.Stats().Captures)

	sent := b.escalated(t, "order_sent")
	_, err = b.ops.Cancel(b.Ctx, oscar, sent.ID, "too late")
	require.ErrorIs(t, err, ops.ErrState, "what may have been sent cannot be cancelled")
}

// Leases: operations of leased tools on one entity run one at a time, in
// the order they were accepted.
func TestEntityLeaseInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, pipetest.Options{})
	tool := b.Tool(t, "capture_payment")
	submit := func(ev string, amount int) *op.Operation {
		return b.Submit(t, wire.Intent{EventID: ev, WorkflowID: "wf_1", Tool: "capture_payment",
			Args: json.RawMessage(fmt.Sprintf(`{"order_id":"order_shared","customer_id":"c","amount_cents":%d,"currency":"USD"}`, amount))})
	}
	first, second := submit("evt_1", 100), submit("evt_2", 200)
	lease := store.EntityLease{TTL: time.Minute, Tools: []string{"capture_payment", "refund_payment", "update_crm_record"}}
	_, _, err := b.Store.BeginLeasedAttempt(b.Ctx, second.ID, second.LeaseEpoch, "w", tool.Timeout, lease)
	require.ErrorIs(t, err, store.ErrLeaseBusy, "an older operation on the entity goes first")
	claimed, _, err := b.Store.BeginLeasedAttempt(b.Ctx, first.ID, first.LeaseEpoch, "w", tool.Timeout, lease)
	require.NoError(t, err)
	_, _, err = b.Store.BeginLeasedAttempt(b.Ctx, second.ID, second.LeaseEpoch, "w", tool.Timeout, lease)
	require.ErrorIs(t, err, store.ErrLeaseBusy, "the first holds the lease while in flight")
	_, err = b.Store.Transition(b.Ctx, store.Change{OperationID: first.ID, From: op.StateDispatched, LeaseEpoch: claimed.LeaseEpoch,
		Events: []op.Event{op.EventSucceed}})
	require.NoError(t, err)
	got, _, err := b.Store.BeginLeasedAttempt(b.Ctx, second.ID, second.LeaseEpoch, "w", tool.Timeout, lease)
	require.NoError(t, err, "released when the first completed")
	require.Equal(t, op.StateDispatched, got.State)
}

// A semantic dedupe window: the same template to the same address within
// a day is suppressed even under another business reference, unless the
// intent overrides it with a reason, which is recorded.
func TestDedupeWindow(t *testing.T) {
	t.Parallel()
	b := setup(t, pipetest.Options{})
	email := func(ev, ref string, override *wire.Override) (op.Decision, string, string) {
		subject, header, body := pipetest.IntentMsg(t, wire.Intent{EventID: ev, WorkflowID: "wf_1", Tool: "send_email",
			Args:           json.RawMessage(fmt.Sprintf(`{"to":"a@example.com","template":"follow_up","reference":%q}`, ref)),
			DedupeOverride: override})
		ans, err := b.Ingester().Ingest(b.Ctx, subject, header, body)
		require.NoError(t, err)
		return ans.Decision, ans.Result.OperationID, ans.Result.Reason
	}
	d, first, why := email("evt_1", "ref_1", nil)
	require.Equal(t, op.DecisionNew, d, why)
	d, id, reason := email("evt_2", "ref_2", nil)
	require.Equal(t, op.DecisionDuplicateOperation, d)
	require.Equal(t, first, id, "answered with the operation that suppressed it")
	require.Contains(t, reason, "dedupe window")
	d, id, _ = email("evt_3", "ref_3", &wire.Override{Reason: "the customer asked for it again"})
	require.Equal(t, op.DecisionNew, d)
	evs, err := b.Store.Events(b.Ctx, id)
	require.NoError(t, err)
	require.Contains(t, string(evs[0].Detail), "the customer asked for it again")
}
