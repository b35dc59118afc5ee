package httpadapter_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/pkg/adapter"
	"github.com/opledger/opledger/pkg/adapter/httpadapter"
	"github.com/opledger/opledger/pkg/op"
)

// Per-call timeouts. fastTimeout is for calls meant to time out (so those
// tests take ~200ms); everything else gets slack, which costs nothing when it
// works and keeps a loaded CI machine from turning a success into a timeout.
const (
	fastTimeout  = 200 * time.Millisecond
	slackTimeout = 5 * time.Second
)

type bundle struct {
	t      *testing.T
	vendor *vendors.Server
	client *http.Client
}

// setup starts a vendor stand-in and a client with its own connection pool.
func setup(t *testing.T, opts vendors.Options) *bundle {
	t.Helper()
	v, err := vendors.Start(opts)
	require.NoError(t, err)
	t.Cleanup(v.Close)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &bundle{t: t, vendor: v, client: &http.Client{Transport: tr}}
}

func (b *bundle) adapter(cfg httpadapter.Config) *httpadapter.Adapter {
	b.t.Helper()
	a, err := httpadapter.New(cfg, b.client)
	require.NoError(b.t, err)
	return a
}

// captureConfig is the payments vendor as the registry describes it.
func captureConfig(base string) httpadapter.Config {
	return httpadapter.Config{
		URL:               base + "/v1/payments/capture",
		IdempotencyHeader: "Idempotency-Key",
		RequestIDHeader:   "Request-Id",
		ReplayedHeader:    "Idempotent-Replayed",
		ExternalIDPointer: "/id",
		Timeout:           slackTimeout,
		Lookup: &httpadapter.LookupConfig{
			URL:               base + "/v1/payments?idempotency_key={idempotency_key}",
			ExternalIDPointer: "/id",
			StatusPointer:     "/status",
			PendingValues:     []string{"pending"},
		},
	}
}

func emailConfig(base string) httpadapter.Config {
	return httpadapter.Config{
		URL:               base + "/v1/messages",
		ReferenceHeader:   "X-Client-Reference",
		ExternalIDPointer: "/id",
		Timeout:           slackTimeout,
		Lookup: &httpadapter.LookupConfig{
			URL:               base + "/v1/messages?client_reference={idempotency_key}",
			ExternalIDPointer: "/id",
			StatusPointer:     "/status",
			PendingValues:     []string{"queued"},
		},
	}
}

func request(key, args string) adapter.Request {
	return adapter.Request{
		OperationID: op.NewID("op"), AttemptID: op.NewID("att"), Tool: "t",
		IdempotencyKey: key, Args: json.RawMessage(args),
	}
}

const captureArgs = `{"amount_cents":4900,"currency":"USD","customer_id":"c1","order_id":"o1"}`

func captureReq(key string) adapter.Request { return request(key, captureArgs) }

func TestIdempotentReplayIsOneCapture(t *testing.T) {
	t.Parallel()
	b := setup(t, vendors.Options{})
	a := b.adapter(captureConfig(b.vendor.URL()))
	key := "payment:o1:capture:4900:USD:v1"

	first := a.Call(context.Background(), captureReq(key))
	require.Equal(t, op.OutcomeSuccess, first.Outcome, first.Error)
	require.Equal(t, http.StatusOK, first.HTTPStatus)
	require.True(t, strings.HasPrefix(first.ExternalObjectID, "ch_"))
	require.True(t, strings.HasPrefix(first.ExternalRequestID, "req_"))
	require.False(t, first.Replayed)
	require.Positive(t, first.Latency)

	second := a.Call(context.Background(), captureReq(key))
	require.Equal(t, op.OutcomeSuccess, second.Outcome)
	require.True(t, second.Replayed)
	require.Equal(t, first.ExternalObjectID, second.ExternalObjectID)

	require.Equal(t, 1, b.vendor.Stats().Captures)
	require.Equal(t, map[string]int{key: 1}, b.vendor.EffectsByKey(vendors.KindCapture))
}

