package vendors_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/pkg/op"
)

type bundle struct {
	t      *testing.T
	srv    *vendors.Server
	client *http.Client
}

func setup(t *testing.T, opts vendors.Options) *bundle {
	t.Helper()
	srv, err := vendors.Start(opts)
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	return &bundle{t: t, srv: srv, client: &http.Client{Timeout: 5 * time.Second}}
}

type reply struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

// do sends one request; header pairs are name, value, name, value, ….
func (b *bundle) do(method, path, body string, header ...string) reply {
	b.t.Helper()
	rep, err := b.try(b.client, method, path, body, header...)
	require.NoError(b.t, err)
	return rep
}

func (b *bundle) try(c *http.Client, method, path, body string, header ...string) (reply, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, b.srv.URL()+path, rd)
	require.NoError(b.t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, err
	}
	rep := reply{status: resp.StatusCode, header: resp.Header, raw: string(raw)}
	_ = json.Unmarshal(raw, &rep.body) // malformed bodies are checked through raw
	return rep, nil
}

const captureBody = `{"order_id":"o1","amount_cents":4900,"currency":"USD","customer_id":"c1"}`

func TestCaptureIdempotency(t *testing.T) {
	t.Parallel()
	b := setup(t, vendors.Options{})

	first := b.do("POST", "/v1/payments/capture", captureBody, "Idempotency-Key", "k1")
	require.Equal(t, http.StatusOK, first.status)
	require.True(t, strings.HasPrefix(first.body["id"].(string), "ch_"))
	require.Equal(t, "succeeded", first.body["status"])
	require.True(t, strings.HasPrefix(first.header.Get("Request-Id"), "req_"))
	require.Empty(t, first.header.Get("Idempotent-Replayed"))

	// Same key, same request (other key order and spacing): replayed, no new charge.
	again := b.do("POST", "/v1/payments/capture",
		`{ "currency":"USD","amount_cents":4900, "order_id":"o1","customer_id":"c1"}`, "Idempotency-Key", "k1")
	require.Equal(t, http.StatusOK, again.status)
	require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
	require.Equal(t, first.raw, again.raw)

	// Same key, other amount: refused.
	conflict := b.do("POST", "/v1/payments/capture",
		`{"order_id":"o1","amount_cents":5000,"currency":"USD","customer_id":"c1"}`, "Idempotency-Key", "k1")
	require.Equal(t, http.StatusUnprocessableEntity, conflict.status)
	require.Equal(t, "idempotency_key_reused", conflict.body["error"])

	st := b.srv.Stats()
	require.Equal(t, 1, st.Captures)
	require.Equal(t, 1, st.Replays)
	require.Equal(t, 1, st.Conflicts)
	require.Equal(t, 3, st.Requests[vendors.RouteCapture])
	require.Equal(t, map[string]int{"k1": 1}, b.srv.EffectsByKey(vendors.KindCapture))

	// Lookup by key finds the charge; an unknown key does not.
	found := b.do("GET", "/v1/payments?idempotency_key=k1", "")
	require.Equal(t, http.StatusOK, found.status)
	require.Equal(t, first.body["id"], found.body["id"])
	missing := b.do("GET", "/v1/payments?idempotency_key=nope", "")
	require.Equal(t, http.StatusNotFound, missing.status)
	require.Equal(t, "not_found", missing.body["error"])
}

func TestCaptureWithoutKeyAlwaysCharges(t *testing.T) {
	t.Parallel()
	b := setup(t, vendors.Options{})
	for range 2 {
		require.Equal(t, http.StatusOK, b.do("POST", "/v1/payments/capture", captureBody).status)
	}
	require.Equal(t, http.StatusBadRequest, b.do("POST", "/v1/payments/capture", `{"order_id":"o1"}`).status)
	require.Equal(t, http.StatusBadRequest, b.do("POST", "/v1/payments/capture", `not json`).status)
	st := b.srv.Stats()
	require.Equal(t, 2, st.Captures)
	require.Equal(t, 2, st.Unkeyed)
	require.Equal(t, map[string]int{"o1": 2}, b.srv.EffectsByKey(vendors.KindCapture))
}

