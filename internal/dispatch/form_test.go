package dispatch_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/reconcile"
	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// A vendor that does not take JSON: the example registry's
// create_payment_intent sends a form-encoded body (as Stripe expects) to the
// stand-in processor, which parses it strictly and refuses anything else.
// The charge is made once, its id read from the JSON answer; when the answer
// is lost after the charge, the reconciler finds it by idempotency key.
//
// Breaking it: a JSON body (no body template) gets a 400 and the operation
// fails permanently; a wrong field name (amount_cents for amount) gets a
// 400 too; a lookup not wired leaves the second operation escalated.
func TestFormEncodedVendor(t *testing.T) {
	t.Parallel()
	b := setup(t)
	args := func(order string) json.RawMessage {
		return json.RawMessage(`{"order_id":"` + order + `","customer_id":"cus_1","amount_cents":4900,"currency":"usd"}`)
	}
	o := b.Submit(t, wire.Intent{EventID: "evt_pi_1", WorkflowID: "wf_1", Tool: "create_payment_intent", Args: args("order_pi_1")})
	require.NoError(t, b.svc.Handle(b.Ctx, b.LastCommand(t, o, wire.KindDispatch).Delivery(1)))
	done := b.Operation(t, o.ID)
	require.Equal(t, op.StateCompletedSuccess, done.State, done.LastError)
	require.True(t, strings.HasPrefix(done.ExternalObjectID, "pi_"), done.ExternalObjectID)
	require.Equal(t, 1, b.Vendors.Stats().PaymentIntents)

	require.NoError(t, b.Vendors.InjectFault(vendors.Fault{Route: vendors.RoutePaymentIntent, Kind: vendors.FaultTimeoutAfterCommit}))
	o2 := b.Submit(t, wire.Intent{EventID: "evt_pi_2", WorkflowID: "wf_1", Tool: "create_payment_intent", Args: args("order_pi_2")})
	require.NoError(t, b.svc.Handle(b.Ctx, b.LastCommand(t, o2, wire.KindDispatch).Delivery(1)))
	require.Equal(t, op.StateUnknownOutcome, b.Operation(t, o2.ID).State)
	rc := reconcile.New(reconcile.Config{Name: "reconciler-1"}, b.Store, b.Bus, b.Registry, b.Adapters, nil, b.Log)
	require.NoError(t, rc.Handle(b.Ctx, b.LastCommand(t, o2, wire.KindUnknown).Delivery(1)))
	found := b.Operation(t, o2.ID)
	require.Equal(t, op.StateCompletedSuccess, found.State)
	require.True(t, strings.HasPrefix(found.ExternalObjectID, "pi_"))
	require.Equal(t, map[string]int{"order_pi_1": 1, "order_pi_2": 1}, b.Vendors.EffectsBy(vendors.KindPaymentIntent, vendors.AttrOrderID))
}
