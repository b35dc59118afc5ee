package wire_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/bus"
	"github.com/opledger/opledger/internal/natsembed"
	"github.com/opledger/opledger/pkg/client"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
	"github.com/opledger/opledger/schema"
)

// schemaBase is the $id prefix every wire schema declares. The loader below
// serves exactly these URLs from the embedded files, so compiling never
// touches the network and a $ref to anything else fails loudly.
const schemaBase = "https://opledger.dev/schema/wire/"

// embeddedLoader resolves schemaBase+<name> to wire/<name> in schema.Wire and
// records what it served.
type embeddedLoader struct {
	mu     sync.Mutex
	served []string
}

func (l *embeddedLoader) Load(url string) (any, error) {
	name, ok := strings.CutPrefix(url, schemaBase)
	if !ok || name == "" || strings.Contains(name, "/") {
		return nil, fmt.Errorf("refusing to load %s: only %s<file> is served, from schema.Wire", url, schemaBase)
	}
	f, err := schema.Wire.Open("wire/" + name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	l.mu.Lock()
	l.served = append(l.served, name)
	l.mu.Unlock()
	return jsonschema.UnmarshalJSON(f)
}

// wireSchemas is the compiled wire schemas, by file name.
type wireSchemas struct {
	byName map[string]*jsonschema.Schema
	loader *embeddedLoader
}

func compileWire(t *testing.T) wireSchemas {
	t.Helper()
	names, err := fs.Glob(schema.Wire, "wire/*.json")
	require.NoError(t, err)
	require.Len(t, names, 4, "schema.Wire should hold intent, command, result and alert; a new file needs tests here")
	l := &embeddedLoader{}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat() // "at" must really be a date-time, not just annotated as one
	c.UseLoader(l)
	ws := wireSchemas{byName: map[string]*jsonschema.Schema{}, loader: l}
	for _, n := range names {
		base := path.Base(n)
		sch, err := c.Compile(schemaBase + base)
		require.NoError(t, err, "compile %s", base)
		ws.byName[base] = sch
	}
	return ws
}

func (ws wireSchemas) validate(t *testing.T, name string, doc []byte) error {
	t.Helper()
	sch := ws.byName[name]
	require.NotNil(t, sch, "no schema %s", name)
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	require.NoError(t, err, "not JSON: %s", doc)
	return sch.Validate(v)
}

func (ws wireSchemas) requireValid(t *testing.T, name string, v any) {
	t.Helper()
	doc, err := json.Marshal(v)
	require.NoError(t, err)
	require.NoError(t, ws.validate(t, name, doc), "%s rejects %s", name, doc)
}

// rawSchema is the parts of a schema file the reflection tests read.
type rawSchema struct {
	ID         string                     `json:"$id"`
	Required   []string                   `json:"required"`
	Properties map[string]json.RawMessage `json:"properties"`
	Defs       map[string]json.RawMessage `json:"$defs"`
}

func readRaw(t *testing.T, name string) rawSchema {
	t.Helper()
	b, err := fs.ReadFile(schema.Wire, "wire/"+name)
	require.NoError(t, err)
	var rs rawSchema
	require.NoError(t, json.Unmarshal(b, &rs), name)
	return rs
}

func subschema(t *testing.T, raw json.RawMessage) rawSchema {
	t.Helper()
	var rs rawSchema
	require.NoError(t, json.Unmarshal(raw, &rs))
	return rs
}

func enumOf(t *testing.T, raw json.RawMessage) []string {
	t.Helper()
	var s struct {
		Enum []string `json:"enum"`
	}
	require.NoError(t, json.Unmarshal(raw, &s))
	require.NotEmpty(t, s.Enum, "no enum in %s", raw)
	return sorted(s.Enum)
}

func sorted[S ~string](in []S) []string {
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = string(s)
	}
	sort.Strings(out)
	return out
}

// jsonFields returns the JSON names of a struct type's fields and the names
// of those always emitted (no omitempty/omitzero).
func jsonFields(t *testing.T, typ reflect.Type) (all, always []string) {
	t.Helper()
	for i := range typ.NumField() {
		f := typ.Field(i)
		tag, ok := f.Tag.Lookup("json")
		require.True(t, ok, "%s.%s has no json tag", typ.Name(), f.Name)
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		all = append(all, name)
		if !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero") {
			always = append(always, name)
		}
	}
	sort.Strings(all)
	sort.Strings(always)
	return all, always
}

