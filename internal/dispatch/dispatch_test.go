package dispatch_test

import (
	"bytes"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/dispatch"
	"github.com/opledger/opledger/internal/pipetest"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

func TestMain(m *testing.M) { testdb.Main(m) }

type bundle struct {
	*pipetest.Env
	svc *dispatch.Service
}

func setup(t *testing.T) bundle {
	t.Helper()
	e := pipetest.Start(t, pipetest.Options{})
	return bundle{Env: e, svc: newDispatcher(e, "dispatcher-1")}
}

func newDispatcher(e *pipetest.Env, name string) *dispatch.Service {
	return dispatch.New(dispatch.Config{Name: name}, e.Store, e.Bus, e.Registry, e.Adapters, nil, e.Log)
}

// captureRequests is how many capture requests reached the vendor, faulted
// or replayed ones included: the count that shows whether we called at all.
func (b bundle) captureRequests() int { return b.Vendors.Stats().Requests[vendors.RouteCapture] }

// A redelivered dispatch command for an operation already past
// pending_dispatch is acknowledged and changes nothing: the vendor is not
// called again.
//
// Breaking it: if the claim did not require pending_dispatch at the
// command's epoch, the redelivery would call the vendor a second time. The
// payments stand-in replays by idempotency key, so Captures would stay 1 —
// which is why this asserts on requests, not only on captures.
func TestRedeliveredCommandNeverCallsVendorAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	o := b.SubmitCapture(t, "wf_1", "order_1")
	cmd := b.LastCommand(t, o, wire.KindDispatch)

	require.NoError(t, b.svc.Handle(b.Ctx, cmd.Delivery(1)))
	done := b.Operation(t, o.ID)
	require.Equal(t, op.StateCompletedSuccess, done.State)
	require.Equal(t, 1, b.captureRequests())
	outboxBefore := len(b.Outbox(t))

	// JetStream redelivers (the ack was lost), and a second dispatcher instance gets it.
	require.NoError(t, b.svc.Handle(b.Ctx, cmd.Delivery(2)))
	require.NoError(t, newDispatcher(b.Env, "dispatcher-2").Handle(b.Ctx, cmd.Delivery(3)))

	require.Equal(t, 1, b.captureRequests(), "the vendor was called once")
	require.Equal(t, 1, b.Vendors.Stats().Captures)
	after := b.Operation(t, o.ID)
	require.Equal(t, done.State, after.State)
	require.Equal(t, done.LeaseEpoch, after.LeaseEpoch)
	require.Equal(t, 1, after.AttemptCount)
	require.Equal(t, done.UpdatedAt, after.UpdatedAt)
	attempts, err := b.Store.Attempts(b.Ctx, o.ID)
	require.NoError(t, err)
	require.Len(t, attempts, 1)
	require.Len(t, b.Outbox(t), outboxBefore, "a suppressed command writes nothing")
}

// Five workers handle the same command at once (a duplicate publish fanned
// out to several dispatchers): exactly one claims it and calls the vendor.
//
// Breaking it: a claim that read the state and then wrote it without the
// conditional update (state and epoch in the WHERE) would let several
// workers pass and call the vendor several times.
func TestConcurrentHandleCallsVendorOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	o := b.SubmitCapture(t, "wf_1", "order_1")
	cmd := b.LastCommand(t, o, wire.KindDispatch)

	const n = 5
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		svc := newDispatcher(b.Env, "dispatcher-"+string(rune('a'+i)))
		go func() {
			defer wg.Done()
			<-start
			errs[i] = svc.Handle(b.Ctx, cmd.Delivery(1))
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "worker %d", i)
	}

	require.Equal(t, 1, b.captureRequests(), "exactly one vendor request")
	require.Equal(t, 1, b.Vendors.Stats().Captures)
	got := b.Operation(t, o.ID)
	require.Equal(t, op.StateCompletedSuccess, got.State)
	require.Equal(t, 1, got.AttemptCount)
	attempts, err := b.Store.Attempts(b.Ctx, o.ID)
	require.NoError(t, err)
	require.Len(t, attempts, 1)
}

