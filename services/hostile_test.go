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
// 2 MB Request-Id header, a body cut short) or never answer at all, and
// the reconciler's lookups meet the same answers. Each
// operation must settle within a bound, as the ledger decides (found by
// the reconciler and completed, retried once nothing was done, or
// escalated), with the agent told the final status, no outbox row
// republished over and over and no effect performed twice.
func TestHostileVendors(t *testing.T) {
	t.Parallel()
	sys := proctest.Start(t, proctest.Options{})
	hostile := []vendors.FaultKind{vendors.FaultNULIDAfterCommit, vendors.FaultHugeHeaderAfterCommit,
		vendors.FaultTruncatedBodyAfterCommit, vendors.FaultEndless}
	// The reconciler's lookups meet the same answers, once each.
	for _, route := range []string{vendors.RouteCapture, vendors.RouteEmail, vendors.RouteCaptureLookup, vendors.RouteEmailLookup} {
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
	require.Equal(t, 4*len(hostile), sys.Vendors.Stats().FaultsFired, "every hostile answer was served")
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

// TestSlowAndEventuallyConsistentVendors has the vendors apply a request
// seconds after it arrived (latency: the effect does not exist, even for
// lookups, until then, and the client has timed out after the tool's 2 s)
// or answer 500 after applying it while their lookups do not show it for a
// while (delayed_visibility). The reconciler does not take a lookup's "not
// found" for "never applied" until the tool's apply_bound has passed since
// the request was sent (send_email: 10 s, its vendor's promise), so even a
// vendor 6 s late is found and nothing is sent again. Captures are safe
// either way: the retry carries the same Idempotency-Key.
//
// Breaking it: trusting "not found" after the settle delay alone (2 s, the
// behaviour before apply_bound) sends the 6 s cases' email twice.
func TestSlowAndEventuallyConsistentVendors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		kind  vendors.FaultKind
		delay time.Duration
	}{
		{vendors.FaultLatency, 2500 * time.Millisecond},
		{vendors.FaultDelayedVisibility, time.Second},
		{vendors.FaultLatency, 6 * time.Second},
		{vendors.FaultDelayedVisibility, 6 * time.Second},
	} {
		t.Run(fmt.Sprintf("%s_%s", c.kind, c.delay), func(t *testing.T) {
			t.Parallel()
			sys := proctest.Start(t, proctest.Options{})
			for _, route := range []string{vendors.RouteCapture, vendors.RouteEmail} {
				require.NoError(t, sys.Vendors.InjectFault(vendors.Fault{Route: route, Kind: c.kind, Delay: c.delay}))
			}
			sys.Publish(wire.Intent{EventID: "s:capture", WorkflowID: "wf_s", Tool: "capture_payment",
				Args: proctest.CaptureArgs("s_order", "cust_1", 4900)})
			sys.Publish(wire.Intent{EventID: "s:email", WorkflowID: "wf_s", Tool: "send_email",
				Args: proctest.EmailArgs("s_user@example.com", "s_order")})
			ops, took := sys.WaitSettled(90 * time.Second)
			t.Logf("settled in %s", took.Round(time.Millisecond))
			// A slow request applies late, whatever the ledger decided
			// meanwhile: count once it has.
			sys.WaitFor("the vendor to have applied both requests", 2*c.delay, func() bool {
				st := sys.Vendors.Stats()
				return st.Captures >= 1 && st.Emails >= 1
			})
			time.Sleep(c.delay) // and a retry's effect, if any
			for _, o := range ops {
				t.Logf("%s: %s", o.IdempotencyKey, o.State)
			}
			sys.CheckEffects(sys.Operations())
		})
	}
}
