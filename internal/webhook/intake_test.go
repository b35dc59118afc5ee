package webhook_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/dispatch"
	"github.com/opledger/opledger/internal/evidence"
	"github.com/opledger/opledger/internal/maintain"
	"github.com/opledger/opledger/internal/pipetest"
	"github.com/opledger/opledger/internal/reconcile"
	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/telemetry"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testlog"
	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/internal/webhook"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/registry"
	"github.com/opledger/opledger/pkg/wire"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// Obviously fake secrets ("test-only-not-a-secret", "old-test-only-not-a-secret").
const (
	testSecret    = "whsec_dGVzdC1vbmx5LW5vdC1hLXNlY3JldA=="
	testSecretOld = "whsec_b2xkLXRlc3Qtb25seS1ub3QtYS1zZWNyZXQ="
	stripeSecret  = "whsec_test_only_not_a_real_stripe_secret"
)

// signStandard signs as a Standard Webhooks sender does, from the published
// scheme, independently of the code under test.
func signStandard(t testing.TB, secret, id string, ts int64, body []byte) string {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	require.NoError(t, err)
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s.%d.%s", id, ts, body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// signStripe signs as Stripe does.
func signStripe(secret string, ts int64, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(mac, "%d.%s", ts, body)
	return fmt.Sprintf("t=%d,v1=%s", ts, hex.EncodeToString(mac.Sum(nil)))
}

type bundle struct {
	*pipetest.Env
	logs     *testlog.Buffer // everything the intake and the settler logged, at debug level
	url      string
	metrics  *prometheus.Registry
	m        *telemetry.Metrics // registered in metrics
	settler  *evidence.Settler
	ingestSt *store.Store // the intake's store, logged in as planner-ingest's role
}

// setup runs the intake on a fresh pipeline (real Postgres, JetStream,
// stand-in vendors, the example registry with a 1 s hold), logged in as
// planner-ingest's Postgres role. payments and payment_intents have
// secrets (payments two, the old one being retired); email has none.
func setup(t *testing.T) bundle {
	t.Helper()
	e := pipetest.Start(t, pipetest.Options{EditRegistry: func(b []byte) ([]byte, error) {
		return bytes.ReplaceAll(b, []byte("    hold: 10m\n"), []byte("    hold: 1s\n")), nil
	}})
	reg := prometheus.NewRegistry()
	m := telemetry.NewMetrics(reg)
	st, err := store.Open(e.Ctx, testdb.User(t, e.DBURL, "opledger_ingest"), store.Options{})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	pay, err := webhook.ParseSecrets(registry.SchemeStandardWebhooks, []string{testSecret, testSecretOld})
	require.NoError(t, err)
	pi, err := webhook.ParseSecrets(registry.SchemeStripe, []string{stripeSecret})
	require.NoError(t, err)
	logs := &testlog.Buffer{}
	log := zerolog.New(logs).Level(zerolog.DebugLevel)
	settler := evidence.New(e.Registry, m, log)
	in, err := webhook.New(webhook.Config{Registry: e.Registry, Store: st, Evidence: settler, Metrics: m, Log: log,
		Secrets: map[string][]webhook.Secret{"payments": pay, "payment_intents": pi}})
	require.NoError(t, err)
	require.Equal(t, []string{"email"}, in.Unconfigured())
	mux := http.NewServeMux()
	in.Mount(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	b := bundle{Env: e, logs: logs, url: srv.URL, metrics: reg, m: m, settler: settler, ingestSt: st}
	t.Cleanup(func() { b.noSecretLogged(t) })
	return b
}

// noSecretLogged fails when any secret, or its key, reached a log line.
func (b bundle) noSecretLogged(t *testing.T) {
	logs := b.logs.String()
	for _, s := range []string{testSecret, testSecretOld, stripeSecret, strings.TrimPrefix(testSecret, "whsec_"),
		"test-only-not-a-secret", "test_only_not_a_real"} {
		require.NotContains(t, logs, s, "a secret in the logs")
	}
}

// answer is what the intake answered.
type answer struct {
	status int
	body   webhook.Answer
}

func (a answer) code() string {
	if a.body.Error != nil {
		return a.body.Error.Code
	}
	return a.body.Status
}

func (b bundle) post(t testing.TB, path string, h http.Header, body []byte) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, b.url+path, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header = h
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var a answer
	a.status = resp.StatusCode
	require.NoError(t, json.Unmarshal(raw, &a.body), "%s", raw)
	return a
}

// std is a Standard Webhooks delivery signed now (plus skew) with secret.
func std(t testing.TB, secret, id string, skew time.Duration, body []byte) http.Header {
	ts := time.Now().Add(skew).Unix()
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	h.Set("webhook-signature", signStandard(t, secret, id, ts, body))
	return h
}

func paymentEvent(typ, key, chargeID string) []byte {
	return []byte(fmt.Sprintf(`{"type":%q,"timestamp":"2026-12-01T10:00:00Z","data":{"id":%q,"object":"charge","idempotency_key":%q,"amount_cents":4900}}`,
		typ, chargeID, key))
}

// counter reads a counter of the intake's registry by its labels.
func (b bundle) counter(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := b.metrics.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue next
				}
			}
			return counterValue(m)
		}
	}
	return 0
}

