package policy_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/dispatch"
	"github.com/opledger/opledger/internal/ingest"
	"github.com/opledger/opledger/internal/pipetest"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/registry"
	"github.com/opledger/opledger/pkg/wire"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// A registry of its own: a charge, and a refund guarded per charge on the
// customer's entity, against the stand-in payments vendor.
const guarded = `
version: 1
tools:
  charge:
    side_effect_class: external_idempotent
    version: 1
    entity: {type: order, id: "{order_id}"}
    key_template: "charge:{order_id}"
    args_schema:
      type: object
      additionalProperties: false
      required: [order_id, customer_id, amount_cents, currency]
      properties:
        order_id: {type: string}
        customer_id: {type: string}
        amount_cents: {type: integer, minimum: 1}
        currency: {type: string}
    adapter: {type: http, vendor: payments, method: POST, path: /v1/payments/capture, idempotency_header: Idempotency-Key, external_id_pointer: /id}
  give_back:
    side_effect_class: external_idempotent
    version: 1
    entity: {type: customer, id: "{customer_id}"}
    key_template: "give_back:{charge_id}:{amount_cents}"
    args_schema:
      type: object
      additionalProperties: false
      required: [charge_id, customer_id, amount_cents]
      properties:
        charge_id: {type: string}
        customer_id: {type: string}
        amount_cents: {type: integer, minimum: 1}
    guards:
      - {kind: total_at_most, scope: charge_id, field: amount_cents, limit: {tool: charge, field: amount_cents}}
    adapter: {type: http, vendor: payments, method: POST, path: /v1/refunds, idempotency_header: Idempotency-Key, external_id_pointer: /id}
  give_once:
    side_effect_class: external_idempotent
    version: 1
    entity: {type: customer, id: "{customer_id}"}
    key_template: "give_once:{charge_id}:{reason}"
    args_schema:
      type: object
      additionalProperties: false
      required: [charge_id, customer_id, reason]
      properties:
        charge_id: {type: string}
        customer_id: {type: string}
        reason: {type: string}
    guards: [{kind: once_per_entity, scope: charge_id}]
    adapter: {type: http, vendor: payments, method: POST, path: /v1/refunds, idempotency_header: Idempotency-Key, external_id_pointer: /id}
`

// State guards are checked against the ledger before an operation exists:
// refunds of a charge never add up to more than was captured, and a
// once-per-charge tool runs once per charge, while other charges of the
// same customer are unaffected.
func TestStateGuards(t *testing.T) {
	t.Parallel()
	e := pipetest.Start(t, pipetest.Options{})
	reg, err := registry.Load([]byte(guarded), registry.Options{Vendors: map[string]string{"payments": e.Vendors.URL()}})
	require.NoError(t, err)
	adapters, err := reg.Adapters(&http.Client{})
	require.NoError(t, err)
	in := ingest.New(ingest.Config{}, e.Store, e.Bus, reg, nil, e.Log)
	d := dispatch.New(dispatch.Config{Name: "d"}, e.Store, e.Bus, reg, adapters, nil, e.Log)
	n := 0
	send := func(tool, args string) (op.Decision, string, *op.Operation) {
		n++
		subject, header, body := pipetest.IntentMsg(t, wire.Intent{EventID: fmt.Sprintf("evt_%d", n), WorkflowID: "wf_1", Tool: tool, Args: json.RawMessage(args)})
		ans, err := in.Ingest(e.Ctx, subject, header, body)
		require.NoError(t, err)
		if ans.Decision != op.DecisionNew {
			return ans.Decision, ans.Result.Reason, nil
		}
		o := e.Operation(t, ans.Result.OperationID)
		require.NoError(t, d.Handle(e.Ctx, e.LastCommand(t, o, wire.KindDispatch).Delivery(1)))
		o = e.Operation(t, o.ID)
		require.Equal(t, op.StateCompletedSuccess, o.State, o.LastError)
		return ans.Decision, "", o
	}
	_, _, ch1 := send("charge", `{"order_id":"o1","customer_id":"c1","amount_cents":5000,"currency":"USD"}`)
	_, _, ch2 := send("charge", `{"order_id":"o2","customer_id":"c1","amount_cents":700,"currency":"USD"}`)
	refund := func(charge string, amount int) (op.Decision, string) {
		dec, why, _ := send("give_back", fmt.Sprintf(`{"charge_id":%q,"customer_id":"c1","amount_cents":%d}`, charge, amount))
		return dec, why
	}
	dec, why := refund(ch1.ExternalObjectID, 3000)
	require.Equal(t, op.DecisionNew, dec, why)
	dec, why = refund(ch1.ExternalObjectID, 2500)
	require.Equal(t, op.DecisionRejected, dec)
	require.Contains(t, why, "5500, above the 5000")
	dec, why = refund(ch1.ExternalObjectID, 2000)
	require.Equal(t, op.DecisionNew, dec, "exactly the captured amount: %s", why)
	dec, why = refund(ch2.ExternalObjectID, 700)
	require.Equal(t, op.DecisionNew, dec, "another charge of the same customer: %s", why)
	dec, why = refund("ch_unknown", 1)
	require.Equal(t, op.DecisionRejected, dec)
	require.Contains(t, why, "no completed charge operation")

	_, _, ch3 := send("charge", `{"order_id":"o3","customer_id":"c9","amount_cents":100,"currency":"USD"}`)
	_, _, ch4 := send("charge", `{"order_id":"o4","customer_id":"c9","amount_cents":100,"currency":"USD"}`)
	dec, why, _ = send("give_once", fmt.Sprintf(`{"charge_id":%q,"customer_id":"c9","reason":"late"}`, ch3.ExternalObjectID))
	require.Equal(t, op.DecisionNew, dec, why)
	dec, why, _ = send("give_once", fmt.Sprintf(`{"charge_id":%q,"customer_id":"c9","reason":"late"}`, ch4.ExternalObjectID))
	require.Equal(t, op.DecisionNew, dec, "per charge, not per customer: %s", why)
	dec, why, _ = send("give_once", fmt.Sprintf(`{"charge_id":%q,"customer_id":"c9","reason":"damaged"}`, ch3.ExternalObjectID))
	require.Equal(t, op.DecisionRejected, dec, "a second refund of the same charge, for another reason")
	require.Contains(t, why, "only one is allowed")
	require.Equal(t, 5, e.Vendors.Stats().Refunds)
}

