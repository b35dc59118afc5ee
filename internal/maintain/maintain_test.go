package maintain_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/dispatch"
	"github.com/opledger/opledger/internal/maintain"
	"github.com/opledger/opledger/internal/pipetest"
	"github.com/opledger/opledger/internal/reconcile"
	"github.com/opledger/opledger/internal/telemetry"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/pkg/adapter"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

func TestMain(m *testing.M) { testdb.Main(m) }

const (
	settleDelay = 300 * time.Millisecond
	grace       = time.Second
)

// bundle runs the pipeline with an injected clock that every write and every
// deadline comparison in the store reads: moving it is the database's time
// passing.
type bundle struct {
	*pipetest.Env
	mu         *sync.Mutex
	now        *time.Time
	dispatcher *dispatch.Service
	reconciler *reconcile.Service
	maint      *maintain.Maintainer
}

func setup(t *testing.T) bundle {
	t.Helper()
	b := bundle{mu: &sync.Mutex{}, now: new(time.Time)}
	*b.now = time.Now()
	b.Env = pipetest.Start(t, pipetest.Options{Clock: func() time.Time {
		b.mu.Lock()
		defer b.mu.Unlock()
		return *b.now
	}})
	b.dispatcher = dispatch.New(dispatch.Config{Name: "dispatcher-1"}, b.Store, b.Bus, b.Registry, b.Adapters, nil, b.Log)
	b.reconciler = reconcile.New(reconcile.Config{Name: "reconciler-1", SettleDelay: settleDelay}, b.Store, b.Bus, b.Registry, b.Adapters, nil, b.Log)
	b.maint = maintain.New(maintain.Config{Name: "maintainer-1", DispatchedGrace: grace, RedriveAfter: time.Minute, StrandInterval: time.Nanosecond},
		b.Store, b.Registry, nil, nil, b.Log)
	return b
}

// advance moves the database's clock on.
func (b bundle) advance(d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	*b.now = b.now.Add(d)
}