func keys(m map[string]json.RawMessage) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestSchemasCompileFromEmbeddedFiles(t *testing.T) {
	t.Parallel()
	ws := compileWire(t)
	for name := range ws.byName {
		require.Equal(t, schemaBase+name, readRaw(t, name).ID, "$id of %s must match its file name for the loader", name)
	}
	// Each file was loaded once, through the embedded loader; command.v1.json's and alert.v1.json's
	// $refs into result.v1.json resolved to the already loaded file.
	require.ElementsMatch(t, []string{"alert.v1.json", "command.v1.json", "intent.v1.json", "result.v1.json"}, ws.loader.served)

	_, err := (&embeddedLoader{}).Load("https://example.com/schema.json")
	require.Error(t, err, "the loader must refuse URLs outside schemaBase")
}

// TestSchemaPropertiesMatchGoTypes checks field by field that each schema lists
// exactly the JSON fields of its Go type, and requires exactly those the Go
// type always emits.
func TestSchemaPropertiesMatchGoTypes(t *testing.T) {
	t.Parallel()
	intent := readRaw(t, "intent.v1.json")
	for _, tc := range []struct {
		name string
		typ  reflect.Type
		rs   rawSchema
	}{
		{"intent", reflect.TypeFor[wire.Intent](), intent},
		{"intent.actor", reflect.TypeFor[wire.Actor](), subschema(t, intent.Properties["actor"])},
		{"command", reflect.TypeFor[wire.Command](), readRaw(t, "command.v1.json")},
		{"result", reflect.TypeFor[wire.Result](), readRaw(t, "result.v1.json")},
		{"alert", reflect.TypeFor[wire.Alert](), readRaw(t, "alert.v1.json")},
	} {
		all, always := jsonFields(t, tc.typ)
		require.Equal(t, all, keys(tc.rs.Properties), "%s: schema properties vs Go json fields", tc.name)
		require.Equal(t, always, sorted(tc.rs.Required), "%s: schema required vs Go fields without omitempty", tc.name)
	}
}

func TestSchemaEnumsMatchGoConstants(t *testing.T) {
	t.Parallel()
	result := readRaw(t, "result.v1.json")
	command := readRaw(t, "command.v1.json")

	require.Equal(t, sorted(op.States), enumOf(t, result.Defs["state"]), "result $defs/state vs op.States")
	require.Equal(t, sorted([]op.Decision{op.DecisionNew, op.DecisionDuplicateEvent, op.DecisionDuplicateOperation,
		op.DecisionConflict, op.DecisionRejected, op.DecisionReopened}), enumOf(t, result.Properties["dedupe_decision"]))
	require.Equal(t, sorted([]op.RetryRecommendation{op.RecommendNone, op.RecommendWait, op.RecommendReconcileBeforeRetry,
		op.RecommendRetrySameKey, op.RecommendChangeArguments, op.RecommendAwaitApproval, op.RecommendEscalated, op.RecommendRetryLater}),
		enumOf(t, result.Properties["retry_recommendation"]))
	require.Equal(t, sorted([]string{wire.KindDispatch, wire.KindUnknown, wire.KindFailed, wire.KindCompleted}),
		enumOf(t, command.Properties["kind"]))

	// Every state's recommendation is one the schema allows.
	recs := enumOf(t, result.Properties["retry_recommendation"])
	for _, s := range op.States {
		rec, _ := op.Recommend(s)
		require.Contains(t, recs, string(rec), "Recommend(%s)", s)
	}

	alert := readRaw(t, "alert.v1.json")
	require.Equal(t, sorted(wire.AlertKinds), enumOf(t, alert.Properties["kind"]))

	for name, spec := range map[string]string{"intent.v1.json": wire.SpecIntent, "command.v1.json": wire.SpecCommand,
		"result.v1.json": wire.SpecResult, "alert.v1.json": wire.SpecAlert} {
		var c struct {
			Const string `json:"const"`
		}
		require.NoError(t, json.Unmarshal(readRaw(t, name).Properties["spec"], &c))
		require.Equal(t, spec, c.Const, "%s spec const", name)
	}
}

