package app_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/examples"
	"github.com/opledger/opledger/internal/api"
	"github.com/opledger/opledger/internal/app"
	"github.com/opledger/opledger/internal/ops"
	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/pkg/client"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// An obviously fake secret ("test-only-not-a-secret") the test signs its
// own webhooks with, given to the stack as an operator would: through
// OPLEDGER_WEBHOOK_SECRETS_PAYMENTS. The stand-in vendors sign with a
// secret the stack made for this run.
const testWebhookSecret = "whsec_dGVzdC1vbmx5LW5vdC1hLXNlY3JldA=="

// The whole system (every service and part in its own Postgres role,
// embedded JetStream, the stand-in vendors sending signed webhooks to
// planner-ingest's HTTP server):
//
//   - a capture times out after the vendor charged, the vendor's lookups
//     fail, and the vendor's (late) webhook settles the unknown_outcome
//     operation completed_success with its charge id and a result to the
//     agent;
//   - an email's webhook, sent twice, arrives while the dispatcher still
//     waits for the vendor's answer: the operation settles from
//     dispatched, the redelivery changes nothing, the dispatcher's late
//     timeout is fenced off;
//   - a capture's webhook arrives before the vendor answered the call;
//   - a webhook (signed here) reports a second charge under a settled
//     operation's key, and another one a charge no operation has: both are
//     flagged out of band, published on ALERTS and listed by the API.
//
// Each effect happened once at the vendor.
func TestVendorWebhooksSettleOperations(t *testing.T) {
	t.Parallel()
	cs := testdb.New(t)
	regYAML := bytes.ReplaceAll(examples.Registry, []byte("    hold: 10m\n"), []byte("    hold: 2s\n"))
	env := map[string]string{"OPLEDGER_WEBHOOK_SECRETS_PAYMENTS": testWebhookSecret}
	token, entry, err := api.GenerateToken("viewer", ops.RoleViewer)
	require.NoError(t, err)
	tokens, err := api.NewTokens([]api.TokenEntry{entry})
	require.NoError(t, err)
	d, err := app.StartStack(context.Background(), app.StackConfig{
		Infra:          app.InfraConfig{DatabaseURL: cs, MemoryStreams: true},
		Registry:       app.RegistryConfig{YAML: regYAML, LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }},
		HTTPAddr:       "127.0.0.1:0",
		APITokens:      tokens,
		VendorWebhooks: true,
		Services: app.ServicesConfig{Dispatchers: 1, Relays: 1, DatabaseURLs: roleUsers(t, cs),
			Reconcile: reconcileFast, Maintain: maintainFast},
	})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	cl, err := client.Connect(d.Infra.NATSURL, "webhook-agent")
	require.NoError(t, err)
	defer cl.Close()
	results, err := cl.Results(ctx, "opledger.results.wf_wh")
	require.NoError(t, err)
	var mu sync.Mutex
	var seen []wire.Result
	go func() {
		for r := range results {
			mu.Lock()
			seen = append(seen, r)
			mu.Unlock()
		}
	}()
	resultsOf := func(id string) []wire.Result {
		mu.Lock()
		defer mu.Unlock()
		var out []wire.Result
		for _, r := range seen {
			if r.OperationID == id {
				out = append(out, r)
			}
		}
		return out
	}
	submit := func(in wire.Intent) *op.Operation {
		in.WorkflowID = "wf_wh"
		require.NoError(t, cl.Publish(ctx, in, ""))
		var id string
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, r := range seen {
				if r.EventID == in.EventID && r.OperationID != "" {
					id = r.OperationID
					return true
				}
			}
			return false
		}, 20*time.Second, 10*time.Millisecond, "no answer to %s", in.EventID)
		o, err := d.Services.Store.Operation(ctx, id)
		require.NoError(t, err)
		return o
	}
	settled := func(id string) *op.Operation {
		var o *op.Operation
		require.Eventually(t, func() bool {
			var err error
			o, err = d.Services.Store.Operation(ctx, id)
			require.NoError(t, err)
			return o.State == op.StateCompletedSuccess
		}, 30*time.Second, 20*time.Millisecond, "operation %s never completed", id)
		return o
	}
	// settledBy returns the event that completed o, which must be a webhook's.
	settledBy := func(o *op.Operation, provider string) op.EventRecord {
		evs, err := d.Services.Store.Events(ctx, o.ID)
		require.NoError(t, err)
		var done []op.EventRecord
		for _, e := range evs {
			if e.To == op.StateCompletedSuccess {
				done = append(done, e)
			}
		}
		require.Len(t, done, 1, "completed once")
		require.Equal(t, "webhook:"+provider, done[0].Actor, "settled by the webhook")
		return done[0]
	}

	for _, f := range []vendors.Fault{
		// A: the capture times out after the charge; the charge's webhook
		// comes 3 s later; the vendor's lookups fail meanwhile.
		{Route: vendors.RouteCapture, Kind: vendors.FaultTimeoutAfterCommit},
		{Route: vendors.RouteCapture, Kind: vendors.FaultWebhookDelay, Delay: 3 * time.Second},
		{Route: vendors.RouteCaptureLookup, Kind: vendors.FaultError500BeforeCommit, Times: 100},
		// B: the email times out after sending; its webhook comes twice, at once.
		{Route: vendors.RouteEmail, Kind: vendors.FaultTimeoutAfterCommit},
		{Route: vendors.RouteEmail, Kind: vendors.FaultWebhookDuplicate},
	} {
		require.NoError(t, d.Vendors.InjectFault(f))
	}
	oa := submit(wire.Intent{EventID: "conv_wh:call_a", Tool: "capture_payment", Args: json.RawMessage(`{"order_id":"o_wh_a","customer_id":"c1","amount_cents":4900,"currency":"USD"}`)})
	ob := submit(wire.Intent{EventID: "conv_wh:call_b", Tool: "send_email", Args: json.RawMessage(`{"to":"a@example.com","template":"payment_receipt","reference":"o_wh_b"}`)})

	// A.
	oa = settled(oa.ID)
	e := settledBy(oa, "payments")
	require.Equal(t, op.StateUnknownOutcome, e.From, "the webhook closed the unknown outcome")
	require.True(t, strings.HasPrefix(oa.ExternalObjectID, "ch_"))
	require.Equal(t, 1, d.Vendors.EffectsByKey(vendors.KindCapture)[oa.IdempotencyKey], "one charge")
	require.Eventually(t, func() bool {
		for _, r := range resultsOf(oa.ID) {
			if r.Status == string(op.StateCompletedSuccess) && r.Final && r.ExternalObjectID == oa.ExternalObjectID {
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond, "the agent is told, with the charge id")

	// B.
	ob = settled(ob.ID)
	e = settledBy(ob, "email")
	require.Equal(t, op.StateDispatched, e.From, "settled while the dispatcher waited for the vendor")
	require.True(t, strings.HasPrefix(ob.ExternalObjectID, "msg_"))
	ev, err := d.Services.Store.EvidenceOf(ctx, ob.ID)
	require.NoError(t, err)
	require.Len(t, ev, 1)
	require.Eventually(t, func() bool {
		in, err := d.Services.Store.InboxEntry(ctx, store.WebhookSource("email"), ev[0].DeliveryID)
		require.NoError(t, err)
		return in.DuplicateCount == 1
	}, 10*time.Second, 10*time.Millisecond, "the second copy is counted as a redelivery")
	require.Eventually(t, func() bool {
		atts, err := d.Services.Store.Attempts(ctx, ob.ID)
		require.NoError(t, err)
		return len(atts) == 1 && atts[0].Outcome == op.OutcomeUnknown
	}, 10*time.Second, 20*time.Millisecond, "the dispatcher's timeout is recorded on its attempt, fenced off the operation")
	require.Equal(t, op.StateCompletedSuccess, settled(ob.ID).State)
	require.Equal(t, 1, d.Vendors.Stats().Emails)

	// C: the webhook comes before the vendor's answer.
	require.NoError(t, d.Vendors.InjectFault(vendors.Fault{Route: vendors.RouteCapture, Kind: vendors.FaultWebhookBeforeAnswer}))
	oc := settled(submit(wire.Intent{EventID: "conv_wh:call_c", Tool: "capture_payment",
		Args: json.RawMessage(`{"order_id":"o_wh_c","customer_id":"c1","amount_cents":4900,"currency":"USD"}`)}).ID)
	require.Equal(t, op.StateDispatched, settledBy(oc, "payments").From)
	require.Equal(t, 1, d.Vendors.EffectsByKey(vendors.KindCapture)[oc.IdempotencyKey])

	// D and E: webhooks no operation the ledger sent explains.
	post := func(id string, body []byte) int {
		ts := time.Now().Unix()
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(testWebhookSecret, "whsec_"))
		require.NoError(t, err)
		mac := hmac.New(sha256.New, key)
		fmt.Fprintf(mac, "%s.%d.%s", id, ts, body)
		req, err := http.NewRequest(http.MethodPost, d.HTTP.URL()+"/webhooks/payments", bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("webhook-id", id)
		req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
		req.Header.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	event := func(key, charge string) []byte {
		return []byte(fmt.Sprintf(`{"type":"payment.succeeded","data":{"id":%q,"idempotency_key":%q}}`, charge, key))
	}
	require.Equal(t, 200, post("msg_second_charge", event(oc.IdempotencyKey, "ch_made_elsewhere")))
	require.Equal(t, 200, post("msg_no_such_order", event("payment:o_never_sent:capture:4900:USD:v1", "ch_nobody")))

	nc, err := nats.Connect(d.Infra.NATSURL)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	var alerts []wire.Alert
	require.Eventually(t, func() bool {
		st, err := js.Stream(ctx, wire.StreamAlerts)
		require.NoError(t, err)
		info, err := st.Info(ctx)
		require.NoError(t, err)
		if info.State.Msgs < 2 {
			return false
		}
		alerts = nil
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
			m, err := st.GetMsg(ctx, seq)
			require.NoError(t, err)
			require.Equal(t, wire.WebhookAlertSubject("payments"), m.Subject)
			var a wire.Alert
			require.NoError(t, json.Unmarshal(m.Data, &a))
			alerts = append(alerts, a)
		}
		return true
	}, 30*time.Second, 50*time.Millisecond, "both flags are published on ALERTS (the ghost after its 2 s hold)")
	byID := map[string]wire.Alert{}
	for _, a := range alerts {
		require.Equal(t, wire.AlertWebhookOutOfBand, a.Kind)
		byID[a.DeliveryID] = a
	}
	require.Equal(t, oc.ID, byID["msg_second_charge"].OperationID)
	require.Equal(t, oc.ExternalObjectID, byID["msg_second_charge"].OperationExternalObjectID)
	require.Equal(t, "ch_made_elsewhere", byID["msg_second_charge"].ExternalObjectID)
	require.Empty(t, byID["msg_no_such_order"].OperationID)

	// Operators see them: the flagged list, and in the operation.
	get := func(path string, out any) {
		req, err := http.NewRequest(http.MethodGet, d.HTTP.URL()+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", path, raw)
		require.NoError(t, json.Unmarshal(raw, out))
	}
	var list api.WebhooksResponse
	get("/v1/webhooks", &list)
	require.Len(t, list.Webhooks, 2)
	for _, w := range list.Webhooks {
		require.Equal(t, store.EvidenceOutOfBand, w.Status)
	}
	var detail ops.Detail
	get("/v1/operations/"+oc.ID, &detail)
	statuses := map[string]string{}
	for _, w := range detail.Webhooks {
		statuses[w.DeliveryID] = w.Status
	}
	require.Equal(t, store.EvidenceOutOfBand, statuses["msg_second_charge"])
	require.NotEmpty(t, firstKey(statuses, store.EvidenceApplied), "and the webhook that settled it")

	// The settlements are counted apart from attempts and lookups.
	mreq, err := http.NewRequest(http.MethodGet, d.HTTP.URL()+"/metrics", nil)
	require.NoError(t, err)
	mreq.Header.Set("Authorization", "Bearer "+token) // any operator role reads the metrics
	resp, err := http.DefaultClient.Do(mreq)
	require.NoError(t, err)
	metrics, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Contains(t, string(metrics), `opledger_webhook_settlements_total{provider="payments",to="completed_success",tool="capture_payment"} 2`)
	require.Contains(t, string(metrics), `opledger_webhook_settlements_total{provider="email",to="completed_success",tool="send_email"} 1`)
	require.Contains(t, string(metrics), `opledger_webhook_evidence_total{provider="payments",status="out_of_band"} 2`)
}

// firstKey returns a key of m whose value is v, or "".
func firstKey(m map[string]string, v string) string {
	for k, x := range m {
		if x == v {
			return k
		}
	}
	return ""
}
