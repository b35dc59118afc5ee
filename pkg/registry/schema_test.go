package registry

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

const (
	schemaFile  = "../../schema/registry.schema.json"
	docFile     = "../../docs/registry.md"
	exampleFile = "../../examples/registry.yaml"
)

// anyVendor gives every vendor a base URL and every secret a value, for
// documents that only need to load.
var anyVendor = Options{
	VendorURL: func(string) (string, bool) { return "http://127.0.0.1:9", true },
	Secret:    func(string) (string, bool) { return "test-secret", true },
}

func registrySchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	raw, err := os.ReadFile(schemaFile)
	require.NoError(t, err)
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	require.NoError(t, c.AddResource("registry.schema.json", doc))
	s, err := c.Compile("registry.schema.json")
	require.NoError(t, err)
	return s
}

// asJSON is a registry document as an editor's schema check sees it.
func asJSON(t *testing.T, data []byte) any {
	t.Helper()
	var root yaml.Node
	require.NoError(t, yaml.Unmarshal(data, &root))
	require.Len(t, root.Content, 1)
	d := &decoder{shadow: map[string][]string{}}
	v := d.value(root.Content[0], at{})
	require.Empty(t, d.probs)
	raw, err := json.Marshal(v)
	require.NoError(t, err)
	out, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	require.NoError(t, err)
	return out
}

func TestExampleRegistryMatchesSchema(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(exampleFile)
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(data, []byte("# yaml-language-server: $schema=../schema/registry.schema.json\n")),
		"editors find the schema through the first line")
	require.NoError(t, registrySchema(t).Validate(asJSON(t, data)))
}

// schemaBase is a valid document the cases below break one way each.
const schemaBase = `version: 1
tools:
  pay:
    side_effect_class: external_irreversible
    version: 1
    entity: {type: order, id: "{order_id}"}
    key_template: "pay:{order_id}"
    args_schema: {type: object, properties: {order_id: {type: string}, amount_cents: {type: integer}}}
    timeout: 2s
    retry: {max_attempts: 3, jitter: 0.2}
    lease: {required: true, ttl: 30s}
    approval: {when: above, field: amount_cents, threshold: 100}
    adapter:
      type: http
      vendor: payments
      method: POST
      path: /v1/pay
      idempotency_header: Idempotency-Key
      headers: {X-Version: "1"}
      secret_headers: {Authorization: "Bearer ${PAY_KEY}"}
      body: {encoding: form, fields: {amount: "{amount_cents}", "metadata[order_id]": "{order_id}"}}
      status_outcomes: {"409": retryable}
      external_id_pointer: /id
      status_pointer: /status
      succeeded_values: [succeeded]
      lookup: {path: "/v1/pay?key={idempotency_key}", external_id_pointer: /id}
`