func TestCaptureConcurrentSameKey(t *testing.T) {
	t.Parallel()
	b := setup(t, vendors.Options{})
	var wg sync.WaitGroup
	ids := make([]string, 32)
	for i := range ids {
		wg.Go(func() {
			rep, err := b.try(b.client, "POST", "/v1/payments/capture", captureBody, "Idempotency-Key", "same")
			if err == nil && rep.status == http.StatusOK {
				ids[i], _ = rep.body["id"].(string)
			}
		})
	}
	wg.Wait()
	for _, id := range ids {
		require.Equal(t, ids[0], id)
	}
	require.Equal(t, 1, b.srv.Stats().Captures)
	require.Equal(t, 31, b.srv.Stats().Replays)
}

func TestRefunds(t *testing.T) {
	t.Parallel()
	b := setup(t, vendors.Options{})
	ch := b.do("POST", "/v1/payments/capture", captureBody, "Idempotency-Key", "cap")
	chID := ch.body["id"].(string)

	body := `{"charge_id":"` + chID + `","amount_cents":900}`
	re := b.do("POST", "/v1/refunds", body, "Idempotency-Key", "ref1")
	require.Equal(t, http.StatusOK, re.status)
	require.True(t, strings.HasPrefix(re.body["id"].(string), "re_"))
	replay := b.do("POST", "/v1/refunds", body, "Idempotency-Key", "ref1")
	require.Equal(t, "true", replay.header.Get("Idempotent-Replayed"))
	require.Equal(t, re.raw, replay.raw)

	// More than is left: refused, no effect.
	require.Equal(t, http.StatusBadRequest,
		b.do("POST", "/v1/refunds", `{"charge_id":"`+chID+`","amount_cents":4001}`, "Idempotency-Key", "ref2").status)
	// The rest, by order id.
	rest := b.do("POST", "/v1/refunds", `{"order_id":"o1"}`, "Idempotency-Key", "ref3")
	require.Equal(t, http.StatusOK, rest.status)
	require.EqualValues(t, 4000, rest.body["amount_cents"])
	require.Equal(t, http.StatusNotFound,
		b.do("POST", "/v1/refunds", `{"charge_id":"ch_nope"}`, "Idempotency-Key", "ref4").status)

	require.Equal(t, re.body["id"], b.do("GET", "/v1/refunds?idempotency_key=ref1", "").body["id"])
	require.Equal(t, http.StatusNotFound, b.do("GET", "/v1/refunds?idempotency_key=ref2", "").status)
	charge := b.do("GET", "/v1/payments?idempotency_key=cap", "")
	require.EqualValues(t, 4900, charge.body["amount_refunded_cents"])
	require.Equal(t, 2, b.srv.Stats().Refunds)
	require.Equal(t, map[string]int{"ref1": 1, "ref3": 1}, b.srv.EffectsByKey(vendors.KindRefund))
}