func counterValue(m *dto.Metric) float64 { return m.GetCounter().GetValue() }

// count runs a counting query.
func (b bundle) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.DB.QueryRow(b.Ctx, sql, args...).Scan(&n))
	return n
}

// unknownCapture dispatches a capture into a timeout after the vendor
// committed: the operation is left in unknown_outcome.
func (b bundle) unknownCapture(t *testing.T, orderID string) *op.Operation {
	t.Helper()
	require.NoError(t, b.Vendors.InjectFault(vendors.Fault{Route: vendors.RouteCapture, Kind: vendors.FaultTimeoutAfterCommit}))
	o := b.SubmitCapture(t, "wf_1", orderID)
	d := dispatch.New(dispatch.Config{Name: "dispatcher-1"}, b.Store, b.Bus, b.Registry, b.Adapters, nil, b.Log)
	require.NoError(t, d.Handle(b.Ctx, b.LastCommand(t, o, wire.KindDispatch).Delivery(1)))
	o = b.Operation(t, o.ID)
	require.Equal(t, op.StateUnknownOutcome, o.State)
	return o
}

// Every hostile delivery is refused with its stable reason and status,
// counted by provider and reason, and leaves nothing in the ledger.
//
// Breaking it: a check that compared signatures over re-encoded JSON, that
// skipped the timestamp, that accepted a stale one when the signature is
// good, or that stored a refused delivery would fail a row or the final
// counts.
func TestHostileDeliveriesAreRefusedAndCounted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	good := paymentEvent("payment.succeeded", "payment:o_1:capture:4900:USD:v1", "ch_1")
	signed := func(id string, body []byte) http.Header { return std(t, testSecret, id, 0, body) }
	deep := []byte(`{"type":"payment.succeeded","data":` + strings.Repeat(`{"a":`, 40) + "1" + strings.Repeat("}", 41))
	huge := []byte(`{"type":"payment.succeeded","pad":"` + strings.Repeat("x", 256<<10) + `"}`)
	ts := time.Now().Unix()
	type tc struct {
		name, path string
		h          http.Header
		body       []byte
		status     int
		reason     string
		label      string // provider label; default payments
	}
	cases := []tc{
		{"unknown provider", "/webhooks/nobody", signed("d1", good), good, 404, webhook.ReasonUnknownProvider, "_unknown"},
		{"provider that looks like a path", "/webhooks/..%2F..%2Fetc", signed("d1", good), good, 404, webhook.ReasonUnknownProvider, "_unknown"},
		{"provider without a secret", "/webhooks/email", signed("d1", good), good, 503, webhook.ReasonNoSecret, "email"},
		{"no signature", "/webhooks/payments", http.Header{"Webhook-Id": {"d1"}, "Webhook-Timestamp": {strconv.FormatInt(ts, 10)}}, good, 401, webhook.ReasonMissingSignature, ""},
		{"no headers at all", "/webhooks/payments", http.Header{}, good, 401, webhook.ReasonMissingSignature, ""},
		{"wrong secret", "/webhooks/payments", std(t, "whsec_"+base64.StdEncoding.EncodeToString([]byte("attacker-test-only-key")), "d1", 0, good), good, 401, webhook.ReasonBadSignature, ""},
		{"signed other bytes", "/webhooks/payments", signed("d1", good), append([]byte(" "), good...), 401, webhook.ReasonBadSignature, ""},
		{"replayed: six minutes old", "/webhooks/payments", std(t, testSecret, "d1", -6*time.Minute, good), good, 401, webhook.ReasonStaleTimestamp, ""},
		{"from the future: six minutes ahead", "/webhooks/payments", std(t, testSecret, "d1", 6*time.Minute, good), good, 401, webhook.ReasonFutureTimestamp, ""},
		{"garbled signature", "/webhooks/payments", http.Header{"Webhook-Id": {"d1"}, "Webhook-Timestamp": {strconv.FormatInt(ts, 10)}, "Webhook-Signature": {"v1,%%%"}}, good, 401, webhook.ReasonMalformedSignature, ""},
		{"timestamp not a number", "/webhooks/payments", http.Header{"Webhook-Id": {"d1"}, "Webhook-Timestamp": {"soon"}, "Webhook-Signature": {signStandard(t, testSecret, "d1", ts, good)}}, good, 401, webhook.ReasonMalformedTimestamp, ""},
		{"two signature headers", "/webhooks/payments", func() http.Header { h := signed("d1", good); h.Add("webhook-signature", "v1,AAAA"); return h }(), good, 400, webhook.ReasonRepeatedHeader, ""},
		{"no id", "/webhooks/payments", func() http.Header { h := signed("d1", good); h.Del("webhook-id"); return h }(), good, 400, webhook.ReasonMissingID, ""},
		{"over 256 KiB", "/webhooks/payments", signed("d1", huge), huge, 413, webhook.ReasonTooLarge, ""},
		{"invalid UTF-8", "/webhooks/payments", signed("d1", []byte("{\"type\":\"payment.succeeded\",\"x\":\"\xff\"}")), []byte("{\"type\":\"payment.succeeded\",\"x\":\"\xff\"}"), 400, webhook.ReasonInvalidUTF8, ""},
		{"half a surrogate pair", "/webhooks/payments", signed("d1", []byte(`{"type":"payment.succeeded","x":"\ud800"}`)), []byte(`{"type":"payment.succeeded","x":"\ud800"}`), 400, webhook.ReasonInvalidUTF8, ""},
		{"NUL", "/webhooks/payments", signed("d1", []byte(`{"type":"payment.succeeded","x":"a\u0000b"}`)), []byte(`{"type":"payment.succeeded","x":"a\u0000b"}`), 400, webhook.ReasonNUL, ""},
		{"duplicate keys", "/webhooks/payments", signed("d1", []byte(`{"type":"payment.failed","type":"payment.succeeded"}`)), []byte(`{"type":"payment.failed","type":"payment.succeeded"}`), 400, webhook.ReasonDuplicateKey, ""},
		{"too deep", "/webhooks/payments", signed("d1", deep), deep, 400, webhook.ReasonTooDeep, ""},
		{"not JSON", "/webhooks/payments", signed("d1", []byte("type=payment.succeeded")), []byte("type=payment.succeeded"), 400, webhook.ReasonMalformedJSON, ""},
		{"not an object", "/webhooks/payments", signed("d1", []byte(`["payment.succeeded"]`)), []byte(`["payment.succeeded"]`), 400, webhook.ReasonNotAnObject, ""},
		{"no type", "/webhooks/payments", signed("d1", []byte(`{"data":{}}`)), []byte(`{"data":{}}`), 400, webhook.ReasonMissingType, ""},
		{"type not text", "/webhooks/payments", signed("d1", []byte(`{"type":"payment\nsucceeded"}`)), []byte(`{"type":"payment\nsucceeded"}`), 400, webhook.ReasonInvalidType, ""},
		{"mapped event without its key", "/webhooks/payments", signed("d1", []byte(`{"type":"payment.succeeded","data":{"id":"ch_1"}}`)), []byte(`{"type":"payment.succeeded","data":{"id":"ch_1"}}`), 400, webhook.ReasonInvalidField, ""},
		{"mapped event with a key too long", "/webhooks/payments", signed("d1", paymentEvent("payment.succeeded", strings.Repeat("k", 300), "ch_1")), paymentEvent("payment.succeeded", strings.Repeat("k", 300), "ch_1"), 400, webhook.ReasonInvalidField, ""},
		{"mapped event with a number for a key", "/webhooks/payments", signed("d1", []byte(`{"type":"payment.succeeded","data":{"id":"ch_1","idempotency_key":7}}`)), []byte(`{"type":"payment.succeeded","data":{"id":"ch_1","idempotency_key":7}}`), 400, webhook.ReasonInvalidField, ""},
		{"stripe: no Stripe-Signature", "/webhooks/payment_intents", http.Header{}, good, 401, webhook.ReasonMissingSignature, "payment_intents"},
		{"stripe: signed by someone else", "/webhooks/payment_intents", http.Header{"Stripe-Signature": {signStripe("whsec_test_only_attacker_secret", ts, good)}}, good, 401, webhook.ReasonBadSignature, "payment_intents"},
		{"stripe: replayed", "/webhooks/payment_intents", http.Header{"Stripe-Signature": {signStripe(stripeSecret, ts-3600, good)}}, good, 401, webhook.ReasonStaleTimestamp, "payment_intents"},
		{"stripe: signed, but no event id", "/webhooks/payment_intents", http.Header{"Stripe-Signature": {signStripe(stripeSecret, ts, good)}}, good, 400, webhook.ReasonMissingID, "payment_intents"},
	}
	want := map[[2]string]float64{}
	for _, c := range cases {
		a := b.post(t, c.path, c.h, c.body)
		require.Equal(t, c.status, a.status, c.name)
		require.NotNil(t, a.body.Error, c.name)
		require.Equal(t, c.reason, a.body.Error.Code, c.name)
		require.Equal(t, webhook.Status(c.reason), a.status, c.name)
		label := c.label
		if label == "" {
			label = "payments"
		}
		want[[2]string{label, c.reason}]++
	}
	for k, n := range want {
		require.Equal(t, n, b.counter(t, "opledger_webhook_rejected_total", map[string]string{"provider": k[0], "reason": k[1]}), "%v", k)
	}
	require.Zero(t, b.count(t, `SELECT count(*) FROM inbox WHERE source LIKE 'webhook:%'`), "nothing refused is stored")
	require.Contains(t, b.logs.String(), `"reason":"bad_signature"`, "refusals are logged (at debug), without secrets")
	require.Zero(t, b.count(t, `SELECT count(*) FROM webhook_evidence`))
}