// TestSchemaAndLoaderRefuseTheSame: each broken document is refused by the
// schema (so an editor flags it) and by the loader.
func TestSchemaAndLoaderRefuseTheSame(t *testing.T) {
	t.Parallel()
	s := registrySchema(t)
	require.NoError(t, s.Validate(asJSON(t, []byte(schemaBase))))
	_, err := Load([]byte(schemaBase), anyVendor)
	require.NoError(t, err)

	for name, edit := range map[string][]string{ // old, new[, old, new]
		"unknown field":                 {"    timeout: 2s\n", "    timeout: 2s\n    colour: blue\n"},
		"misspelt nested field":         {"max_attempts: 3", "max_attempt: 3"},
		"wrong version":                 {"version: 1\ntools", "version: 2\ntools"},
		"bad tool name":                 {"  pay:\n", "  Pay:\n"},
		"unknown class":                 {"external_irreversible", "external_sometimes"},
		"version zero":                  {"    version: 1\n", "    version: 0\n"},
		"string for an integer":         {"max_attempts: 3", "max_attempts: three"},
		"too many attempts":             {"max_attempts: 3", "max_attempts: 101"},
		"jitter above 1":                {"jitter: 0.2", "jitter: 2"},
		"bad duration":                  {"timeout: 2s", "timeout: fast"},
		"irreversible without approval": {"    approval: {when: above, field: amount_cents, threshold: 100}\n", ""},
		"above without field":           {"field: amount_cents, ", ""},
		"irreversible without lookup":   {"      lookup: {path: \"/v1/pay?key={idempotency_key}\", external_id_pointer: /id}\n", ""},
		"idempotent without key header": {"external_irreversible", "external_idempotent",
			"      idempotency_header: Idempotency-Key\n", ""},
		"lease without entity":                {"    entity: {type: order, id: \"{order_id}\"}\n", ""},
		"write without key template":          {"    key_template: \"pay:{order_id}\"\n", ""},
		"static credential header":            {"X-Version: \"1\"", "Authorization: Bearer x"},
		"secret reference in a static header": {"X-Version: \"1\"", "X-Version: \"${V}\""},
		"secret header without a reference":   {"\"Bearer ${PAY_KEY}\"", "Bearer plain"},
		"form field that is an object":        {"amount: \"{amount_cents}\"", "amount: {value: \"{amount_cents}\"}"},
		"body on a GET":                       {"method: POST", "method: GET"},
		"unknown encoding":                    {"encoding: form", "encoding: xml"},
		"unknown outcome":                     {"\"409\": retryable", "\"409\": fine"},
		"bad status key":                      {"\"409\": retryable", "\"4x\": retryable"},
		"pointer without slash":               {"external_id_pointer: /id\n      status_pointer", "external_id_pointer: id\n      status_pointer"},
		"values without status pointer":       {"      status_pointer: /status\n", ""},
		"adapter type":                        {"type: http", "type: grpc"},
		"path without slash":                  {"path: /v1/pay\n", "path: v1/pay\n"},
		"pure read with compensation":         {"external_irreversible", "pure_read\n    compensation: {tool: pay}"},
		"slash in a key template":             {"key_template: \"pay:{order_id}\"", "key_template: \"pay/{order_id}\""},
		"slash in an entity id":               {"id: \"{order_id}\"", "id: \"o/{order_id}\""},
		// Settings nothing would read are refused, not ignored.
		"lease ttl without a lease":      {"lease: {required: true, ttl: 30s}", "lease: {ttl: 30s}"},
		"lease ttl with required false":  {"lease: {required: true, ttl: 30s}", "lease: {required: false, ttl: 30s}"},
		"approval field with never":      {"when: above, field: amount_cents, threshold: 100", "when: never, field: amount_cents"},
		"approval threshold with never":  {"when: above, field: amount_cents, threshold: 100", "when: never, threshold: 100"},
		"approvals required with never":  {"when: above, field: amount_cents, threshold: 100", "when: never, approvals_required: 2"},
		"approval expiry with never":     {"when: above, field: amount_cents, threshold: 100", "when: never, expires_after: 1h"},
		"approval threshold with always": {"when: above, field: amount_cents, threshold: 100", "when: always, threshold: 100"},
		"approval field with always":     {"when: above, field: amount_cents, threshold: 100", "when: always, field: amount_cents"},
		"reconcile without a lookup":     {"external_irreversible", "internal_write", "    approval: {when: above, field: amount_cents, threshold: 100}\n", "    reconcile: {max_lookups: 3}\n", "      lookup: {path: \"/v1/pay?key={idempotency_key}\", external_id_pointer: /id}\n", ""},
	} {
		doc := schemaBase
		for i := 0; i < len(edit); i += 2 {
			require.Contains(t, doc, edit[i], name)
			doc = strings.Replace(doc, edit[i], edit[i+1], 1)
		}
		require.Error(t, s.Validate(asJSON(t, []byte(doc))), "the schema must refuse: %s", name)
		_, err := Load([]byte(doc), anyVendor)
		require.Error(t, err, "the loader must refuse: %s", name)
	}

	// What each refusal above leaves out is accepted by both.
	for name, edit := range map[string][]string{
		"approval expiry and dual control with always": {"when: above, field: amount_cents, threshold: 100", "when: always, approvals_required: 2, expires_after: 1h"},
		"a bare never":                    {"when: above, field: amount_cents, threshold: 100", "when: never"},
		"no lease":                        {"lease: {required: true, ttl: 30s}", "lease: {required: false}"},
		"reconcile with a lookup":         {"    timeout: 2s\n", "    timeout: 2s\n    reconcile: {max_lookups: 3, interval: 1s, deadline: 1m}\n"},
		"a playbook that runs on its own": {"    timeout: 2s\n", "    timeout: 2s\n    compensation: {tool: pay, on_failure: true}\n"},
	} {
		doc := schemaBase
		for i := 0; i < len(edit); i += 2 {
			require.Contains(t, doc, edit[i], name)
			doc = strings.Replace(doc, edit[i], edit[i+1], 1)
		}
		require.NoError(t, s.Validate(asJSON(t, []byte(doc))), "the schema must accept: %s", name)
		_, err := Load([]byte(doc), anyVendor)
		require.NoError(t, err, "the loader must accept: %s", name)
	}
}

// loaderFields lists the fields the decoder accepts in struct type t, as
// dotted paths under prefix, by reflection over the same yaml tags the
// decoder reads.
func loaderFields(t reflect.Type, prefix string, out map[string]bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	for name, i := range yamlFields(t) {
		out[prefix+name] = true
		ft := t.Field(i).Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case ft.Kind() == reflect.Struct:
			loaderFields(ft, prefix+name+".", out)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			loaderFields(ft.Elem(), prefix+name+"[].", out) // a list of mappings: guards[].kind
		}
	}
}

