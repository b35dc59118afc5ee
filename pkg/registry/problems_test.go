package registry_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/registry"
)

// problems loads doc and returns every problem as its user would read it.
func problems(t *testing.T, doc string, opts registry.Options) []string {
	t.Helper()
	if opts.Vendors == nil {
		opts.Vendors = vendors.Vendors
	}
	_, err := registry.Load([]byte(doc), opts)
	var le *registry.LoadError
	require.True(t, errors.As(err, &le), "want a *LoadError, got %v", err)
	require.ErrorIs(t, err, op.ErrInvalid)
	out := make([]string, len(le.Problems))
	for i, p := range le.Problems {
		out[i] = p.String()
		for _, goWord := range []string{"registry.", "fileTool", "fileAdapter", "map[", "int64", "[]string", "yaml:", "httpadapter", "Config"} {
			require.NotContains(t, out[i], goWord, "a problem speaks the registry's terms, not Go's")
		}
	}
	return out
}

// tool is a valid pure_read tool to edit: line 3 is its name, line 4 the
// first of its fields.
const tool = `version: 1
tools:
  read_thing:
    side_effect_class: pure_read
    version: 1
    args_schema: {type: object, properties: {id: {type: string}}}
    adapter: {type: http, vendor: accounts, method: GET, path: "/v1/things/{id}"}
`

func TestValidToolLoads(t *testing.T) {
	t.Parallel()
	_, err := registry.Load([]byte(tool), vendors)
	require.NoError(t, err)
}

func TestUnknownFields(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		doc  string
		want []string
	}{
		"misspelt tool field": {tool + "    key_templat: \"thing:{id}\"\n", []string{
			"line 8: tool read_thing: unknown field key_templat; did you mean key_template?",
		}},
		"misspelt required field: its absence is not reported twice": {strings.Replace(tool, "side_effect_class", "side_efect_class", 1), []string{
			"line 4: tool read_thing: unknown field side_efect_class; did you mean side_effect_class?",
		}},
		"misspelt nested field": {tool + "    retry: {max_attempt: 3}\n", []string{
			"line 8: tool read_thing: retry: unknown field max_attempt; did you mean max_attempts?",
		}},
		"dashes for underscores": {tool + "    key-template: \"thing:{id}\"\n", []string{
			"line 8: tool read_thing: unknown field key-template; did you mean key_template?",
		}},
		"transposed letters": {tool + "    dedupe: {widnow: 1h, key_template: \"t:{id}\"}\n", []string{
			"line 8: tool read_thing: dedupe: unknown field widnow; did you mean window?",
		}},
		"document field": {strings.Replace(tool, "tools:", "tool: {}\ntools:", 1), []string{
			"line 2: unknown field tool; did you mean tools?",
		}},
		"lookup field": {strings.Replace(tool, `path: "/v1/things/{id}"}`, `path: "/v1/things/{id}", lookup: {path: /x, foud_status: 200}}`, 1), []string{
			"line 7: tool read_thing: adapter.lookup: unknown field foud_status; did you mean found_status?",
		}},
		"nothing close": {tool + "    colour: blue\n", []string{
			"line 8: tool read_thing: unknown field colour; the fields here are adapter, apply_bound, approval, args_schema, compensation, " +
				"dedupe, description, entity, guards, intent, key_template, lease, normalize, reconcile, retry, sensitive, side_effect_class, timeout, version",
		}},
	} {
		require.Equal(t, tc.want, problems(t, tc.doc, registry.Options{}), name)
	}
}