// operation returns an operation with every field a result can carry.
func operation(s op.State) *op.Operation {
	return &op.Operation{
		ID: op.NewID("op"), WorkflowID: "wf_1", RunID: "run_1", Tool: "capture_payment", ToolVersion: 1,
		Args: json.RawMessage(`{"amount_cents":4900}`), ArgsHash: strings.Repeat("a", 64),
		Class: op.ClassExternalIrreversible, IdempotencyKey: "payment:order_123:capture:4900:USD:v1",
		State: s, AttemptCount: 2, LeaseEpoch: 3, ExternalRequestID: "req_1", ExternalObjectID: "ch_1",
		CreatedAt: time.Date(2026, 7, 7, 10, 0, 0, 0, time.UTC),
		UpdatedAt: time.Date(2026, 7, 7, 12, 0, 0, 500, time.FixedZone("CEST", 2*3600)),
	}
}

func TestResultForEveryStateValidates(t *testing.T) {
	t.Parallel()
	ws := compileWire(t)
	decisions := []op.Decision{op.DecisionNew, op.DecisionDuplicateEvent, op.DecisionDuplicateOperation}
	for _, s := range op.States {
		for _, d := range decisions {
			o := operation(s)
			r := wire.ResultFor(o, "conv_1:call_1", d)
			ws.requireValid(t, "result.v1.json", r)
			require.Equal(t, string(s), r.Status)
			require.Equal(t, s.Terminal(), r.Final, "final for %s", s)
			rec, msg := op.Recommend(s)
			require.Equal(t, rec, r.RetryRecommendation)
			require.Equal(t, msg, r.SafeUserMessage)
			require.Equal(t, time.UTC, r.At.Location())
		}

		// What the dispatcher publishes: reason and the vendor's status code.
		r := wire.ResultFor(operation(s), "conv_1:call_1", op.DecisionNew)
		r.RawStatusCode, r.Reason = 503, "vendor timed out"
		ws.requireValid(t, "result.v1.json", r)

		// What the sweeper and the compensator publish: no event id, and a
		// bare operation (no key, ids or times) still makes a valid result.
		ws.requireValid(t, "result.v1.json", wire.ResultFor(&op.Operation{ID: "op_1", WorkflowID: "wf_1", Tool: "t", State: s}, "", op.DecisionNew))
	}
}

func TestRejectionValidates(t *testing.T) {
	t.Parallel()
	ws := compileWire(t)
	at := time.Date(2026, 7, 7, 10, 0, 0, 123456789, time.Local)
	for _, d := range []op.Decision{op.DecisionRejected, op.DecisionConflict, op.DecisionDuplicateEvent} {
		r := wire.Rejection("conv_1:call_1", "wf_1", "capture_payment", "args.customer_id: is required", d, at)
		ws.requireValid(t, "result.v1.json", r)
		require.Equal(t, string(op.StateRejected), r.Status)
		require.True(t, r.Final)
		require.Equal(t, op.RecommendChangeArguments, r.RetryRecommendation)
		require.Empty(t, r.OperationID)
	}
	// An undecodable intent: no tool, the event id derived from the body.
	ws.requireValid(t, "result.v1.json", wire.Rejection("sha256:"+strings.Repeat("0", 64), "wf_1", "", "intent is not valid JSON", op.DecisionRejected, at))
	// A key conflict names the operation holding the key (as ingest sets it).
	r := wire.Rejection("conv_1:call_3", "wf_1", "capture_payment", "idempotency key already used", op.DecisionConflict, at)
	r.OperationID = "op_1"
	ws.requireValid(t, "result.v1.json", r)
}

func TestAlertOfEveryKindValidates(t *testing.T) {
	t.Parallel()
	ws := compileWire(t)
	for _, kind := range wire.AlertKinds {
		a := wire.Alert{Spec: wire.SpecAlert, Kind: kind, Provider: "payments", DeliveryID: "msg_1", EventType: "payment.succeeded",
			Outcome: "success", MatchBy: "idempotency_key", MatchValue: "payment:o_1:capture:4900:USD:v1",
			Reason: "no operation has this key", At: time.Now().UTC()}
		ws.requireValid(t, "alert.v1.json", a)
		a.OperationID, a.Tool, a.State, a.ExternalObjectID, a.OperationExternalObjectID = "op_1", "capture_payment", "completed_success", "ch_2", "ch_1"
		ws.requireValid(t, "alert.v1.json", a)
	}
	bad := `{"spec":"opledger.alert.v1","kind":"webhook_sneaky","provider":"p","delivery_id":"d","event_type":"t","outcome":"success","match_by":"idempotency_key","match_value":"k","reason":"","at":"2026-01-01T00:00:00Z"}`
	require.Error(t, ws.validate(t, "alert.v1.json", []byte(bad)))
}

