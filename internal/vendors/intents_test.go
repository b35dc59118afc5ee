package vendors_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/vendors"
)

const (
	formType   = "application/x-www-form-urlencoded"
	intentBody = "amount=4900&currency=usd&customer=cus_1&metadata%5Border_id%5D=o1"
)

// intent posts a form-encoded payment intent; header pairs as for do.
func (b *bundle) intent(body string, header ...string) reply {
	b.t.Helper()
	return b.do("POST", "/v1/payment_intents", body, append([]string{"Content-Type", formType}, header...)...)
}

func TestPaymentIntentIdempotency(t *testing.T) {
	t.Parallel()
	b := setup(t, vendors.Options{})

	first := b.intent(intentBody, "Idempotency-Key", "k1")
	require.Equal(t, http.StatusOK, first.status, first.raw)
	id, _ := first.body["id"].(string)
	require.True(t, strings.HasPrefix(id, "pi_"), id)
	require.Equal(t, "payment_intent", first.body["object"])
	require.Equal(t, "succeeded", first.body["status"])
	require.EqualValues(t, 4900, first.body["amount"])
	require.Equal(t, "usd", first.body["currency"])
	require.Equal(t, "cus_1", first.body["customer"])
	require.Equal(t, map[string]any{"order_id": "o1"}, first.body["metadata"])
	require.True(t, strings.HasPrefix(first.header.Get("Request-Id"), "req_"))
	require.Empty(t, first.header.Get("Idempotent-Replayed"))

	// Same key, same parameters in another order (and a charset): replayed byte for byte.
	again := b.do("POST", "/v1/payment_intents",
		"metadata%5Border_id%5D=o1&customer=cus_1&currency=usd&amount=4900",
		"Content-Type", formType+"; charset=utf-8", "Idempotency-Key", "k1")
	require.Equal(t, http.StatusOK, again.status)
	require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
	require.Equal(t, first.raw, again.raw)

	// Same key, another amount: 400 idempotency error, no effect.
	conflict := b.intent(strings.Replace(intentBody, "4900", "5000", 1), "Idempotency-Key", "k1")
	require.Equal(t, http.StatusBadRequest, conflict.status)
	require.Equal(t, "idempotency_error", conflict.body["error"].(map[string]any)["type"])

	st := b.srv.Stats()
	require.Equal(t, 1, st.PaymentIntents)
	require.Equal(t, 0, st.Captures)
	require.Equal(t, 1, st.Replays)
	require.Equal(t, 1, st.Conflicts)
	require.Equal(t, 3, st.Requests[vendors.RoutePaymentIntent])
	require.Equal(t, map[string]int{"k1": 1}, b.srv.EffectsByKey(vendors.KindPaymentIntent))

	found := b.do("GET", "/v1/payment_intents?idempotency_key=k1", "")
	require.Equal(t, http.StatusOK, found.status)
	require.Equal(t, first.raw, found.raw)
	missing := b.do("GET", "/v1/payment_intents?idempotency_key=nope", "")
	require.Equal(t, http.StatusNotFound, missing.status)
	e := missing.body["error"].(map[string]any)
	require.Equal(t, "invalid_request_error", e["type"])
	require.Equal(t, "resource_missing", e["code"])
	require.Equal(t, 2, b.srv.Stats().Requests[vendors.RoutePaymentIntentLookup])
}

func TestPaymentIntentWithoutKeyAlwaysCharges(t *testing.T) {
	t.Parallel()
	b := setup(t, vendors.Options{})
	for range 2 {
		rep := b.intent("amount=1&currency=eur&metadata%5Border_id%5D=o7&metadata%5Bsource%5D=agent")
		require.Equal(t, http.StatusOK, rep.status, rep.raw)
		require.Nil(t, rep.body["customer"])
		require.Contains(t, rep.raw, `"customer":null`)
		require.Equal(t, map[string]any{"order_id": "o7", "source": "agent"}, rep.body["metadata"])
	}
	st := b.srv.Stats()
	require.Equal(t, 2, st.PaymentIntents)
	require.Equal(t, 2, st.Unkeyed)
	require.Equal(t, map[string]int{"o7": 2}, b.srv.EffectsByKey(vendors.KindPaymentIntent))
}

