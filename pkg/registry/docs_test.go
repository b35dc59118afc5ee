package registry

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/opledger/opledger/pkg/adapter"
	"github.com/opledger/opledger/pkg/op"
)

// block is a fenced code block of docs/registry.md.
type block struct {
	lang, text string
	marker     string // the <!-- marker --> just before it, if any
	line       int
}

func docBlocks(t *testing.T) []block {
	t.Helper()
	md, err := os.ReadFile(docFile)
	require.NoError(t, err)
	var out []block
	var cur *block
	marker := ""
	for i, line := range strings.Split(string(md), "\n") {
		switch {
		case cur != nil && line == "```":
			out = append(out, *cur)
			cur, marker = nil, ""
		case cur != nil:
			cur.text += line + "\n"
		case strings.HasPrefix(line, "```"):
			cur = &block{lang: strings.TrimPrefix(line, "```"), marker: marker, line: i + 1}
		case strings.HasPrefix(line, "<!-- ") && strings.HasSuffix(line, " -->"):
			marker = strings.TrimSuffix(strings.TrimPrefix(line, "<!-- "), " -->")
		case line != "":
			marker = ""
		}
	}
	require.Nil(t, cur, "unclosed code block")
	return out
}

func findBlock(t *testing.T, blocks []block, marker string) block {
	t.Helper()
	for _, b := range blocks {
		if b.marker == marker {
			return b
		}
	}
	t.Fatalf("docs/registry.md has no block marked %q", marker)
	return block{}
}

// TestDocExamples holds every YAML example of docs/registry.md to the
// loader: whole files load (and match the schema), fragments of a tool
// decode without a problem, and the broken example gives exactly the
// problems the document shows.
func TestDocExamples(t *testing.T) {
	t.Parallel()
	blocks := docBlocks(t)
	s := registrySchema(t)
	fragments := 0
	for _, b := range blocks {
		if b.lang != "yaml" {
			continue
		}
		switch {
		case b.marker == "broken-example":
			_, err := Load([]byte(b.text), anyVendor)
			var le *LoadError
			require.ErrorAs(t, err, &le, "line %d", b.line)
			var got []string
			for _, p := range le.Problems {
				got = append(got, p.String())
			}
			want := findBlock(t, blocks, "broken-example-output").text
			require.Equal(t, want, strings.Join(got, "\n")+"\n", "the output shown for the broken example")
			require.Error(t, s.Validate(asJSON(t, []byte(b.text))))
		case strings.HasPrefix(b.text, "version: "):
			_, err := Load([]byte(b.text), anyVendor)
			require.NoError(t, err, "the example at line %d", b.line)
			require.NoError(t, s.Validate(asJSON(t, []byte(b.text))), "the example at line %d", b.line)
		default:
			var n yaml.Node
			require.NoError(t, yaml.Unmarshal([]byte(b.text), &n), "the fragment at line %d", b.line)
			d := &decoder{shadow: map[string][]string{}}
			// A fragment of the document (the webhooks section), or of a tool.
			var into any = &fileTool{}
			if strings.HasPrefix(b.text, "webhooks:") {
				into = &fileDoc{}
			}
			d.decode(n.Content[0], reflect.ValueOf(into).Elem(), at{tool: "fragment"})
			require.Empty(t, d.probs, "the fragment at line %d", b.line)
			fragments++
		}
	}
	require.GreaterOrEqual(t, fragments, 4)
}

// cardsVendor stands in for the made-up vendor of the worked example: it
// takes form-encoded payment intents with a bearer key and an idempotency
// key, and searches them by metadata.
type cardsVendor struct {
	*httptest.Server
	mu      sync.Mutex
	status  string            // what a new payment intent's status is
	intents map[string]string // opledger_key -> intent JSON
	bodies  []string
	byKey   map[string]string // Idempotency-Key -> intent JSON, for replays
}

func startCards(t *testing.T, apiKey string) *cardsVendor {
	t.Helper()
	v := &cardsVendor{status: "requires_action", intents: map[string]string{}, byKey: map[string]string{}}
	fields := []string{"amount", "currency", "customer", "payment_method", "confirm", "off_session",
		"metadata[order_id]", "metadata[opledger_key]"}
	v.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Request-Id", "req_1")
		w.Header().Set("Content-Type", "application/json")
		refuse := func(code int, why string) {
			w.WriteHeader(code)
			_, _ = io.WriteString(w, `{"error":{"type":"`+why+`"}}`)
		}
		if r.Header.Get("Authorization") != "Bearer "+apiKey {
			refuse(http.StatusUnauthorized, "authentication_error")
			return
		}
		v.mu.Lock()
		defer v.mu.Unlock()
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1/payment_intents":
			if r.Header.Get("Content-Type") != "application/x-www-form-urlencoded" {
				refuse(http.StatusBadRequest, "wrong_content_type")
				return
			}
			raw, _ := io.ReadAll(r.Body)
			form, err := url.ParseQuery(string(raw))
			if err != nil || len(form) != len(fields) {
				refuse(http.StatusBadRequest, "invalid_request_error")
				return
			}
			for _, f := range fields {
				if len(form[f]) != 1 {
					refuse(http.StatusBadRequest, "invalid_request_error")
					return
				}
			}
			key := r.Header.Get("Idempotency-Key")
			if prev, ok := v.byKey[key]; ok {
				w.Header().Set("Idempotent-Replayed", "true")
				_, _ = io.WriteString(w, prev)
				return
			}
			v.bodies = append(v.bodies, string(raw))
			intent := `{"id":"pi_` + form.Get("metadata[order_id]") + `","object":"payment_intent","status":"` + v.status + `"}`
			v.byKey[key] = intent
			v.intents[form.Get("metadata[opledger_key]")] = intent
			_, _ = io.WriteString(w, intent)
		case r.Method == http.MethodGet && r.URL.Path == "/v1/payment_intents/search":
			key, ok := strings.CutPrefix(r.URL.Query().Get("query"), "metadata['opledger_key']:'")
			key, ok2 := strings.CutSuffix(key, "'")
			if !ok || !ok2 {
				refuse(http.StatusBadRequest, "invalid_request_error")
				return
			}
			data := "[]"
			if intent, found := v.intents[key]; found {
				data = "[" + intent + "]"
			}
			_, _ = io.WriteString(w, `{"object":"search_result","data":`+data+`}`)
		default:
			refuse(http.StatusNotFound, "not_found")
		}
	}))
	t.Cleanup(v.Close)
	return v
}

