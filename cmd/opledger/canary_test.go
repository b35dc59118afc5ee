package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/api"
	"github.com/opledger/opledger/internal/app"
	"github.com/opledger/opledger/internal/bus"
	"github.com/opledger/opledger/internal/ingest"
	"github.com/opledger/opledger/internal/maintain"
	"github.com/opledger/opledger/internal/ops"
	"github.com/opledger/opledger/internal/reconcile"
	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testlog"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// canary is the one secret of the canary test: the vendor's API key, a
// sensitive argument, what the vendor echoes and what a handler panics
// with. Not a real secret. Its tail is not hexadecimal: the logs hold
// panics' stacks, whose pointers (0x7f3a…) matched the tail it had before.
const canary = "CANARY-not-a-secret-zq9w"

// canaryRegistry: a card charge whose vendor takes the canary as its API
// key (a secret header) and whose card token and PIN are sensitive.
const canaryRegistry = `version: 1
tools:
  charge_card:
    side_effect_class: external_idempotent
    version: 1
    key_template: "card:{order_id}:{amount_cents}"
    sensitive: [card_token, pin]
    args_schema:
      type: object
      additionalProperties: false
      required: [order_id, card_token, amount_cents]
      properties:
        order_id: {type: string, minLength: 1, maxLength: 64}
        card_token: {type: string, minLength: 1, maxLength: 64}
        pin: {type: string, enum: ["0000", "1234"]}
        amount_cents: {type: integer, minimum: 1}
    timeout: 2s
    reconcile: {max_lookups: 5, interval: 100ms}
    adapter:
      type: http
      vendor: cards
      method: POST
      path: /v1/cards
      idempotency_header: Idempotency-Key
      secret_headers: {Authorization: "Bearer ${CARDS_API_KEY}"}
      external_id_pointer: /id
      request_id_header: Request-Id
      lookup:
        method: GET
        path: "/v1/cards?key={idempotency_key}"
        external_id_pointer: /id
`

// canaryVendor is the far edge: a card vendor that echoes what it was sent,
// credential included, in its headers and bodies, and sometimes in the very
// identifiers opledger keeps.
type canaryVendor struct {
	mu    sync.Mutex
	calls map[string]int // by order id
	saw   []string       // what reached it: credentials and bodies
}

func (v *canaryVendor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	auth := r.Header.Get("Authorization")
	var args struct {
		OrderID   string `json:"order_id"`
		CardToken string `json:"card_token"`
	}
	_ = json.Unmarshal(body, &args)
	v.mu.Lock()
	v.saw = append(v.saw, auth, string(body))
	key := r.URL.Query().Get("key")
	order := args.OrderID
	if r.Method == http.MethodGet {
		order = strings.Split(strings.TrimPrefix(key, "card:"), ":")[0]
	}
	v.calls[r.Method+" "+order]++
	n := v.calls[r.Method+" "+order]
	v.mu.Unlock()
	// Every answer echoes the credential and the token somewhere.
	w.Header().Set("X-Echo-Authorization", auth)
	w.Header().Set("X-Echo-Card", args.CardToken)
	answer := func(status int, requestID string, doc map[string]any) {
		w.Header().Set("Request-Id", requestID)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		doc["echo"] = auth + " " + string(body)
		_ = json.NewEncoder(w).Encode(doc)
	}
	if r.Method == http.MethodGet { // the lookup: found, clean, but chatty
		answer(http.StatusOK, "req_lookup_"+auth, map[string]any{"id": "ch_" + order})
		return
	}
	switch {
	case order == "o_echo":
		// Success, with the credential as the request id.
		answer(http.StatusOK, auth, map[string]any{"id": "ch_echo", "card": args.CardToken})
	case order == "o_id" && n == 1:
		// Success whose object id holds the card token.
		answer(http.StatusOK, "req_1", map[string]any{"id": "ch_" + args.CardToken})
	case order == "o_declined":
		answer(http.StatusPaymentRequired, "req_"+args.CardToken, map[string]any{"error": map[string]any{"code": "card_declined",
			"message": "card " + args.CardToken + " declined for " + auth}})
	case order == "o_500":
		answer(http.StatusInternalServerError, "req_"+auth, map[string]any{"error": auth})
	default:
		answer(http.StatusOK, "req_ok", map[string]any{"id": "ch_" + order})
	}
}