func TestEmailWithoutDedupeSendsTwice(t *testing.T) {
	t.Parallel()
	b := setup(t, vendors.Options{})
	cfg := emailConfig(b.vendor.URL())
	cfg.StatusOutcomes = map[string]op.Outcome{"202": op.OutcomeAcknowledged}
	a := b.adapter(cfg)
	req := request("email:a@example.com:welcome:o1:v1", `{"template":"welcome","to":"a@example.com"}`)

	for range 2 {
		res := a.Call(context.Background(), req)
		require.Equal(t, op.OutcomeAcknowledged, res.Outcome, res.Error)
		require.Equal(t, http.StatusAccepted, res.HTTPStatus)
		require.True(t, strings.HasPrefix(res.ExternalObjectID, "msg_"))
	}
	// The vendor has no idempotency: our key was only a reference, and both calls sent.
	require.Equal(t, 2, b.vendor.Stats().Emails)
	require.Equal(t, map[string]int{req.IdempotencyKey: 2}, b.vendor.EffectsByKey(vendors.KindEmail))
}

// TestFaultClassification injects each vendor fault into one capture and
// checks the outcome, that the vendor saw exactly one request (no hidden
// transport retry), how many charges it made, and that a lookup agrees.
func TestFaultClassification(t *testing.T) {
	t.Parallel()
	cases := []struct {
		fault    vendors.FaultKind
		outcome  op.Outcome
		category string
		status   int
		captures int
	}{
		// A timed-out request may reach the vendor late on a loaded machine,
		// so its counts are awaited rather than read at once.
		{vendors.FaultTimeoutAfterCommit, op.OutcomeUnknown, httpadapter.CategoryTimeout, 0, 1},
		{vendors.FaultTimeoutBeforeCommit, op.OutcomeUnknown, httpadapter.CategoryTimeout, 0, 0},
		{vendors.FaultError500AfterCommit, op.OutcomeUnknown, httpadapter.CategoryServerError, 500, 1},
		{vendors.FaultError500BeforeCommit, op.OutcomeUnknown, httpadapter.CategoryServerError, 500, 0},
		{vendors.FaultRateLimit, op.OutcomeRetryable, httpadapter.CategoryRateLimited, 429, 0},
		{vendors.FaultResetAfterCommit, op.OutcomeUnknown, httpadapter.CategoryConnection, 0, 1},
		{vendors.FaultMalformedAfterCommit, op.OutcomeUnknown, httpadapter.CategoryMalformedResponse, 200, 1},
		{vendors.FaultLatency, op.OutcomeSuccess, "", 200, 1},
	}
	for _, tc := range cases {
		t.Run(string(tc.fault), func(t *testing.T) {
			t.Parallel()
			b := setup(t, vendors.Options{})
			cfg := captureConfig(b.vendor.URL())
			a := b.adapter(cfg)
			timesOut := tc.category == httpadapter.CategoryTimeout
			faulted := a
			if timesOut {
				cfg.Timeout = fastTimeout
				faulted = b.adapter(cfg) // same client, same connection pool
			}
			ctx := context.Background()
			key := "k-" + string(tc.fault)

			// Warm the connection pool so the faulted call runs on a reused
			// connection: where net/http would re-send a keyed POST by itself.
			lr, err := a.Lookup(ctx, captureReq(key))
			require.NoError(t, err)
			require.False(t, lr.Found)

			f := vendors.Fault{Route: vendors.RouteCapture, Kind: tc.fault}
			if tc.fault == vendors.FaultLatency {
				f.Delay = 20 * time.Millisecond
			}
			require.NoError(t, b.vendor.InjectFault(f))
			res := faulted.Call(ctx, captureReq(key))
			require.Equal(t, tc.outcome, res.Outcome, res.Error)
			require.Equal(t, tc.category, res.ErrorCategory)
			require.Equal(t, tc.status, res.HTTPStatus)
			if tc.outcome != op.OutcomeSuccess {
				require.NotEmpty(t, res.Error)
			}
			require.Eventually(t, func() bool {
				st := b.vendor.Stats()
				return st.Requests[vendors.RouteCapture] >= 1 && st.Captures == tc.captures
			}, 5*time.Second, 5*time.Millisecond)
			require.Equal(t, 1, b.vendor.Stats().Requests[vendors.RouteCapture], "the vendor saw a hidden re-send")
			if tc.fault == vendors.FaultRateLimit {
				require.Equal(t, time.Second, res.RetryAfter)
			}

			// The reconciler's view: a lookup by key agrees with the vendor's count.
			lr, err = a.Lookup(ctx, captureReq(key))
			require.NoError(t, err)
			require.Equal(t, tc.captures == 1, lr.Found)
			if lr.Found {
				require.Equal(t, op.OutcomeSuccess, lr.Outcome)
				require.True(t, strings.HasPrefix(lr.ExternalObjectID, "ch_"))
				// Re-sending under the same key is safe with this vendor: a replay of the same charge.
				again := a.Call(ctx, captureReq(key))
				require.Equal(t, op.OutcomeSuccess, again.Outcome)
				require.True(t, again.Replayed)
				require.Equal(t, lr.ExternalObjectID, again.ExternalObjectID)
			}
			require.Equal(t, tc.captures, b.vendor.Stats().Captures)
			require.Equal(t, 1+btoi(lr.Found), b.vendor.Stats().Requests[vendors.RouteCapture])
		})
	}
}