// Guards look only at the asking tenant's operations, and a refusal names
// nothing of another tenant: globex refunding acme's charge finds no
// charge of its own to take a limit from (not acme's 5000), and the
// default tenant's customer "acme/c1" is not acme's customer c1, whose
// once-per-charge refund it must not see. Breaking it: guard queries
// without the tenant (globex's refund accepted against acme's capture), or
// entity ids that keep a value's '/' (the default tenant refused, with
// acme's operation id in the reason).
func TestGuardsSeeOnlyTheirTenant(t *testing.T) {
	t.Parallel()
	e := pipetest.Start(t, pipetest.Options{})
	reg, err := registry.Load([]byte(guarded), registry.Options{Vendors: map[string]string{"payments": e.Vendors.URL()}})
	require.NoError(t, err)
	adapters, err := reg.Adapters(&http.Client{})
	require.NoError(t, err)
	in := ingest.New(ingest.Config{}, e.Store, e.Bus, reg, nil, e.Log)
	d := dispatch.New(dispatch.Config{Name: "d"}, e.Store, e.Bus, reg, adapters, nil, e.Log)
	n := 0
	send := func(tenant, tool, args string) (op.Decision, string, *op.Operation) {
		n++
		_, header, body := pipetest.IntentMsg(t, wire.Intent{EventID: fmt.Sprintf("evt_%d", n), WorkflowID: "wf_1", Tool: tool, Args: json.RawMessage(args)})
		ans, err := in.Ingest(e.Ctx, wire.TenantIntentSubject(tenant, "wf_1"), header, body)
		require.NoError(t, err)
		if ans.Decision != op.DecisionNew {
			return ans.Decision, ans.Result.Reason, nil
		}
		o := e.Operation(t, ans.Result.OperationID)
		if tool == "charge" {
			require.NoError(t, d.Handle(e.Ctx, e.LastCommand(t, o, wire.KindDispatch).Delivery(1)))
			o = e.Operation(t, o.ID)
			require.Equal(t, op.StateCompletedSuccess, o.State, o.LastError)
		}
		return ans.Decision, "", o
	}
	_, _, acmeCharge := send("acme", "charge", `{"order_id":"o1","customer_id":"c1","amount_cents":5000,"currency":"USD"}`)
	dec, why, acmeOnce := send("acme", "give_once", fmt.Sprintf(`{"charge_id":%q,"customer_id":"c1","reason":"late"}`, acmeCharge.ExternalObjectID))
	require.Equal(t, op.DecisionNew, dec, why)

	dec, why, _ = send("globex", "give_back", fmt.Sprintf(`{"charge_id":%q,"customer_id":"c1","amount_cents":10}`, acmeCharge.ExternalObjectID))
	require.Equal(t, op.DecisionRejected, dec, "no limit from another tenant's capture")
	require.Contains(t, why, "no completed charge operation")
	require.NotContains(t, why, acmeCharge.ID)
	require.NotContains(t, why, "5000")

	dec, why, _ = send(wire.DefaultTenant, "give_once", fmt.Sprintf(`{"charge_id":%q,"customer_id":"acme/c1","reason":"late"}`, acmeCharge.ExternalObjectID))
	require.Equal(t, op.DecisionNew, dec, "the default tenant's customer acme/c1 is not acme's c1: %s", why)
	require.NotContains(t, why, acmeOnce.ID)
}