func TestPaymentIntentRejects(t *testing.T) {
	t.Parallel()
	b := setup(t, vendors.Options{})
	long := strings.Repeat("k", 41)
	cases := []struct {
		name, contentType, body, param string
	}{
		{"json body", "application/json", `{"amount":4900,"currency":"usd","metadata":{"order_id":"o1"}}`, ""},
		{"no content type", "", intentBody, ""},
		{"bad escape", formType, "amount=%zz", ""},
		{"missing amount", formType, "currency=usd&metadata%5Border_id%5D=o1", "amount"},
		{"zero amount", formType, strings.Replace(intentBody, "4900", "0", 1), "amount"},
		{"negative amount", formType, strings.Replace(intentBody, "4900", "-5", 1), "amount"},
		{"plus amount", formType, strings.Replace(intentBody, "4900", "%2B5", 1), "amount"},
		{"decimal amount", formType, strings.Replace(intentBody, "4900", "49.00", 1), "amount"},
		{"upper currency", formType, strings.Replace(intentBody, "usd", "USD", 1), "currency"},
		{"short currency", formType, strings.Replace(intentBody, "usd", "us", 1), "currency"},
		{"missing currency", formType, "amount=1&metadata%5Border_id%5D=o1", "currency"},
		{"missing order id", formType, "amount=1&currency=usd", "metadata[order_id]"},
		{"empty order id", formType, "amount=1&currency=usd&metadata%5Border_id%5D=", "metadata[order_id]"},
		{"unknown param", formType, intentBody + "&confirm=true", "confirm"},
		{"repeated param", formType, intentBody + "&amount=1", "amount"},
		{"long metadata key", formType, intentBody + "&metadata%5B" + long + "%5D=v", "metadata[" + long + "]"},
	}
	for _, tc := range cases {
		rep := b.do("POST", "/v1/payment_intents", tc.body, "Content-Type", tc.contentType, "Idempotency-Key", tc.name)
		require.Equal(t, http.StatusBadRequest, rep.status, tc.name)
		e, ok := rep.body["error"].(map[string]any)
		require.True(t, ok, "%s: %s", tc.name, rep.raw)
		require.Equal(t, "invalid_request_error", e["type"], tc.name)
		require.NotEmpty(t, e["message"], tc.name)
		if tc.param != "" {
			require.Equal(t, tc.param, e["param"], tc.name)
		}
	}
	require.Zero(t, b.srv.Stats().PaymentIntents)
	require.Empty(t, b.srv.EffectsByKey(vendors.KindPaymentIntent))
	// A refused request stores nothing under its key: fixed, it goes through.
	require.Equal(t, http.StatusOK, b.intent(intentBody, "Idempotency-Key", "zero amount").status)
}

func TestPaymentIntentFaultRoutes(t *testing.T) {
	t.Parallel()
	b := setup(t, vendors.Options{})
	require.NoError(t, b.srv.InjectFault(vendors.Fault{Route: vendors.RoutePaymentIntent, Kind: vendors.FaultError500AfterCommit}))
	require.NoError(t, b.srv.InjectFault(vendors.Fault{Route: vendors.RoutePaymentIntentLookup, Kind: vendors.FaultRateLimit}))
	require.NoError(t, b.srv.InjectFault(vendors.Fault{Route: vendors.RouteCapture, Kind: vendors.FaultRateLimit}))

	require.Equal(t, http.StatusInternalServerError, b.intent(intentBody, "Idempotency-Key", "k").status)
	require.Equal(t, 1, b.srv.Stats().PaymentIntents)
	require.Equal(t, http.StatusTooManyRequests, b.do("GET", "/v1/payment_intents?idempotency_key=k", "").status)
	require.Equal(t, http.StatusOK, b.do("GET", "/v1/payment_intents?idempotency_key=k", "").status)
	require.Equal(t, 2, b.srv.Stats().FaultsFired) // the capture fault is still pending

	rep := b.do("POST", "/_admin/faults", `{"route":"payment_intent_lookup","fault":"error_500_before_commit"}`)
	require.Equal(t, http.StatusNoContent, rep.status)
	require.Equal(t, http.StatusInternalServerError, b.do("GET", "/v1/payment_intents?idempotency_key=k", "").status)
}