func TestLookupAfterTimeoutFindsCharge(t *testing.T) {
	t.Parallel()
	b := setup(t, vendors.Options{})
	cfg := captureConfig(b.vendor.URL())
	a := b.adapter(cfg)
	cfg.Timeout = fastTimeout
	fast := b.adapter(cfg)
	require.NoError(t, b.vendor.InjectFault(vendors.Fault{Route: vendors.RouteCapture, Kind: vendors.FaultTimeoutAfterCommit}))

	res := fast.Call(context.Background(), captureReq("k1"))
	require.Equal(t, op.OutcomeUnknown, res.Outcome)
	require.Equal(t, httpadapter.CategoryTimeout, res.ErrorCategory)
	require.Equal(t, "no response after the request was sent: timed out", res.Error)
	require.Eventually(t, func() bool { return b.vendor.Stats().Captures == 1 }, 5*time.Second, 5*time.Millisecond)

	lr, err := a.Lookup(context.Background(), captureReq("k1"))
	require.NoError(t, err)
	require.True(t, lr.Found)
	require.Equal(t, op.OutcomeSuccess, lr.Outcome)
	require.Equal(t, http.StatusOK, lr.HTTPStatus)
	require.Equal(t, 1, b.vendor.Stats().Captures)
}

func TestConnectionRefusedIsRetryable(t *testing.T) {
	t.Parallel()
	// A port that was just free: nothing listens there.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	base := "http://" + l.Addr().String()
	require.NoError(t, l.Close())

	a, err := httpadapter.New(captureConfig(base), nil)
	require.NoError(t, err)
	res := a.Call(context.Background(), captureReq("k1"))
	require.Equal(t, op.OutcomeRetryable, res.Outcome)
	require.Equal(t, httpadapter.CategoryConnection, res.ErrorCategory)
	require.Equal(t, "request not sent: connection refused", res.Error)
	require.Zero(t, res.HTTPStatus)

	_, err = a.Lookup(context.Background(), captureReq("k1"))
	var le *httpadapter.LookupError
	require.ErrorAs(t, err, &le)
	require.Equal(t, httpadapter.CategoryConnection, le.Category)
}

func TestCanceledBeforeSendIsRetryable(t *testing.T) {
	t.Parallel()
	b := setup(t, vendors.Options{})
	a := b.adapter(captureConfig(b.vendor.URL()))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res := a.Call(ctx, captureReq("k1"))
	require.Equal(t, op.OutcomeRetryable, res.Outcome)
	require.Equal(t, "request not sent: canceled", res.Error)
	require.Zero(t, b.vendor.Stats().Requests[vendors.RouteCapture])
}

func TestKeyReuseWithOtherArgsIsPermanent(t *testing.T) {
	t.Parallel()
	b := setup(t, vendors.Options{})
	a := b.adapter(captureConfig(b.vendor.URL()))
	require.Equal(t, op.OutcomeSuccess, a.Call(context.Background(), captureReq("k1")).Outcome)

	res := a.Call(context.Background(), request("k1", `{"amount_cents":5000,"currency":"USD","customer_id":"c1","order_id":"o1"}`))
	require.Equal(t, op.OutcomePermanent, res.Outcome)
	require.Equal(t, httpadapter.CategoryClientError, res.ErrorCategory)
	require.Equal(t, http.StatusUnprocessableEntity, res.HTTPStatus)
	require.Equal(t, "vendor answered HTTP 422 (idempotency_key_reused)", res.Error)
	require.Equal(t, 1, b.vendor.Stats().Captures)
}

