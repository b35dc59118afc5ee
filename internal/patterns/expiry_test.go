package patterns_test

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/examples"
	"github.com/opledger/opledger/internal/app"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// TestApprovalExpiresInTheRunningSystem: a capture above the approval
// threshold waits for a person; nobody decides within approval.expires_after
// (2 s here, 24 h by default), and the running maintenance leader, not a
// test calling it, ends it cancelled, with a final result that tells the
// agent nothing was done. An approver who comes later is refused, and the
// vendor never sees the charge.
func TestApprovalExpiresInTheRunningSystem(t *testing.T) {
	t.Parallel()
	rule := []byte("    approval: {when: above, field: amount_cents, threshold: 1000000}\n")
	require.Equal(t, 2, bytes.Count(examples.Registry, rule), "capture_payment's and create_payment_intent's approval rule")
	yaml := bytes.Replace(examples.Registry, rule,
		[]byte("    approval: {when: above, field: amount_cents, threshold: 1000000, expires_after: 2s}\n"), 1)
	s := startWith(t, app.RegistryConfig{YAML: yaml})

	in := intent("support:big_1", "wf_expiry", "capture_payment",
		`{"order_id":"order_big_1","customer_id":"cust_1","amount_cents":2500000,"currency":"USD"}`)
	in.Actor = &wire.Actor{Type: "agent", ID: "billing-agent"}
	a := s.submit(t, in)
	require.Equal(t, op.DecisionNew, a.Decision())
	require.Equal(t, op.StateAwaitingApproval, s.operation(t, a.OperationID).State)

	res := s.final(t, a.OperationID)
	require.Equal(t, op.StateCancelled, op.State(res.Status), "%+v", res)
	require.Contains(t, res.Reason, "expired")
	require.Contains(t, s.history(t, a.OperationID), op.EventCancel)

	o := s.operation(t, a.OperationID)
	err := s.api(http.MethodPost, "/v1/operations/"+o.ID+"/approve", map[string]string{"args_hash": o.ArgsHash, "reason": "late"}, nil)
	require.ErrorContains(t, err, "409", "an approval after the request expired is refused")
	require.Equal(t, op.StateCancelled, s.operation(t, o.ID).State)
	require.Zero(t, s.Vendors.Stats().Captures, "nothing reached the vendor")
}
