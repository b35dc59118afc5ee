package wire_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// intentDoc is a valid intent for workflow wf_1 as a JSON object to modify.
func intentDoc(t *testing.T, edits ...func(map[string]any)) []byte {
	t.Helper()
	m := map[string]any{
		"spec": wire.SpecIntent, "event_id": "conv_1:call_1", "workflow_id": "wf_1", "tool": "capture_payment",
		"args": map[string]any{"order_id": "order_123", "customer_id": "cust_456", "amount_cents": 4900, "currency": "USD"},
	}
	for _, e := range edits {
		e(m)
	}
	b, err := json.Marshal(m)
	require.NoError(t, err)
	return b
}

func set(field string, v any) func(map[string]any) { return func(m map[string]any) { m[field] = v } }
func del(field string) func(map[string]any)        { return func(m map[string]any) { delete(m, field) } }

const subj = "opledger.intents.wf_1"

func TestDecodeIntentValid(t *testing.T) {
	t.Parallel()

	full := []byte(`{
		"spec": "opledger.intent.v1",
		"event_id": "conv_1:call_1",
		"workflow_id": "wf_1",
		"run_id": "run_7",
		"tool": "capture_payment",
		"intent": "collect_payment_for_order",
		"args": {"order_id": "order_123", "customer_id": "cust_456", "amount_cents": 4900, "currency": "USD"},
		"actor": {"type": "agent", "id": "support-bot"},
		"correlation": {"conversation_id": "conv_1"}
	}` + "\n")
	in, err := wire.DecodeIntent(subj, "conv_1:call_1", full)
	require.NoError(t, err)
	require.Equal(t, wire.SpecIntent, in.Spec)
	require.Equal(t, "conv_1:call_1", in.EventID)
	require.Equal(t, "wf_1", in.WorkflowID)
	require.Equal(t, "run_7", in.RunID)
	require.Equal(t, "capture_payment", in.Tool)
	require.Equal(t, "collect_payment_for_order", in.Intent)
	require.JSONEq(t, `{"order_id":"order_123","customer_id":"cust_456","amount_cents":4900,"currency":"USD"}`, string(in.Args))
	require.Equal(t, &wire.Actor{Type: "agent", ID: "support-bot"}, in.Actor)
	require.Equal(t, map[string]string{"conversation_id": "conv_1"}, in.Correlation)

	for _, tc := range []struct {
		name, subject, msgID string
		body                 []byte
	}{
		{"minimal", subj, "conv_1:call_1", intentDoc(t)},
		{"no subject or header to check against", "", "", intentDoc(t)},
		{"empty object args", subj, "conv_1:call_1", intentDoc(t, set("args", map[string]any{}))},
		{"ids of exactly MaxIDLen bytes", wire.IntentSubject(strings.Repeat("w", wire.MaxIDLen)), strings.Repeat("e", wire.MaxIDLen),
			intentDoc(t, set("event_id", strings.Repeat("e", wire.MaxIDLen)), set("workflow_id", strings.Repeat("w", wire.MaxIDLen)),
				set("run_id", strings.Repeat("r", wire.MaxIDLen)))},
		{"non-ASCII and punctuation in ids", wire.IntentSubject("wf-é/1#x"), "conv é:call/1", intentDoc(t,
			set("event_id", "conv é:call/1"), set("workflow_id", "wf-é/1#x"))},
		{"body of exactly MaxIntentLen bytes", subj, "conv_1:call_1", padTo(t, wire.MaxIntentLen)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, err := wire.DecodeIntent(tc.subject, tc.msgID, tc.body)
			require.NoError(t, err)
			require.NotNil(t, in)
		})
	}
}

// padTo returns a valid intent of exactly n bytes, grown through an
// argument (the envelope's own text fields are bounded; args are the
// registry schema's to bound).
func padTo(t *testing.T, n int) []byte {
	t.Helper()
	pad := func(k int) func(map[string]any) {
		return set("args", map[string]any{"order_id": "order_123", "pad": strings.Repeat("p", k)})
	}
	short := intentDoc(t, pad(0))
	padded := intentDoc(t, pad(n-len(short)))
	require.Len(t, padded, n)
	return padded
}

// Long inputs in the table are runs of one of these letters; an error message
// may quote at most 64 characters of any input.
var longRuns = []string{"w", "e", "s", "x", "k", "r", "q"}