// One canary secret goes through every path opledger has for a secret —
// the vendor's API key (a secret header), a sensitive argument (valid
// intents, and intents refused for that very argument or for another),
// a vendor echoing both in its headers, bodies, request ids and object
// ids, a vendor's error message, lookups, a panic in a message handler and
// in an HTTP handler — and is then searched for in everything opledger
// says: every log line (debug level), every message on every NATS subject
// (results, commands, JetStream's API and deliveries, with their headers,
// which carry the traces' traceparent), the operators' API's answers,
// `opledger ops list` and `ops show`, /metrics, /readyz and the inbox's
// kept bytes of refused intents. It must appear nowhere but in what the
// agent itself published and what the vendor was sent.
//
// Breaking it: redacting arguments nowhere (the API and ops show print the
// token), a validation error quoting the PIN (`got "CANARY…"`), a rejected
// intent kept as it came, the dispatcher keeping a request id or object id
// that echoes the credential (results and the API), a handler panic logged
// with its value, or the vendor's error body copied into last_error.
func TestCanarySecretNeverLeaks(t *testing.T) {
	t.Parallel()
	vendor := &canaryVendor{calls: map[string]int{}}
	vsrv := httptest.NewServer(vendor)
	t.Cleanup(vsrv.Close)
	logs := &testlog.Buffer{}
	lg := zerolog.New(logs).Level(zerolog.DebugLevel)

	adminToken, adminEntry, err := api.GenerateToken("root", ops.RoleAdmin)
	require.NoError(t, err)
	tokens, err := api.NewTokens([]api.TokenEntry{adminEntry})
	require.NoError(t, err)
	d, err := app.StartStack(context.Background(), app.StackConfig{
		Infra: app.InfraConfig{DatabaseURL: testdb.New(t), MemoryStreams: true, Log: lg},
		Registry: app.RegistryConfig{YAML: []byte(canaryRegistry), Vendors: map[string]string{"cards": vsrv.URL},
			LookupEnv: func(k string) (string, bool) {
				if k == "CARDS_API_KEY" {
					return canary, true
				}
				return "", false
			}},
		HTTPAddr: "127.0.0.1:0", APITokens: tokens, Log: lg,
		Services: app.ServicesConfig{Relays: 1,
			Reconcile: reconcile.Config{SettleDelay: 100 * time.Millisecond},
			Maintain:  maintain.Config{SweepInterval: 200 * time.Millisecond, ElectInterval: 100 * time.Millisecond}},
	})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	// Everything on every subject, from before the first intent.
	nc, err := nats.Connect(d.Infra.NATSURL, nats.Name("canary-wiretap"))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	var wmu sync.Mutex
	var wire_ []*nats.Msg
	_, err = nc.Subscribe(">", func(m *nats.Msg) {
		wmu.Lock()
		wire_ = append(wire_, m)
		wmu.Unlock()
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	js, err := jetstream.New(nc)
	require.NoError(t, err)

	// The agent's intents, as bytes it keeps: they, and the vendor, are
	// the only places the canary may be.
	var published [][]byte
	publish := func(eventID, args string) {
		body := []byte(`{"spec":"opledger.intent.v1","event_id":"` + eventID + `","workflow_id":"wf_canary","tool":"charge_card","args":` + args + `}`)
		published = append(published, body)
		_, err := js.Publish(ctx, wire.IntentSubject("wf_canary"), body)
		require.NoError(t, err)
	}
	for _, order := range []string{"o_echo", "o_id", "o_declined", "o_500", "o_plain"} {
		publish("conv_c:"+order, `{"order_id":"`+order+`","card_token":"`+canary+`","pin":"1234","amount_cents":500}`)
	}
	publish("conv_c:bad_pin", `{"order_id":"o_pin","card_token":"tok_1","pin":"`+canary+`","amount_cents":500}`)
	publish("conv_c:bad_amount", `{"order_id":"o_amt","card_token":"`+canary+`","amount_cents":"lots"}`)
	publish("conv_c:bad_json", `{"order_id":"o_json","card_token":"`+canary+`"`)

	st := d.Services.Store
	final := map[string]op.State{"o_echo": op.StateCompletedSuccess, "o_id": op.StateCompletedSuccess,
		"o_declined": op.StateFailedPermanent, "o_500": op.StateCompletedSuccess, "o_plain": op.StateCompletedSuccess}
	var opIDs []string
	require.Eventually(t, func() bool {
		list, err := st.OperationsByWorkflow(ctx, "wf_canary")
		if err != nil || len(list) != len(final) {
			return false
		}
		opIDs = opIDs[:0]
		for _, o := range list {
			var a struct {
				OrderID string `json:"order_id"`
			}
			_ = json.Unmarshal(o.Args, &a)
			if o.State != final[a.OrderID] {
				return false
			}
			opIDs = append(opIDs, o.ID)
		}
		return true
	}, 60*time.Second, 50*time.Millisecond, "every card charge settles")
	for _, ev := range []string{"conv_c:bad_pin", "conv_c:bad_amount", "sha256:"} {
		if ev == "sha256:" {
			continue // the unreadable one is keyed by its hash; checked below through its answer
		}
		// Ingest workers take intents in any order: a refused intent may
		// be recorded after every charge has settled.
		var in *store.InboxEntry
		require.Eventually(t, func() bool {
			var err error
			in, err = st.InboxEntry(ctx, ingest.Source, ev)
			return err == nil
		}, 30*time.Second, 20*time.Millisecond, "%s is recorded", ev)
		require.Equal(t, op.DecisionRejected, in.Decision, ev)
		require.NotContains(t, string(in.Payload), canary, "%s: the inbox keeps the refused intent without its sensitive values", ev)
		require.NotContains(t, in.Reason, canary, ev)
	}

	// A panic in a message handler, and in an HTTP handler, with the
	// canary in its value.
	pb, err := bus.Connect(ctx, d.Infra.NATSURL, "canary-panic", lg)
	require.NoError(t, err)
	t.Cleanup(pb.Close)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "CANARY", Subjects: []string{"canary.>"}, Storage: jetstream.MemoryStorage})
	require.NoError(t, err)
	panicked := make(chan struct{}, 8)
	stop, err := pb.Consume(ctx, bus.ConsumerConfig{Stream: "CANARY", Durable: "canary", Filters: []string{"canary.>"}},
		func(context.Context, bus.Delivery) error {
			panicked <- struct{}{}
			panic(errors.New("handler exploded holding " + canary))
		})
	require.NoError(t, err)
	_, err = js.Publish(ctx, "canary.boom", []byte("x"))
	require.NoError(t, err)
	select {
	case <-panicked:
	case <-ctx.Done():
		t.Fatal("the handler never ran")
	}
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "handler panicked") }, 10*time.Second, 20*time.Millisecond)
	stop()
	hs, err := app.ServeHTTP(app.HTTPConfig{Addr: "127.0.0.1:0", Gatherer: prometheus.NewRegistry(), Log: lg,
		Routes: func(mux *http.ServeMux) {
			mux.HandleFunc("GET /boom", func(http.ResponseWriter, *http.Request) { panic("http handler holding " + canary) })
		}})
	require.NoError(t, err)
	t.Cleanup(hs.Close)
	resp, err := http.Get(hs.URL() + "/boom")
	require.NoError(t, err)
	boom, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	require.NotContains(t, string(boom), canary)
	require.Contains(t, logs.String(), "http handler panicked")

	// What people read: the API, the CLI, the metrics.
	var answers []string
	get := func(path string) string {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.HTTP.URL()+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", path, b)
		answers = append(answers, string(b))
		return string(b)
	}
	get("/v1/operations?workflow_id=wf_canary")
	for _, id := range opIDs {
		require.Contains(t, get("/v1/operations/"+id), `"arguments_redacted"`)
	}
	get("/metrics")
	get("/readyz")
	c := cli{t: t, env: map[string]string{"OPLEDGER_API_URL": d.HTTP.URL(), "OPLEDGER_API_TOKEN": adminToken}}
	code, out, errOut := c.run("", "ops", "list", "-workflow", "wf_canary")
	require.Equal(t, 0, code, errOut)
	answers = append(answers, out, errOut)
	for _, id := range opIDs {
		code, out, errOut = c.run("", "ops", "show", id)
		require.Equal(t, 0, code, errOut)
		require.Contains(t, out, "sensitive, shown as ***")
		answers = append(answers, out, errOut)
	}

	// The paths were really taken: the vendor got the credential and the
	// token, echoed them, and the ledger kept the operations' own ids.
	vendor.mu.Lock()
	saw := strings.Join(vendor.saw, "\n")
	vendor.mu.Unlock()
	require.Contains(t, saw, "Bearer "+canary, "the credential reached the vendor")
	require.Contains(t, saw, `"card_token":"`+canary+`"`, "the sensitive argument reached the vendor")
	o := opByOrder(t, ctx, d, "o_id")
	require.Equal(t, "ch_o_id", o.ExternalObjectID, "the echoing id was not kept; the lookup's was")

	// And the canary is nowhere else.
	require.NotContains(t, logs.String(), canary, "a log line holds the canary")
	require.NotContains(t, logs.String(), "zq9w", "a log line holds the canary's tail")
	for _, a := range answers {
		require.NotContains(t, a, canary)
	}
	require.NoError(t, nc.Flush())
	time.Sleep(200 * time.Millisecond) // the wiretap's last deliveries
	wmu.Lock()
	defer wmu.Unlock()
	results := 0
	for _, m := range wire_ {
		if strings.HasPrefix(m.Subject, wire.ResultSubjectPrefix) {
			results++
		}
		if isPublished(m.Data, published) {
			continue // the agent's own intent, on its way to planner-ingest
		}
		all := m.Subject + " " + fmt.Sprint(m.Header) + " " + string(m.Data)
		require.NotContains(t, all, canary, "NATS message on %s", m.Subject)
	}
	require.GreaterOrEqual(t, results, 8, "the answers and outcomes were published")
}

func isPublished(data []byte, published [][]byte) bool {
	for _, p := range published {
		if bytes.Equal(data, p) {
			return true
		}
	}
	return false
}

func opByOrder(t *testing.T, ctx context.Context, d *app.Stack, order string) *op.Operation {
	t.Helper()
	list, err := d.Services.Store.OperationsByWorkflow(ctx, "wf_canary")
	require.NoError(t, err)
	for _, o := range list {
		if strings.Contains(string(o.Args), `"order_id":"`+order+`"`) {
			return o
		}
	}
	t.Fatalf("no operation for %s", order)
	return nil
}
