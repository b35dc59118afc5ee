package dispatch_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/dispatch"
	"github.com/opledger/opledger/internal/pipetest"
	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// An attempt's vendor call must end within the tool's timeout counted from
// before the claim: the sweeper fences the attempt off after that, and a
// dispatcher that calls later could race the attempt that replaced it. With a
// timeout shorter than the least time a call is started with, every claim is
// "too late": nothing may reach the vendor, and the attempt is recorded as
// not sent (retryable under the same key). Breaking the rule shows up as a
// capture request at the vendor.
func TestNoCallAfterTheAttemptDeadline(t *testing.T) {
	t.Parallel()
	// Under minCallTime (50 ms), with as much as that allows left for the claim.
	e := pipetest.Start(t, pipetest.Options{ToolTimeout: 49 * time.Millisecond})
	d := dispatch.New(dispatch.Config{Name: "dispatcher-1"}, e.Store, e.Bus, e.Registry, e.Adapters, nil, e.Log)
	o := e.SubmitCapture(t, "wf_1", "order_late")
	err := d.Handle(e.Ctx, e.LastCommand(t, o, wire.KindDispatch).Delivery(1))
	require.Zero(t, e.Vendors.Stats().Requests[vendors.RouteCapture], "no request after the deadline")
	if errors.Is(err, context.DeadlineExceeded) {
		// On a loaded machine the claim itself can outlast the 49 ms: the
		// command goes back to the bus (and a claim that committed late is
		// fenced off by the sweeper); nothing may have been sent either way.
		t.Logf("the claim outlasted the tool's timeout: %v", err)
		return
	}
	require.NoError(t, err)
	got := e.Operation(t, o.ID)
	require.Equal(t, op.StatePendingDispatch, got.State, "back in line for a retry")
	atts, err := e.Store.Attempts(e.Ctx, o.ID)
	require.NoError(t, err)
	require.Len(t, atts, 1)
	require.Equal(t, op.OutcomeRetryable, atts[0].Outcome)
	require.Equal(t, "not_sent", atts[0].ErrorCategory)
}