func TestDecodeIntentRejects(t *testing.T) {
	t.Parallel()
	long := func(r string) string { return strings.Repeat(r, 500) }

	for _, tc := range []struct {
		name    string
		subject string
		msgID   string
		body    []byte
		want    string // a phrase the message must contain
	}{
		{"empty body", subj, "", nil, "not valid JSON"},
		{"not JSON", subj, "", []byte("capture the payment"), "not valid JSON"},
		{"truncated JSON", subj, "", intentDoc(t)[:40], "not valid JSON"},
		{"JSON array", subj, "", []byte(`[` + string(intentDoc(t)) + `]`), "not valid JSON"},
		{"JSON string", subj, "", []byte(`"` + long("x") + `"`), "not valid JSON"},
		{"raw control character in a string", subj, "", []byte(`{"spec":"opledger.intent.v1","event_id":"a` + "\x01" + `"}`), "not valid JSON"},
		{"wrong type for event_id", subj, "", intentDoc(t, set("event_id", 42)), "not valid JSON"},
		{"wrong type for correlation value", subj, "", intentDoc(t, set("correlation", map[string]any{long("k"): 1})), "not valid JSON"},

		{"second JSON value", subj, "", append(intentDoc(t), intentDoc(t)...), "data after the JSON object"},
		{"trailing garbage", subj, "", append(intentDoc(t), []byte(" "+long("x"))...), "data after the JSON object"},

		{"unknown field", subj, "", intentDoc(t, set("idempotency_key", "k")), "unknown field"},
		{"long unknown field", subj, "", intentDoc(t, set(long("k"), 1)), "unknown field"},
		{"unknown actor field", subj, "", intentDoc(t, set("actor", map[string]any{"type": "agent", "id": "a", "name": "x"})), "unknown field"},

		{"missing spec", subj, "", intentDoc(t, del("spec")), "spec must be"},
		{"wrong spec", subj, "", intentDoc(t, set("spec", "opledger.intent.v2")), "spec must be"},
		{"long spec", subj, "", intentDoc(t, set("spec", long("s"))), "spec must be"},

		{"missing event_id", subj, "", intentDoc(t, del("event_id")), "event_id"},
		{"empty event_id", subj, "", intentDoc(t, set("event_id", "")), "event_id"},
		{"event_id one byte too long", subj, "", intentDoc(t, set("event_id", strings.Repeat("e", wire.MaxIDLen+1))), "event_id"},
		{"event_id of 500 chars", subj, long("e"), intentDoc(t, set("event_id", long("e"))), "event_id"},
		{"event_id too long in bytes", subj, "", intentDoc(t, set("event_id", strings.Repeat("é", 101))), "event_id"},
		{"event_id with NUL", subj, "", intentDoc(t, set("event_id", "conv_1\x00call_1")), "event_id"},
		{"event_id with newline", subj, "", intentDoc(t, set("event_id", "conv_1\ncall_1")), "event_id"},
		{"event_id with tab", subj, "", intentDoc(t, set("event_id", "conv_1\tcall_1")), "event_id"},
		{"event_id with unit separator", subj, "", intentDoc(t, set("event_id", "conv_1\x1f")), "event_id"},
		{"event_id with DEL", subj, "", intentDoc(t, set("event_id", "conv_1\x7f")), "event_id"},

		{"missing workflow_id", subj, "", intentDoc(t, del("workflow_id")), "workflow_id"},
		{"workflow_id with dot", "", "", intentDoc(t, set("workflow_id", "wf.1")), "workflow_id"},
		{"workflow_id with star", "", "", intentDoc(t, set("workflow_id", "wf*")), "workflow_id"},
		{"workflow_id with gt", "", "", intentDoc(t, set("workflow_id", ">")), "workflow_id"},
		{"workflow_id with space", "", "", intentDoc(t, set("workflow_id", "wf 1")), "workflow_id"},
		{"workflow_id with control char", "", "", intentDoc(t, set("workflow_id", "wf\x02")), "workflow_id"},
		{"workflow_id of 500 chars", wire.IntentSubject(long("w")), "", intentDoc(t, set("workflow_id", long("w"))), "workflow_id"},

		{"run_id with control char", subj, "", intentDoc(t, set("run_id", "run\x03")), "run_id"},
		{"run_id of 500 chars", subj, "", intentDoc(t, set("run_id", long("r"))), "run_id"},

		{"missing tool", subj, "", intentDoc(t, del("tool")), "tool is required"},
		{"empty tool", subj, "", intentDoc(t, set("tool", "")), "tool is required"},

		{"missing args", subj, "", intentDoc(t, del("args")), "args must be a JSON object"},
		{"null args", subj, "", intentDoc(t, set("args", nil)), "args must be a JSON object"},
		{"array args", subj, "", intentDoc(t, set("args", []any{1, 2})), "args must be a JSON object"},
		{"string args", subj, "", intentDoc(t, set("args", `{"order_id":"order_123"}`)), "args must be a JSON object"},
		{"number args", subj, "", intentDoc(t, set("args", 4900)), "args must be a JSON object"},
		{"boolean args", subj, "", intentDoc(t, set("args", true)), "args must be a JSON object"},

		{"subject of another workflow", "opledger.intents.wf_2", "", intentDoc(t), "published on"},
		{"subject with extra token", "opledger.intents.wf_1.x", "", intentDoc(t), "published on"},
		{"subject outside the prefix", "opledger.results.wf_1", "", intentDoc(t), "published on"},
		{"long subject and long workflow", "opledger.intents." + long("q"),
			"", intentDoc(t, set("workflow_id", strings.Repeat("w", wire.MaxIDLen))), "published on"},

		{"header differs from event_id", subj, "conv_1:call_2", intentDoc(t), "Nats-Msg-Id"},
		{"header long and different", subj, long("x"), intentDoc(t), "Nats-Msg-Id"},
		{"header differs only in case", subj, "CONV_1:CALL_1", intentDoc(t), "Nats-Msg-Id"},

		{"body one byte over the limit", subj, "", padTo(t, wire.MaxIntentLen+1), "over the"},
		{"body far over the limit", subj, "", []byte(strings.Repeat("x", 3*wire.MaxIntentLen)), "over the"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, err := wire.DecodeIntent(tc.subject, tc.msgID, tc.body)
			require.Error(t, err)
			require.Nil(t, in)
			require.True(t, errors.Is(err, op.ErrInvalid), "error %q does not wrap op.ErrInvalid", err)
			msg := err.Error()
			require.Contains(t, msg, tc.want)
			// The message goes into a result's reason: short, one line, and
			// never a whole long input.
			require.LessOrEqual(t, len(msg), 256, "message too long: %q", msg)
			require.NotContains(t, msg, "\n")
			for _, r := range longRuns {
				require.NotContains(t, msg, strings.Repeat(r, 65), "message quotes more than 64 characters of input: %q", msg)
			}
		})
	}
}