// TestTypeProblemsAllAtOnce: values of the wrong kind are named in YAML's
// terms, and the rest of the document is still checked.
func TestTypeProblemsAllAtOnce(t *testing.T) {
	t.Parallel()
	doc := `version: 1
tools:
  pay:
    side_effect_class: external_idempotent
    version: "2"
    description: [a, b]
    key_template: "pay:{order_id}"
    entity: {type: order, id: {order_id}}
    args_schema:
      type: object
      properties: {order_id: {type: string}}
    timeout: 5
    retry: {max_attempts: three, jitter: high, initial_backoff: 1s}
    lease: {required: yes}
    adapter:
      type: http
      vendor: payments
      path: /v1/pay
      idempotency_header: Idempotency-Key
      headers: [X-A]
      lookup: {path: /v1/pay, found_status: 200 OK, pending_values: pending}
  other: [1, 2]
`
	require.Equal(t, []string{
		`line 5: tool pay: version: must be an integer, got "2"`,
		`line 6: tool pay: description: must be a string, got a list`,
		`line 8: tool pay: entity.id: must be a string, got a mapping: a template in braces must be quoted, like "{order_id}"`,
		`line 12: tool pay: timeout: must be a duration like 500ms or 5s, got "5"`,
		`line 13: tool pay: retry.jitter: must be a number, got "high"`,
		`line 13: tool pay: retry.max_attempts: must be an integer, got "three"`,
		`line 14: tool pay: lease.required: must be true or false, got "yes"`,
		`line 20: tool pay: adapter.headers: must be a mapping, got a list`,
		`line 21: tool pay: adapter.lookup.found_status: must be an integer, got "200 OK"`,
		`line 21: tool pay: adapter.lookup.pending_values: must be a list, got "pending"`,
		`line 22: tool other: must be a mapping, got a list`,
	}, problems(t, doc, registry.Options{}))

	require.Equal(t, []string{`line 1: version: must be an integer, got "one"`},
		problems(t, strings.Replace(tool, "version: 1\ntools", "version: one\ntools", 1), registry.Options{}))
	require.Equal(t, []string{`line 2: tools: must be a mapping, got a list`},
		problems(t, "version: 1\ntools: [a]\n", registry.Options{}))
	require.Equal(t, []string{`version: is required: write version: 1 at the top of the file`},
		problems(t, strings.Replace(tool, "version: 1\n", "", 1), registry.Options{}))
	require.Equal(t, []string{`line 7: tool read_thing: adapter.body.fields.amount: a template in braces must be quoted, like "{amount}" (write {amount: null} for a mapping)`},
		problems(t, strings.Replace(tool, `method: GET, path: "/v1/things/{id}"}`, `path: /x, body: {fields: {amount: {amount}}}}`, 1), registry.Options{}))
}

func TestDuplicateKeys(t *testing.T) {
	t.Parallel()
	doc := `version: 1
tools:
  read_thing:
    side_effect_class: pure_read
    version: 1
    version: 2
    args_schema:
      type: object
      properties:
        id: {type: string}
        id: {type: integer}
    adapter:
      type: http
      vendor: accounts
      path: /x
      headers: {X-A: "1", X-A: "2"}
  read_thing:
    version: 3
`
	require.Equal(t, []string{
		"line 6: tool read_thing: version: given twice (first at line 5)",
		"line 11: tool read_thing: args_schema.properties.id: given twice (first at line 10)",
		"line 16: tool read_thing: adapter.headers.X-A: given twice (first at line 16)",
		"line 17: tool read_thing: defined twice (first at line 3)",
	}, problems(t, doc, registry.Options{}))
	require.Equal(t, []string{"line 2: version: given twice (first at line 1)"},
		problems(t, "version: 1\nversion: 1\ntools: {}\n", registry.Options{}))
}

func TestNotARegistry(t *testing.T) {
	t.Parallel()
	for doc, want := range map[string]string{
		"version: [1":              `not valid YAML: line 1: did not find expected ',' or ']'`,
		"":                         "the file is empty: it needs version: 1 and tools",
		"# only a comment\n":       "the file is empty: it needs version: 1 and tools",
		"- a\n- b\n":               "line 1: the file must be a mapping with version and tools, got a list",
		"version: 1\ntools: {}\n":  "tools: at least one tool is required",
		tool + "---\nversion: 1\n": "line 8: a registry file holds one YAML document; put each in a file of its own",
	} {
		require.Equal(t, []string{want}, problems(t, doc, registry.Options{}), doc)
	}
}