// An authentic delivery is recorded once: a redelivery (a new timestamp
// and signature, the same id and body) is answered 200 and counted; the
// same id with other bytes is refused; the secret being retired still
// works; an event type the registry does not map is recorded only.
func TestDeliveryRecordedOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := []byte(`{"type":"charge.dispute.created","data":{"id":"dp_1"}}`)
	a := b.post(t, "/webhooks/payments", std(t, testSecret, "msg_1", 0, body), body)
	require.Equal(t, 200, a.status)
	require.Equal(t, webhook.ResultUnmapped, a.code())
	a = b.post(t, "/webhooks/payments", std(t, testSecretOld, "msg_1", -time.Minute, body), body)
	require.Equal(t, 200, a.status, "signed with the secret being retired")
	require.Equal(t, webhook.ResultDuplicate, a.code())
	other := []byte(`{"type":"charge.dispute.created","data":{"id":"dp_2"}}`)
	a = b.post(t, "/webhooks/payments", std(t, testSecret, "msg_1", 0, other), other)
	require.Equal(t, 409, a.status)
	require.Equal(t, webhook.ReasonIDReused, a.code())

	in, err := b.Store.InboxEntry(b.Ctx, store.WebhookSource("payments"), "msg_1")
	require.NoError(t, err)
	require.Equal(t, 1, in.DuplicateCount)
	require.Empty(t, in.Payload, "the inbox keeps the hash, not the bytes")
	sum := sha256.Sum256(body)
	require.Equal(t, hex.EncodeToString(sum[:]), in.PayloadHash)
	require.Zero(t, b.count(t, `SELECT count(*) FROM webhook_evidence`), "an unmapped event is no evidence")
	require.Equal(t, 1.0, b.counter(t, "opledger_webhook_deliveries_total", map[string]string{"provider": "payments", "result": "unmapped"}))
	require.Equal(t, 1.0, b.counter(t, "opledger_webhook_deliveries_total", map[string]string{"provider": "payments", "result": "duplicate"}))
}