func TestSubjects(t *testing.T) {
	t.Parallel()
	require.Equal(t, "opledger.intents.wf_1", wire.IntentSubject("wf_1"))
	require.Equal(t, "opledger.results.wf_1", wire.ResultSubject("wf_1"))
	require.Equal(t, "opledger.ops.unknown.send_email.op_1", wire.OpsSubject(wire.KindUnknown, "send_email", "op_1"))
	require.Equal(t, "Nats-Msg-Id", wire.HeaderMsgID)
	require.Equal(t, "traceparent", wire.HeaderTraceparent)
}

// An intent is read exactly once, one way: what a filter in front of
// opledger reads as a harmless call is what opledger runs. Each rule below
// was broken by encoding/json's defaults: field names matched without
// regard to case, the last of a repeated key won, unknown fields passed (in
// nested objects), and bytes that are not UTF-8 were replaced by U+FFFD, so
// that two different event ids became one.
func TestDecodeIntentReadsOneWay(t *testing.T) {
	t.Parallel()
	base := `"spec":"opledger.intent.v1","event_id":"conv_1:call_1","workflow_id":"wf_1","args":{"account_id":"acct_1"}`
	for _, tc := range []struct {
		name, body, reason string
	}{
		{"a second tool in upper case", `{` + base + `,"tool":"get_account_status","TOOL":"capture_payment"}`, `unknown field "TOOL" (field names are case-sensitive: "tool")`},
		{"Spec instead of spec", `{"Spec":"opledger.intent.v1","event_id":"e","workflow_id":"wf_1","tool":"t","args":{}}`, `unknown field "Spec"`},
		{"EVENT_ID instead of event_id", `{"spec":"opledger.intent.v1","EVENT_ID":"e","workflow_id":"wf_1","tool":"t","args":{}}`, `unknown field "EVENT_ID"`},
		{"tool twice", `{` + base + `,"tool":"get_account_status","tool":"capture_payment"}`, `field "tool" appears twice`},
		{"unknown field", `{` + base + `,"tool":"t","priority":"high"}`, `unknown field "priority"`},
		{"unknown actor field", `{` + base + `,"tool":"t","actor":{"type":"agent","id":"a","role":"admin"}}`, `unknown field "actor.role"`},
		{"repeated key inside args", `{"spec":"opledger.intent.v1","event_id":"e","workflow_id":"wf_1","tool":"t","args":{"amount_cents":1,"amount_cents":100000}}`, `appears twice`},
		{"raw invalid UTF-8 in event_id", "{\"spec\":\"opledger.intent.v1\",\"event_id\":\"h:utf\xff\",\"workflow_id\":\"wf_1\",\"tool\":\"t\",\"args\":{}}", "invalid UTF-8 at byte 46"},
		{"unpaired surrogate escape in event_id", `{"spec":"opledger.intent.v1","event_id":"h:utf\udcff","workflow_id":"wf_1","tool":"t","args":{}}`, "unpaired UTF-16 surrogate"},
		{"high surrogate without its pair", `{"spec":"opledger.intent.v1","event_id":"h:\ud83dx","workflow_id":"wf_1","tool":"t","args":{}}`, "unpaired UTF-16 surrogate"},
		{"NUL in the intent label", `{` + base + `,"tool":"t","intent":"pay\u0000"}`, "intent must be"},
		{"newline in the tool name", `{` + base + `,"tool":"t\n"}`, "tool is required"},
		{"reserved workflow id", `{"spec":"opledger.intent.v1","event_id":"e","workflow_id":"_unroutable","tool":"t","args":{}}`, "workflow_id is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := wire.DecodeIntent("", "", []byte(tc.body))
			require.ErrorIs(t, err, op.ErrInvalid)
			require.ErrorContains(t, err, tc.reason)
		})
	}
	// Distinct invalid event ids are never merged into one: both are refused.
	_, err1 := wire.DecodeIntent("", "", []byte("{\"spec\":\"opledger.intent.v1\",\"event_id\":\"h:utf\xff\",\"workflow_id\":\"wf_1\",\"tool\":\"t\",\"args\":{}}"))
	_, err2 := wire.DecodeIntent("", "", []byte("{\"spec\":\"opledger.intent.v1\",\"event_id\":\"h:utf\xfe\",\"workflow_id\":\"wf_1\",\"tool\":\"t\",\"args\":{}}"))
	require.Error(t, err1)
	require.Error(t, err2)

	// A valid surrogate pair is a character like any other.
	in, err := wire.DecodeIntent("", "", []byte(`{"spec":"opledger.intent.v1","event_id":"call_\ud83d\ude00","workflow_id":"wf_1","tool":"t","args":{}}`))
	require.NoError(t, err)
	require.Equal(t, "call_😀", in.EventID)
}