func TestEmailSendsEveryTime(t *testing.T) {
	t.Parallel()
	b := setup(t, vendors.Options{EmailQueueDelay: time.Hour})
	body := `{"to":"a@example.com","template":"welcome","subject":"Hi","body":"Hello"}`
	first := b.do("POST", "/v1/messages", body, "X-Client-Reference", "ref-1")
	require.Equal(t, http.StatusAccepted, first.status)
	require.Equal(t, "queued", first.body["status"])
	require.True(t, strings.HasPrefix(first.body["id"].(string), "msg_"))
	second := b.do("POST", "/v1/messages", body, "X-Client-Reference", "ref-1")
	require.Equal(t, http.StatusAccepted, second.status)
	require.NotEqual(t, first.body["id"], second.body["id"])
	b.do("POST", "/v1/messages", body) // no reference
	require.Equal(t, http.StatusBadRequest, b.do("POST", "/v1/messages", `{"to":"nobody"}`).status)

	require.Equal(t, 3, b.srv.Stats().Emails)
	require.Equal(t, map[string]int{"ref-1": 2, "a@example.com|welcome": 1}, b.srv.EffectsByKey(vendors.KindEmail))

	found := b.do("GET", "/v1/messages?client_reference=ref-1", "")
	require.Equal(t, http.StatusOK, found.status)
	require.Equal(t, first.body["id"], found.body["id"])
	require.Equal(t, "queued", found.body["status"])
	require.Equal(t, http.StatusNotFound, b.do("GET", "/v1/messages?client_reference=other", "").status)
}

func TestEmailDeliveredWithoutQueueDelay(t *testing.T) {
	t.Parallel()
	b := setup(t, vendors.Options{})
	b.do("POST", "/v1/messages", `{"to":"a@example.com"}`, "X-Client-Reference", "r")
	require.Equal(t, "delivered", b.do("GET", "/v1/messages?client_reference=r", "").body["status"])
}

func TestTickets(t *testing.T) {
	t.Parallel()
	b := setup(t, vendors.Options{})
	body := `{"conversation_id":"conv1","queue":"billing","summary":"refund request"}`
	first := b.do("POST", "/v1/tickets", body, "Idempotency-Key", "t1")
	require.Equal(t, http.StatusCreated, first.status)
	require.True(t, strings.HasPrefix(first.body["id"].(string), "tk_"))
	again := b.do("POST", "/v1/tickets", body, "Idempotency-Key", "t1")
	require.Equal(t, http.StatusCreated, again.status)
	require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
	require.Equal(t, first.body["id"], b.do("GET", "/v1/tickets?idempotency_key=t1", "").body["id"])
	require.Equal(t, http.StatusNotFound, b.do("GET", "/v1/tickets?idempotency_key=t2", "").status)
	require.Equal(t, 1, b.srv.Stats().Tickets)
	require.Equal(t, map[string]int{"t1": 1}, b.srv.EffectsByKey(vendors.KindTicket))
}

func TestAccounts(t *testing.T) {
	t.Parallel()
	b := setup(t, vendors.Options{})
	rep := b.do("GET", "/v1/accounts/acct_42", "")
	require.Equal(t, http.StatusOK, rep.status)
	require.Equal(t, map[string]any{"id": "acct_42", "status": "active"}, rep.body)
	require.Equal(t, "closed", b.do("GET", "/v1/accounts/closed_1", "").body["status"])
	require.Equal(t, http.StatusNotFound, b.do("GET", "/v1/accounts/missing_1", "").status)
	require.Equal(t, 2, b.srv.Stats().AccountReads)
}

func TestCRMUpsertCountsChanges(t *testing.T) {
	t.Parallel()
	b := setup(t, vendors.Options{})
	put := func(body, key string) reply {
		return b.do("PUT", "/v1/crm/records/r1", body, "Idempotency-Key", key)
	}
	first := put(`{"record_id":"r1","field":"status","value":"won"}`, "w1")
	require.Equal(t, http.StatusOK, first.status)
	require.Equal(t, true, first.body["changed"])
	require.EqualValues(t, 1, first.body["version"])

	same := put(`{"value":"won","field":"status","record_id":"r1"}`, "w2") // new key, same content: no write
	require.Equal(t, false, same.body["changed"])
	require.EqualValues(t, 1, same.body["version"])

	replay := put(`{"record_id":"r1","field":"status","value":"won"}`, "w1")
	require.Equal(t, "true", replay.header.Get("Idempotent-Replayed"))
	require.Equal(t, first.raw, replay.raw)
	require.Equal(t, http.StatusUnprocessableEntity, put(`{"record_id":"r1","field":"status","value":"lost"}`, "w1").status)

	note := put(`{"record_id":"r1","field":"note","value":"called back"}`, "w3")
	require.EqualValues(t, 2, note.body["version"])
	merged := put(`{"tier":"gold","status":"won"}`, "w4") // plain object: upsert keys
	require.EqualValues(t, 3, merged.body["version"])
	require.Equal(t, http.StatusBadRequest, put(`[1,2]`, "w5").status)

	got := b.do("GET", "/v1/crm/records/r1", "")
	require.Equal(t, map[string]any{"status": "won", "note": "called back", "tier": "gold"}, got.body["fields"])
	require.Equal(t, http.StatusNotFound, b.do("GET", "/v1/crm/records/r2", "").status)
	require.Equal(t, 3, b.srv.Stats().CRMWrites)
	require.Equal(t, map[string]int{"w1": 1, "w3": 1, "w4": 1}, b.srv.EffectsByKey(vendors.KindCRM))
}