func TestCommandOfEveryKindValidates(t *testing.T) {
	t.Parallel()
	ws := compileWire(t)
	for _, kind := range []string{wire.KindDispatch, wire.KindUnknown, wire.KindFailed, wire.KindCompleted} {
		for _, s := range op.States {
			for _, eventID := range []string{"conv_1:call_1", ""} {
				o := operation(s)
				ws.requireValid(t, "command.v1.json", wire.Command{
					Spec: wire.SpecCommand, Kind: kind, OperationID: o.ID, Tool: o.Tool, IdempotencyKey: o.IdempotencyKey,
					LeaseEpoch: o.LeaseEpoch, WorkflowID: o.WorkflowID, EventID: eventID, State: o.State,
				})
			}
		}
		require.Equal(t, "opledger.ops."+kind+".capture_payment.op_1", wire.OpsSubject(kind, "capture_payment", "op_1"))
	}
}

// TestClientIntentValidates publishes intents with pkg/client to a real
// JetStream and checks what was stored: the body validates against the schema
// and decodes, and the headers are the ones the protocol asks for.
func TestClientIntentValidates(t *testing.T) {
	t.Parallel()
	ws := compileWire(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	srv, err := natsembed.Start(natsembed.Options{})
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)
	b, err := bus.Connect(ctx, srv.URL(), "wire-test-setup", zerolog.Nop())
	require.NoError(t, err)
	require.NoError(t, b.EnsureStreams(ctx, bus.StreamOptions{Memory: true}))
	b.Close()

	cl, err := client.Connect(srv.URL(), "wire-test-agent")
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	nc, err := nats.Connect(srv.URL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	stream, err := js.Stream(ctx, wire.StreamIntents)
	require.NoError(t, err)

	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	for _, in := range []wire.Intent{
		{ // minimal: Spec left empty for the client to fill in
			EventID: "conv_1:call_1", WorkflowID: "wf_1", Tool: "capture_payment",
			Args: json.RawMessage(`{"order_id":"order_123","customer_id":"cust_456","amount_cents":4900,"currency":"USD"}`),
		},
		{ // every field
			Spec: wire.SpecIntent, EventID: "conv_2:call_9", WorkflowID: "wf_2", RunID: "run_7", Tool: "send_email",
			Intent: "notify_customer", Args: json.RawMessage(`{"to":"a@example.com","template":"follow_up","reference":"order_123"}`),
			Actor: &wire.Actor{Type: "agent", ID: "support-bot"}, Correlation: map[string]string{"conversation_id": "conv_2"},
		},
	} {
		err := cl.Publish(ctx, in, tp)
		require.NoError(t, err)
		subject := wire.IntentSubject(in.WorkflowID)
		msg, err := stream.GetLastMsgForSubject(ctx, subject)
		require.NoError(t, err)

		require.NoError(t, ws.validate(t, "intent.v1.json", msg.Data), "schema rejects the client's intent %s", msg.Data)
		require.Empty(t, msg.Header.Get(wire.HeaderMsgID), "no stream-wide dedupe id that another tenant could take")
		require.Equal(t, tp, msg.Header.Get(wire.HeaderTraceparent))

		got, err := wire.DecodeIntent(msg.Subject, msg.Header.Get(wire.HeaderMsgID), msg.Data)
		require.NoError(t, err)
		in.Spec, in.Tenant = wire.SpecIntent, wire.DefaultTenant
		require.JSONEq(t, string(in.Args), string(got.Args))
		got.Args, in.Args = nil, nil
		require.Equal(t, in, *got)
	}
}

// TestSchemasRejectInvalidDocuments makes sure the schemas are not vacuous:
// each document here breaks exactly one rule.
func TestSchemasRejectInvalidDocuments(t *testing.T) {
	t.Parallel()
	ws := compileWire(t)

	validResult := mustJSON(t, wire.ResultFor(operation(op.StateCompletedSuccess), "conv_1:call_1", op.DecisionNew))
	validCommand := mustJSON(t, wire.Command{Spec: wire.SpecCommand, Kind: wire.KindDispatch, OperationID: "op_1", Tool: "t",
		IdempotencyKey: "k", LeaseEpoch: 0, WorkflowID: "wf_1", State: op.StatePendingDispatch})
	validIntent := `{"spec":"opledger.intent.v1","event_id":"conv_1:call_1","workflow_id":"wf_1","tool":"capture_payment","args":{}}`
	require.NoError(t, ws.validate(t, "result.v1.json", []byte(validResult)))
	require.NoError(t, ws.validate(t, "command.v1.json", []byte(validCommand)))
	require.NoError(t, ws.validate(t, "intent.v1.json", []byte(validIntent)))

	for _, tc := range []struct {
		name, schema, doc string
	}{
		{"intent missing event_id", "intent.v1.json", without(t, validIntent, "event_id")},
		{"intent missing args", "intent.v1.json", without(t, validIntent, "args")},
		{"intent unknown field", "intent.v1.json", with(t, validIntent, "priority", 1)},
		{"intent field in other case", "intent.v1.json", with(t, without(t, validIntent, "tool"), "Tool", "capture_payment")},
		{"intent wrong spec", "intent.v1.json", with(t, validIntent, "spec", "opledger.intent.v2")},
		{"intent empty event_id", "intent.v1.json", with(t, validIntent, "event_id", "")},
		{"intent event_id of 201 chars", "intent.v1.json", with(t, validIntent, "event_id", strings.Repeat("e", 201))},
		{"intent event_id with control char", "intent.v1.json", with(t, validIntent, "event_id", "conv_1\x01call_1")},
		{"intent event_id with DEL", "intent.v1.json", with(t, validIntent, "event_id", "conv_1\x7f")},
		{"intent workflow_id with dot", "intent.v1.json", with(t, validIntent, "workflow_id", "wf.1")},
		{"intent workflow_id with wildcard", "intent.v1.json", with(t, validIntent, "workflow_id", "wf_>")},
		{"intent workflow_id with tab", "intent.v1.json", with(t, validIntent, "workflow_id", "wf\t1")},
		{"intent run_id with newline", "intent.v1.json", with(t, validIntent, "run_id", "run\n1")},
		{"intent args array", "intent.v1.json", with(t, validIntent, "args", []int{1})},
		{"intent args null", "intent.v1.json", with(t, validIntent, "args", nil)},
		{"intent actor type unknown", "intent.v1.json", with(t, validIntent, "actor", map[string]string{"type": "robot", "id": "r1"})},
		{"intent correlation value not string", "intent.v1.json", with(t, validIntent, "correlation", map[string]int{"n": 1})},

		{"result missing event_id", "result.v1.json", without(t, validResult, "event_id")},
		{"result missing final", "result.v1.json", without(t, validResult, "final")},
		{"result unknown field", "result.v1.json", with(t, validResult, "extra", true)},
		{"result bad status", "result.v1.json", with(t, validResult, "status", "done")},
		{"result bad dedupe_decision", "result.v1.json", with(t, validResult, "dedupe_decision", "duplicate")},
		{"result bad retry_recommendation", "result.v1.json", with(t, validResult, "retry_recommendation", "retry")},
		{"result negative attempt_count", "result.v1.json", with(t, validResult, "attempt_count", -1)},
		{"result at not a date-time", "result.v1.json", with(t, validResult, "at", "yesterday")},
		{"result wrong spec", "result.v1.json", with(t, validResult, "spec", "opledger.result.v2")},
		{"result final as string", "result.v1.json", with(t, validResult, "final", "true")},

		{"command missing lease_epoch", "command.v1.json", without(t, validCommand, "lease_epoch")},
		{"command unknown field", "command.v1.json", with(t, validCommand, "attempt", 1)},
		{"command bad kind", "command.v1.json", with(t, validCommand, "kind", "retry")},
		{"command bad state (via $ref)", "command.v1.json", with(t, validCommand, "state", "done")},
		{"command negative lease_epoch", "command.v1.json", with(t, validCommand, "lease_epoch", -1)},
		{"command key over 255 chars", "command.v1.json", with(t, validCommand, "idempotency_key", strings.Repeat("k", 256))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Error(t, ws.validate(t, tc.schema, []byte(tc.doc)), "%s accepts %s", tc.schema, tc.doc)
		})
	}
}