// TestAliasBomb: a few lines of nested aliases must not decode into
// billions of values.
func TestAliasBomb(t *testing.T) {
	t.Parallel()
	doc := "version: 1\nx0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
	for i := 1; i < 9; i++ {
		doc += "x" + string(rune('0'+i)) + ": &a" + string(rune('0'+i)) + " [" + strings.Repeat("*a"+string(rune('0'+i-1))+", ", 9) + "*a" + string(rune('0'+i-1)) + "]\n"
	}
	doc += "tools:\n  t:\n    args_schema: {default: *a8}\n"
	_, err := registry.Load([]byte(doc), vendors)
	require.ErrorContains(t, err, "more than 1000000 values once its aliases are expanded")
}

func TestAnchorsAndMergeKeys(t *testing.T) {
	t.Parallel()
	doc := `version: 1
tools:
  read_a:
    side_effect_class: pure_read
    version: 1
    args_schema: &args {type: object, properties: {id: {type: string}}}
    adapter: &accounts {type: http, vendor: accounts, method: GET, path: "/v1/a/{id}"}
  read_b:
    side_effect_class: pure_read
    version: 1
    args_schema: *args
    adapter:
      <<: *accounts
      path: "/v1/b/{id}"
`
	reg, err := registry.Load([]byte(doc), vendors)
	require.NoError(t, err)
	b, err := reg.Tool("read_b")
	require.NoError(t, err)
	require.Equal(t, "GET", b.Adapter.HTTP.Method)
	require.Equal(t, "http://127.0.0.1:9/v1/b/{id}", b.Adapter.HTTP.URL, "a key written in the mapping wins over a merged one")

	bad := strings.Replace(doc, "<<: *accounts", "<<: [1]\n      type: http\n      vendor: accounts", 1)
	require.Equal(t, []string{"line 13: tool read_b: adapter: << must merge a mapping or a list of mappings"},
		problems(t, bad, registry.Options{}))
}

// TestProblemsNameTheirFile: with several files, each problem names its
// file and line, and a tool defined twice names both places.
func TestProblemsNameTheirFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a := filepath.Join(dir, "a.yaml")
	b := filepath.Join(dir, "b.yaml")
	require.NoError(t, os.WriteFile(a, []byte(tool+"    retry: {max_attempts: lots}\n"), 0o600))
	require.NoError(t, os.WriteFile(b, []byte("version: 1\ntools:\n  read_thing:\n    version: 1\n  other:\n    side_efect_class: pure_read\n"), 0o600))
	_, err := registry.LoadPaths([]string{dir}, vendors)
	var le *registry.LoadError
	require.ErrorAs(t, err, &le)
	var got []string
	for _, p := range le.Problems {
		got = append(got, p.String())
	}
	require.Equal(t, []string{
		a + `:8: tool read_thing: retry.max_attempts: must be an integer, got "lots"`,
		b + ":3: tool read_thing: also defined in " + a + " (line 3)",
		b + ":5: tool other: adapter: is required",
		b + ":5: tool other: args_schema: is required (a JSON Schema object)",
		b + ":5: tool other: version: is required: an integer ≥ 1, part of every idempotency key",
		b + ":6: tool other: unknown field side_efect_class; did you mean side_effect_class?",
	}, got)
	require.Equal(t, a, le.Problems[0].File)
	require.Equal(t, 8, le.Problems[0].Line)

	_, err = registry.LoadPaths([]string{a}, vendors)
	require.ErrorContains(t, err, a+`:8: tool read_thing: retry.max_attempts: must be an integer, got "lots"`, "one named file is named too")
}

