package httpadapter_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/pkg/adapter"
	"github.com/opledger/opledger/pkg/adapter/httpadapter"
	"github.com/opledger/opledger/pkg/op"
)

// TestJSONBodyAgainstVendor maps args whose names and shape differ from the
// payments vendor's onto the body it expects. The vendor decodes strictly
// into an integer amount, so a number sent as a string would be refused; the
// same key replays, so the same args must give the same bytes.
func TestJSONBodyAgainstVendor(t *testing.T) {
	t.Parallel()
	b := setup(t, vendors.Options{})
	cfg := captureConfig(b.vendor.URL())
	cfg.Body = &httpadapter.BodyConfig{Fields: map[string]any{
		"order_id":     "{order.id}",
		"amount_cents": "{total}",
		"currency":     "{cur}",
		"customer_id":  "cust_{customer}",
	}}
	a := b.adapter(cfg)
	req := request("payment:o1:v1", `{"cur":"USD","customer":"c1","order":{"id":"o1"},"total":4900}`)

	first := a.Call(context.Background(), req)
	require.Equal(t, op.OutcomeSuccess, first.Outcome, first.Error)
	require.True(t, strings.HasPrefix(first.ExternalObjectID, "ch_"))
	again := a.Call(context.Background(), req)
	require.Equal(t, op.OutcomeSuccess, again.Outcome, again.Error)
	require.True(t, again.Replayed, "the same args must make the same body")
	require.Equal(t, first.ExternalObjectID, again.ExternalObjectID)
	require.Equal(t, 1, b.vendor.Stats().Captures)
}

func TestJSONBodyOnTheWire(t *testing.T) {
	t.Parallel()
	rec := startRecorder(t)
	a, err := httpadapter.New(httpadapter.Config{URL: rec.url + "/v1/x", Body: &httpadapter.BodyConfig{
		Encoding: httpadapter.EncodingJSON,
		Fields: map[string]any{
			"amount":   "{amount_cents}",
			"lines":    "{items}",
			"ok":       "{flags.ok}",
			"label":    "Order {order_id} <{amount_cents}> {{literal}}",
			"ref":      "{idempotency_key}",
			"op":       "{operation_id}",
			"nested":   map[string]any{"order": "{order_id}", "tags": []any{"agent", "{order_id}", int64(3)}},
			"confirm":  true,
			"count":    int64(2),
			"rate":     0.5,
			"nothing":  nil,
			"note":     "",
			"reason":   "{reason}",
			"currency": "eur",
		},
	}}, nil)
	require.NoError(t, err)
	req := request("k1", `{"amount_cents":4900,"flags":{"ok":false},"items":[{"sku":"a","qty":1}],"order_id":"o&1","reason":""}`)
	res := a.Call(context.Background(), req)
	require.Equal(t, op.OutcomeSuccess, res.Outcome, res.Error)

	got, body := rec.last(t)
	require.Equal(t, "application/json", got.Header.Get("Content-Type"))
	require.JSONEq(t, `{
		"amount": 4900, "lines": [{"qty":1,"sku":"a"}], "ok": false,
		"label": "Order o&1 <4900> {literal}", "ref": "k1", "op": "`+req.OperationID+`",
		"nested": {"order":"o&1","tags":["agent","o&1",3]},
		"confirm": true, "count": 2, "rate": 0.5, "nothing": null, "note": "", "reason": "", "currency": "eur"
	}`, string(body))
	require.Contains(t, string(body), `"Order o&1 <4900> {literal}"`, "text goes as it is, without HTML escapes")
	require.True(t, strings.HasPrefix(string(body), `{"amount":4900,"confirm":true,`), "fields in name order: %s", body)
}

// formVendor is a stand-in for a vendor that takes form-encoded bodies, as
// Stripe does: it refuses any other Content-Type, a body that does not parse,
// a field given twice and a field it does not know.
type formVendor struct {
	*httptest.Server
	mu    sync.Mutex
	forms []url.Values
}