func TestDecodeCommandIsStrict(t *testing.T) {
	t.Parallel()
	good := `{"spec":"opledger.command.v1","kind":"dispatch","operation_id":"op_1","tool":"t","idempotency_key":"k","lease_epoch":0,"workflow_id":"wf_1","state":"pending_dispatch"}`
	c, err := wire.DecodeCommand([]byte(good))
	require.NoError(t, err)
	require.Equal(t, "op_1", c.OperationID)
	for _, bad := range []string{
		`{"spec":"opledger.command.v1","kind":"dispatch","operation_id":"op_1","OPERATION_ID":"op_2"}`,
		`{"spec":"opledger.command.v1","kind":"dispatch","operation_id":"op_1","operation_id":"op_2"}`,
		`{"spec":"opledger.command.v1","kind":"dispatch"}`,
		`{"spec":"other","operation_id":"op_1"}`,
	} {
		_, err := wire.DecodeCommand([]byte(bad))
		require.ErrorIs(t, err, op.ErrInvalid, bad)
	}
}

// Results are read as strictly as intents, except that fields added later
// in v1 are ignored: a client must not see another result than a filter in
// front of it does (encoding/json would take "STATUS" for status, keep the
// last of two "final"s and turn invalid UTF-8 into U+FFFD).
func TestDecodeResultReadsOneWay(t *testing.T) {
	t.Parallel()
	base := `"spec":"opledger.result.v1","operation_id":"op_1","event_id":"e","workflow_id":"wf_1","tool":"t","version":3,"dedupe_decision":"new","retry_recommendation":"none","safe_user_message":"m","attempt_count":1,"at":"2026-01-01T00:00:00Z"`
	r, err := wire.DecodeResult([]byte(`{` + base + `,"status":"completed_success","final":true,"added_in_v1_later":{"x":1}}`))
	require.NoError(t, err)
	require.Equal(t, "completed_success", r.Status)
	require.True(t, r.Final)
	require.EqualValues(t, 3, r.Version)

	for _, tc := range []struct{ name, body, reason string }{
		{"a second status in upper case", `{` + base + `,"status":"failed_permanent","STATUS":"completed_success","final":true}`, `unknown field "STATUS" (field names are case-sensitive: "status")`},
		{"Final instead of final", `{` + base + `,"status":"pending_dispatch","Final":true}`, `unknown field "Final"`},
		{"final twice", `{` + base + `,"status":"pending_dispatch","final":false,"final":true}`, `field "final" appears twice`},
		{"a repeat inside an unknown field", `{` + base + `,"status":"s","final":true,"extra":{"a":1,"a":2}}`, `field "extra.a" appears twice`},
		{"invalid UTF-8", "{" + base + ",\"status\":\"s\",\"final\":true,\"reason\":\"r\xff\"}", "invalid UTF-8"},
		{"unpaired surrogate", `{` + base + `,"status":"s","final":true,"reason":"\udc00"}`, "unpaired UTF-16 surrogate"},
		{"data after the object", `{` + base + `,"status":"s","final":true} {}`, "data after"},
		{"another spec", `{"spec":"opledger.result.v2","status":"s"}`, `spec must be "opledger.result.v1"`},
		{"a wrong type", `{` + base + `,"status":"s","final":"yes"}`, "final"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := wire.DecodeResult([]byte(tc.body))
			require.ErrorIs(t, err, op.ErrInvalid)
			require.ErrorContains(t, err, tc.reason)
		})
	}
}