// A dispatcher dies after committing "dispatched" (BeginAttemptTx) and
// before recording an outcome. The sweeper leaves it alone while the call
// could still be in flight; once now is past the tool's timeout plus grace
// it marks the operation unknown_outcome, bumps the lease epoch and sends it
// to reconciliation. When the "dead" dispatcher comes back and records its
// outcome at the old epoch, the write is refused with op.ErrStale and
// changes nothing.
//
// Then the operation is reconciled (not applied), retried and claimed by a
// live dispatcher at a newer epoch: the dead dispatcher's write is refused
// again, this time by the epoch alone, and the live one's stands.
//
// Breaking it: sweeping without the timeout check would steal live calls
// (first Sweep returns 1); a sweep without BumpEpoch, or a Record not fenced
// by the epoch, would let the late write complete the operation behind the
// reconciler's or the live dispatcher's back (state and external id checks).
func TestSweepFencesDeadDispatcher(t *testing.T) {
	t.Parallel()
	b := setup(t)
	o := b.SubmitCapture(t, "wf_1", "order_1")
	tool := b.Tool(t, "capture_payment")

	claimed, att, err := b.Store.BeginAttempt(b.Ctx, o.ID, o.LeaseEpoch, "dispatcher-dead", pipetest.DefaultToolTimeout)
	require.NoError(t, err)
	require.Equal(t, op.StateDispatched, claimed.State)
	// ... and the dispatcher is gone: no vendor call, no Record.

	moved, err := b.maint.Sweep(b.Ctx)
	require.NoError(t, err)
	require.Zero(t, moved, "a call still within its timeout is not stuck")
	require.Equal(t, op.StateDispatched, b.Operation(t, o.ID).State)

	b.advance(tool.Timeout + grace + time.Second)
	moved, err = b.maint.Sweep(b.Ctx)
	require.NoError(t, err)
	require.Equal(t, 1, moved)
	swept := b.Operation(t, o.ID)
	require.Equal(t, op.StateUnknownOutcome, swept.State)
	require.Equal(t, claimed.LeaseEpoch+1, swept.LeaseEpoch, "the sweeper took the lease")
	require.Equal(t, "stuck", swept.LastErrorCategory)
	unknown := b.LastCommand(t, o, wire.KindUnknown).Command(t)
	require.Equal(t, swept.LeaseEpoch, unknown.LeaseEpoch)
	require.Equal(t, "evt_order_1", unknown.EventID, "the sweeper's command names the event that created the operation")
	outboxBefore := len(b.Outbox(t))

	// The dead dispatcher wakes up and records that its call timed out. (Had
	// it recorded a 2xx, the reconciler would escalate instead of retrying:
	// see TestAnsweredButNotFoundEscalates.)
	_, err = dispatch.Record(b.Ctx, b.Store, tool, claimed, att,
		adapter.Result{Outcome: op.OutcomeUnknown, ErrorCategory: "timeout", Error: "deadline exceeded"},
		"evt_order_1", telemetry.FromTraceID(o.TraceID))
	require.Error(t, err)
	require.True(t, errors.Is(err, op.ErrStale), "late record: %v", err)

	after := b.Operation(t, o.ID)
	require.Equal(t, swept, after, "the late write changed nothing")
	require.Empty(t, after.ExternalObjectID)
	require.Len(t, b.Outbox(t), outboxBefore)
	attempts, err := b.Store.Attempts(b.Ctx, o.ID)
	require.NoError(t, err)
	require.Len(t, attempts, 1)
	// The attempt row keeps what the vendor answered (evidence for whoever
	// reconciles), but nothing else moved: the operation, above, is as the
	// sweeper left it.
	require.False(t, attempts[0].FinishedAt.IsZero(), "the sweeper finished the attempt, and the late answer is kept on it")
	require.Equal(t, op.OutcomeUnknown, attempts[0].Outcome)
	require.Equal(t, "timeout", attempts[0].ErrorCategory)
	require.Zero(t, b.Vendors.Stats().Requests[vendors.RouteCapture])

	// The harder case for the fence: the operation is back in dispatched,
	// held by a live dispatcher at a newer epoch. The reconciler finds no
	// charge (the dead dispatcher never reached the vendor) and retries; a
	// new dispatcher claims it. Now only the epoch, not the state, tells the
	// dead dispatcher's write from the live one's.
	b.advance(settleDelay + 50*time.Millisecond)
	require.NoError(t, b.reconciler.Handle(b.Ctx, b.LastCommand(t, o, wire.KindUnknown).Delivery(1)))
	retry := b.Operation(t, o.ID)
	require.Equal(t, op.StatePendingDispatch, retry.State)
	live, liveAtt := b.Claim(t, retry, "dispatcher-live")
	require.Equal(t, op.StateDispatched, live.State)
	require.Greater(t, live.LeaseEpoch, claimed.LeaseEpoch)

	_, err = dispatch.Record(b.Ctx, b.Store, tool, claimed, att,
		adapter.Result{Outcome: op.OutcomeSuccess, HTTPStatus: 200, ExternalObjectID: "ch_late"},
		"evt_order_1", telemetry.FromTraceID(o.TraceID))
	require.ErrorIs(t, err, op.ErrStale, "same state, old epoch: refused")
	require.Equal(t, live, b.Operation(t, o.ID), "the live dispatcher's claim stands")

	_, err = dispatch.Record(b.Ctx, b.Store, tool, live, liveAtt,
		adapter.Result{Outcome: op.OutcomeSuccess, HTTPStatus: 200, ExternalObjectID: "ch_live"},
		"evt_order_1", telemetry.FromTraceID(o.TraceID))
	require.NoError(t, err)
	final := b.Operation(t, o.ID)
	require.Equal(t, op.StateCompletedSuccess, final.State)
	require.Equal(t, "ch_live", final.ExternalObjectID)
}