func TestLookupPendingAndErrors(t *testing.T) {
	t.Parallel()
	b := setup(t, vendors.Options{EmailQueueDelay: time.Hour})
	a := b.adapter(emailConfig(b.vendor.URL()))
	req := request("ref-1", `{"to":"a@example.com","template":"welcome"}`)
	ctx := context.Background()

	lr, err := a.Lookup(ctx, req)
	require.NoError(t, err)
	require.False(t, lr.Found)
	require.Equal(t, http.StatusNotFound, lr.HTTPStatus)

	sent := a.Call(ctx, req)
	require.Equal(t, op.OutcomeSuccess, sent.Outcome)
	lr, err = a.Lookup(ctx, req)
	require.NoError(t, err)
	require.True(t, lr.Found)
	require.Equal(t, op.OutcomeAcknowledged, lr.Outcome, "a queued message is still pending")
	require.Equal(t, sent.ExternalObjectID, lr.ExternalObjectID)

	var le *httpadapter.LookupError
	require.NoError(t, b.vendor.InjectFault(vendors.Fault{Route: vendors.RouteEmailLookup, Kind: vendors.FaultError500BeforeCommit}))
	_, err = a.Lookup(ctx, req)
	require.ErrorAs(t, err, &le)
	require.Equal(t, http.StatusInternalServerError, le.HTTPStatus)
	require.Equal(t, httpadapter.CategoryServerError, le.Category)

	require.NoError(t, b.vendor.InjectFault(vendors.Fault{Route: vendors.RouteEmailLookup, Kind: vendors.FaultMalformedAfterCommit}))
	_, err = a.Lookup(ctx, req)
	require.ErrorAs(t, err, &le)
	require.Equal(t, httpadapter.CategoryMalformedResponse, le.Category)

	require.NoError(t, b.vendor.InjectFault(vendors.Fault{Route: vendors.RouteEmailLookup, Kind: vendors.FaultTimeoutBeforeCommit}))
	fastCfg := emailConfig(b.vendor.URL())
	fastCfg.Timeout = fastTimeout
	_, err = b.adapter(fastCfg).Lookup(ctx, req)
	require.ErrorAs(t, err, &le)
	require.Equal(t, httpadapter.CategoryTimeout, le.Category)

	// No lookup configured.
	cfg := emailConfig(b.vendor.URL())
	cfg.Lookup = nil
	plain := b.adapter(cfg)
	_, err = plain.Lookup(ctx, req)
	require.ErrorIs(t, err, httpadapter.ErrNoLookup)
}

func TestReadsAndPathTemplates(t *testing.T) {
	t.Parallel()
	b := setup(t, vendors.Options{})
	accounts := b.adapter(httpadapter.Config{
		Method: "get", URL: b.vendor.URL() + "/v1/accounts/{account_id}", ExternalIDPointer: "/id", Timeout: slackTimeout,
	})
	res := accounts.Call(context.Background(), request("", `{"account_id":"acct 1/x"}`))
	require.Equal(t, op.OutcomeSuccess, res.Outcome, res.Error)
	require.Equal(t, "acct 1/x", res.ExternalObjectID, "the path value arrives unescaped and whole")
	missing := accounts.Call(context.Background(), request("", `{"account_id":"missing_1"}`))
	require.Equal(t, op.OutcomePermanent, missing.Outcome)
	require.Equal(t, "vendor answered HTTP 404 (not_found)", missing.Error)
	require.Equal(t, 1, b.vendor.Stats().AccountReads)

	crm := b.adapter(httpadapter.Config{
		Method: "PUT", URL: b.vendor.URL() + "/v1/crm/records/{record_id}", IdempotencyHeader: "Idempotency-Key",
		ExternalIDPointer: "/id", Timeout: slackTimeout,
	})
	args := `{"field":"status","record_id":"r1","value":"won"}`
	require.Equal(t, "r1", crm.Call(context.Background(), request("crm:r1:status:won:v1", args)).ExternalObjectID)
	require.Equal(t, "r1", crm.Call(context.Background(), request("crm:r1:status:won:v2", args)).ExternalObjectID)
	require.Equal(t, 1, b.vendor.Stats().CRMWrites, "the second write changed nothing")
}

func TestConcurrentCallsOneCapture(t *testing.T) {
	t.Parallel()
	b := setup(t, vendors.Options{})
	a := b.adapter(captureConfig(b.vendor.URL()))
	var wg sync.WaitGroup
	results := make([]adapter.Result, 16)
	for i := range results {
		wg.Go(func() { results[i] = a.Call(context.Background(), captureReq("same")) })
	}
	wg.Wait()
	for _, r := range results {
		require.Equal(t, op.OutcomeSuccess, r.Outcome, r.Error)
		require.Equal(t, results[0].ExternalObjectID, r.ExternalObjectID)
	}
	require.Equal(t, 1, b.vendor.Stats().Captures)
}