// ReadJSON checks keys against the type at every depth: in a nested struct,
// in a slice of structs, through a pointer and an embedded struct.
func TestReadJSONChecksNestedTypes(t *testing.T) {
	t.Parallel()
	type Inner struct {
		Name string `json:"name"`
	}
	type Base struct {
		ID string `json:"id"`
	}
	type Outer struct {
		Base
		One   *Inner            `json:"one"`
		Many  []Inner           `json:"many"`
		Map   map[string]Inner  `json:"map"`
		Raw   json.RawMessage   `json:"raw"`
		Plain map[string]string `json:"plain"`
	}
	var out Outer
	require.NoError(t, wire.ReadJSON([]byte(`{"id":"x","one":{"name":"a"},"many":[{"name":"b","new":1}],"map":{"k":{"name":"c"}},"raw":{"NAME":1},"plain":{"A":"1","a":"2"}}`), &out))
	require.Equal(t, "x", out.ID)
	require.Equal(t, "b", out.Many[0].Name)
	require.Equal(t, "2", out.Plain["a"], "map keys are data, not field names: both cases are kept")
	for body, reason := range map[string]string{
		`{"ID":"x"}`:                           `unknown field "ID"`,
		`{"one":{"NAME":"a"}}`:                 `unknown field "one.NAME"`,
		`{"many":[{"name":"a"},{"Name":"b"}]}`: `unknown field "many[1].Name"`,
		`{"map":{"k":{"nAme":"c"}}}`:           `unknown field "map.k.nAme"`,
		`{"raw":{"a":1,"a":2}}`:                `field "raw.a" appears twice`,
	} {
		require.ErrorContains(t, wire.ReadJSON([]byte(body), &out), reason, body)
	}
}

// Invalid UTF-8 anywhere in an intent's headers is refused like invalid
// UTF-8 in its body; a header that is merely malformed is its reader's to
// judge.
func TestCheckHeaders(t *testing.T) {
	t.Parallel()
	require.NoError(t, wire.CheckHeaders(map[string]string{"traceparent": "not-a-traceparent", "Nats-Msg-Id": "e"}))
	require.NoError(t, wire.CheckHeaders(nil))
	err := wire.CheckHeaders(map[string]string{"traceparent": "00-\xff-x", "Nats-Msg-Id": "e"})
	require.ErrorIs(t, err, op.ErrInvalid)
	require.ErrorContains(t, err, "header traceparent is not valid UTF-8")
	require.ErrorContains(t, wire.CheckHeaders(map[string]string{"X-\xfe": "v"}), "a header name is not valid UTF-8")
}
