package httpadapter_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/pkg/adapter"
	"github.com/opledger/opledger/pkg/adapter/httpadapter"
	"github.com/opledger/opledger/pkg/op"
)

// recorder is a real HTTP server that records what arrives and answers as
// the query asks (?status=, ?retry_after=, ?location=, ?body=). It checks
// what the adapter puts on the wire; vendor behaviour is tested against
// internal/vendors.
type recorder struct {
	url  string
	mu   sync.Mutex
	seen []*http.Request
	body [][]byte
}

func startRecorder(t *testing.T) *recorder {
	t.Helper()
	rec := &recorder{}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	rec.url = "http://" + l.Addr().String()
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rec.mu.Lock()
		rec.seen = append(rec.seen, r)
		rec.body = append(rec.body, b)
		rec.mu.Unlock()
		q := r.URL.Query()
		if v := q.Get("retry_after"); v != "" {
			w.Header().Set("Retry-After", v)
		}
		if v := q.Get("location"); v != "" {
			w.Header().Set("Location", v)
		}
		status := http.StatusOK
		if v := q.Get("status"); v != "" {
			status, _ = strconv.Atoi(v)
		}
		body := `{"id":"obj_1","n":7}`
		if q.Has("body") {
			body = q.Get("body")
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return rec
}

func (r *recorder) requests() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}

func (r *recorder) last(t *testing.T) (*http.Request, []byte) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	require.NotEmpty(t, r.seen)
	return r.seen[len(r.seen)-1], r.body[len(r.body)-1]
}

func TestWhatGoesOnTheWire(t *testing.T) {
	t.Parallel()
	rec := startRecorder(t)
	a, err := httpadapter.New(httpadapter.Config{
		URL:               rec.url + "/v1/c/{customer.id}/items/{items.1.sku}?ref={idempotency_key}&op={operation_id}",
		Headers:           map[string]string{"X-Api-Version": "2024-01", "Accept": "application/vnd.vendor+json"},
		SecretHeaders:     map[string]string{"Authorization": "Bearer ${TOKEN}"},
		Secret:            func(name string) (string, bool) { return "configured", name == "TOKEN" },
		IdempotencyHeader: "Idempotency-Key",
		ReferenceHeader:   "X-Client-Reference",
	}, nil)
	require.NoError(t, err)

	args := `{"customer":{"id":"cu/1 x"},"items":[{"sku":"a"},{"sku":"b?c"}]}`
	req := adapter.Request{
		OperationID: "op_1", IdempotencyKey: "k&1=2 v1", Args: []byte(args),
		Header: http.Header{"Traceparent": {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}, "Authorization": {"Bearer smuggled"}},
	}
	res := a.Call(context.Background(), req)
	require.Equal(t, op.OutcomeSuccess, res.Outcome, res.Error)

	got, body := rec.last(t)
	require.Equal(t, http.MethodPost, got.Method)
	require.Equal(t, "/v1/c/cu%2F1%20x/items/b%3Fc", got.URL.EscapedPath())
	require.Equal(t, "k&1=2 v1", got.URL.Query().Get("ref"))
	require.Equal(t, "op_1", got.URL.Query().Get("op"))
	require.Equal(t, args, string(body), "the canonical args go as they are")
	require.Equal(t, "application/json", got.Header.Get("Content-Type"))
	require.Equal(t, "k&1=2 v1", got.Header.Get("Idempotency-Key"))
	require.Equal(t, "k&1=2 v1", got.Header.Get("X-Client-Reference"))
	require.Equal(t, req.Header.Get("Traceparent"), got.Header.Get("Traceparent"))
	require.Equal(t, "2024-01", got.Header.Get("X-Api-Version"))
	require.Equal(t, "Bearer configured", got.Header.Get("Authorization"), "configured headers win")
	require.Equal(t, "application/vnd.vendor+json", got.Header.Get("Accept"), "a configured Accept wins over the default")
}