// TestIntentSchemaAgreesWithDecodeIntent runs the same intent documents
// through the schema and through DecodeIntent. Where they disagree, the row
// says why; such a row fails once the gap is closed, so it can be removed.
func TestIntentSchemaAgreesWithDecodeIntent(t *testing.T) {
	t.Parallel()
	ws := compileWire(t)
	base := `{"spec":"opledger.intent.v1","event_id":"conv_1:call_1","workflow_id":"wf_1","tool":"capture_payment","args":{"order_id":"order_123"}}`
	for _, tc := range []struct {
		name       string
		doc        string
		wantSchema bool // schema accepts
		wantGo     bool // DecodeIntent accepts
		gap        string
	}{
		{name: "minimal", doc: base, wantSchema: true, wantGo: true},
		{name: "every field", doc: with(t, with(t, with(t, with(t, base, "run_id", "run_1"), "intent", "collect_payment_for_order"),
			"actor", map[string]string{"type": "agent", "id": "bot"}), "correlation", map[string]string{"conversation_id": "conv_1"}),
			wantSchema: true, wantGo: true},
		{name: "200-byte ASCII ids", doc: with(t, with(t, base, "event_id", strings.Repeat("e", 200)), "workflow_id", strings.Repeat("w", 200)), wantSchema: true, wantGo: true},
		{name: "201-byte event_id", doc: with(t, base, "event_id", strings.Repeat("e", 201))},
		{name: "missing spec", doc: without(t, base, "spec")},
		{name: "wrong spec", doc: with(t, base, "spec", "opledger.intent.v0")},
		{name: "missing event_id", doc: without(t, base, "event_id")},
		{name: "missing workflow_id", doc: without(t, base, "workflow_id")},
		{name: "missing tool", doc: without(t, base, "tool")},
		{name: "empty tool", doc: with(t, base, "tool", "")},
		{name: "missing args", doc: without(t, base, "args")},
		{name: "args string", doc: with(t, base, "args", "x")},
		{name: "unknown top-level field", doc: with(t, base, "idempotency_key", "k")},
		{name: "unknown actor field", doc: with(t, base, "actor", map[string]string{"type": "agent", "id": "bot", "name": "x"})},
		{name: "workflow_id with space", doc: with(t, base, "workflow_id", "wf 1")},
		{name: "workflow_id with star", doc: with(t, base, "workflow_id", "wf*")},
		{name: "event_id with NUL", doc: with(t, base, "event_id", "conv_1\x00")},
		{name: "event_id with unit separator", doc: with(t, base, "event_id", "conv_1\x1f")},
		{name: "run_id with DEL", doc: with(t, base, "run_id", "run\x7f")},
		{name: "event_id with non-ASCII", doc: with(t, base, "event_id", "conv_é:call_1"), wantSchema: true, wantGo: true},

		{name: "150 two-byte characters", doc: with(t, base, "event_id", strings.Repeat("é", 150)), wantSchema: true,
			gap: "schema maxLength counts characters (150), DecodeIntent counts bytes (300 > MaxIDLen)"},
		{name: "empty run_id", doc: with(t, base, "run_id", ""), wantGo: true,
			gap: "DecodeIntent treats an empty run_id as absent; the schema requires minLength 1"},
		{name: "actor type outside the enum", doc: with(t, base, "actor", map[string]string{"type": "robot", "id": "r1"}), wantGo: true,
			gap: "DecodeIntent does not check actor"},
		{name: "actor without id", doc: with(t, base, "actor", map[string]string{"type": "agent"}), wantGo: true,
			gap: "DecodeIntent does not check actor"},
		{name: "field name in other case", doc: with(t, without(t, base, "tool"), "TOOL", "capture_payment")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.gap != "", tc.wantSchema != tc.wantGo, "a row where schema and Go differ must say why, and only such a row")
			schemaErr := ws.validate(t, "intent.v1.json", []byte(tc.doc))
			_, goErr := wire.DecodeIntent("", "", []byte(tc.doc))
			require.Equal(t, tc.wantSchema, schemaErr == nil, "schema: %v\n%s", schemaErr, tc.doc)
			require.Equal(t, tc.wantGo, goErr == nil, "DecodeIntent: %v\n%s", goErr, tc.doc)
		})
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// with returns doc with field set to v; without returns doc without field.
func with(t *testing.T, doc, field string, v any) string {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(doc), &m))
	m[field] = v
	return mustJSON(t, m)
}

func without(t *testing.T, doc, field string) string {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(doc), &m))
	_, ok := m[field]
	require.True(t, ok, "%s has no field %s", doc, field)
	delete(m, field)
	return mustJSON(t, m)
}