// TestSecretHeaderNeverInErrors resolves a token through Config.Secret, proves
// it reaches the vendor, then drives every failure and checks that no error,
// category or formatted adapter shows it.
func TestSecretHeaderNeverInErrors(t *testing.T) {
	t.Parallel()
	const token = "tok_S3CRET_value_42"
	secret := token
	b := setup(t, vendors.Options{APIKey: token})
	cfg := captureConfig(b.vendor.URL())
	cfg.SecretHeaders = map[string]string{"Authorization": "Bearer ${TEST_VENDOR_TOKEN}"}
	cfg.Secret = func(name string) (string, bool) { return secret, name == "TEST_VENDOR_TOKEN" }
	ctx := context.Background()
	ok := b.adapter(cfg).Call(ctx, captureReq("k0"))
	require.Equal(t, op.OutcomeSuccess, ok.Outcome, "the token must reach the vendor")

	// Only the strings matter below; a short timeout keeps the stalls quick.
	cfg.Timeout = fastTimeout
	a := b.adapter(cfg)
	var texts []string
	check := func(res adapter.Result) {
		texts = append(texts, res.Error, res.ErrorCategory)
	}

	for i, f := range vendors.FaultKinds {
		require.NoError(t, b.vendor.InjectFault(vendors.Fault{Route: vendors.RouteCapture, Kind: f, Delay: 5 * time.Millisecond}))
		check(a.Call(ctx, captureReq(fmt.Sprintf("k%d", i+1))))
	}
	check(a.Call(ctx, request("k0", `{"amount_cents":1,"currency":"USD","order_id":"o9"}`))) // 422

	// A wrong token: 401.
	secret = token + "-wrong"
	wrong := b.adapter(cfg)
	res := wrong.Call(ctx, captureReq("k9"))
	require.Equal(t, op.OutcomePermanent, res.Outcome)
	check(res)
	_, err := wrong.Lookup(ctx, captureReq("k9"))
	require.Error(t, err)
	texts = append(texts, err.Error())

	require.NoError(t, b.vendor.InjectFault(vendors.Fault{Route: vendors.RouteCaptureLookup, Kind: vendors.FaultTimeoutAfterCommit}))
	_, err = a.Lookup(ctx, captureReq("k0"))
	require.Error(t, err)
	texts = append(texts, err.Error())

	// The vendor gone.
	b.vendor.Close()
	check(a.Call(ctx, captureReq("k10")))
	_, err = a.Lookup(ctx, captureReq("k10"))
	require.Error(t, err)
	texts = append(texts, err.Error())

	texts = append(texts, fmt.Sprintf("%v %+v %s", a, a, a))
	for _, s := range texts {
		require.NotContains(t, s, token)
		require.NotContains(t, s, "S3CRET")
	}

	// An unset variable fails New, naming the variable and the header only.
	cfg.SecretHeaders = map[string]string{"Authorization": "Bearer ${TEST_VENDOR_TOKEN_UNSET}"}
	_, err = httpadapter.New(cfg, nil)
	require.ErrorIs(t, err, op.ErrInvalid)
	var ce *httpadapter.ConfigError
	require.True(t, errors.As(err, &ce))
	require.Contains(t, ce.Field, "Authorization")
	require.Contains(t, err.Error(), "TEST_VENDOR_TOKEN_UNSET")
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// BenchmarkCall measures one keyed capture through the adapter against the
// local payments stand-in (new key per call: every call is a real capture).
func BenchmarkCall(b *testing.B) {
	v, err := vendors.Start(vendors.Options{})
	require.NoError(b, err)
	defer v.Close()
	a, err := httpadapter.New(captureConfig(v.URL()), nil)
	require.NoError(b, err)
	var n atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			res := a.Call(context.Background(), captureReq("bench-"+strconv.FormatInt(n.Add(1), 10)))
			if res.Outcome != op.OutcomeSuccess {
				b.Fatalf("outcome %s: %s", res.Outcome, res.Error)
			}
		}
	})
	if got := v.Stats().Captures; got != int(n.Load()) {
		b.Fatalf("vendor captured %d for %d calls", got, n.Load())
	}
}