func TestGetSendsNoBody(t *testing.T) {
	t.Parallel()
	rec := startRecorder(t)
	a, err := httpadapter.New(httpadapter.Config{Method: "GET", URL: rec.url + "/r/{id}", ExternalIDPointer: "/n"}, nil)
	require.NoError(t, err)
	res := a.Call(context.Background(), request("", `{"id":42}`))
	require.Equal(t, op.OutcomeSuccess, res.Outcome)
	require.Equal(t, "7", res.ExternalObjectID, "numbers are read as their JSON text")
	got, body := rec.last(t)
	require.Equal(t, "/r/42", got.URL.Path)
	require.Empty(t, body)
	require.Empty(t, got.Header.Get("Content-Type"))
}

func TestTemplateFieldMissingIsPermanentAndNotSent(t *testing.T) {
	t.Parallel()
	rec := startRecorder(t)
	a, err := httpadapter.New(httpadapter.Config{URL: rec.url + "/r/{id}?k={idempotency_key}"}, nil)
	require.NoError(t, err)
	for _, tc := range []struct{ key, args, msg string }{
		{"k", `{}`, "request not sent: url field {id} is missing from the args"},
		{"k", `{"id":""}`, "request not sent: url field {id} is empty"},
		{"k", `{"id":{"a":1}}`, "request not sent: url field {id} is not a string, number or boolean"},
		{"", `{"id":"x"}`, "request not sent: url field {idempotency_key} is empty"},
		{"k", `not json`, "request not sent: canonical args are not JSON"},
	} {
		res := a.Call(context.Background(), request(tc.key, tc.args))
		require.Equal(t, op.OutcomePermanent, res.Outcome)
		require.Equal(t, httpadapter.CategoryClientError, res.ErrorCategory)
		require.Equal(t, tc.msg, res.Error)
	}
	require.Zero(t, rec.requests())
}

func TestStatusOutcomes(t *testing.T) {
	t.Parallel()
	rec := startRecorder(t)
	call := func(cfg httpadapter.Config, status string, extra string) adapter.Result {
		t.Helper()
		cfg.URL = rec.url + "/s?status=" + status + extra
		a, err := httpadapter.New(cfg, nil)
		require.NoError(t, err)
		return a.Call(context.Background(), request("k", `{}`))
	}
	defaults := httpadapter.Config{}
	for _, tc := range []struct {
		status   string
		outcome  op.Outcome
		category string
	}{
		{"200", op.OutcomeSuccess, ""},
		{"201", op.OutcomeSuccess, ""},
		{"202", op.OutcomeSuccess, ""},
		{"400", op.OutcomePermanent, httpadapter.CategoryClientError},
		{"404", op.OutcomePermanent, httpadapter.CategoryClientError},
		{"409", op.OutcomePermanent, httpadapter.CategoryClientError},
		{"408", op.OutcomeRetryable, httpadapter.CategoryClientError},
		{"425", op.OutcomeRetryable, httpadapter.CategoryClientError},
		{"429", op.OutcomeRetryable, httpadapter.CategoryRateLimited},
		{"500", op.OutcomeUnknown, httpadapter.CategoryServerError},
		{"503", op.OutcomeUnknown, httpadapter.CategoryServerError},
		{"302", op.OutcomeUnknown, httpadapter.CategoryUnexpectedStatus},
	} {
		res := call(defaults, tc.status, "")
		require.Equal(t, tc.outcome, res.Outcome, tc.status)
		require.Equal(t, tc.category, res.ErrorCategory, tc.status)
		require.Equal(t, tc.status, strconv.Itoa(res.HTTPStatus))
	}

	mapped := httpadapter.Config{StatusOutcomes: map[string]op.Outcome{
		"409": op.OutcomeNoop, "4xx": op.OutcomeUnknown, "202": op.OutcomeAcknowledged, "2XX": op.OutcomeSuccess,
	}}
	require.Equal(t, op.OutcomeNoop, call(mapped, "409", "").Outcome, "exact code beats class")
	require.Equal(t, op.OutcomeUnknown, call(mapped, "404", "").Outcome)
	require.Equal(t, op.OutcomeUnknown, call(mapped, "429", "").Outcome, "an operator's class beats a default")
	require.Equal(t, op.OutcomeAcknowledged, call(mapped, "202", "").Outcome)
	require.Equal(t, op.OutcomeSuccess, call(mapped, "200", "").Outcome)
}