// TestFaults drives every fault on the capture route and checks what the
// client saw and how many charges exist. Only the stalls get a client that
// gives up after 200ms; the request may then reach the vendor late on a
// loaded machine, so counts are awaited.
func TestFaults(t *testing.T) {
	t.Parallel()
	type faultCase struct {
		fault    vendors.FaultKind
		status   int // 0: the client gets no response, or not all of it
		captures int
	}
	cases := []faultCase{
		{vendors.FaultTimeoutAfterCommit, 0, 1},
		{vendors.FaultTimeoutBeforeCommit, 0, 0},
		{vendors.FaultError500AfterCommit, http.StatusInternalServerError, 1},
		{vendors.FaultError500BeforeCommit, http.StatusInternalServerError, 0},
		{vendors.FaultRateLimit, http.StatusTooManyRequests, 0},
		{vendors.FaultClientError, http.StatusBadRequest, 0},
		{vendors.FaultResetAfterCommit, 0, 1},
		{vendors.FaultMalformedAfterCommit, http.StatusOK, 1},
		{vendors.FaultLatency, http.StatusOK, 1},
		{vendors.FaultNULIDAfterCommit, http.StatusOK, 1},
		{vendors.FaultHugeHeaderAfterCommit, http.StatusOK, 1},
		{vendors.FaultTruncatedBodyAfterCommit, 0, 1}, // the body read fails
		{vendors.FaultEndless, 0, 0},
		{vendors.FaultDelayedVisibility, http.StatusInternalServerError, 1},
		// Webhook faults leave the request alone (webhooks_test.go tests them).
		{vendors.FaultWebhookDrop, http.StatusOK, 1},
		{vendors.FaultWebhookDuplicate, http.StatusOK, 1},
		{vendors.FaultWebhookDelay, http.StatusOK, 1},
		{vendors.FaultWebhookBeforeAnswer, http.StatusOK, 1},
	}
	for _, k := range vendors.FaultKinds {
		require.True(t, slices.ContainsFunc(cases, func(tc faultCase) bool { return tc.fault == k }), "fault %s has no case", k)
	}
	for _, tc := range cases {
		t.Run(string(tc.fault), func(t *testing.T) {
			t.Parallel()
			b := setup(t, vendors.Options{})
			f := vendors.Fault{Route: vendors.RouteCapture, Kind: tc.fault}
			if tc.fault == vendors.FaultLatency {
				f.Delay = 20 * time.Millisecond // shorter than the client's patience
			}
			require.NoError(t, b.srv.InjectFault(f))
			c := b.client
			switch tc.fault {
			case vendors.FaultTimeoutAfterCommit, vendors.FaultTimeoutBeforeCommit, vendors.FaultEndless:
				c = &http.Client{Timeout: 200 * time.Millisecond}
			}
			rep, err := b.try(c, "POST", "/v1/payments/capture", captureBody, "Idempotency-Key", "k")
			if tc.status == 0 {
				require.Error(t, err)
			} else {
				require.NoError(t, err)
				require.Equal(t, tc.status, rep.status)
			}
			switch tc.fault {
			case vendors.FaultRateLimit:
				require.Equal(t, "1", rep.header.Get("Retry-After"))
			case vendors.FaultClientError:
				require.Equal(t, "invalid_request", rep.body["error"])
			case vendors.FaultMalformedAfterCommit:
				require.False(t, json.Valid([]byte(rep.raw)))
			}
			require.Eventually(t, func() bool {
				st := b.srv.Stats()
				return st.FaultsFired == 1 && st.Captures == tc.captures
			}, 5*time.Second, 5*time.Millisecond)

			// The fault is used up: the retry under the same key gets a
			// charge, and there is still at most one.
			next := b.do("POST", "/v1/payments/capture", captureBody, "Idempotency-Key", "k")
			require.Equal(t, http.StatusOK, next.status)
			require.Equal(t, tc.captures == 1, next.header.Get("Idempotent-Replayed") == "true")
			require.Equal(t, 1, b.srv.Stats().Captures)
		})
	}
}

