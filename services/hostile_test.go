package services_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/proctest"
	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/pkg/wire"
)

// TestHostileVendors has the vendors answer captures and emails in ways a
// client must survive after performing the effect (an id holding U+0000, a
// 2 MB Request-Id header, a body cut short) or never answer at all. Each
// operation must settle within a bound, as the ledger decides (found by
// the reconciler and completed, retried once nothing was done, or
// escalated), with the agent told the final status, no outbox row
// republished over and over and no effect performed twice.
func TestHostileVendors(t *testing.T) {
	t.Parallel()
	sys := proctest.Start(t, proctest.Options{})
	hostile := []vendors.FaultKind{vendors.FaultNULIDAfterCommit, vendors.FaultHugeHeaderAfterCommit,
		vendors.FaultTruncatedBodyAfterCommit, vendors.FaultEndless}
	for _, route := range []string{vendors.RouteCapture, vendors.RouteEmail} {
		for _, k := range hostile {
			require.NoError(t, sys.Vendors.InjectFault(vendors.Fault{Route: route, Kind: k}))
		}
	}
	// One capture and one email per fault; faults apply in order to the
	// next requests, so which operation meets which depends on timing.
	for i := range hostile {
		sys.Publish(wire.Intent{EventID: fmt.Sprintf("h:capture_%d", i), WorkflowID: "wf_h", Tool: "capture_payment",
			Args: proctest.CaptureArgs(fmt.Sprintf("h_order_%d", i), "cust_1", 4900)})
		sys.Publish(wire.Intent{EventID: fmt.Sprintf("h:email_%d", i), WorkflowID: "wf_h", Tool: "send_email",
			Args: proctest.EmailArgs(fmt.Sprintf("h_user_%d@example.com", i), fmt.Sprintf("h_order_%d", i))})
	}
	ops, took := sys.WaitSettled(90 * time.Second)
	t.Logf("settled in %s", took.Round(time.Millisecond))
	require.Equal(t, 2*len(hostile), sys.Vendors.Stats().FaultsFired, "every hostile answer was served")
	for _, o := range ops {
		atts, err := sys.Store.Attempts(t.Context(), o.ID)
		require.NoError(t, err)
		path := ""
		for _, a := range atts {
			path += fmt.Sprintf(" [%s %s http=%d]", a.Outcome, a.ErrorCategory, a.HTTPStatus)
		}
		t.Logf("%s %s: %s after%s", o.Tool, o.IdempotencyKey, o.State, path)
	}
	sys.CheckEffects(ops)
	sys.CheckOutbox(3)
}