func TestRedirectIsNotFollowed(t *testing.T) {
	t.Parallel()
	rec := startRecorder(t)
	a, err := httpadapter.New(httpadapter.Config{URL: rec.url + "/s?status=307&location=/elsewhere"}, nil)
	require.NoError(t, err)
	res := a.Call(context.Background(), request("k", `{"a":1}`))
	require.Equal(t, op.OutcomeUnknown, res.Outcome)
	require.Equal(t, http.StatusTemporaryRedirect, res.HTTPStatus)
	require.Equal(t, 1, rec.requests())
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	rec := startRecorder(t)
	inAMinute := time.Now().Add(61 * time.Second).UTC().Format(http.TimeFormat)
	for _, tc := range []struct {
		header   string
		min, max time.Duration
	}{
		{"120", 120 * time.Second, 120 * time.Second},
		{"0", 0, 0},
		{"-5", 0, 0},
		{"soon", 0, 0},
		{"99999999999999", 24 * time.Hour, 24 * time.Hour},
		{inAMinute, 50 * time.Second, 61 * time.Second},
		{"Mon, 02 Jan 2006 15:04:05 GMT", 0, 0},
	} {
		a, err := httpadapter.New(httpadapter.Config{URL: rec.url + "/s?status=429&retry_after={v}"}, nil)
		require.NoError(t, err)
		res := a.Call(context.Background(), request("k", `{"v":"`+tc.header+`"}`))
		require.Equal(t, op.OutcomeRetryable, res.Outcome)
		require.GreaterOrEqual(t, res.RetryAfter, tc.min, tc.header)
		require.LessOrEqual(t, res.RetryAfter, tc.max, tc.header)
	}
}

func TestPositiveBodies(t *testing.T) {
	t.Parallel()
	rec := startRecorder(t)
	call := func(status, body, pointer string) adapter.Result {
		t.Helper()
		a, err := httpadapter.New(httpadapter.Config{
			URL:               rec.url + "/s?status=" + status + "&body={b}",
			ExternalIDPointer: pointer,
			StatusOutcomes:    map[string]op.Outcome{"409": op.OutcomeNoop},
		}, nil)
		require.NoError(t, err)
		return a.Call(context.Background(), request("k", `{"b":`+strconv.Quote(body)+`}`))
	}
	// No pointer: the body does not matter.
	require.Equal(t, op.OutcomeSuccess, call("200", "not json", "").Outcome)
	// Pointer set: a 2xx that is not JSON is unknown.
	res := call("200", `{"id":`, "/id")
	require.Equal(t, op.OutcomeUnknown, res.Outcome)
	require.Equal(t, httpadapter.CategoryMalformedResponse, res.ErrorCategory)
	require.Equal(t, "HTTP 200 with a response body that is not JSON", res.Error)
	empty, err := httpadapter.New(httpadapter.Config{URL: rec.url + "/s?body=", ExternalIDPointer: "/id"}, nil)
	require.NoError(t, err)
	require.Equal(t, op.OutcomeUnknown, empty.Call(context.Background(), request("k", `{}`)).Outcome)
	// Valid JSON without the id: still the vendor's success.
	res = call("200", `{"other":1}`, "/id")
	require.Equal(t, op.OutcomeSuccess, res.Outcome)
	require.Empty(t, res.ExternalObjectID)
	// Pointer escapes and arrays.
	require.Equal(t, "x", call("200", `{"a/b":[{"c~d":"x"}]}`, "/a~1b/0/c~0d").ExternalObjectID)
	// A mapped non-2xx positive outcome keeps its outcome whatever the body.
	require.Equal(t, op.OutcomeNoop, call("409", `oops`, "/id").Outcome)
	require.Equal(t, "obj_9", call("409", `{"id":"obj_9"}`, "/id").ExternalObjectID)
}

