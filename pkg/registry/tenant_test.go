package registry_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/pkg/registry"
	"github.com/opledger/opledger/pkg/wire"
)

// The identities of the default tenant and of a named tenant never meet,
// however the arguments are chosen: a default-tenant call whose values
// start with "acme/" gets neither tenant acme's key, nor its entity (lease
// queue, guards, entity versions), nor its dedupe key, also for a key
// template that starts with a placeholder. Breaking it: rendering '/' in a
// value as it is, which made the default tenant's customer "acme/c1" the
// entity acme/c1, tenant acme's customer c1.
func TestTenantIdentitiesNeverCollide(t *testing.T) {
	t.Parallel()
	reg, err := registry.Load([]byte(`version: 1
tools:
  notify:
    side_effect_class: internal_write
    version: 1
    entity: {type: customer, id: "{customer_id}"}
    key_template: "{customer_id}:{topic}"
    dedupe: {window: 1h, key_template: "{customer_id}:{topic}"}
    args_schema:
      type: object
      additionalProperties: false
      required: [customer_id, topic]
      properties:
        customer_id: {type: string}
        topic: {type: string}
    adapter: {type: http, vendor: email, path: /v1/notify}
`), vendors)
	require.NoError(t, err)
	tl, err := reg.Tool("notify")
	require.NoError(t, err)
	prepare := func(tenant, args string) *registry.Prepared {
		p, err := tl.Prepare(registry.Proposal{WorkflowID: "wf", Tenant: tenant, Args: []byte(args)})
		require.NoError(t, err)
		return p
	}
	acme := prepare("acme", `{"customer_id":"c1","topic":"t"}`)
	require.Equal(t, "acme/c1:t:v1", acme.Operation.IdempotencyKey)
	require.Equal(t, "acme/c1", acme.Operation.EntityID)
	for _, args := range []string{`{"customer_id":"acme/c1","topic":"t"}`, `{"customer_id":"acme\u2215c1","topic":"t"}`, `{"customer_id":"acme","topic":"/c1"}`} {
		for _, tenant := range []string{"", wire.DefaultTenant} {
			d := prepare(tenant, args)
			require.NotEqual(t, acme.Operation.IdempotencyKey, d.Operation.IdempotencyKey)
			require.NotEqual(t, acme.Operation.EntityID, d.Operation.EntityID)
			require.NotEqual(t, acme.DedupeKey, d.DedupeKey)
			require.NotContains(t, d.Operation.IdempotencyKey+d.Operation.EntityID+d.DedupeKey, "/", "no '/' in a default-tenant identity")
		}
	}
	// Nor can one named tenant take another's, whose name starts like it.
	other := prepare("acme-x", `{"customer_id":"c1","topic":"t"}`)
	require.NotEqual(t, acme.Operation.IdempotencyKey, other.Operation.IdempotencyKey)
	crafted := prepare("acme", `{"customer_id":"x/c1","topic":"t"}`)
	require.Equal(t, 1, strings.Count(crafted.Operation.IdempotencyKey, "/"), "the tenant's '/' is the only one")
}

// '/' in the literal text of an identity template is refused: it would let
// a default-tenant key ("acme/{order_id}") equal a named tenant's.
func TestIdentityTemplatesHaveNoSlash(t *testing.T) {
	t.Parallel()
	for field, line := range map[string]string{
		"key_template":        `    key_template: "acme/{order_id}"`,
		"entity.id":           `    entity: {type: order, id: "acme/{order_id}"}`,
		"dedupe.key_template": `    dedupe: {window: 1h, key_template: "o/{order_id}"}`,
	} {
		doc := `version: 1
tools:
  t:
    side_effect_class: internal_write
    version: 1
` + line + `
` + map[bool]string{true: "", false: `    key_template: "k:{order_id}"
`}[field == "key_template"] + `    args_schema:
      type: object
      properties:
        order_id: {type: string}
    adapter: {type: http, vendor: email, path: /v1/x}
`
		got := strings.Join(problems(t, doc, registry.Options{}), "\n")
		require.Contains(t, got, field+": '/' is reserved", doc)
	}
}
