package registry_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/pkg/registry"
)

const canary = "CANARY-not-a-secret-7f3a"

// cardTool has a sensitive card token and a sensitive nested code.
const cardTool = `version: 1
tools:
  charge_card:
    side_effect_class: external_idempotent
    version: 1
    key_template: "card:{order_id}:{amount_cents}"
    sensitive: [card_token, verify.code]
    args_schema:
      type: object
      additionalProperties: false
      required: [order_id, card_token, amount_cents]
      properties:
        order_id: {type: string}
        card_token: {type: string, enum: [tok_a, tok_b]}
        amount_cents: {type: integer}
        verify:
          type: object
          properties:
            code: {type: string}
    adapter: {type: http, vendor: payments, path: /v1/cards, idempotency_header: Idempotency-Key, external_id_pointer: /id}
`

// Sensitive arguments are hashed and sent as they are, and shown nowhere:
// redacted where arguments are shown (with their names), kept out of the
// bytes of a rejected intent, never repeated by a refusal, and known to the
// workers as values a vendor must not echo. Breaking it: a validation error
// quoting the value (enum errors say `got "…"`), or a redaction that only
// looks at the top level.
func TestSensitiveArguments(t *testing.T) {
	t.Parallel()
	reg, err := registry.Load([]byte(cardTool), vendors)
	require.NoError(t, err)
	tl, err := reg.Tool("charge_card")
	require.NoError(t, err)
	require.Equal(t, []string{"card_token", "verify.code"}, tl.Sensitive)

	p, err := tl.Prepare(registry.Proposal{WorkflowID: "wf", Args: []byte(`{"order_id":"o1","card_token":"tok_a","amount_cents":5,"verify":{"code":"` + canary + `"}}`)})
	require.NoError(t, err)
	require.Contains(t, string(p.Operation.Args), canary, "the ledger keeps what the vendor must receive")
	require.NotContains(t, p.Operation.IdempotencyKey, canary)
	shown, redacted := tl.RedactArgs(p.Operation.Args)
	require.Equal(t, []string{"card_token", "verify.code"}, redacted)
	require.NotContains(t, string(shown), canary)
	require.NotContains(t, string(shown), "tok_a")
	require.JSONEq(t, `{"amount_cents":5,"card_token":"***","order_id":"o1","verify":{"code":"***"}}`, string(shown))
	require.ElementsMatch(t, []string{"tok_a", canary}, tl.SensitiveValues(p.Operation.Args))

	// A refusal names the field, never the value.
	_, err = tl.Prepare(registry.Proposal{WorkflowID: "wf", Args: []byte(`{"order_id":"o1","card_token":"` + canary + `","amount_cents":5}`)})
	require.Error(t, err)
	require.NotContains(t, err.Error(), canary)
	require.Contains(t, err.Error(), "card_token")
	require.Contains(t, err.Error(), "sensitive")
	_, err = tl.Prepare(registry.Proposal{WorkflowID: "wf", Args: []byte(`{"order_id":"o1","card_token":"tok_a","amount_cents":5,"verify":{"code":7}}`)})
	require.Error(t, err)
	require.NotContains(t, err.Error(), "got ")

	// The bytes of a rejected intent lose the values too; what cannot be
	// read for them is not kept at all.
	body := []byte(`{"spec":"opledger.intent.v1","event_id":"e","workflow_id":"wf","tool":"charge_card","args":{"card_token":"` + canary + `","extra":1}}`)
	kept, ok := reg.RedactIntent(body)
	require.True(t, ok)
	require.NotContains(t, string(kept), canary)
	require.Contains(t, string(kept), `"event_id":"e"`)
	for _, bad := range []string{`{"tool":"charge_card","args":"` + canary + `"}`, `{"tool":"charge_card","args":` + canary, `not json ` + canary, `{"tool":"nope","args":{"x":"` + canary + `"}}`} {
		kept, ok := reg.RedactIntent([]byte(bad))
		require.False(t, ok && strings.Contains(string(kept), canary), "%s kept as %s", bad, kept)
	}
	// Without sensitive arguments nothing changes.
	plain := loadExample(t)
	kept, ok = plain.RedactIntent([]byte(`garbage`))
	require.True(t, ok)
	require.Equal(t, "garbage", string(kept))
	capture, _ := plain.Tool("capture_payment")
	args := json.RawMessage(`{"order_id":"o"}`)
	same, none := capture.RedactArgs(args)
	require.Equal(t, string(args), string(same))
	require.Empty(t, none)
}

// The loader refuses a sensitive argument where opledger would show or
// send its value in the clear, and a compensation that hands one to an
// argument that is not sensitive.
func TestSensitiveArgumentsRefusedWhereShown(t *testing.T) {
	t.Parallel()
	base := func(tool string) string {
		return `version: 1
tools:
  t:
    side_effect_class: internal_write
    version: 1
` + tool + `    args_schema:
      type: object
      properties:
        order_id: {type: string}
        secret: {type: string}
        amount: {type: integer}
    adapter: {type: http, vendor: payments, path: "/v1/x/{order_id}", lookup: {path: "/v1/x?o={order_id}"}}
`
	}
	for name, c := range map[string]struct{ tool, want string }{
		"unknown":      {"    key_template: \"k:{order_id}\"\n    sensitive: [nope]\n", `"nope" is not a property of args_schema`},
		"twice":        {"    key_template: \"k:{order_id}\"\n    sensitive: [secret, secret]\n", "secret is listed twice"},
		"in the key":   {"    key_template: \"k:{order_id}:{secret}\"\n    sensitive: [secret]\n", "secret is in key_template"},
		"in an entity": {"    key_template: \"k:{order_id}\"\n    entity: {type: x, id: \"{secret}\"}\n    sensitive: [secret]\n", "secret is in entity.id"},
		"normalized":   {"    key_template: \"k:{order_id}\"\n    normalize: {secret: [trim]}\n    sensitive: [secret]\n", "normalized as an identity field"},
		"in the url":   {"    key_template: \"k:{order_id}\"\n    sensitive: [order_id]\n", "order_id is in key_template"},
	} {
		got := strings.Join(problems(t, base(c.tool), registry.Options{}), "\n")
		require.Contains(t, got, c.want, name)
	}
	url := strings.Replace(base("    key_template: \"k:{amount}\"\n    sensitive: [order_id]\n"), "{order_id}", "{order_id}", 1)
	require.Contains(t, strings.Join(problems(t, url, registry.Options{}), "\n"), "order_id is in adapter.path")

	comp := `version: 1
tools:
  pay:
    side_effect_class: internal_write
    version: 1
    key_template: "p:{order_id}"
    sensitive: [secret]
    args_schema: {type: object, properties: {order_id: {type: string}, secret: {type: string}}}
    adapter: {type: http, vendor: payments, path: /v1/p}
    compensation: {tool: undo, args: {order_id: "{order_id}", note: "{secret}"}}
  undo:
    side_effect_class: internal_write
    version: 1
    key_template: "u:{order_id}"
    args_schema: {type: object, properties: {order_id: {type: string}, note: {type: string}}}
    adapter: {type: http, vendor: payments, path: /v1/u}
`
	require.Contains(t, strings.Join(problems(t, comp, registry.Options{}), "\n"), "carries sensitive argument secret to tool undo")
	_, err := registry.Load([]byte(strings.Replace(comp, "    adapter: {type: http, vendor: payments, path: /v1/u}", "    sensitive: [note]\n    adapter: {type: http, vendor: payments, path: /v1/u}", 1)), vendors)
	require.NoError(t, err, "handed to a sensitive argument")
}