func startFormVendor(t *testing.T, known []string, answer func(form url.Values, w http.ResponseWriter)) *formVendor {
	t.Helper()
	v := &formVendor{}
	v.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fail := func(code string) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"error":{"type":"invalid_request_error","code":"`+code+`"}}`)
		}
		if r.Header.Get("Content-Type") != "application/x-www-form-urlencoded" {
			fail("wrong_content_type")
			return
		}
		raw, err := io.ReadAll(r.Body)
		if err != nil {
			fail("unreadable")
			return
		}
		form, err := url.ParseQuery(string(raw))
		if err != nil {
			fail("malformed_form")
			return
		}
		for name, vs := range form {
			if len(vs) != 1 {
				fail("repeated_field")
				return
			}
			if !slices.Contains(known, name) {
				fail("unknown_field")
				return
			}
		}
		v.mu.Lock()
		v.forms = append(v.forms, form)
		v.mu.Unlock()
		answer(form, w)
	}))
	t.Cleanup(v.Close)
	return v
}

func (v *formVendor) received() []url.Values {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.forms)
}

func TestFormBody(t *testing.T) {
	t.Parallel()
	known := []string{"amount", "currency", "customer", "confirm", "description", "metadata[order_id]", "metadata[opledger_key]"}
	v := startFormVendor(t, known, func(form url.Values, w http.ResponseWriter) {
		w.Header().Set("Request-Id", "req_form_1")
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"pi_1","object":"payment_intent","status":"succeeded"}`)
	})
	a, err := httpadapter.New(httpadapter.Config{
		URL:               v.URL + "/v1/payment_intents",
		IdempotencyHeader: "Idempotency-Key",
		RequestIDHeader:   "Request-Id",
		ExternalIDPointer: "/id",
		StatusPointer:     "/status",
		SucceededValues:   []string{"succeeded"},
		Body: &httpadapter.BodyConfig{Encoding: httpadapter.EncodingForm, Fields: map[string]any{
			"amount":                 "{amount_cents}",
			"currency":               "{currency}",
			"customer":               "{customer_id}",
			"confirm":                true,
			"description":            "Order {order_id} & more",
			"metadata[order_id]":     "{order_id}",
			"metadata[opledger_key]": "{idempotency_key}",
		}},
	}, nil)
	require.NoError(t, err)
	res := a.Call(context.Background(), request("payment:o 1:v1", `{"amount_cents":4900,"currency":"usd","customer_id":"cus_1","order_id":"o 1"}`))
	require.Equal(t, op.OutcomeSuccess, res.Outcome, res.Error)
	require.Equal(t, "pi_1", res.ExternalObjectID)
	require.Equal(t, "req_form_1", res.ExternalRequestID)

	got := v.received()
	require.Len(t, got, 1)
	require.Equal(t, url.Values{
		"amount": {"4900"}, "currency": {"usd"}, "customer": {"cus_1"}, "confirm": {"true"},
		"description": {"Order o 1 & more"}, "metadata[order_id]": {"o 1"}, "metadata[opledger_key]": {"payment:o 1:v1"},
	}, got[0])

	// A missing field fails before anything is sent.
	res = a.Call(context.Background(), request("k2", `{"amount_cents":4900,"currency":"usd","order_id":"o2"}`))
	require.Equal(t, op.OutcomePermanent, res.Outcome)
	require.Equal(t, httpadapter.CategoryClientError, res.ErrorCategory)
	require.Equal(t, `request not sent: body field "customer": {customer_id} is missing from the args`, res.Error)
	require.Len(t, v.received(), 1)
}