// schemaFields collects every field the schema names (in properties, or as
// required) under node, following its local references; external ones
// (the JSON Schema metaschema of args_schema) and map values are not fields.
func schemaFields(t *testing.T, root map[string]any, node any, prefix string, out map[string]bool) {
	t.Helper()
	m, ok := node.(map[string]any)
	if !ok {
		return
	}
	if ref, ok := m["$ref"].(string); ok && strings.HasPrefix(ref, "#/$defs/") {
		defs := root["$defs"].(map[string]any)
		target, ok := defs[strings.TrimPrefix(ref, "#/$defs/")]
		require.True(t, ok, "dangling %s", ref)
		schemaFields(t, root, target, prefix, out)
	}
	if props, ok := m["properties"].(map[string]any); ok {
		for name, sub := range props {
			out[prefix+name] = true
			schemaFields(t, root, sub, prefix+name+".", out)
		}
	}
	if req, ok := m["required"].([]any); ok {
		for _, name := range req {
			out[prefix+name.(string)] = true
		}
	}
	if items, ok := m["items"].(map[string]any); ok && prefix != "" {
		// The mappings of a list: guards[].kind.
		schemaFields(t, root, items, strings.TrimSuffix(prefix, ".")+"[].", out)
	}
	for _, k := range []string{"if", "then", "else", "not"} {
		schemaFields(t, root, m[k], prefix, out)
	}
	for _, k := range []string{"allOf", "anyOf", "oneOf"} {
		if list, ok := m[k].([]any); ok {
			for _, sub := range list {
				schemaFields(t, root, sub, prefix, out)
			}
		}
	}
}

// docFields collects the first cell of every table row that follows a
// "<!-- fields: NAME -->" marker, per NAME.
func docFields(t *testing.T, md string) map[string]map[string]bool {
	t.Helper()
	out := map[string]map[string]bool{}
	var cur map[string]bool
	rows := 0
	for _, line := range strings.Split(md, "\n") {
		if name, ok := strings.CutPrefix(line, "<!-- fields: "); ok {
			name = strings.TrimSuffix(name, " -->")
			if out[name] == nil {
				out[name] = map[string]bool{}
			}
			cur, rows = out[name], 0
			continue
		}
		if cur == nil {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			if line != "" || rows > 0 {
				cur = nil
			}
			continue
		}
		rows++
		cell := strings.TrimSpace(strings.Split(line, "|")[1])
		if name, ok := strings.CutPrefix(cell, "`"); ok && strings.HasSuffix(name, "`") {
			cur[strings.TrimSuffix(name, "`")] = true
		}
	}
	return out
}

// TestFieldsInStep keeps docs/registry.md and schema/registry.schema.json in
// step with the loader: every field the loader accepts is documented and in
// the schema, and neither names a field the loader does not know.
func TestFieldsInStep(t *testing.T) {
	t.Parallel()
	loader := map[string]map[string]bool{"document": {}, "tool": {}, "webhook": {}, "webhook_event": {}}
	loaderFields(reflect.TypeOf(fileDoc{}), "", loader["document"])
	loaderFields(reflect.TypeOf(fileTool{}), "", loader["tool"])
	loaderFields(reflect.TypeOf(fileWebhook{}), "", loader["webhook"])
	loaderFields(reflect.TypeOf(fileWebhookEvent{}), "", loader["webhook_event"])
	require.True(t, loader["webhook_event"]["match.pointer"])
	require.True(t, loader["tool"]["adapter.lookup.status_pointer"], "reflection reaches nested sections")
	require.True(t, loader["tool"]["adapter.body.encoding"])
	require.True(t, loader["tool"]["guards[].limit.tool"], "reflection reaches the mappings of a list")

	raw, err := os.ReadFile(schemaFile)
	require.NoError(t, err)
	var root map[string]any
	require.NoError(t, json.Unmarshal(raw, &root))
	schema := map[string]map[string]bool{"document": {}, "tool": {}, "webhook": {}, "webhook_event": {}}
	schemaFields(t, root, root, "", schema["document"])
	defs := root["$defs"].(map[string]any)
	schemaFields(t, root, defs["tool"], "", schema["tool"])
	schemaFields(t, root, defs["webhook"], "", schema["webhook"])
	schemaFields(t, root, defs["webhook_event"], "", schema["webhook_event"])

	md, err := os.ReadFile(docFile)
	require.NoError(t, err)
	docs := docFields(t, string(md))

	for _, ns := range []string{"document", "tool", "webhook", "webhook_event"} {
		for _, other := range []struct {
			what   string
			fields map[string]bool
		}{{"docs/registry.md", docs[ns]}, {"schema/registry.schema.json", schema[ns]}} {
			var missing, unknown []string
			for f := range loader[ns] {
				if !other.fields[f] {
					missing = append(missing, f)
				}
			}
			for f := range other.fields {
				if !loader[ns][f] {
					unknown = append(unknown, f)
				}
			}
			slices.Sort(missing)
			slices.Sort(unknown)
			require.Empty(t, missing, "%s fields the loader accepts but %s does not have", ns, other.what)
			require.Empty(t, unknown, "%s fields %s has but the loader does not accept", ns, other.what)
		}
	}
}
