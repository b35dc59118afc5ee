package vendors_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/vendors"
)

const (
	testStdSecret    = "whsec_dGVzdC1vbmx5LW5vdC1hLXNlY3JldA=="
	testStripeSecret = "whsec_test_only_not_a_real_stripe_secret"
)

// received is one webhook the receiver got, its signature checked by the
// schemes' published rules (written here, not taken from opledger).
type received struct {
	provider, id string
	body         map[string]any
	valid        bool
	at           time.Time
}

type receiver struct {
	*httptest.Server
	mu    sync.Mutex
	got   []received
	block chan struct{} // when set, deliveries wait on it
}

func startReceiver(t *testing.T) *receiver {
	t.Helper()
	rc := &receiver{}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		provider := strings.TrimPrefix(r.URL.Path, "/webhooks/")
		rec := received{provider: provider, at: time.Now()}
		_ = json.Unmarshal(raw, &rec.body)
		if provider == vendors.ProviderPaymentIntents {
			var ts, v1 string
			for _, kv := range strings.Split(r.Header.Get("Stripe-Signature"), ",") {
				k, v, _ := strings.Cut(kv, "=")
				switch k {
				case "t":
					ts = v
				case "v1":
					v1 = v
				}
			}
			mac := hmac.New(sha256.New, []byte(testStripeSecret))
			fmt.Fprintf(mac, "%s.%s", ts, raw)
			rec.valid = hex.EncodeToString(mac.Sum(nil)) == v1
			rec.id, _ = rec.body["id"].(string)
		} else {
			key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(testStdSecret, "whsec_"))
			mac := hmac.New(sha256.New, key)
			rec.id = r.Header.Get("webhook-id")
			fmt.Fprintf(mac, "%s.%s.%s", rec.id, r.Header.Get("webhook-timestamp"), raw)
			rec.valid = r.Header.Get("webhook-signature") == "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil))
		}
		rc.mu.Lock()
		block := rc.block
		rc.got = append(rc.got, rec)
		rc.mu.Unlock()
		if block != nil {
			<-block
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) all() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.got...)
}

func (rc *receiver) wait(t *testing.T, n int) []received {
	t.Helper()
	require.Eventually(t, func() bool { return len(rc.all()) >= n }, 5*time.Second, 5*time.Millisecond)
	return rc.all()
}

func TestWebhooksAfterEffects(t *testing.T) {
	t.Parallel()
	b := setup(t, vendors.Options{})
	rc := startReceiver(t)
	b.srv.SetWebhooks(vendors.WebhookTarget{URL: rc.URL + "/webhooks/", Secrets: map[string]string{
		vendors.ProviderPayments: testStdSecret, vendors.ProviderEmail: testStdSecret, vendors.ProviderPaymentIntents: testStripeSecret}})

	ch := b.do("POST", "/v1/payments/capture", captureBody, "Idempotency-Key", "k1")
	require.Equal(t, http.StatusOK, ch.status)
	got := rc.wait(t, 1)
	require.True(t, got[0].valid, "signed by the Standard Webhooks scheme")
	require.Equal(t, vendors.ProviderPayments, got[0].provider)
	require.Equal(t, "payment.succeeded", got[0].body["type"])
	data := got[0].body["data"].(map[string]any)
	require.Equal(t, ch.body["id"], data["id"])
	require.Equal(t, "k1", data["idempotency_key"])

	// A replay under the same key makes no effect, and no webhook.
	require.Equal(t, http.StatusOK, b.do("POST", "/v1/payments/capture", captureBody, "Idempotency-Key", "k1").status)
	b.do("POST", "/v1/messages", `{"to":"a@example.com","template":"t"}`, "X-Client-Reference", "email:a:t:v1")
	b.do("POST", "/v1/payment_intents", "amount=4900&currency=usd&metadata[order_id]=o1",
		"Content-Type", "application/x-www-form-urlencoded", "Idempotency-Key", "intent:o1:4900:usd:v1")
	got = rc.wait(t, 3)
	require.Len(t, got, 3)
	byProvider := map[string]received{}
	for _, g := range got {
		require.True(t, g.valid, "%s is signed", g.provider)
		byProvider[g.provider] = g
	}
	msg := byProvider[vendors.ProviderEmail]
	require.Equal(t, "message.delivered", msg.body["type"])
	require.Equal(t, "email:a:t:v1", msg.body["data"].(map[string]any)["client_reference"])
	pi := byProvider[vendors.ProviderPaymentIntents]
	require.Equal(t, "payment_intent.succeeded", pi.body["type"])
	require.True(t, strings.HasPrefix(pi.id, "evt_"))
	require.Equal(t, "intent:o1:4900:usd:v1", pi.body["request"].(map[string]any)["idempotency_key"])
	require.True(t, strings.HasPrefix(pi.body["data"].(map[string]any)["object"].(map[string]any)["id"].(string), "pi_"))
	// The receiver records a delivery before it answers: the vendor counts
	// it delivered once the answer is back.
	require.Eventually(t, func() bool { return b.srv.Stats().WebhooksDelivered == 3 }, 5*time.Second, 5*time.Millisecond)
	require.Equal(t, 3, b.srv.Stats().WebhooksSent)
}

