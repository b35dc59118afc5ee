package registry

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// webhookBase is a valid registry with a webhooks section; the cases below
// break it one way each.
const webhookBase = `version: 1
tools:
  pay:
    side_effect_class: external_idempotent
    version: 1
    key_template: "pay:{order_id}"
    args_schema: {type: object, properties: {order_id: {type: string}}}
    adapter: {type: http, vendor: payments, path: /v1/pay, idempotency_header: Idempotency-Key}
  mail:
    side_effect_class: external_non_idempotent
    version: 1
    key_template: "mail:{to}"
    args_schema: {type: object, properties: {to: {type: string}}}
    adapter:
      type: http
      vendor: email
      path: /v1/send
      reference_header: X-Client-Reference
      lookup: {path: "/v1/send?ref={idempotency_key}"}
  read:
    side_effect_class: pure_read
    version: 1
    args_schema: {type: object}
    adapter: {type: http, vendor: x, method: GET, path: /v1/read}
webhooks:
  payments:
    scheme: standard_webhooks
    tolerance: 2m
    max_body_bytes: 4096
    max_depth: 8
    hold: 30s
    events:
      payment.succeeded:
        tools: [pay]
        match: {by: idempotency_key, pointer: /data/key}
        outcome: success
        external_id_pointer: /data/id
  mailer:
    scheme: stripe
    events:
      message.bounced:
        tools: [mail]
        match: {by: client_reference, pointer: "/data/object/ref~1erence"}
        outcome: failed
`

func TestWebhooksSection(t *testing.T) {
	t.Parallel()
	require.NoError(t, registrySchema(t).Validate(asJSON(t, []byte(webhookBase))))
	reg, err := Load([]byte(webhookBase), anyVendor)
	require.NoError(t, err)
	require.Equal(t, []string{"mailer", "payments"}, reg.Webhooks())

	w, ok := reg.Webhook("payments")
	require.True(t, ok)
	require.Equal(t, SchemeStandardWebhooks, w.Scheme)
	require.Equal(t, 2*time.Minute, w.Tolerance)
	require.Equal(t, 4096, w.MaxBodyBytes)
	require.Equal(t, 8, w.MaxDepth)
	require.Equal(t, 30*time.Second, w.Hold)
	require.Nil(t, w.IDPointer, "a Standard Webhooks id is the header")
	require.Equal(t, Pointer{"type"}, w.TypePointer)
	ev := w.Events["payment.succeeded"]
	require.Equal(t, &WebhookEvent{Type: "payment.succeeded", Tools: []string{"pay"}, MatchBy: MatchIdempotencyKey,
		MatchPointer: Pointer{"data", "key"}, Outcome: WebhookSuccess, ExternalIDPointer: Pointer{"data", "id"}}, ev)

	m, ok := reg.Webhook("mailer")
	require.True(t, ok)
	require.Equal(t, Pointer{"id"}, m.IDPointer, "stripe's delivery id is the event's id")
	require.Equal(t, DefaultWebhookTolerance, m.Tolerance)
	require.Equal(t, DefaultWebhookMaxBody, m.MaxBodyBytes)
	require.Equal(t, DefaultWebhookHold, m.Hold)
	require.Equal(t, Pointer{"data", "object", "ref/erence"}, m.Events["message.bounced"].MatchPointer)
	_, ok = reg.Webhook("nobody")
	require.False(t, ok)
}