func TestFaultTimesAndRoutes(t *testing.T) {
	t.Parallel()
	b := setup(t, vendors.Options{})
	require.NoError(t, b.srv.InjectFault(vendors.Fault{Route: vendors.RouteEmail, Kind: vendors.FaultError500BeforeCommit, Times: 2}))
	require.NoError(t, b.srv.InjectFault(vendors.Fault{Route: vendors.RouteAny, Kind: vendors.FaultRateLimit}))

	// The capture route skips the email fault and takes the wildcard one.
	require.Equal(t, http.StatusTooManyRequests, b.do("POST", "/v1/payments/capture", captureBody).status)
	require.Equal(t, http.StatusOK, b.do("POST", "/v1/payments/capture", captureBody).status)
	msg := `{"to":"a@example.com"}`
	require.Equal(t, http.StatusInternalServerError, b.do("POST", "/v1/messages", msg).status)
	require.Equal(t, http.StatusInternalServerError, b.do("POST", "/v1/messages", msg).status)
	require.Equal(t, http.StatusAccepted, b.do("POST", "/v1/messages", msg).status)
	require.Equal(t, 1, b.srv.Stats().Emails)

	require.NoError(t, b.srv.InjectFault(vendors.Fault{Route: vendors.RouteEmail, Kind: vendors.FaultRateLimit, Times: 5}))
	b.srv.ClearFaults()
	require.Equal(t, http.StatusAccepted, b.do("POST", "/v1/messages", msg).status)

	require.ErrorIs(t, b.srv.InjectFault(vendors.Fault{Route: "nope", Kind: vendors.FaultRateLimit}), op.ErrInvalid)
	require.ErrorIs(t, b.srv.InjectFault(vendors.Fault{Route: vendors.RouteCapture, Kind: "explode"}), op.ErrInvalid)
	require.ErrorIs(t, b.srv.InjectFault(vendors.Fault{Route: vendors.RouteCapture, Kind: vendors.FaultRateLimit, Times: -1}), op.ErrInvalid)
}

// TestLatencyCommitsLate: a slow vendor performs the effect after the client
// has given up — the case where a lookup right after the timeout says "not
// found" and a later one finds the charge.
func TestLatencyCommitsLate(t *testing.T) {
	t.Parallel()
	b := setup(t, vendors.Options{})
	// The delay leaves a wide margin between the client giving up and the commit.
	require.NoError(t, b.srv.InjectFault(vendors.Fault{Route: vendors.RouteCapture, Kind: vendors.FaultLatency, Delay: time.Second}))
	_, err := b.try(&http.Client{Timeout: 100 * time.Millisecond}, "POST", "/v1/payments/capture", captureBody, "Idempotency-Key", "slow")
	require.Error(t, err)
	require.Equal(t, 0, b.srv.Stats().Captures)
	require.Equal(t, http.StatusNotFound, b.do("GET", "/v1/payments?idempotency_key=slow", "").status)
	require.Eventually(t, func() bool { return b.srv.Stats().Captures == 1 }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, http.StatusOK, b.do("GET", "/v1/payments?idempotency_key=slow", "").status)
}