// The vendor answers 429 (rate_limit fault: refused before acting,
// Retry-After: 1). The attempt is failed_retryable, the operation goes back
// to pending_dispatch with a dispatch command delayed by at least the
// Retry-After, and after capture_payment's budget of 3 attempts it fails
// permanently with a failed command. An old command redelivered while the
// operation waits at a newer epoch is refused.
//
// Breaking it: a retry command written due now would hammer a vendor that
// asked us to wait (available_at check); ignoring the budget would go on
// past 3 requests; a retry without the epoch check would let the stale
// first command call the vendor again.
func TestRateLimitedRetriesThenFailsPermanently(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, b.Vendors.InjectFault(vendors.Fault{Route: vendors.RouteCapture, Kind: vendors.FaultRateLimit, Times: 3}))
	o := b.SubmitCapture(t, "wf_1", "order_1")
	tool := b.Tool(t, "capture_payment")
	require.Equal(t, 3, tool.Retry.MaxAttempts)
	first := b.LastCommand(t, o, wire.KindDispatch)

	cmd := first
	for attempt := 1; attempt < tool.Retry.MaxAttempts; attempt++ {
		require.NoError(t, b.svc.Handle(b.Ctx, cmd.Delivery(1)))
		cur := b.Operation(t, o.ID)
		require.Equal(t, op.StatePendingDispatch, cur.State, "attempt %d", attempt)
		require.Equal(t, attempt, cur.AttemptCount)
		require.Equal(t, "rate_limited", cur.LastErrorCategory)

		next := b.LastCommand(t, o, wire.KindDispatch)
		require.NotEqual(t, cmd.MsgID, next.MsgID, "attempt %d wrote a new dispatch command", attempt)
		require.True(t, next.AvailableAt.After(time.Now().Add(500*time.Millisecond)),
			"the retry is delayed by the vendor's Retry-After (1s); due at %s", next.AvailableAt)
		c := next.Command(t)
		require.Equal(t, cur.LeaseEpoch, c.LeaseEpoch)
		require.Equal(t, op.StatePendingDispatch, c.State)
		cmd = next
	}
	events, err := b.Store.Events(b.Ctx, o.ID)
	require.NoError(t, err)
	var seen []op.Event
	for _, e := range events {
		seen = append(seen, e.Event)
	}
	require.Equal(t, []op.Event{op.EventCreate, op.EventEnqueue,
		op.EventDispatch, op.EventFailRetryable, op.EventRetry,
		op.EventDispatch, op.EventFailRetryable, op.EventRetry}, seen)

	// The first command, redelivered now, is from epoch 0; the operation is
	// pending again but at a newer epoch. It must not reach the vendor.
	require.NoError(t, b.svc.Handle(b.Ctx, first.Delivery(2)))
	require.Equal(t, 2, b.captureRequests(), "the stale command did not call the vendor")
	require.Equal(t, 2, b.Operation(t, o.ID).AttemptCount)

	// The last attempt of the budget.
	require.NoError(t, b.svc.Handle(b.Ctx, cmd.Delivery(1)))
	final := b.Operation(t, o.ID)
	require.Equal(t, op.StateFailedPermanent, final.State)
	require.Equal(t, 3, final.AttemptCount)
	require.Equal(t, "retries_exhausted", final.LastErrorCategory)
	failed := b.LastCommand(t, o, wire.KindFailed).Command(t)
	require.Equal(t, op.StateFailedPermanent, failed.State)
	require.Len(t, b.Commands(t, o, wire.KindDispatch), 3, "no dispatch command after the budget")

	st := b.Vendors.Stats()
	require.Equal(t, 3, st.Requests[vendors.RouteCapture])
	require.Equal(t, 0, st.Captures, "429 is refused before acting")
}

// The vendor captures, then never answers (timeout_after_commit): the
// attempt ends when the tool's timeout passes, the outcome is unknown and the
// operation goes to reconciliation — never to a retry, which for an
// irreversible capture could charge twice.
//
// Breaking it: classifying a timeout after the request was sent as
// retryable would write a dispatch command (and the second attempt would be
// a second request); the vendor counts exactly one capture either way here,
// so the ledger side is what is asserted.
func TestTimeoutAfterCommitIsUnknownOutcome(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, b.Vendors.InjectFault(vendors.Fault{Route: vendors.RouteCapture, Kind: vendors.FaultTimeoutAfterCommit}))
	o := b.SubmitCapture(t, "wf_1", "order_1")

	require.NoError(t, b.svc.Handle(b.Ctx, b.LastCommand(t, o, wire.KindDispatch).Delivery(1)))
	got := b.Operation(t, o.ID)
	require.Equal(t, op.StateUnknownOutcome, got.State)
	require.Equal(t, "timeout", got.LastErrorCategory)
	require.Empty(t, got.ExternalObjectID, "we never saw the vendor's answer")

	unknown := b.LastCommand(t, o, wire.KindUnknown).Command(t)
	require.Equal(t, op.StateUnknownOutcome, unknown.State)
	require.Equal(t, got.LeaseEpoch, unknown.LeaseEpoch)
	require.Len(t, b.Commands(t, o, wire.KindDispatch), 1, "no retry of an ambiguous capture")
	attempts, err := b.Store.Attempts(b.Ctx, o.ID)
	require.NoError(t, err)
	require.Len(t, attempts, 1)
	require.Equal(t, op.OutcomeUnknown, attempts[0].Outcome)

	st := b.Vendors.Stats()
	require.Equal(t, 1, st.Captures, "the vendor did capture")
	require.Equal(t, 1, st.Requests[vendors.RouteCapture])
}

// The vendor refuses the request for good (422: another client already used
// our idempotency key with a different request). The operation fails
// permanently at once, with a failed command, and is not retried.
//
// Breaking it: treating a 4xx as retryable would put the operation back in
// pending_dispatch with another dispatch command.
func TestPermanentRefusalFailsPermanently(t *testing.T) {
	t.Parallel()
	b := setup(t)
	o := b.SubmitCapture(t, "wf_1", "order_1")
	// Someone else's request under the same key, with other content.
	req, err := http.NewRequest(http.MethodPost, b.Vendors.URL()+"/v1/payments/capture",
		bytes.NewReader([]byte(`{"order_id":"order_1","customer_id":"someone_else","amount_cents":4900,"currency":"USD"}`)))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", o.IdempotencyKey)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)

	require.NoError(t, b.svc.Handle(b.Ctx, b.LastCommand(t, o, wire.KindDispatch).Delivery(1)))
	got := b.Operation(t, o.ID)
	require.Equal(t, op.StateFailedPermanent, got.State)
	require.Equal(t, "client_error", got.LastErrorCategory)
	require.Contains(t, got.LastError, "422")
	require.Equal(t, 1, got.AttemptCount)
	require.Equal(t, op.StateFailedPermanent, b.LastCommand(t, o, wire.KindFailed).Command(t).State)
	require.Len(t, b.Commands(t, o, wire.KindDispatch), 1, "no retry")
	attempts, err := b.Store.Attempts(b.Ctx, o.ID)
	require.NoError(t, err)
	require.Len(t, attempts, 1)
	require.Equal(t, http.StatusUnprocessableEntity, attempts[0].HTTPStatus)

	st := b.Vendors.Stats()
	require.Equal(t, 1, st.Conflicts, "our request was refused")
	require.Equal(t, 1, st.Captures, "only the other client's capture happened")
}
