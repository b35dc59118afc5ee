package vendors_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/vendors"
)

// TestDelayedVisibility: on every keyed route the effect happens, the client
// gets a 500, and the lookup does not find it while the delay lasts; a retry
// under the same key is still replayed (the idempotency store is consistent).
func TestDelayedVisibility(t *testing.T) {
	t.Parallel()
	type route struct {
		name   string
		post   func(b *bundle, key string) reply
		lookup string
		kind   string
	}
	routes := []route{
		{vendors.RouteCapture, func(b *bundle, key string) reply {
			return b.do("POST", "/v1/payments/capture", captureBody, "Idempotency-Key", key)
		}, "/v1/payments?idempotency_key=", vendors.KindCapture},
		{vendors.RoutePaymentIntent, func(b *bundle, key string) reply {
			return b.intent(intentBody, "Idempotency-Key", key)
		}, "/v1/payment_intents?idempotency_key=", vendors.KindPaymentIntent},
		{vendors.RouteTicket, func(b *bundle, key string) reply {
			return b.do("POST", "/v1/tickets", `{"conversation_id":"c1"}`, "Idempotency-Key", key)
		}, "/v1/tickets?idempotency_key=", vendors.KindTicket},
		{vendors.RouteRefund, func(b *bundle, key string) reply {
			require.Equal(b.t, http.StatusOK, b.do("POST", "/v1/payments/capture", captureBody, "Idempotency-Key", "cap-"+key).status)
			return b.do("POST", "/v1/refunds", `{"order_id":"o1","amount_cents":100}`, "Idempotency-Key", key)
		}, "/v1/refunds?idempotency_key=", vendors.KindRefund},
		{vendors.RouteEmail, func(b *bundle, key string) reply {
			return b.do("POST", "/v1/messages", `{"to":"a@example.com"}`, "X-Client-Reference", key)
		}, "/v1/messages?client_reference=", vendors.KindEmail},
	}
	for _, rt := range routes {
		t.Run(rt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, vendors.Options{})
			require.NoError(t, b.srv.InjectFault(vendors.Fault{Route: rt.name, Kind: vendors.FaultDelayedVisibility, Delay: time.Hour}))
			require.Equal(t, http.StatusInternalServerError, rt.post(b, "hidden").status)
			require.Equal(t, map[string]int{"hidden": 1}, b.srv.EffectsByKey(rt.kind), "the effect happened")
			require.Equal(t, http.StatusNotFound, b.do("GET", rt.lookup+"hidden", "").status, "but lookups do not see it")

			if rt.name != vendors.RouteEmail { // email has no idempotency: a resend is a second message
				replay := rt.post(b, "hidden")
				require.Equal(t, "true", replay.header.Get("Idempotent-Replayed"))
				require.Equal(t, http.StatusNotFound, b.do("GET", rt.lookup+"hidden", "").status)
				require.Equal(t, map[string]int{"hidden": 1}, b.srv.EffectsByKey(rt.kind))
			}

			require.NoError(t, b.srv.InjectFault(vendors.Fault{Route: rt.name, Kind: vendors.FaultDelayedVisibility, Delay: 20 * time.Millisecond}))
			require.Equal(t, http.StatusInternalServerError, rt.post(b, "soon").status)
			require.Eventually(t, func() bool {
				return b.do("GET", rt.lookup+"soon", "").status == http.StatusOK
			}, 5*time.Second, 5*time.Millisecond, "visible once the delay has passed")
		})
	}
}

// TestDelayedVisibilityEmailResend: a later, visible message with the same
// reference is found while the first one is still hidden.
func TestDelayedVisibilityEmailResend(t *testing.T) {
	t.Parallel()
	b := setup(t, vendors.Options{})
	require.NoError(t, b.srv.InjectFault(vendors.Fault{Route: vendors.RouteEmail, Kind: vendors.FaultDelayedVisibility, Delay: time.Hour}))
	body := `{"to":"a@example.com"}`
	require.Equal(t, http.StatusInternalServerError, b.do("POST", "/v1/messages", body, "X-Client-Reference", "r").status)
	second := b.do("POST", "/v1/messages", body, "X-Client-Reference", "r")
	require.Equal(t, http.StatusAccepted, second.status)
	found := b.do("GET", "/v1/messages?client_reference=r", "")
	require.Equal(t, http.StatusOK, found.status)
	require.Equal(t, second.body["id"], found.body["id"])
	require.Equal(t, 2, b.srv.Stats().Emails)
}

// TestDelayedVisibilityCRM: GET shows the record as it was before a hidden
// write, and a later visible write shows everything.
func TestDelayedVisibilityCRM(t *testing.T) {
	t.Parallel()
	b := setup(t, vendors.Options{})
	put := func(id, body string) int { return b.do("PUT", "/v1/crm/records/"+id, body).status }
	get := func(id string) reply { return b.do("GET", "/v1/crm/records/"+id, "") }

	require.Equal(t, http.StatusOK, put("r1", `{"status":"open"}`))
	require.NoError(t, b.srv.InjectFault(vendors.Fault{Route: vendors.RouteCRM, Kind: vendors.FaultDelayedVisibility, Delay: time.Hour, Times: 2}))
	require.Equal(t, http.StatusInternalServerError, put("r1", `{"status":"won"}`))
	old := get("r1")
	require.EqualValues(t, 1, old.body["version"])
	require.Equal(t, map[string]any{"status": "open"}, old.body["fields"])
	require.Equal(t, 2, b.srv.Stats().CRMWrites)

	// A new record written hidden does not exist for GET yet.
	require.Equal(t, http.StatusInternalServerError, put("r2", `{"status":"open"}`))
	require.Equal(t, http.StatusNotFound, get("r2").status)

	require.Equal(t, http.StatusOK, put("r1", `{"note":"called"}`))
	now := get("r1")
	require.EqualValues(t, 3, now.body["version"])
	require.Equal(t, map[string]any{"status": "won", "note": "called"}, now.body["fields"])
}