// 10,000 deliveries of one event, sixteen at a time: every one is answered
// 200, the inbox has one row (9,999 redeliveries counted), the operation
// changed once, one result went to the agent, the vendor captured once.
func TestTenThousandDeliveriesOfOneEvent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	o := b.unknownCapture(t, "o_flood")
	body := paymentEvent("payment.succeeded", o.IdempotencyKey, "ch_flood")
	h := std(t, testSecret, "msg_flood", 0, body)
	const n, workers = 10_000, 16
	var wg sync.WaitGroup
	codes := make(chan string, n)
	next := make(chan struct{}, n)
	for range n {
		next <- struct{}{}
	}
	close(next)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range next {
				req, _ := http.NewRequest(http.MethodPost, b.url+"/webhooks/payments", bytes.NewReader(body))
				req.Header = h.Clone()
				resp, err := client.Do(req)
				if err != nil {
					codes <- err.Error()
					continue
				}
				var a webhook.Answer
				_ = json.NewDecoder(resp.Body).Decode(&a)
				resp.Body.Close()
				codes <- strconv.Itoa(resp.StatusCode) + " " + a.Status
			}
		}()
	}
	wg.Wait()
	close(codes)
	got := map[string]int{}
	for c := range codes {
		got[c]++
	}
	require.Equal(t, map[string]int{"200 evidence": 1, "200 duplicate": n - 1}, got)

	in, err := b.Store.InboxEntry(b.Ctx, store.WebhookSource("payments"), "msg_flood")
	require.NoError(t, err)
	require.Equal(t, n-1, in.DuplicateCount)
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM inbox WHERE source = 'webhook:payments'`))
	o = b.Operation(t, o.ID)
	require.Equal(t, op.StateCompletedSuccess, o.State)
	require.Equal(t, "ch_flood", o.ExternalObjectID)
	evs, err := b.Store.Events(b.Ctx, o.ID)
	require.NoError(t, err)
	settled := 0
	for _, e := range evs {
		if e.Actor == evidence.Actor("payments") {
			settled++
			require.Equal(t, op.EventSucceed, e.Event)
		}
	}
	require.Equal(t, 1, settled, "one change of the operation")
	finals := 0
	for _, r := range b.Results(t) {
		if r.OperationID == o.ID && r.Status == string(op.StateCompletedSuccess) {
			finals++
			require.Equal(t, "ch_flood", r.ExternalObjectID)
			require.True(t, r.Final)
		}
	}
	require.Equal(t, 1, finals, "one result to the agent")
	require.Equal(t, 1, b.Vendors.Stats().Captures)
	require.Equal(t, float64(n-1), b.counter(t, "opledger_webhook_deliveries_total", map[string]string{"provider": "payments", "result": "duplicate"}))
	require.Equal(t, 1.0, b.counter(t, "opledger_webhook_settlements_total", map[string]string{"provider": "payments", "tool": "capture_payment", "to": "completed_success"}))
}

// A webhook that arrives before its operation was dispatched is held; the
// dispatch then times out after the vendor committed, and the reconciler
// (in its own Postgres role) settles the operation with the held evidence,
// without asking the vendor.
//
// Breaking it: settling a pending_dispatch operation would let an effect
// the ledger never sent complete it; dropping the early webhook would leave
// the reconciler to look the charge up (a capture_lookup request).
func TestWebhookBeforeDispatchIsHeldThenApplied(t *testing.T) {
	t.Parallel()
	b := setup(t)
	o := b.SubmitCapture(t, "wf_1", "o_early")
	body := paymentEvent("payment.succeeded", o.IdempotencyKey, "ch_early")
	a := b.post(t, "/webhooks/payments", std(t, testSecret, "msg_early", 0, body), body)
	require.Equal(t, webhook.ResultEvidence, a.code())
	e, err := b.Store.EvidenceGet(b.Ctx, "payments", "msg_early")
	require.NoError(t, err)
	require.Equal(t, store.EvidenceHeld, e.Status)
	require.Equal(t, o.ID, e.OperationID, "the operation it names is known")
	require.Contains(t, e.Reason, "pending_dispatch")
	require.Equal(t, op.StatePendingDispatch, b.Operation(t, o.ID).State, "not settled before it was sent")

	require.NoError(t, b.Vendors.InjectFault(vendors.Fault{Route: vendors.RouteCapture, Kind: vendors.FaultTimeoutAfterCommit}))
	d := dispatch.New(dispatch.Config{Name: "dispatcher-1"}, b.Store, b.Bus, b.Registry, b.Adapters, nil, b.Log)
	require.NoError(t, d.Handle(b.Ctx, b.LastCommand(t, o, wire.KindDispatch).Delivery(1)))
	o = b.Operation(t, o.ID)
	require.Equal(t, op.StateUnknownOutcome, o.State)

	rst, err := store.Open(b.Ctx, testdb.User(t, b.DBURL, "opledger_reconciler"), store.Options{})
	require.NoError(t, err)
	defer rst.Close()
	rc := reconcile.New(reconcile.Config{Name: "reconciler-1", Evidence: b.settler}, rst, b.Bus, b.Registry, b.Adapters, b.m, b.Log)
	require.NoError(t, rc.Handle(b.Ctx, b.LastCommand(t, o, wire.KindUnknown).Delivery(1)))
	o = b.Operation(t, o.ID)
	require.Equal(t, op.StateCompletedSuccess, o.State)
	require.Equal(t, "ch_early", o.ExternalObjectID)
	require.Zero(t, b.Vendors.Stats().Requests[vendors.RouteCaptureLookup], "the vendor was not asked")
	require.Equal(t, 1.0, b.counter(t, "opledger_reconciliations_total", map[string]string{"tool": "capture_payment", "verdict": "webhook"}),
		"the reconciler counts an outcome a webhook resolved apart from its lookups")
	require.Zero(t, b.counter(t, "opledger_reconciliations_total", map[string]string{"tool": "capture_payment", "verdict": "found"}))
	e, err = b.Store.EvidenceGet(b.Ctx, "payments", "msg_early")
	require.NoError(t, err)
	require.Equal(t, store.EvidenceApplied, e.Status)
	evs, err := b.Store.Events(b.Ctx, o.ID)
	require.NoError(t, err)
	last := evs[len(evs)-1]
	require.Equal(t, op.EventSucceed, last.Event)
	require.Equal(t, op.StateUnknownOutcome, last.From)
	require.Equal(t, evidence.Actor("payments"), last.Actor)
	require.Contains(t, string(last.Detail), "msg_early")
}

// The maintenance leader's pass (in the maintainer's role) applies held
// evidence once its operation can be settled, and once the hold (1 s here)
// ran out flags, with an alert, evidence no operation explains
// (out_of_band) and evidence about an operation a person owns (expired).
func TestMaintainerSettlesAndExpiresHeldEvidence(t *testing.T) {
	t.Parallel()
	b := setup(t)
	mst, err := store.Open(b.Ctx, testdb.User(t, b.DBURL, "opledger_maintainer"), store.Options{})
	require.NoError(t, err)
	defer mst.Close()
	mt := maintain.New(maintain.Config{Name: "maintainer-1", Evidence: b.settler}, mst, b.Registry, nil, nil, b.Log)

	// Held while pending, applied by the pass once unknown.
	o := b.SubmitCapture(t, "wf_1", "o_held")
	body := paymentEvent("payment.succeeded", o.IdempotencyKey, "ch_held")
	require.Equal(t, 200, b.post(t, "/webhooks/payments", std(t, testSecret, "msg_held", 0, body), body).status)
	// No operation at all has this key.
	ghost := paymentEvent("payment.succeeded", "payment:o_never:capture:4900:USD:v1", "ch_ghost")
	require.Equal(t, 200, b.post(t, "/webhooks/payments", std(t, testSecret, "msg_ghost", 0, ghost), ghost).status)

	// Escalated to a person: a webhook may not settle it; once the hold
	// runs out, the evidence is flagged for that person.
	esc := b.unknownCapture(t, "o_escalated")
	esc, err = b.Store.Transition(b.Ctx, store.Change{OperationID: esc.ID, From: esc.State, LeaseEpoch: esc.LeaseEpoch,
		Events: []op.Event{op.EventEscalate}, Actor: "test"})
	require.NoError(t, err)
	escBody := paymentEvent("payment.succeeded", esc.IdempotencyKey, "ch_escalated")
	require.Equal(t, 200, b.post(t, "/webhooks/payments", std(t, testSecret, "msg_escalated", 0, escBody), escBody).status)

	require.NoError(t, b.Vendors.InjectFault(vendors.Fault{Route: vendors.RouteCapture, Kind: vendors.FaultTimeoutAfterCommit}))
	d := dispatch.New(dispatch.Config{Name: "dispatcher-1"}, b.Store, b.Bus, b.Registry, b.Adapters, nil, b.Log)
	require.NoError(t, d.Handle(b.Ctx, b.LastCommand(t, o, wire.KindDispatch).Delivery(1)))
	require.Equal(t, op.StateUnknownOutcome, b.Operation(t, o.ID).State)

	status := func(id string) string {
		e, err := b.Store.EvidenceGet(b.Ctx, "payments", id)
		require.NoError(t, err)
		return e.Status
	}
	require.Eventually(t, func() bool {
		_, err := mt.SettleHeld(b.Ctx)
		require.NoError(t, err)
		return status("msg_held") == store.EvidenceApplied && status("msg_ghost") == store.EvidenceOutOfBand &&
			status("msg_escalated") == store.EvidenceExpired
	}, 10*time.Second, 50*time.Millisecond)
	require.Equal(t, op.StateEscalated, b.Operation(t, esc.ID).State, "the person decides")
	o = b.Operation(t, o.ID)
	require.Equal(t, op.StateCompletedSuccess, o.State)
	require.Equal(t, "ch_held", o.ExternalObjectID)

	var alerts []wire.Alert
	for _, r := range b.Outbox(t) {
		if r.Subject == wire.WebhookAlertSubject("payments") {
			var a wire.Alert
			require.NoError(t, json.Unmarshal(r.Payload, &a))
			alerts = append(alerts, a)
		}
	}
	require.Len(t, alerts, 2)
	byID := map[string]wire.Alert{}
	for _, a := range alerts {
		byID[a.DeliveryID] = a
	}
	require.Equal(t, wire.AlertWebhookOutOfBand, byID["msg_ghost"].Kind)
	require.Equal(t, "ch_ghost", byID["msg_ghost"].ExternalObjectID)
	require.Empty(t, byID["msg_ghost"].OperationID)
	require.Equal(t, wire.AlertWebhookExpired, byID["msg_escalated"].Kind)
	require.Equal(t, esc.ID, byID["msg_escalated"].OperationID)
	require.Equal(t, string(op.StateEscalated), byID["msg_escalated"].State)

	// Nothing is due any more: the pass decides nothing.
	n, err := mt.SettleHeld(b.Ctx)
	require.NoError(t, err)
	require.Zero(t, n)
}

// Webhooks about operations that already settled: the same outcome and
// object is confirmed and changes nothing; another object is flagged as a
// possible out-of-band duplicate; a failure reported for a completed
// operation is a contradiction; any effect reported for an operation that
// was cancelled before it was sent is out of band. Every flag writes an
// alert; none changes the operation.
func TestWebhooksAboutSettledOperations(t *testing.T) {
	t.Parallel()
	b := setup(t)
	o := b.SubmitCapture(t, "wf_1", "o_done")
	d := dispatch.New(dispatch.Config{Name: "dispatcher-1"}, b.Store, b.Bus, b.Registry, b.Adapters, nil, b.Log)
	require.NoError(t, d.Handle(b.Ctx, b.LastCommand(t, o, wire.KindDispatch).Delivery(1)))
	o = b.Operation(t, o.ID)
	require.Equal(t, op.StateCompletedSuccess, o.State)
	ch := o.ExternalObjectID
	require.NotEmpty(t, ch)

	cancelled := b.SubmitCapture(t, "wf_1", "o_cancelled")
	_, err := b.Store.Transition(b.Ctx, store.Change{OperationID: cancelled.ID, From: cancelled.State, LeaseEpoch: cancelled.LeaseEpoch,
		Events: []op.Event{op.EventCancel}, Actor: "test"})
	require.NoError(t, err)

	for _, c := range []struct {
		id, typ, key, chargeID, want string
	}{
		{"msg_same", "payment.succeeded", o.IdempotencyKey, ch, store.EvidenceConfirmed},
		{"msg_other", "payment.succeeded", o.IdempotencyKey, "ch_outside", store.EvidenceOutOfBand},
		{"msg_failed", "payment.failed", o.IdempotencyKey, ch, store.EvidenceContradicted},
		{"msg_cancelled", "payment.succeeded", cancelled.IdempotencyKey, "ch_cancelled", store.EvidenceOutOfBand},
	} {
		body := paymentEvent(c.typ, c.key, c.chargeID)
		a := b.post(t, "/webhooks/payments", std(t, testSecret, c.id, 0, body), body)
		require.Equal(t, 200, a.status, c.id)
		e, err := b.Store.EvidenceGet(b.Ctx, "payments", c.id)
		require.NoError(t, err)
		require.Equal(t, c.want, e.Status, "%s: %s", c.id, e.Reason)
		require.NotEmpty(t, e.OperationID, c.id)
	}
	after := b.Operation(t, o.ID)
	require.Equal(t, o.Version, after.Version, "no webhook changed the settled operation")
	require.Equal(t, ch, after.ExternalObjectID)
	require.Equal(t, op.StateCancelled, b.Operation(t, cancelled.ID).State)
	kinds := map[string]int{}
	for _, r := range b.Outbox(t) {
		if strings.HasPrefix(r.Subject, wire.AlertSubjectPrefix) {
			var a wire.Alert
			require.NoError(t, json.Unmarshal(r.Payload, &a))
			kinds[a.Kind]++
		}
	}
	require.Equal(t, map[string]int{wire.AlertWebhookOutOfBand: 2, wire.AlertWebhookContradiction: 1}, kinds)
	flagged, err := b.Store.ListEvidence(b.Ctx, store.EvidenceFilter{Statuses: store.EvidenceFlagged})
	require.NoError(t, err)
	require.Len(t, flagged, 3)
	require.Equal(t, 2.0, b.counter(t, "opledger_webhook_evidence_total", map[string]string{"provider": "payments", "status": "out_of_band"}))
}

// A Stripe-signed event settles the Stripe-like payment intent whose
// request timed out, matched by the idempotency key Stripe puts in the
// event's request.
func TestStripeEventSettlesPaymentIntent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, b.Vendors.InjectFault(vendors.Fault{Route: vendors.RoutePaymentIntent, Kind: vendors.FaultTimeoutAfterCommit}))
	o := b.Submit(t, wire.Intent{EventID: "evt_pi", WorkflowID: "wf_1", Tool: "create_payment_intent",
		Args: json.RawMessage(`{"order_id":"o_pi","customer_id":"cus_1","amount_cents":4900,"currency":"usd"}`)})
	d := dispatch.New(dispatch.Config{Name: "dispatcher-1"}, b.Store, b.Bus, b.Registry, b.Adapters, nil, b.Log)
	require.NoError(t, d.Handle(b.Ctx, b.LastCommand(t, o, wire.KindDispatch).Delivery(1)))
	require.Equal(t, op.StateUnknownOutcome, b.Operation(t, o.ID).State)

	body := []byte(fmt.Sprintf(`{"id":"evt_1","object":"event","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1","status":"succeeded"}},"request":{"id":"req_1","idempotency_key":%q}}`, o.IdempotencyKey))
	h := http.Header{"Stripe-Signature": {signStripe(stripeSecret, time.Now().Unix(), body)}}
	a := b.post(t, "/webhooks/payment_intents", h, body)
	require.Equal(t, webhook.ResultEvidence, a.code())
	o = b.Operation(t, o.ID)
	require.Equal(t, op.StateCompletedSuccess, o.State)
	require.Equal(t, "pi_1", o.ExternalObjectID)
	in, err := b.Store.InboxEntry(context.Background(), store.WebhookSource("payment_intents"), "evt_1")
	require.NoError(t, err, "a Stripe delivery is recorded under its event id")
	require.Equal(t, op.DecisionNew, in.Decision)
}