func TestVendorErrorCodeOnlyWhenSafe(t *testing.T) {
	t.Parallel()
	rec := startRecorder(t)
	a, err := httpadapter.New(httpadapter.Config{URL: rec.url + "/s?status=400&body={b}"}, nil)
	require.NoError(t, err)
	for body, want := range map[string]string{
		`{"error":"invalid_request"}`:                   "vendor answered HTTP 400 (invalid_request)",
		`{"error":{"type":"card_error","code":"x1"}}`:   "vendor answered HTTP 400 (card_error)",
		`{"error":"card 4242424242424242 was refused"}`: "vendor answered HTTP 400",
		`not json`: "vendor answered HTTP 400",
	} {
		res := a.Call(context.Background(), request("k", `{"b":`+strconv.Quote(body)+`}`))
		require.Equal(t, want, res.Error)
	}
}

func TestNewValidation(t *testing.T) {
	t.Parallel()
	ok := httpadapter.Config{URL: "http://127.0.0.1:1/x"}
	for _, tc := range []struct {
		field string
		edit  func(*httpadapter.Config)
	}{
		{"Method", func(c *httpadapter.Config) { c.Method = "FETCH" }},
		{"URL", func(c *httpadapter.Config) { c.URL = "" }},
		{"URL", func(c *httpadapter.Config) { c.URL = "http://h/{id" }},
		{"URL", func(c *httpadapter.Config) { c.URL = "http://h/id}" }},
		{"URL", func(c *httpadapter.Config) { c.URL = "http://h/{}" }},
		{"URL", func(c *httpadapter.Config) { c.URL = "http://h/{a..b}" }},
		{"URL", func(c *httpadapter.Config) { c.URL = "/relative/{id}" }},
		{"URL", func(c *httpadapter.Config) { c.URL = "ftp://h/x" }},
		{"Timeout", func(c *httpadapter.Config) { c.Timeout = -time.Second }},
		{`StatusOutcomes["200"]`, func(c *httpadapter.Config) { c.StatusOutcomes = map[string]op.Outcome{"200": "great"} }},
		{`StatusOutcomes["2x"]`, func(c *httpadapter.Config) { c.StatusOutcomes = map[string]op.Outcome{"2x": op.OutcomeSuccess} }},
		{`StatusOutcomes["700"]`, func(c *httpadapter.Config) { c.StatusOutcomes = map[string]op.Outcome{"700": op.OutcomeSuccess} }},
		{"ExternalIDPointer", func(c *httpadapter.Config) { c.ExternalIDPointer = "id" }},
		{"ExternalIDPointer", func(c *httpadapter.Config) { c.ExternalIDPointer = "/a~2" }},
		{`Headers["Bad Name"]`, func(c *httpadapter.Config) { c.Headers = map[string]string{"Bad Name": "x"} }},
		{`SecretHeaders["X"]`, func(c *httpadapter.Config) { c.SecretHeaders = map[string]string{"X": "a${UNTERMINATED"} }},
		{`SecretHeaders["X"]`, func(c *httpadapter.Config) { c.SecretHeaders = map[string]string{"X": "${1BAD}"} }},
		{`SecretHeaders["X"]`, func(c *httpadapter.Config) {
			c.SecretHeaders = map[string]string{"X": "${OPLEDGER_TEST_SURELY_UNSET}"}
		}},
		{`SecretHeaders["X"]`, func(c *httpadapter.Config) { c.SecretHeaders = map[string]string{"X": "no reference"} }},
		{`Headers["X"]`, func(c *httpadapter.Config) { c.Headers = map[string]string{"X": "a\r\nInjected: 1"} }},
		{`Headers["X"]`, func(c *httpadapter.Config) { c.Headers = map[string]string{"X": "${TOKEN}"} }},
		{`Headers["authorization"]`, func(c *httpadapter.Config) { c.Headers = map[string]string{"authorization": "Bearer x"} }},
		{`Headers["Content-Type"]`, func(c *httpadapter.Config) { c.Headers = map[string]string{"Content-Type": "text/plain"} }},
		{`Headers["Idempotency-Key"]`, func(c *httpadapter.Config) {
			c.IdempotencyHeader, c.Headers = "Idempotency-Key", map[string]string{"Idempotency-Key": "fixed"}
		}},
		{`SecretHeaders["x-token"]`, func(c *httpadapter.Config) {
			c.Headers = map[string]string{"X-Token": "a"}
			c.SecretHeaders = map[string]string{"x-token": "${TOKEN}"}
			c.Secret = func(string) (string, bool) { return "s", true }
		}},
		{"RequestIDPointer", func(c *httpadapter.Config) { c.RequestIDPointer = "request_id" }},
		{"StatusPointer", func(c *httpadapter.Config) { c.StatusPointer = "status" }},
		{"FailedValues", func(c *httpadapter.Config) { c.FailedValues = []string{"failed"} }},
		{"SucceededValues", func(c *httpadapter.Config) {
			c.StatusPointer, c.PendingValues, c.SucceededValues = "/status", []string{"x"}, []string{"x"}
		}},
		{"Body", func(c *httpadapter.Config) {
			c.Method, c.Body = "GET", &httpadapter.BodyConfig{Fields: map[string]any{"a": "{a}"}}
		}},
		{"Body.Encoding", func(c *httpadapter.Config) {
			c.Body = &httpadapter.BodyConfig{Encoding: "xml", Fields: map[string]any{"a": "{a}"}}
		}},
		{"Body.Fields", func(c *httpadapter.Config) { c.Body = &httpadapter.BodyConfig{} }},
		{`Body.Fields["a"]`, func(c *httpadapter.Config) { c.Body = &httpadapter.BodyConfig{Fields: map[string]any{"a": "{a"}} }},
		{`Body.Fields["a"]`, func(c *httpadapter.Config) { c.Body = &httpadapter.BodyConfig{Fields: map[string]any{"a": "x}"}} }},
		{`Body.Fields["a"]["b"][1]`, func(c *httpadapter.Config) {
			c.Body = &httpadapter.BodyConfig{Fields: map[string]any{"a": map[string]any{"b": []any{"{x}", "{a b}"}}}}
		}},
		{`Body.Fields["metadata"]`, func(c *httpadapter.Config) {
			c.Body = &httpadapter.BodyConfig{Encoding: "form", Fields: map[string]any{"metadata": map[string]any{"order_id": "{order_id}"}}}
		}},
		{`Body.Fields["x"]`, func(c *httpadapter.Config) {
			c.Body = &httpadapter.BodyConfig{Encoding: "form", Fields: map[string]any{"x": nil}}
		}},
		{"IdempotencyHeader", func(c *httpadapter.Config) { c.IdempotencyHeader = "Idem Key" }},
		{"Lookup.Method", func(c *httpadapter.Config) { c.Lookup = &httpadapter.LookupConfig{Method: "PUT", URL: "http://h/x"} }},
		{"Lookup.URL", func(c *httpadapter.Config) { c.Lookup = &httpadapter.LookupConfig{URL: "nope"} }},
		{"Lookup.NotFoundStatus", func(c *httpadapter.Config) {
			c.Lookup = &httpadapter.LookupConfig{URL: "http://h/x", FoundStatus: 404}
		}},
		{"Lookup.StatusPointer", func(c *httpadapter.Config) {
			c.Lookup = &httpadapter.LookupConfig{URL: "http://h/x", StatusPointer: "status"}
		}},
	} {
		cfg := ok
		tc.edit(&cfg)
		_, err := httpadapter.New(cfg, nil)
		require.ErrorIs(t, err, op.ErrInvalid, tc.field)
		var ce *httpadapter.ConfigError
		require.True(t, errors.As(err, &ce), tc.field)
		require.Equal(t, tc.field, ce.Field)
		require.NotContains(t, err.Error(), "Injected")
	}

	a, err := httpadapter.New(httpadapter.Config{URL: "https://vendor.example/x/{id}", Method: "patch"}, nil)
	require.NoError(t, err)
	require.Equal(t, "httpadapter(PATCH https://vendor.example)", a.String())
}
