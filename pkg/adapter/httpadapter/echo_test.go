package httpadapter_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/pkg/adapter"
	"github.com/opledger/opledger/pkg/adapter/httpadapter"
	"github.com/opledger/opledger/pkg/op"
)

// A vendor that echoes a credential back (the Authorization header into
// its Request-Id, or into an id or an error code of its body) never gets
// it stored, logged or published: everything downstream reads the
// adapter's Result, and the Result holds no secret. A request id with the
// secret is dropped; an object id with it makes the answer malformed (the
// lookup settles it, and a lookup record with it is unreadable too); an
// error text has it redacted.
//
// Breaking it: without adapter.Redact in Call and Lookup the charge's
// Request-Id reaches attempts.external_request_id, the API and results.
func TestVendorEchoingACredentialIsNeverKept(t *testing.T) {
	t.Parallel()
	const secret = "sk_live_0123456789abcdef" // the shape of a real key: ≥ 8 bytes
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		auth := r.Header.Get("Authorization")
		key := strings.TrimPrefix(auth, "Bearer ")
		switch r.URL.Query().Get("echo") {
		case "header":
			w.Header().Set("Request-Id", "req_"+auth)
			_, _ = io.WriteString(w, `{"id":"ch_1"}`)
		case "request_id_body":
			_, _ = fmt.Fprintf(w, `{"id":"ch_1","request_id":"req-%s"}`, key)
		case "object":
			_, _ = fmt.Fprintf(w, `{"id":"ch_%s"}`, key)
		case "error":
			w.WriteHeader(http.StatusBadRequest)
			_, _ = fmt.Fprintf(w, `{"error":{"code":%q}}`, strings.ToLower(key))
		case "lookup":
			_, _ = fmt.Fprintf(w, `{"id":"%s"}`, key)
		}
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	base := "http://" + l.Addr().String()
	mk := func(echo string) *httpadapter.Adapter {
		t.Helper()
		a, err := httpadapter.New(httpadapter.Config{
			URL: base + "/v1/charges?echo=" + echo, Timeout: 2 * time.Second, ExternalIDPointer: "/id",
			RequestIDHeader: "Request-Id", RequestIDPointer: func() string {
				if echo == "request_id_body" {
					return "/request_id"
				}
				return ""
			}(),
			SecretHeaders: map[string]string{"Authorization": "Bearer ${PAY_KEY}"},
			Secret:        func(name string) (string, bool) { return secret, name == "PAY_KEY" },
			Lookup:        &httpadapter.LookupConfig{URL: base + "/v1/lookup?echo=lookup", ExternalIDPointer: "/id"},
		}, nil)
		require.NoError(t, err)
		return a
	}
	req := adapter.Request{OperationID: "op_1", AttemptID: "att_1", Tool: "pay", IdempotencyKey: "k1", Args: []byte(`{}`)}
	noSecret := func(res adapter.Result) {
		t.Helper()
		all := fmt.Sprintf("%+v", res)
		require.NotContains(t, all, secret)
		require.NotContains(t, strings.ToLower(all), strings.ToLower(secret))
	}

	res := mk("header").Call(context.Background(), req)
	noSecret(res)
	require.Equal(t, op.OutcomeSuccess, res.Outcome, "the answer itself is fine")
	require.Equal(t, "ch_1", res.ExternalObjectID)
	require.Empty(t, res.ExternalRequestID, "the echoed request id is dropped")

	res = mk("request_id_body").Call(context.Background(), req)
	noSecret(res)
	require.Equal(t, op.OutcomeSuccess, res.Outcome)
	require.Empty(t, res.ExternalRequestID)

	res = mk("object").Call(context.Background(), req)
	noSecret(res)
	require.Equal(t, op.OutcomeUnknown, res.Outcome, "an object id we cannot store: the effect is confirmed by a lookup")
	require.Equal(t, adapter.CategoryCredentialEcho, res.ErrorCategory)
	require.Empty(t, res.ExternalObjectID)

	res = mk("error").Call(context.Background(), req)
	noSecret(res)
	require.Equal(t, op.OutcomePermanent, res.Outcome)
	require.Equal(t, "vendor answered HTTP 400 (code [redacted])", adapter.RedactText("vendor answered HTTP 400 (code "+secret+")", []string{secret}))

	lr, err := mk("header").Lookup(context.Background(), req)
	var le *httpadapter.LookupError
	require.True(t, errors.As(err, &le), "a record whose id is a credential is unreadable: %v", err)
	require.Equal(t, adapter.CategoryCredentialEcho, le.Category)
	require.NotContains(t, err.Error(), secret)
	require.Empty(t, lr.ExternalObjectID)

	// Short secrets are matched as whole values only: a two-letter
	// "credential" does not blank every id that happens to contain it.
	require.False(t, adapter.HoldsSecret("ch_ab12", []string{"ab"}))
	require.True(t, adapter.HoldsSecret("ab", []string{"ab"}))
	require.True(t, adapter.HoldsSecret("x-"+secret+"-y", []string{secret}))
}
