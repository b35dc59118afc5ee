package registry

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const mcpDoc = `version: 1
tools:
  charge:
    side_effect_class: external_irreversible
    version: 1
    key_template: "charge:{order_id}"
    args_schema: {type: object, additionalProperties: false, properties: {order_id: {type: string}}}
    approval: {when: never}
    adapter:
      type: mcp
      server: payments
      tool: create_charge
      external_id_pointer: /id
      verify: {tool: find_charge, args: {key: "{idempotency_key}", order: "{order_id}", mode: exact}, found_pointer: /found}
  charges:
    side_effect_class: pure_read
    version: 1
    args_schema: {type: object}
    adapter: {type: mcp, server: payments}
  email:
    side_effect_class: internal_write
    version: 1
    key_template: "email:{to}"
    args_schema: {type: object, properties: {to: {type: string}}}
    adapter: {type: http, vendor: mail, path: /send}
`

func TestMCPAdapterLoads(t *testing.T) {
	t.Parallel()
	reg, err := Load([]byte(mcpDoc), anyVendor)
	require.NoError(t, err)
	charge, err := reg.Tool("charge")
	require.NoError(t, err)
	require.Equal(t, "mcp", charge.Adapter.Type)
	require.Equal(t, "create_charge", charge.Adapter.MCP.Tool)
	require.True(t, charge.Adapter.HasLookup())
	require.False(t, charge.Adapter.VendorIdempotency, "no idempotency_argument: the upstream is not said to deduplicate")
	reads, _ := reg.Tool("charges")
	require.Equal(t, "charges", reads.Adapter.MCP.Tool, "the tool's own name by default")
	require.Equal(t, []string{"payments"}, reg.MCPServers())
	_, err = reg.Adapters(nil)
	require.ErrorContains(t, err, "not configured", "an mcp tool needs its upstream")
	require.NoError(t, registrySchema(t).Validate(asJSON(t, []byte(mcpDoc))))
}

func TestMCPAdapterProblems(t *testing.T) {
	t.Parallel()
	for name, edit := range map[string][2]string{
		"irreversible without verify":   {"      verify: {tool: find_charge, args: {key: \"{idempotency_key}\", order: \"{order_id}\", mode: exact}, found_pointer: /found}\n", ""},
		"an http field on an mcp tool":  {"      tool: create_charge\n", "      tool: create_charge\n      path: /v1/x\n"},
		"verify of an unknown argument": {"order: \"{order_id}\"", "order: \"{order}\""},
		"verify without found":          {", found_pointer: /found}", "}"},
		"bad server name":               {"server: payments\n      tool", "server: Payments\n      tool"},
		"idempotent without argument":   {"    side_effect_class: pure_read\n", "    side_effect_class: external_idempotent\n    key_template: \"c\"\n"},
	} {
		doc := strings.Replace(mcpDoc, edit[0], edit[1], 1)
		require.NotEqual(t, mcpDoc, doc, name)
		_, err := Load([]byte(doc), anyVendor)
		require.Error(t, err, name)
		if name != "verify of an unknown argument" { // placeholders are the loader's to check
			require.Error(t, registrySchema(t).Validate(asJSON(t, []byte(doc))), "the schema refuses it too: %s", name)
		}
	}
}

func TestCatalogNeedsNoVendors(t *testing.T) {
	t.Parallel()
	_, err := Load([]byte(mcpDoc), Options{})
	require.ErrorContains(t, err, "no base URL for vendor", "a registry that runs needs its vendors")
	reg, err := Load([]byte(mcpDoc), Options{Catalog: true})
	require.NoError(t, err, "a catalog lists and prepares only")
	email, _ := reg.Tool("email")
	_, err = email.NewAdapter(nil)
	require.ErrorContains(t, err, "catalog")
	prep, err := email.Prepare(Proposal{WorkflowID: "wf", Args: []byte(`{"to":"a@example.com"}`)})
	require.NoError(t, err)
	require.Equal(t, "email:a@example.com:v1", prep.Operation.IdempotencyKey)
}