// TestAdapterProblemsAllAtOnce: the adapter's own validation stops at its
// first problem; the registry still reports every one, in its terms.
func TestAdapterProblemsAllAtOnce(t *testing.T) {
	t.Parallel()
	doc := `version: 1
tools:
  pay:
    side_effect_class: external_idempotent
    version: 1
    key_template: "pay:{order_id}"
    args_schema: {type: object, properties: {order_id: {type: string}, amount_cents: {type: integer}}}
    adapter:
      type: http
      vendor: payments
      method: POST
      path: "/v1/orders/{order_idd}/pay"
      idempotency_header: Idempotency-Key
      headers: {Authorization: Bearer sk_test_x, X-Version: "${API_VERSION}", Idempotency-Key: fixed}
      secret_headers: {X-Token: "${PAY_TOKEN}", X-Plain: plain}
      body:
        encoding: form
        fields: {amount: "{amount_cent}", "metadata[order_id]": "{order_id}", nested: {a: b}}
      status_outcomes: {"409": fine, "2x": success}
      status_pointer: status
      succeeded_values: [succeeded]
      failed_values: [succeeded]
`
	require.Equal(t, []string{
		"line 12: tool pay: adapter.path: placeholder {order_idd} is not a property of args_schema",
		"line 14: tool pay: adapter.headers.Authorization: carries credentials: put it in adapter.secret_headers with a ${NAME} reference",
		"line 14: tool pay: adapter.headers.Idempotency-Key: the header is adapter.idempotency_header, which carries the idempotency key",
		"line 14: tool pay: adapter.headers.X-Version: a ${NAME} secret reference belongs in adapter.secret_headers",
		"line 15: tool pay: adapter.secret_headers.X-Plain: references no secret: write it as ${NAME}, or make it a static header",
		"line 15: tool pay: adapter.secret_headers.X-Token: secret PAY_TOKEN is not set",
		"line 18: tool pay: adapter.body.fields.amount: placeholder {amount_cent} is not a property of args_schema",
		`line 18: tool pay: adapter.body.fields.nested: form fields are flat, so a value cannot be an object: name nested fields the way the vendor expects, e.g. "metadata[order_id]"`,
		`line 19: tool pay: adapter.status_outcomes.2x: key must be a status code like "409" or a class like "4xx"`,
		`line 19: tool pay: adapter.status_outcomes.409: unknown outcome "fine"`,
		`line 20: tool pay: adapter.status_pointer: JSON pointer must start with "/"`,
		`line 21: tool pay: adapter.succeeded_values: "succeeded" is also in adapter.failed_values`,
	}, problems(t, doc, registry.Options{}))
}

// TestRequestAndResponseMapping: the adapter's body, headers and response
// pointers come from the registry as written.
func TestRequestAndResponseMapping(t *testing.T) {
	t.Parallel()
	doc := `version: 1
tools:
  pay:
    side_effect_class: external_irreversible
    version: 1
    key_template: "pay:{order_id}"
    args_schema: {type: object, properties: {order_id: {type: string}, amount_cents: {type: integer}}}
    approval: {when: never}
    adapter:
      type: http
      vendor: payments
      path: /v1/payment_intents
      idempotency_header: Idempotency-Key
      headers: {Stripe-Version: "2024-06-20"}
      secret_headers: {Authorization: "Bearer ${PAY_TOKEN}"}
      body:
        encoding: form
        fields:
          amount: "{amount_cents}"
          confirm: true
          "metadata[order_id]": "{order_id}"
          "metadata[opledger_key]": "{idempotency_key}"
      external_id_pointer: /id
      status_pointer: /status
      pending_values: [requires_action, processing]
      failed_values: [canceled]
      succeeded_values: [succeeded]
      request_id_header: Request-Id
      request_id_pointer: /request_id
      lookup:
        path: "/v1/payment_intents/search?query={idempotency_key}"
        external_id_pointer: /data/0/id
        status_pointer: /data/0/status
        succeeded_values: [succeeded]
`
	const secret = "tok_never_shown_7"
	opts := registry.Options{Vendors: vendors.Vendors, Secret: func(name string) (string, bool) {
		return secret, name == "PAY_TOKEN"
	}}
	reg, err := registry.Load([]byte(doc), opts)
	require.NoError(t, err)
	tl, err := reg.Tool("pay")
	require.NoError(t, err)
	cfg := tl.Adapter.HTTP
	require.Equal(t, "form", cfg.Body.Encoding)
	require.Equal(t, map[string]any{"amount": "{amount_cents}", "confirm": true, "metadata[order_id]": "{order_id}",
		"metadata[opledger_key]": "{idempotency_key}"}, cfg.Body.Fields)
	require.Equal(t, map[string]string{"Stripe-Version": "2024-06-20"}, cfg.Headers)
	require.Equal(t, map[string]string{"Authorization": "Bearer ${PAY_TOKEN}"}, cfg.SecretHeaders, "the registry keeps the reference, not the secret")
	require.Equal(t, "/status", cfg.StatusPointer)
	require.Equal(t, []string{"requires_action", "processing"}, cfg.PendingValues)
	require.Equal(t, []string{"canceled"}, cfg.FailedValues)
	require.Equal(t, []string{"succeeded"}, cfg.SucceededValues)
	require.Equal(t, "/request_id", cfg.RequestIDPointer)

	// A secret that cannot go in a header: the problem never shows it.
	opts.Secret = func(string) (string, bool) { return secret + "\n", true }
	_, err = registry.Load([]byte(doc), opts)
	require.ErrorContains(t, err, "adapter.secret_headers.Authorization: value contains a control character")
	require.NotContains(t, err.Error(), secret)
}