// TestLatencyNeverAppliedIfClosed: a request still being applied when the
// vendor goes down never commits, and lookups meanwhile see nothing.
func TestLatencyNeverAppliedIfClosed(t *testing.T) {
	t.Parallel()
	b := setup(t, vendors.Options{})
	require.NoError(t, b.srv.InjectFault(vendors.Fault{Route: vendors.RoutePaymentIntent, Kind: vendors.FaultLatency, Delay: time.Hour}))
	errc := make(chan error, 1)
	go func() {
		_, err := b.try(&http.Client{}, "POST", "/v1/payment_intents", intentBody, "Content-Type", formType, "Idempotency-Key", "k")
		errc <- err
	}()
	require.Eventually(t, func() bool { return b.srv.Stats().FaultsFired == 1 }, 5*time.Second, 5*time.Millisecond)
	require.Equal(t, http.StatusNotFound, b.do("GET", "/v1/payment_intents?idempotency_key=k", "").status)
	b.srv.Close()
	select {
	case err := <-errc:
		require.Error(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("client still waiting after Close")
	}
	require.Zero(t, b.srv.Stats().PaymentIntents)
	require.Empty(t, b.srv.EffectsByKey(vendors.KindPaymentIntent))
}

func TestAdminHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t, vendors.Options{})
	rep := b.do("POST", "/_admin/faults", `{"route":"capture","fault":"rate_limit","times":2}`)
	require.Equal(t, http.StatusNoContent, rep.status)
	require.Equal(t, http.StatusBadRequest, b.do("POST", "/_admin/faults", `{"route":"capture","fault":"explode"}`).status)
	require.Equal(t, http.StatusBadRequest, b.do("POST", "/_admin/faults", `{"route":"capture","fault":"rate_limit","extra":1}`).status)

	for range 2 {
		require.Equal(t, http.StatusTooManyRequests, b.do("POST", "/v1/payments/capture", captureBody, "Idempotency-Key", "a").status)
	}
	require.Equal(t, http.StatusOK, b.do("POST", "/v1/payments/capture", captureBody, "Idempotency-Key", "a").status)

	stats := b.do("GET", "/_admin/stats", "")
	require.Equal(t, http.StatusOK, stats.status)
	var st vendors.Stats
	require.NoError(t, json.Unmarshal([]byte(stats.raw), &st))
	require.Equal(t, b.srv.Stats(), st)
	require.Equal(t, 1, st.Captures)
	require.Equal(t, 2, st.FaultsFired)

	effects := b.do("GET", "/_admin/effects?kind=capture", "")
	require.Equal(t, map[string]any{"a": float64(1)}, effects.body)

	// Every kind is accepted by name, with a delay.
	for _, k := range vendors.FaultKinds {
		rep := b.do("POST", "/_admin/faults", `{"route":"payment_intent","fault":"`+string(k)+`","delay_ms":5}`)
		require.Equal(t, http.StatusNoContent, rep.status, "%s: %s", k, rep.raw)
	}
	require.Equal(t, http.StatusBadRequest, b.do("POST", "/_admin/faults", `{"route":"capture","fault":"latency","delay_ms":-1}`).status)
	require.Equal(t, http.StatusNoContent, b.do("POST", "/_admin/faults", `{"route":"*","fault":"error_500_before_commit","times":9}`).status)
	require.Equal(t, http.StatusNoContent, b.do("DELETE", "/_admin/faults", "").status)
	require.Equal(t, http.StatusNoContent, b.do("POST", "/_admin/reset", "").status)
	require.Equal(t, 0, b.srv.Stats().Captures)
	require.Empty(t, b.srv.EffectsByKey(vendors.KindCapture))
	// Reset forgot the key too: the same key charges anew.
	require.Empty(t, b.do("POST", "/v1/payments/capture", captureBody, "Idempotency-Key", "a").header.Get("Idempotent-Replayed"))
}

