package dispatch_test

import (
	"net"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/dispatch"
	"github.com/opledger/opledger/internal/pipetest"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// A vendor that is down (connection refused on every attempt) is not a
// permanent failure of the action (issue 7.9): nothing was sent, so the
// operation retries under its key until the budget is spent, then fails
// saying nothing was done and recommending retry_later — never
// change_arguments. The same action sent again once the vendor is back
// (a new event id, the same arguments) reopens it under the same key, as
// a new generation, and it runs once.
//
// Breaking it: classifying "connection refused" as a permanent error, or
// recommending change_arguments, leaves the business key burnt for good;
// answering the later intent duplicate_operation never runs the action.
func TestVendorOutageEndsRetryLaterAndReopens(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// The vendors as seen from a dispatcher while they are down: a port
	// that was just free, where nothing listens.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	downURL := "http://" + l.Addr().String()
	require.NoError(t, l.Close())
	downReg := pipetest.LoadRegistry(t, downURL, pipetest.DefaultToolTimeout)
	downAdapters, err := downReg.Adapters(&http.Client{})
	require.NoError(t, err)
	down := dispatch.New(dispatch.Config{Name: "dispatcher-down"}, b.Store, b.Bus, downReg, downAdapters, nil, b.Log)

	tool := b.Tool(t, "capture_payment")
	o := b.SubmitCapture(t, "wf_out", "order_outage")
	for i := range tool.Retry.MaxAttempts {
		require.NoError(t, down.Handle(b.Ctx, b.LastCommand(t, o, wire.KindDispatch).Delivery(1)), "attempt %d", i+1)
	}
	o = b.Operation(t, o.ID)
	require.Equal(t, op.StateFailedPermanent, o.State)
	require.Equal(t, op.CategoryRetriesExhausted, o.LastErrorCategory)
	require.True(t, o.Reopenable())
	require.Zero(t, b.captureRequests(), "the vendor was down: nothing reached it")

	var final wire.Result
	for _, r := range b.Results(t) {
		if r.OperationID == o.ID && r.Version > final.Version {
			final = r
		}
	}
	require.Equal(t, string(op.StateFailedPermanent), final.Status)
	require.Equal(t, op.RecommendRetryLater, final.RetryRecommendation, "an outage is no reason to change the arguments")
	require.Contains(t, final.SafeUserMessage, "Nothing was done")
	require.Contains(t, final.Reason, "nothing was done")
	require.Contains(t, final.Reason, "connection refused")

	// The vendor is back; the agent sends the same action again later.
	in := wire.Intent{EventID: "evt_again", WorkflowID: "wf_out", Tool: "capture_payment", Args: pipetest.CaptureArgs("order_outage", "cust_1", 4900)}
	subject, header, body := pipetest.IntentMsg(t, in)
	ans, err := b.Ingester().Ingest(b.Ctx, subject, header, body)
	require.NoError(t, err)
	require.Equal(t, op.DecisionReopened, ans.Decision)
	require.Equal(t, o.ID, ans.Result.OperationID)
	o = b.Operation(t, o.ID)
	require.Equal(t, 2, o.Generation)
	require.NoError(t, b.svc.Handle(b.Ctx, b.LastCommand(t, o, wire.KindDispatch).Delivery(1)))
	o = b.Operation(t, o.ID)
	require.Equal(t, op.StateCompletedSuccess, o.State)
	require.Equal(t, 1, b.captureRequests())
	require.Equal(t, 1, b.Vendors.Stats().Captures)
}