func TestCompensationChecks(t *testing.T) {
	t.Parallel()
	doc := `version: 1
tools:
  pay:
    side_effect_class: internal_write
    version: 1
    key_template: "pay:{order_id}"
    args_schema: {type: object, properties: {order_id: {type: string}, meta: {type: object, properties: {a: {type: string}}}}}
    adapter: {type: http, vendor: payments, path: /v1/pay}
    compensation:
      tool: unpay
      args: {charge_id: "{external_object_id}", why: "{reason}", ref: "{meta.a}", order_id: "{order_id}"}
  unpay:
    side_effect_class: internal_write
    version: 1
    key_template: "unpay:{charge_id}"
    args_schema: {type: object, properties: {charge_id: {type: string}, order_id: {type: string}, ref: {type: string}}}
    adapter: {type: http, vendor: payments, path: /v1/unpay}
`
	require.Equal(t, []string{
		"line 11: tool pay: compensation.args.ref: placeholder {meta.a}: compensation templates read top-level arguments only",
		"line 11: tool pay: compensation.args.why: placeholder {reason} is neither a top-level property of args_schema " +
			"nor external_object_id, external_request_id or operation_id",
		"line 11: tool pay: compensation.args.why: tool unpay has no argument why in its args_schema",
	}, problems(t, doc, registry.Options{}))
}

// Settings that nothing enforces are refused at load, each with a reason in
// the registry's terms, so that an operator never believes a rule holds
// that does not.
//
// Breaking it: dropping any of the checks in compile or guardProblems
// loads the document; the tool would then run without the lease, approval
// or guard its author wrote (a guard whose limit names no tool refuses
// every call instead).
func TestIneffectiveSettingsAreRefused(t *testing.T) {
	t.Parallel()
	doc := `version: 1
tools:
  pay:
    side_effect_class: internal_write
    version: 1
    entity: {type: order, id: "{order_id}"}
    key_template: "pay:{order_id}"
    args_schema: {type: object, properties: {order_id: {type: string}, amount_cents: {type: integer}}}
    adapter: {type: http, vendor: payments, path: /v1/pay}
    lease: {ttl: 30s}
    approval: {when: never, field: amount_cents, threshold: 5, approvals_required: 2, expires_after: 1h}
    reconcile: {max_lookups: 3}
  refund:
    side_effect_class: internal_write
    version: 1
    entity: {type: charge, id: "{charge_id}"}
    key_template: "refund:{charge_id}:{amount_cents}"
    args_schema: {type: object, properties: {charge_id: {type: string}, amount_cents: {type: integer}, note: {type: string}}}
    adapter: {type: http, vendor: payments, path: /v1/refund}
    approval: {when: always, field: amount_cents, threshold: 5}
    guards:
      - {kind: total_at_most, field: amount_cents, limit: {tool: capture, field: amount_cents}}
      - {kind: total_at_most, field: amount_cents, limit: {tool: pay, field: order_id}}
      - {kind: total_at_most, field: amount_cents, limit: {tool: pay, field: missing}}
`
	require.Equal(t, []string{
		"line 10: tool pay: lease.ttl: has no effect without lease.required: true: no lease is taken",
		"line 11: tool pay: approval.approvals_required: has no effect with approval.when: never",
		"line 11: tool pay: approval.expires_after: has no effect with approval.when: never",
		"line 11: tool pay: approval.field: has no effect with approval.when: never",
		"line 11: tool pay: approval.threshold: has no effect with approval.when: never",
		"line 12: tool pay: reconcile: has no effect without adapter.lookup (or, for an mcp tool, adapter.verify): the reconciler has nothing to ask the vendor, so it decides at once",
		"line 20: tool refund: approval.field: has no effect with approval.when: always",
		"line 20: tool refund: approval.threshold: has no effect with approval.when: always",
		"line 22: tool refund: guards.0.limit.tool: names unregistered tool \"capture\"",
		"line 23: tool refund: guards.1.limit.field: must name an integer argument of tool pay, \"order_id\" is not one",
		"line 24: tool refund: guards.2.limit.field: must name an integer argument of tool pay, \"missing\" is not one",
	}, problems(t, doc, registry.Options{}))
}