// Each broken section is refused by the loader with a problem naming the
// field and its line, and (where a schema can tell) by the schema.
func TestWebhooksSectionProblems(t *testing.T) {
	t.Parallel()
	s := registrySchema(t)
	for name, c := range map[string]struct {
		old, new string
		want     string // in the problem
		schema   bool   // the schema refuses it too
	}{
		"unknown scheme":        {"scheme: standard_webhooks", "scheme: hmac", `line 27: webhooks.payments.scheme: must be standard_webhooks or stripe, got "hmac"`, true},
		"no scheme":             {"    scheme: standard_webhooks\n", "", "webhooks.payments.scheme: is required", true},
		"bad provider name":     {"  payments:\n", "  Payments:\n", "webhooks.Payments: a provider name must be lower-case", true},
		"tolerance too long":    {"tolerance: 2m", "tolerance: 2h", "webhooks.payments.tolerance: must be a positive duration like 5m, at most 1h0m0s", false},
		"bad duration":          {"hold: 30s", "hold: soon", `webhooks.payments.hold: must be a positive duration`, true},
		"tiny body limit":       {"max_body_bytes: 4096", "max_body_bytes: 10", "webhooks.payments.max_body_bytes: must be between 1024", true},
		"depth too deep":        {"max_depth: 8", "max_depth: 1000", "webhooks.payments.max_depth: must be between 2 and 256", true},
		"id pointer on std":     {"    hold: 30s\n", "    hold: 30s\n    id_pointer: /id\n", "webhooks.payments.id_pointer: is not for standard_webhooks", true},
		"unknown field":         {"    hold: 30s\n", "    hold: 30s\n    secret: whsec_x\n", "webhooks.payments: unknown field secret", true},
		"unregistered tool":     {"tools: [pay]", "tools: [charge]", `webhooks.payments.events.payment.succeeded.tools[0]: names unregistered tool "charge"`, false},
		"key without header":    {"tools: [pay]", "tools: [mail]", "tool mail sends the vendor no idempotency key", false},
		"ref without header":    {"tools: [mail]", "tools: [pay]", "tool pay sends the vendor no client reference", false},
		"pure read":             {"tools: [pay]", "tools: [pay, read]", "tool read is a pure_read", false},
		"tool twice":            {"tools: [pay]", "tools: [pay, pay]", "names tool pay twice", true},
		"no tools":              {"        tools: [pay]\n", "", "events.payment.succeeded.tools: is required", true},
		"unknown outcome":       {"outcome: success", "outcome: maybe", `outcome: must be success, noop or failed, got "maybe"`, true},
		"unknown match":         {"by: idempotency_key", "by: order_id", `match.by: must be idempotency_key`, true},
		"pointer without slash": {"pointer: /data/key", "pointer: data/key", `match.pointer: a JSON pointer starts with "/"`, true},
		"bad escape":            {"external_id_pointer: /data/id", "external_id_pointer: /data/~2", "invalid ~ escape", true},
		"bad event type":        {"payment.succeeded:", "\"payment succeeded\":", "an event type is 1 to 200 letters", true},
		"match missing":         {"        match: {by: idempotency_key, pointer: /data/key}\n", "", "events.payment.succeeded.match: is required", true},
	} {
		require.Contains(t, webhookBase, c.old, name)
		doc := strings.Replace(webhookBase, c.old, c.new, 1)
		_, err := Load([]byte(doc), anyVendor)
		var le *LoadError
		require.True(t, errors.As(err, &le), "%s: the loader must refuse it", name)
		require.Contains(t, err.Error(), c.want, name)
		for _, p := range le.Problems {
			require.NotZero(t, p.Line, "%s: %s has its line", name, p)
		}
		if c.schema {
			require.Error(t, s.Validate(asJSON(t, []byte(doc))), "the schema must refuse: %s", name)
		}
	}

	// A provider defined in two files.
	_, err := LoadSources([]Source{{Name: "a.yaml", Data: []byte(webhookBase)},
		{Name: "b.yaml", Data: []byte("version: 1\nwebhooks:\n  payments: {scheme: stripe}\n")}}, anyVendor)
	require.ErrorContains(t, err, "b.yaml:3: webhooks.payments: also defined in a.yaml (line 26)")
}

func TestPointerLookup(t *testing.T) {
	t.Parallel()
	doc := map[string]any{"data": map[string]any{"items": []any{"a", map[string]any{"id": "ch_1"}}, "a/b": "slash", "~": "tilde"}}
	for ptr, want := range map[string]any{
		"/data/items/1/id": "ch_1",
		"/data/a~1b":       "slash",
		"/data/~0":         "tilde",
		"/data/items/0":    "a",
	} {
		p, err := ParsePointer(ptr)
		require.NoError(t, err)
		require.Equal(t, ptr, p.String())
		got, ok := p.Lookup(doc)
		require.True(t, ok, ptr)
		require.Equal(t, want, got, ptr)
	}
	for _, ptr := range []string{"/data/items/2", "/data/items/01", "/data/items/-1", "/data/items/x", "/nothing", "/data/items/1/id/deeper"} {
		p, err := ParsePointer(ptr)
		require.NoError(t, err)
		_, ok := p.Lookup(doc)
		require.False(t, ok, ptr)
	}
}