func TestBodyFieldMissingIsPermanentAndNotSent(t *testing.T) {
	t.Parallel()
	rec := startRecorder(t)
	for _, tc := range []struct {
		encoding string
		fields   map[string]any
		key      string
		args     string
		msg      string
	}{
		{"json", map[string]any{"a": "{id}"}, "k", `{}`, `body field "a": {id} is missing from the args`},
		{"json", map[string]any{"a": "{id}"}, "k", `{"id":null}`, `body field "a": {id} is missing from the args`},
		{"json", map[string]any{"m": map[string]any{"b": "x{id}"}}, "k", `{"id":{"v":1}}`,
			`body field "m.b": {id} is not a string, number or boolean`},
		{"json", map[string]any{"a": "{idempotency_key}"}, "", `{}`, `body field "a": {idempotency_key} is empty`},
		{"json", map[string]any{"a": "{id}"}, "k", `not json`, `canonical args are not JSON`},
		{"form", map[string]any{"metadata[id]": "{id}"}, "k", `{"id":[1]}`,
			`body field "metadata[id]": {id} is not a string, number or boolean`},
		{"form", map[string]any{"a": "{id}"}, "k", `{"other":1}`, `body field "a": {id} is missing from the args`},
	} {
		a, err := httpadapter.New(httpadapter.Config{URL: rec.url + "/x", Body: &httpadapter.BodyConfig{Encoding: tc.encoding, Fields: tc.fields}}, nil)
		require.NoError(t, err)
		res := a.Call(context.Background(), request(tc.key, tc.args))
		require.Equal(t, op.OutcomePermanent, res.Outcome, tc.msg)
		require.Equal(t, httpadapter.CategoryClientError, res.ErrorCategory)
		require.Equal(t, "request not sent: "+tc.msg, res.Error)
	}
	require.Zero(t, rec.requests())
}

func TestPlaceholders(t *testing.T) {
	t.Parallel()
	a, err := httpadapter.New(httpadapter.Config{
		URL: "http://h/v1/{account.id}?k={idempotency_key}",
		Body: &httpadapter.BodyConfig{Fields: map[string]any{
			"b": "{amount}", "a": map[string]any{"x": []any{"{op} {operation_id}"}},
		}},
		Lookup: &httpadapter.LookupConfig{URL: "http://h/v1/{account.id}/{ref}"},
	}, nil)
	require.NoError(t, err)
	require.Equal(t, []httpadapter.Placeholder{
		{Field: "URL", Arg: "account.id"},
		{Field: `Body.Fields["a"]["x"][0]`, Arg: "op"},
		{Field: `Body.Fields["b"]`, Arg: "amount"},
		{Field: "Lookup.URL", Arg: "account.id"},
		{Field: "Lookup.URL", Arg: "ref"},
	}, a.Placeholders())
}

// answering is a vendor that answers every request with the status, headers
// and body of its current reply.
type answering struct {
	*httptest.Server
	mu     sync.Mutex
	status int
	header http.Header
	body   string
}