// A dispatch command that was published (its outbox row marked sent) and
// then lost — terminated, lost with a NATS server's store — must not leave
// its operation in pending_dispatch forever: once it has waited RedriveAfter
// on the database's clock, the re-drive writes it again, once. Breaking the
// rule shows up as no second command, or as a new command on every pass.
func TestRedriveLostCommand(t *testing.T) {
	t.Parallel()
	b := setup(t)
	o := b.SubmitCapture(t, "wf_1", "order_lost")

	b.advance(time.Hour)
	n, err := b.maint.Redrive(b.Ctx, time.Minute)
	require.NoError(t, err)
	require.Zero(t, n, "its command is still waiting in the outbox")

	// The relay published it; JetStream then lost it.
	b.Published(t, o.ID)
	n, err = b.maint.Redrive(b.Ctx, 2*time.Hour)
	require.NoError(t, err)
	require.Zero(t, n, "not waiting long enough yet")

	n, err = b.maint.Redrive(b.Ctx, time.Minute)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	again := b.LastCommand(t, o, wire.KindDispatch)
	require.Nil(t, again.SentAt)
	cmd := again.Command(t)
	require.Equal(t, o.LeaseEpoch, cmd.LeaseEpoch)
	require.Equal(t, "evt_order_lost", cmd.EventID)
	b.Published(t, o.ID)

	n, err = b.maint.Redrive(b.Ctx, time.Minute)
	require.NoError(t, err)
	require.Zero(t, n, "written once per RedriveAfter, not on every pass")

	require.NoError(t, b.dispatcher.Handle(b.Ctx, again.Delivery(1)))
	require.Equal(t, op.StateCompletedSuccess, b.Operation(t, o.ID).State)
	require.Equal(t, 1, b.Vendors.Stats().Captures)
	require.Equal(t, 1, b.Vendors.Stats().Requests[vendors.RouteCapture])
}

// The database's clock decides. Here every process's host clock runs 30 s
// ahead of the database's (the store's clock is the host's minus 30 s):
// the sweeper must not fence a call still inside its deadline, and the
// reconciler must not cut a settle window short. Comparing a host clock
// with database timestamps (as time.Since(o.UpdatedAt) did) would do both.
func TestHostClockAheadChangesNothing(t *testing.T) {
	t.Parallel()
	e := pipetest.Start(t, pipetest.Options{Clock: func() time.Time { return time.Now().Add(-30 * time.Second) }})
	d := dispatch.New(dispatch.Config{Name: "dispatcher-1"}, e.Store, e.Bus, e.Registry, e.Adapters, nil, e.Log)
	rc := reconcile.New(reconcile.Config{Name: "reconciler-1", SettleDelay: 5 * time.Second}, e.Store, e.Bus, e.Registry, e.Adapters, nil, e.Log)
	mt := maintain.New(maintain.Config{Name: "maintainer-1", DispatchedGrace: grace}, e.Store, e.Registry, nil, nil, e.Log)

	live := e.SubmitCapture(t, "wf_1", "order_live")
	claimed, _, err := e.Store.BeginAttempt(e.Ctx, live.ID, live.LeaseEpoch, "dispatcher-live", 10*time.Second)
	require.NoError(t, err)
	moved, err := mt.Sweep(e.Ctx)
	require.NoError(t, err)
	require.Zero(t, moved, "a call inside its deadline on the database's clock is live")
	require.Equal(t, claimed, e.Operation(t, live.ID))

	require.NoError(t, e.Vendors.InjectFault(vendors.Fault{Route: vendors.RouteCapture, Kind: vendors.FaultTimeoutBeforeCommit}))
	o := e.SubmitCapture(t, "wf_1", "order_doubt")
	require.NoError(t, d.Handle(e.Ctx, e.LastCommand(t, o, wire.KindDispatch).Delivery(1)))
	o = e.Operation(t, o.ID)
	require.Equal(t, op.StateUnknownOutcome, o.State)
	require.Error(t, rc.Handle(e.Ctx, e.LastCommand(t, o, wire.KindUnknown).Delivery(1)), "not found, but not settled yet: look again")
	require.Equal(t, o, e.Operation(t, o.ID), "the settle window is counted on the database's clock")
	require.Len(t, e.Commands(t, o, wire.KindDispatch), 1, "nothing re-sent")
}