func TestWebhookFaults(t *testing.T) {
	t.Parallel()
	b := setup(t, vendors.Options{})
	rc := startReceiver(t)
	b.srv.SetWebhooks(vendors.WebhookTarget{URL: rc.URL + "/webhooks/", Secrets: map[string]string{vendors.ProviderPayments: testStdSecret}})
	capture := func(order string) reply {
		return b.do("POST", "/v1/payments/capture", strings.Replace(captureBody, "o1", order, 1), "Idempotency-Key", order)
	}

	// Dropped: the effect happens, no webhook.
	require.NoError(t, b.srv.InjectFault(vendors.Fault{Route: vendors.RouteCapture, Kind: vendors.FaultWebhookDrop}))
	capture("o_drop")
	// Duplicated: two deliveries, one id, one body.
	require.NoError(t, b.srv.InjectFault(vendors.Fault{Route: vendors.RouteCapture, Kind: vendors.FaultWebhookDuplicate}))
	capture("o_dup")
	got := rc.wait(t, 2)
	require.Equal(t, got[0].id, got[1].id)
	require.Equal(t, got[0].body, got[1].body)
	require.Equal(t, "o_dup", got[0].body["data"].(map[string]any)["order_id"])

	// Delayed: a later effect's webhook overtakes it.
	require.NoError(t, b.srv.InjectFault(vendors.Fault{Route: vendors.RouteCapture, Kind: vendors.FaultWebhookDelay, Delay: 300 * time.Millisecond}))
	capture("o_late")
	capture("o_early")
	got = rc.wait(t, 4)
	require.Equal(t, "o_early", got[2].body["data"].(map[string]any)["order_id"])
	require.Equal(t, "o_late", got[3].body["data"].(map[string]any)["order_id"], "reordered")

	// Before the answer: the webhook is delivered while the API call waits.
	rc.mu.Lock()
	rc.block = make(chan struct{})
	block := rc.block
	rc.mu.Unlock()
	require.NoError(t, b.srv.InjectFault(vendors.Fault{Route: vendors.RouteCapture, Kind: vendors.FaultWebhookBeforeAnswer}))
	answered := make(chan reply, 1)
	go func() { answered <- capture("o_first") }()
	rc.wait(t, 5)
	select {
	case <-answered:
		t.Fatal("the API answered before its webhook was delivered")
	case <-time.After(100 * time.Millisecond):
	}
	close(block)
	require.Equal(t, http.StatusOK, (<-answered).status)
	require.Equal(t, 5, b.srv.Stats().Captures)
	require.Len(t, rc.all(), 5, "five captures, one webhook dropped, one sent twice")
}