func startAnswering(t *testing.T) *answering {
	t.Helper()
	v := &answering{status: http.StatusOK}
	v.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		v.mu.Lock()
		status, header, body := v.status, v.header, v.body
		v.mu.Unlock()
		for k, vs := range header {
			w.Header()[k] = vs
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(v.Close)
	return v
}

func (v *answering) reply(status int, header http.Header, body string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.status, v.header, v.body = status, header, body
}

// TestStatusPointerOnCalls: a 2xx is only as good as the status its body
// reports.
func TestStatusPointerOnCalls(t *testing.T) {
	t.Parallel()
	v := startAnswering(t)
	a, err := httpadapter.New(httpadapter.Config{
		URL:               v.URL + "/v1/payment_intents",
		ExternalIDPointer: "/id",
		StatusPointer:     "/status",
		PendingValues:     []string{"requires_action", "processing"},
		FailedValues:      []string{"failed", "canceled"},
		SucceededValues:   []string{"succeeded"},
		StatusOutcomes:    map[string]op.Outcome{"409": op.OutcomeNoop},
	}, nil)
	require.NoError(t, err)
	for _, tc := range []struct {
		name     string
		status   int
		body     string
		outcome  op.Outcome
		category string
		msg      string
		id       string
	}{
		{"succeeded", 200, `{"id":"pi_1","status":"succeeded"}`, op.OutcomeSuccess, "", "", "pi_1"},
		{"requires action", 200, `{"id":"pi_1","status":"requires_action"}`, op.OutcomeAcknowledged, "", "", "pi_1"},
		{"processing", 201, `{"id":"pi_1","status":"processing"}`, op.OutcomeAcknowledged, "", "", "pi_1"},
		{"failed", 200, `{"id":"pi_1","status":"failed"}`, op.OutcomePermanent, httpadapter.CategoryFailedStatus,
			`vendor answered HTTP 200 with failed status "failed"`, "pi_1"},
		{"unrecognised", 200, `{"id":"pi_1","status":"on_hold"}`, op.OutcomeUnknown, httpadapter.CategoryUnrecognizedValue,
			`vendor answered HTTP 200 with status "on_hold" that is not a configured pending, failed or succeeded value`, "pi_1"},
		{"unsafe unrecognised status is not echoed", 200, `{"id":"pi_1","status":"Card 4000 0000 0000 0002"}`, op.OutcomeUnknown,
			httpadapter.CategoryUnrecognizedValue,
			`vendor answered HTTP 200 with a status that is not a configured pending, failed or succeeded value`, "pi_1"},
		{"no status", 200, `{"id":"pi_1"}`, op.OutcomeUnknown, httpadapter.CategoryMalformedResponse,
			"HTTP 200 without a status at the configured pointer", "pi_1"},
		{"empty status", 200, `{"id":"pi_1","status":""}`, op.OutcomeUnknown, httpadapter.CategoryMalformedResponse,
			"HTTP 200 without a status at the configured pointer", "pi_1"},
		{"not JSON", 200, `ok`, op.OutcomeUnknown, httpadapter.CategoryMalformedResponse,
			"HTTP 200 with a response body that is not JSON", ""},
		{"status given twice", 200, `{"id":"pi_1","status":"failed","status":"succeeded"}`, op.OutcomeUnknown,
			httpadapter.CategoryMalformedResponse, "HTTP 200 with a response body that is not JSON", ""},
		{"a mapped non-2xx keeps its outcome", 409, `{"id":"pi_1","status":"failed"}`, op.OutcomeNoop, "", "", "pi_1"},
		{"an error stays an error", 402, `{"error":{"code":"card_declined"},"status":"succeeded"}`, op.OutcomePermanent,
			httpadapter.CategoryClientError, "vendor answered HTTP 402 (card_declined)", ""},
	} {
		v.reply(tc.status, nil, tc.body)
		res := a.Call(context.Background(), request("k", `{}`))
		require.Equal(t, tc.outcome, res.Outcome, tc.name)
		require.Equal(t, tc.category, res.ErrorCategory, tc.name)
		require.Equal(t, tc.msg, res.Error, tc.name)
		require.Equal(t, tc.id, res.ExternalObjectID, tc.name)
		require.NotContains(t, res.Error, "4000", tc.name)
	}
}

func TestRequestIDPointer(t *testing.T) {
	t.Parallel()
	v := startAnswering(t)
	a, err := httpadapter.New(httpadapter.Config{
		URL: v.URL + "/x", RequestIDHeader: "X-Request-Id", RequestIDPointer: "/meta/request_id",
	}, nil)
	require.NoError(t, err)
	call := func(status int, header http.Header, body string) adapter.Result {
		t.Helper()
		v.reply(status, header, body)
		return a.Call(context.Background(), request("k", `{}`))
	}
	res := call(200, http.Header{"X-Request-Id": {"req_h"}}, `{"meta":{"request_id":"req_b"}}`)
	require.Equal(t, op.OutcomeSuccess, res.Outcome)
	require.Equal(t, "req_b", res.ExternalRequestID, "the body wins over the header")
	res = call(200, http.Header{"X-Request-Id": {"req_h"}}, `{"meta":{}}`)
	require.Equal(t, "req_h", res.ExternalRequestID)
	res = call(400, nil, `{"error":"invalid_request","meta":{"request_id":"req_e"}}`)
	require.Equal(t, op.OutcomePermanent, res.Outcome)
	require.Equal(t, "req_e", res.ExternalRequestID, "errors carry their request id too")
	res = call(200, nil, `not json`)
	require.Equal(t, op.OutcomeUnknown, res.Outcome, "a request id pointer needs a JSON body, like an object id pointer")
	require.Equal(t, httpadapter.CategoryMalformedResponse, res.ErrorCategory)
}

// TestVendorValuesAreBounded: ids that are too long, not UTF-8 or hold
// control characters make the response malformed and are never returned.
func TestVendorValuesAreBounded(t *testing.T) {
	t.Parallel()
	v := startAnswering(t)
	a, err := httpadapter.New(httpadapter.Config{
		URL: v.URL + "/x", ExternalIDPointer: "/id", RequestIDHeader: "Request-Id", RequestIDPointer: "/request_id",
		Lookup: &httpadapter.LookupConfig{URL: v.URL + "/x?k={idempotency_key}", ExternalIDPointer: "/id"},
	}, nil)
	require.NoError(t, err)
	quote := func(s string) string {
		b, err := json.Marshal(s)
		require.NoError(t, err)
		return string(b)
	}
	max := strings.Repeat("a", httpadapter.MaxVendorID)
	v.reply(200, http.Header{"Request-Id": {"req_" + max[4:]}}, `{"id":`+quote(max)+`}`)
	res := a.Call(context.Background(), request("k", `{}`))
	require.Equal(t, op.OutcomeSuccess, res.Outcome, "255 bytes fit")
	require.Equal(t, max, res.ExternalObjectID)
	require.Len(t, res.ExternalRequestID, httpadapter.MaxVendorID)

	huge := strings.Repeat("r", 2<<20)
	for name, tc := range map[string]struct {
		status int
		header http.Header
		body   string
		msg    string
	}{
		"object id too long":        {200, nil, `{"id":` + quote(max+"a") + `}`, "HTTP 200 with an object id that is too long or not plain text"},
		"object id not UTF-8":       {200, nil, "{\"id\":\"ch_\xff\"}", "HTTP 200 with a response body that is not JSON"},
		"id given twice":            {200, nil, `{"id":"ch_1","id":"ch_2"}`, "HTTP 200 with a response body that is not JSON"},
		"object id with NUL":        {200, nil, `{"id":"ch_\u0000"}`, "HTTP 200 with an object id that is too long or not plain text"},
		"object id with newline":    {200, nil, `{"id":"ch_1\nInjected"}`, "HTTP 200 with an object id that is too long or not plain text"},
		"object id with DEL":        {200, nil, `{"id":"ch_\u007f"}`, "HTTP 200 with an object id that is too long or not plain text"},
		"numeric id too long":       {200, nil, `{"id":` + strings.Repeat("9", 256) + `}`, "HTTP 200 with an object id that is too long or not plain text"},
		"request id in body":        {200, nil, `{"request_id":` + quote(max+"a") + `}`, "HTTP 200 with a request id in the body that is too long or not plain text"},
		"2 MB request id header":    {200, http.Header{"Request-Id": {huge}}, `{"id":"ch_1"}`, "HTTP 200 with a request id header that is too long or not plain text"},
		"request id header not UTF": {200, http.Header{"Request-Id": {"req_\xff"}}, `{"id":"ch_1"}`, "HTTP 200 with a request id header that is too long or not plain text"},
	} {
		v.reply(tc.status, tc.header, tc.body)
		res := a.Call(context.Background(), request("k", `{}`))
		require.Equal(t, op.OutcomeUnknown, res.Outcome, name)
		require.Equal(t, httpadapter.CategoryMalformedResponse, res.ErrorCategory, name)
		if tc.msg != "" {
			require.Equal(t, tc.msg, res.Error, name)
		}
		require.Empty(t, res.ExternalObjectID, name)
		require.Empty(t, res.ExternalRequestID, name)
		require.Equal(t, tc.status, res.HTTPStatus, name)
	}

	// On a refusal the status decides: the unstorable id is dropped and the
	// outcome stays what the status says (429: retry, 400: permanent).
	for _, tc := range []struct {
		status int
		header http.Header
		body   string
		want   op.Outcome
	}{
		{429, http.Header{"Request-Id": {huge}}, `{}`, op.OutcomeRetryable},
		{400, nil, `{"request_id":"r\u0001"}`, op.OutcomePermanent},
	} {
		v.reply(tc.status, tc.header, tc.body)
		res := a.Call(context.Background(), request("k", `{}`))
		require.Equal(t, tc.want, res.Outcome, "HTTP %d", tc.status)
		require.Empty(t, res.ExternalRequestID)
	}

	v.reply(200, nil, `{"id":`+quote(max+"a")+`}`)
	lr, err := a.Lookup(context.Background(), request("k", `{}`))
	requireLookupError(t, lr, err, httpadapter.CategoryMalformedResponse, http.StatusOK)
}
