package registry_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/pkg/registry"
)

// JSON Schema ignores keywords it does not know, so "propertes" would make
// an args_schema that checks nothing. Every unknown keyword is a problem,
// at its line, with the keyword meant when one is close; property names,
// enum values and defaults are data, not keywords; x- keys are extensions.
//
// Breaking it: without the check the document loads.
func TestArgsSchemaUnknownKeywords(t *testing.T) {
	t.Parallel()
	doc := `version: 1
tools:
  read_thing:
    side_effect_class: pure_read
    version: 1
    args_schema:
      type: object
      requird: [id]
      x-owner: payments-team
      propertes: {}
      properties:
        id: {type: string, maxLenght: 64}
        propertes: {type: string, enum: [requird], default: requird}
        items:
          type: array
          items: {typ: string}
          prefixItems: [{type: string}, {minimun: 1}]
        Type: {type: string}
      allOf: [{if: {required: [id]}, then: {patern: "^a"}}]
      $defs: {a: {wibble: 1}}
    adapter: {type: http, vendor: accounts, method: GET, path: "/v1/things/{id}"}
`
	require.Equal(t, []string{
		"line 8: tool read_thing: args_schema.requird: unknown JSON Schema keyword, which would check nothing; did you mean required?",
		"line 10: tool read_thing: args_schema.propertes: unknown JSON Schema keyword, which would check nothing; did you mean properties?",
		"line 12: tool read_thing: args_schema.properties.id.maxLenght: unknown JSON Schema keyword, which would check nothing; did you mean maxLength?",
		"line 16: tool read_thing: args_schema.properties.items.items.typ: unknown JSON Schema keyword, which would check nothing; did you mean type?",
		"line 17: tool read_thing: args_schema.properties.items.prefixItems[1].minimun: unknown JSON Schema keyword, which would check nothing; did you mean minimum?",
		"line 19: tool read_thing: args_schema.allOf[0].then.patern: unknown JSON Schema keyword, which would check nothing; did you mean pattern?",
		"line 20: tool read_thing: args_schema.$defs.a.wibble: unknown JSON Schema keyword, which would check nothing (extensions start with x-)",
	}, problems(t, doc, registry.Options{}))
}

// Every problem is reported in one run: misspelt fields and keywords, type
// errors, and the rules across fields (an irreversible tool's approval
// rule, apply_bound against timeout) alike. A field whose value could not
// be read is not judged again by a rule that would read its default
// instead (apply_bound against a timeout that is not a duration).
func TestEveryProblemAtOnce(t *testing.T) {
	t.Parallel()
	doc := `version: 1
tools:
  send:
    side_effect_class: external_irreversible
    version: 1
    key_templat: "send:{to}"
    key_template: "send:{to}"
    timeout: 10s
    apply_bound: 1s
    args_schema:
      type: object
      propertes: {to: {type: string}}
      properties: {to: {type: string}}
    retry: {max_attempts: three}
    adapter:
      type: http
      vendor: email
      path: /v1/messages
      lookup: {path: "/v1/messages?client_reference={idempotency_key}"}
  other:
    side_effect_class: external_non_idempotent
    version: 1
    key_template: "other:{to}"
    timeout: 1x
    apply_bound: 1s
    args_schema: {type: object, properties: {to: {type: string}}}
    adapter:
      type: http
      vendor: email
      path: /v1/messages
      lookup: {path: "/v1/messages?client_reference={idempotency_key}"}
`
	require.Equal(t, []string{
		"line 3: tool send: approval: an external_irreversible tool must state its approval rule",
		"line 6: tool send: unknown field key_templat; did you mean key_template?",
		"line 9: tool send: apply_bound: must not be shorter than timeout (10s): a request may be applied as long as it may be in flight",
		"line 12: tool send: args_schema.propertes: unknown JSON Schema keyword, which would check nothing; did you mean properties?",
		`line 14: tool send: retry.max_attempts: must be an integer, got "three"`,
		`line 24: tool other: timeout: must be a duration like 500ms or 5s, got "1x"`,
	}, problems(t, doc, registry.Options{}))
}