func TestRetryDefaults(t *testing.T) {
	t.Parallel()
	reg, err := registry.Load([]byte(tool+"    retry: {max_attempts: 3}\n"), vendors)
	require.NoError(t, err)
	tl, err := reg.Tool("read_thing")
	require.NoError(t, err)
	require.Equal(t, registry.RetryPolicy{MaxAttempts: 3, InitialBackoff: 200 * time.Millisecond, MaxBackoff: 10 * time.Second, Jitter: 0.2,
		MaxElapsed: 10 * time.Minute},
		tl.Retry, "a retry section's defaults are the documented ones")
	require.Equal(t, []string{"line 8: tool read_thing: retry.max_attempts: is required in a retry section: attempts in all, 1 to 100"},
		problems(t, tool+"    retry: {jitter: 0.1}\n", registry.Options{}))
}

func TestArgsHashPlaceholder(t *testing.T) {
	t.Parallel()
	reg, err := registry.Load([]byte(tool+"    key_template: \"thing:{id}:{_args_hash}\"\n"), vendors)
	require.NoError(t, err)
	tl, err := reg.Tool("read_thing")
	require.NoError(t, err)
	p, err := tl.Prepare(registry.Proposal{WorkflowID: "wf", Args: []byte(`{"id":"a"}`)})
	require.NoError(t, err)
	require.Equal(t, "thing:a:"+p.Operation.ArgsHash+":v1", p.Operation.IdempotencyKey)
}

// TestTemplateProblems: a template problem quotes the template where it is
// wrong, never the vendor's base URL, and a bad duration is one problem.
func TestTemplateProblems(t *testing.T) {
	t.Parallel()
	doc := strings.Replace(tool, `path: "/v1/things/{id}"}`, `path: "/v1/things/{id"}`, 1) +
		"    dedupe: {window: -1s, key_template: \"t:{id}\"}\n"
	got := problems(t, doc, registry.Options{Vendors: map[string]string{"accounts": "https://user:pw@vendor.example"}})
	require.Equal(t, []string{
		`line 7: tool read_thing: adapter.path: unbalanced '{' at "{id"`,
		`line 8: tool read_thing: dedupe.window: must be a duration like 500ms or 5s, got "-1s"`,
	}, got)
	got = problems(t, strings.Replace(tool, `path: "/v1/things/{id}"}`, `path: "/v1/things/{a b}"}`, 1), registry.Options{})
	require.Equal(t, []string{`line 7: tool read_thing: adapter.path: invalid placeholder "{a b}": a dotted argument path, {idempotency_key} or {operation_id}`}, got)
}