func TestAPIKey(t *testing.T) {
	t.Parallel()
	b := setup(t, vendors.Options{APIKey: "sk_test_123"})
	require.Equal(t, http.StatusUnauthorized, b.do("GET", "/v1/accounts/a1", "").status)
	require.Equal(t, http.StatusUnauthorized, b.do("GET", "/v1/accounts/a1", "", "Authorization", "Bearer wrong").status)
	require.Equal(t, http.StatusOK, b.do("GET", "/v1/accounts/a1", "", "Authorization", "Bearer sk_test_123").status)
	require.Equal(t, http.StatusOK, b.do("GET", "/_admin/stats", "").status) // admin needs no key
}

// TestCloseReleasesStalledRequests: Close must not wait for the stall.
func TestCloseReleasesStalledRequests(t *testing.T) {
	t.Parallel()
	b := setup(t, vendors.Options{Stall: time.Minute})
	require.NoError(t, b.srv.InjectFault(vendors.Fault{Route: vendors.RouteCapture, Kind: vendors.FaultTimeoutAfterCommit}))
	errc := make(chan error, 1)
	go func() {
		_, err := b.try(&http.Client{}, "POST", "/v1/payments/capture", captureBody)
		errc <- err
	}()
	require.Eventually(t, func() bool { return b.srv.Stats().Captures == 1 }, 5*time.Second, 5*time.Millisecond)
	start := time.Now()
	b.srv.Close()
	require.Less(t, time.Since(start), 3*time.Second)
	select {
	case err := <-errc:
		require.Error(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("client still waiting after Close")
	}
}

func TestStartOptions(t *testing.T) {
	t.Parallel()
	_, err := vendors.Start(vendors.Options{Latency: -time.Second})
	require.ErrorIs(t, err, op.ErrInvalid)
	_, err = vendors.Start(vendors.Options{Addr: "127.0.0.1:-5"})
	require.Error(t, err)

	b := setup(t, vendors.Options{Latency: 30 * time.Millisecond})
	start := time.Now()
	b.do("GET", "/v1/accounts/a", "")
	require.GreaterOrEqual(t, time.Since(start), 30*time.Millisecond)
}

// The stand-ins' /_admin routes answer only requests from this host's
// loopback (they steer faults and counts), while the vendor routes answer
// anyone. Breaking it: a stand-in on a shared network whose faults anyone
// can inject.
func TestAdminOnlyFromLoopback(t *testing.T) {
	t.Parallel()
	s, err := vendors.Start(vendors.Options{})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	h := s.Handler()
	for _, tc := range []struct {
		remote, method, path string
		want                 int
	}{
		{"10.0.0.7:4000", "POST", "/_admin/faults", http.StatusForbidden},
		{"10.0.0.7:4000", "GET", "/_admin/stats", http.StatusForbidden},
		{"10.0.0.7:4000", "POST", "/_admin/reset", http.StatusForbidden},
		{"127.0.0.1:4000", "GET", "/_admin/stats", http.StatusOK},
		{"[::1]:4000", "GET", "/_admin/stats", http.StatusOK},
		{"10.0.0.7:4000", "GET", "/v1/accounts/acct_1", http.StatusOK},
	} {
		req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(`{"route":"capture","fault":"rate_limit"}`))
		req.RemoteAddr = tc.remote
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		require.Equal(t, tc.want, rec.Code, "%s %s from %s: %s", tc.method, tc.path, tc.remote, rec.Body.String())
	}
	require.Zero(t, s.Stats().FaultsFired)
}