func (v *cardsVendor) settle(status string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for k, intent := range v.intents {
		var m map[string]any
		_ = json.Unmarshal([]byte(intent), &m)
		m["status"] = status
		b, _ := json.Marshal(m)
		v.intents[k] = string(b)
	}
}

// TestWorkedExampleAgainstVendor loads the worked example of
// docs/registry.md as written and runs it against a stand-in for its vendor.
func TestWorkedExampleAgainstVendor(t *testing.T) {
	t.Parallel()
	blocks := docBlocks(t)
	example := findBlock(t, blocks, "worked-example")
	const apiKey = "test_cards_key_not_real"
	v := startCards(t, apiKey)
	reg, err := Load([]byte(example.text), Options{
		Vendors: map[string]string{"cards": v.URL},
		Secret: func(name string) (string, bool) {
			return apiKey, name == "CARDS_API_KEY"
		},
	})
	require.NoError(t, err)
	tool, err := reg.Tool("charge_card")
	require.NoError(t, err)

	p, err := tool.Prepare(Proposal{WorkflowID: "wf_1", Args: []byte(
		`{"order_id": "o_1", "customer_id": "cus_1", "payment_method_id": "pm_1", "amount_cents": 4900, "currency": "USD"}`)})
	require.NoError(t, err)
	require.Equal(t, "charge:o_1:4900:usd:v1", p.Operation.IdempotencyKey, "the key the document shows")
	require.Equal(t, op.EventEnqueue, p.Initial, "49.00 needs no approval")

	a, err := tool.NewAdapter(nil)
	require.NoError(t, err)
	req := adapter.Request{OperationID: p.Operation.ID, Tool: tool.Name, IdempotencyKey: p.Operation.IdempotencyKey, Args: p.Operation.Args}
	ctx := context.Background()

	// Not found yet: the search's empty list is a failed lookup, never "not applied".
	looker := a.(adapter.Looker)
	_, err = looker.Lookup(ctx, req)
	require.Error(t, err)

	res := a.Call(ctx, req)
	require.Equal(t, op.OutcomeAcknowledged, res.Outcome, "requires_action is not a success: %s", res.Error)
	require.Equal(t, "pi_o_1", res.ExternalObjectID)
	require.Equal(t, "req_1", res.ExternalRequestID)

	// The request is the one the document shows.
	shown := findBlockAfter(t, blocks, example.line, "text")
	lines := strings.Split(strings.TrimSpace(shown.text), "\n")
	require.Equal(t, []string{lines[len(lines)-1]}, v.bodies, "the body the document shows")

	again := a.Call(ctx, req)
	require.True(t, again.Replayed)
	require.Len(t, v.bodies, 1, "a re-send under the same key is a replay")

	lr, err := looker.Lookup(ctx, req)
	require.NoError(t, err)
	require.Equal(t, adapter.LookupResult{Found: true, Outcome: op.OutcomeAcknowledged, ExternalObjectID: "pi_o_1", HTTPStatus: 200}, lr)
	v.settle("succeeded")
	lr, err = looker.Lookup(ctx, req)
	require.NoError(t, err)
	require.Equal(t, op.OutcomeSuccess, lr.Outcome)
	v.settle("canceled")
	lr, err = looker.Lookup(ctx, req)
	require.NoError(t, err)
	require.Equal(t, op.OutcomePermanent, lr.Outcome)

	// A payment the vendor declines at once is permanent, not a success.
	v.mu.Lock()
	v.status = "requires_payment_method"
	v.mu.Unlock()
	p2, err := tool.Prepare(Proposal{WorkflowID: "wf_1", Args: []byte(
		`{"order_id": "o_2", "customer_id": "cus_1", "payment_method_id": "pm_1", "amount_cents": 4900, "currency": "usd"}`)})
	require.NoError(t, err)
	res = a.Call(ctx, adapter.Request{OperationID: p2.Operation.ID, IdempotencyKey: p2.Operation.IdempotencyKey, Args: p2.Operation.Args})
	require.Equal(t, op.OutcomePermanent, res.Outcome)
	require.Equal(t, `vendor answered HTTP 200 with failed status "requires_payment_method"`, res.Error)
	require.False(t, slices.ContainsFunc([]string{res.Error, res.ErrorCategory}, func(s string) bool { return strings.Contains(s, apiKey) }))
}

func findBlockAfter(t *testing.T, blocks []block, line int, lang string) block {
	t.Helper()
	for _, b := range blocks {
		if b.line > line && b.lang == lang {
			return b
		}
	}
	t.Fatalf("no %s block after line %d", lang, line)
	return block{}
}
