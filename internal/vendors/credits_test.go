package vendors_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/vendors"
)

// TestCredits: account credits are keyed like payments (create, replay,
// refuse a reused key), read strictly, and found by key afterwards.
func TestCredits(t *testing.T) {
	t.Parallel()
	b := setup(t, vendors.Options{})
	const body = `{"amount_cents":1500,"reason":"retention offer"}`
	first := b.do("POST", "/v1/accounts/cust_1/credits", body, "Idempotency-Key", "cr1")
	require.Equal(t, http.StatusCreated, first.status, first.raw)
	require.True(t, strings.HasPrefix(first.body["id"].(string), "cr_"))
	require.Equal(t, "applied", first.body["status"])
	require.Equal(t, "cust_1", first.body["account_id"])

	again := b.do("POST", "/v1/accounts/cust_1/credits", `{"reason":"retention offer", "amount_cents":1500}`, "Idempotency-Key", "cr1")
	require.Equal(t, http.StatusCreated, again.status)
	require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
	require.Equal(t, first.raw, again.raw)
	require.Equal(t, http.StatusUnprocessableEntity,
		b.do("POST", "/v1/accounts/cust_1/credits", `{"amount_cents":1600,"reason":"retention offer"}`, "Idempotency-Key", "cr1").status)

	for name, bad := range map[string]string{
		"unknown field":   `{"amount_cents":1,"reason":"","customer_id":"cust_1"}`,
		"two objects":     `{"amount_cents":1}{"amount_cents":2}`,
		"not json":        `amount=1`,
		"no amount":       `{"reason":"x"}`,
		"negative amount": `{"amount_cents":-1}`,
	} {
		rep := b.do("POST", "/v1/accounts/cust_1/credits", bad, "Idempotency-Key", "bad-"+name)
		require.Equal(t, http.StatusBadRequest, rep.status, name)
	}
	require.Equal(t, http.StatusNotFound, b.do("POST", "/v1/accounts/missing_1/credits", body, "Idempotency-Key", "cr2").status)
	require.Equal(t, http.StatusBadRequest, b.do("POST", "/v1/accounts/closed_1/credits", body, "Idempotency-Key", "cr3").status)

	found := b.do("GET", "/v1/credits?idempotency_key=cr1", "")
	require.Equal(t, http.StatusOK, found.status)
	require.Equal(t, first.body["id"], found.body["id"])
	require.Equal(t, http.StatusNotFound, b.do("GET", "/v1/credits?idempotency_key=cr2", "").status)

	st := b.srv.Stats()
	require.Equal(t, 1, st.Credits)
	require.Equal(t, map[string]int{"cr1": 1}, b.srv.EffectsByKey(vendors.KindCredit))
	require.Equal(t, 10, st.Requests[vendors.RouteCredit])
	require.Equal(t, 2, st.Requests[vendors.RouteCreditLookup])
}

// TestRefundCustomer: a refund may name its customer; a refund naming
// another customer than the charge's is refused and refunds nothing.
func TestRefundCustomer(t *testing.T) {
	t.Parallel()
	b := setup(t, vendors.Options{})
	ch := b.do("POST", "/v1/payments/capture", captureBody, "Idempotency-Key", "k1").body["id"].(string)
	wrong := b.do("POST", "/v1/refunds", `{"charge_id":"`+ch+`","customer_id":"c2","amount_cents":100}`, "Idempotency-Key", "r1")
	require.Equal(t, http.StatusBadRequest, wrong.status)
	require.Equal(t, "customer_mismatch", wrong.body["error"])
	ok := b.do("POST", "/v1/refunds", `{"charge_id":"`+ch+`","customer_id":"c1","amount_cents":100,"reason":"asked"}`, "Idempotency-Key", "r2")
	require.Equal(t, http.StatusOK, ok.status, ok.raw)
	require.Equal(t, "c1", ok.body["customer_id"])
	require.Equal(t, 1, b.srv.Stats().Refunds)
}

// TestActivities: the vendor records when it was busy with each refund and
// credit of a customer, so that requests processed at the same time show
// as overlapping, and requests processed one after the other do not.
func TestActivities(t *testing.T) {
	t.Parallel()
	b := setup(t, vendors.Options{})
	ch := b.do("POST", "/v1/payments/capture", captureBody, "Idempotency-Key", "k1").body["id"].(string)
	const delay = 100 * time.Millisecond
	require.NoError(t, b.srv.InjectFault(vendors.Fault{Route: vendors.RouteRefund, Kind: vendors.FaultLatency, Delay: delay}))
	require.NoError(t, b.srv.InjectFault(vendors.Fault{Route: vendors.RouteCredit, Kind: vendors.FaultLatency, Delay: delay, Times: 2}))

	// A refund and a credit at once: they overlap.
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		b.do("POST", "/v1/refunds", `{"charge_id":"`+ch+`","customer_id":"c1","amount_cents":100}`, "Idempotency-Key", "r1")
	}()
	go func() {
		defer wg.Done()
		b.do("POST", "/v1/accounts/c1/credits", `{"amount_cents":100}`, "Idempotency-Key", "cr1")
	}()
	wg.Wait()
	// Then a credit on its own, and one for another customer.
	b.do("POST", "/v1/accounts/c1/credits", `{"amount_cents":200}`, "Idempotency-Key", "cr2")
	b.do("POST", "/v1/accounts/c9/credits", `{"amount_cents":200}`, "Idempotency-Key", "cr3")

	acts := b.srv.Activities("c1")
	require.Len(t, acts, 3)
	require.ElementsMatch(t, []string{"r1", "cr1"}, []string{acts[0].IdempotencyKey, acts[1].IdempotencyKey})
	require.True(t, overlaps(acts[0], acts[1]), "%+v", acts)
	require.Equal(t, vendors.Activity{Route: vendors.RouteCredit, Customer: "c1", IdempotencyKey: "cr2"},
		vendors.Activity{Route: acts[2].Route, Customer: acts[2].Customer, IdempotencyKey: acts[2].IdempotencyKey})
	require.False(t, overlaps(acts[2], acts[0]) || overlaps(acts[2], acts[1]))
	for _, a := range acts[:2] {
		require.GreaterOrEqual(t, a.End.Sub(a.Start), delay, "the latency counts as processing")
	}
	require.Len(t, b.srv.Activities("c9"), 1)
	require.Empty(t, b.srv.Activities("k1"), "captures are not recorded")

	var admin []vendors.Activity
	require.NoError(t, json.Unmarshal([]byte(b.do("GET", "/_admin/activity?customer=c1", "").raw), &admin))
	require.Len(t, admin, 3)
	b.srv.Reset()
	require.Empty(t, b.srv.Activities("c1"))
}

// overlaps reports whether the vendor processed a and b at the same time.
func overlaps(a, b vendors.Activity) bool {
	return a.Start.Before(b.End) && b.Start.Before(a.End)
}
