package httpadapter_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/pkg/adapter"
	"github.com/opledger/opledger/pkg/adapter/httpadapter"
	"github.com/opledger/opledger/pkg/op"
)

// requireLookupError checks that a lookup failed with category and that the
// result says nothing but the HTTP status.
func requireLookupError(t *testing.T, lr adapter.LookupResult, err error, category string, status int) *httpadapter.LookupError {
	t.Helper()
	var le *httpadapter.LookupError
	require.ErrorAs(t, err, &le)
	require.Equal(t, category, le.Category, le.Reason)
	require.Equal(t, status, le.HTTPStatus)
	require.Equal(t, adapter.LookupResult{HTTPStatus: status}, lr, "a failed lookup must not look like a record")
	return le
}

// TestLookupStatusValuesAgainstVendor drives the status mapping with what the
// local vendor really answers: charges are "succeeded", messages "queued"
// then "delivered".
func TestLookupStatusValuesAgainstVendor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, vendors.Options{})
	base := b.vendor.URL()
	const key = "payment:o1:capture:4900:USD:v1"
	charge := b.adapter(captureConfig(base)).Call(ctx, captureReq(key))
	require.Equal(t, op.OutcomeSuccess, charge.Outcome, charge.Error)

	capture := func(edit func(*httpadapter.LookupConfig)) *httpadapter.Adapter {
		cfg := captureConfig(base)
		edit(cfg.Lookup)
		return b.adapter(cfg)
	}

	t.Run("listed success", func(t *testing.T) {
		t.Parallel()
		a := capture(func(l *httpadapter.LookupConfig) {
			l.PendingValues, l.FailedValues, l.SucceededValues = []string{"pending"}, []string{"failed"}, []string{"succeeded"}
		})
		lr, err := a.Lookup(ctx, captureReq(key))
		require.NoError(t, err)
		require.Equal(t, adapter.LookupResult{Found: true, Outcome: op.OutcomeSuccess,
			ExternalObjectID: charge.ExternalObjectID, HTTPStatus: http.StatusOK}, lr)
	})
	t.Run("no succeeded list: any status neither pending nor failed is success", func(t *testing.T) {
		t.Parallel()
		a := capture(func(l *httpadapter.LookupConfig) { l.FailedValues = []string{"failed"} })
		lr, err := a.Lookup(ctx, captureReq(key))
		require.NoError(t, err)
		require.True(t, lr.Found)
		require.Equal(t, op.OutcomeSuccess, lr.Outcome)
	})
	t.Run("unrecognised status is an error", func(t *testing.T) {
		t.Parallel()
		// The operator listed only other statuses: "succeeded" is not evidence.
		a := capture(func(l *httpadapter.LookupConfig) {
			l.PendingValues, l.SucceededValues = []string{"pending"}, []string{"paid", "captured"}
		})
		lr, err := a.Lookup(ctx, captureReq(key))
		le := requireLookupError(t, lr, err, httpadapter.CategoryUnrecognizedValue, http.StatusOK)
		require.Contains(t, le.Error(), `"succeeded"`, "a plain status token is named")
	})
	t.Run("missing status is an error", func(t *testing.T) {
		t.Parallel()
		a := capture(func(l *httpadapter.LookupConfig) { l.StatusPointer, l.PendingValues = "/state", nil })
		lr, err := a.Lookup(ctx, captureReq(key))
		requireLookupError(t, lr, err, httpadapter.CategoryMalformedResponse, http.StatusOK)
	})
	t.Run("missing id is an error", func(t *testing.T) {
		t.Parallel()
		a := capture(func(l *httpadapter.LookupConfig) { l.ExternalIDPointer = "/charge_id" })
		lr, err := a.Lookup(ctx, captureReq(key))
		requireLookupError(t, lr, err, httpadapter.CategoryMalformedResponse, http.StatusOK)
	})
	t.Run("missing id without a status pointer is an error", func(t *testing.T) {
		t.Parallel()
		a := capture(func(l *httpadapter.LookupConfig) {
			l.ExternalIDPointer, l.StatusPointer, l.PendingValues = "/charge_id", "", nil
		})
		lr, err := a.Lookup(ctx, captureReq(key))
		requireLookupError(t, lr, err, httpadapter.CategoryMalformedResponse, http.StatusOK)
	})
	t.Run("not found is still no record", func(t *testing.T) {
		t.Parallel()
		a := capture(func(l *httpadapter.LookupConfig) { l.SucceededValues = []string{"succeeded"} })
		lr, err := a.Lookup(ctx, captureReq("never-sent"))
		require.NoError(t, err)
		require.Equal(t, adapter.LookupResult{HTTPStatus: http.StatusNotFound}, lr)
	})
}

func TestLookupQueuedThenDeliveredAgainstVendor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	req := request("email:a@example.com:receipt:o1:v1", `{"template":"receipt","to":"a@example.com"}`)
	for _, tc := range []struct {
		delay   time.Duration
		outcome op.Outcome
	}{
		{time.Hour, op.OutcomeAcknowledged}, // still "queued"
		{0, op.OutcomeSuccess},              // "delivered" at once
	} {
		b := setup(t, vendors.Options{EmailQueueDelay: tc.delay})
		cfg := emailConfig(b.vendor.URL())
		cfg.Lookup.PendingValues = []string{"queued"}
		cfg.Lookup.FailedValues = []string{"bounced"}
		cfg.Lookup.SucceededValues = []string{"delivered"}
		a := b.adapter(cfg)
		sent := a.Call(ctx, req)
		require.Equal(t, op.OutcomeSuccess, sent.Outcome, sent.Error)
		lr, err := a.Lookup(ctx, req)
		require.NoError(t, err)
		require.True(t, lr.Found)
		require.Equal(t, tc.outcome, lr.Outcome, "delay %v", tc.delay)
		require.Equal(t, sent.ExternalObjectID, lr.ExternalObjectID)
	}
}

// TestLookupBodiesTheVendorCannotProduce uses the recorder for a failed
// charge and a search endpoint's empty answer.
func TestLookupBodiesTheVendorCannotProduce(t *testing.T) {
	t.Parallel()
	rec := startRecorder(t)
	ctx := context.Background()
	lookup := func(body string, edit func(*httpadapter.LookupConfig)) (adapter.LookupResult, error) {
		t.Helper()
		l := &httpadapter.LookupConfig{
			URL:               rec.url + "/v1/charges/search?body=" + url.QueryEscape(body) + "&key={idempotency_key}",
			ExternalIDPointer: "/id",
			StatusPointer:     "/status",
			PendingValues:     []string{"pending", "processing"},
			FailedValues:      []string{"failed", "canceled"},
			SucceededValues:   []string{"succeeded"},
		}
		if edit != nil {
			edit(l)
		}
		a, err := httpadapter.New(httpadapter.Config{URL: rec.url + "/v1/charges", Lookup: l, Timeout: slackTimeout}, nil)
		require.NoError(t, err)
		return a.Lookup(ctx, captureReq("k1"))
	}

	t.Run("failed status is permanent", func(t *testing.T) {
		lr, err := lookup(`{"id":"ch_1","status":"failed"}`, nil)
		require.NoError(t, err)
		require.Equal(t, adapter.LookupResult{Found: true, Outcome: op.OutcomePermanent, ExternalObjectID: "ch_1",
			HTTPStatus: http.StatusOK}, lr)
	})
	t.Run("failed status is permanent without a succeeded list", func(t *testing.T) {
		lr, err := lookup(`{"id":"ch_1","status":"canceled"}`, func(l *httpadapter.LookupConfig) { l.SucceededValues = nil })
		require.NoError(t, err)
		require.Equal(t, op.OutcomePermanent, lr.Outcome)
		require.True(t, lr.Found)
	})
	t.Run("pending status is acknowledged", func(t *testing.T) {
		lr, err := lookup(`{"id":"ch_1","status":"processing"}`, nil)
		require.NoError(t, err)
		require.Equal(t, adapter.LookupResult{Found: true, Outcome: op.OutcomeAcknowledged, ExternalObjectID: "ch_1",
			HTTPStatus: http.StatusOK}, lr)
	})
	t.Run("numeric id and status are read as text", func(t *testing.T) {
		lr, err := lookup(`{"id":42,"status":3}`, func(l *httpadapter.LookupConfig) {
			l.PendingValues, l.FailedValues, l.SucceededValues = []string{"1"}, []string{"2"}, []string{"3"}
		})
		require.NoError(t, err)
		require.Equal(t, op.OutcomeSuccess, lr.Outcome)
		require.Equal(t, "42", lr.ExternalObjectID)
	})
	t.Run("search with an empty list is an error", func(t *testing.T) {
		lr, err := lookup(`{"data":[]}`, func(l *httpadapter.LookupConfig) {
			l.ExternalIDPointer, l.StatusPointer = "/data/0/id", "/data/0/status"
		})
		requireLookupError(t, lr, err, httpadapter.CategoryMalformedResponse, http.StatusOK)
	})
	t.Run("search with an empty list is an error with only an id pointer", func(t *testing.T) {
		lr, err := lookup(`{"data":[]}`, func(l *httpadapter.LookupConfig) {
			l.ExternalIDPointer, l.StatusPointer = "/data/0/id", ""
			l.PendingValues, l.FailedValues, l.SucceededValues = nil, nil, nil
		})
		requireLookupError(t, lr, err, httpadapter.CategoryMalformedResponse, http.StatusOK)
	})
	t.Run("search hit", func(t *testing.T) {
		lr, err := lookup(`{"data":[{"id":"ch_9","status":"succeeded"}]}`, func(l *httpadapter.LookupConfig) {
			l.ExternalIDPointer, l.StatusPointer = "/data/0/id", "/data/0/status"
		})
		require.NoError(t, err)
		require.Equal(t, adapter.LookupResult{Found: true, Outcome: op.OutcomeSuccess, ExternalObjectID: "ch_9",
			HTTPStatus: http.StatusOK}, lr)
	})
	for name, body := range map[string]string{
		"empty id":        `{"id":"","status":"succeeded"}`,
		"null id":         `{"id":null,"status":"succeeded"}`,
		"object id":       `{"id":{"v":"ch_1"},"status":"succeeded"}`,
		"empty status":    `{"id":"ch_1","status":""}`,
		"null status":     `{"id":"ch_1","status":null}`,
		"no status":       `{"id":"ch_1"}`,
		"not JSON":        `ch_1 succeeded`,
		"empty body":      ``,
		"top-level array": `[]`,
	} {
		t.Run(name+" is an error", func(t *testing.T) {
			lr, err := lookup(body, nil)
			requireLookupError(t, lr, err, httpadapter.CategoryMalformedResponse, http.StatusOK)
		})
	}
	t.Run("unsafe unrecognised status is not echoed", func(t *testing.T) {
		lr, err := lookup(`{"id":"ch_1","status":"Bearer tok_SECRET"}`, nil)
		le := requireLookupError(t, lr, err, httpadapter.CategoryUnrecognizedValue, http.StatusOK)
		require.NotContains(t, le.Error(), "SECRET")
	})
	t.Run("status values are exact", func(t *testing.T) {
		lr, err := lookup(`{"id":"ch_1","status":"FAILED"}`, nil)
		requireLookupError(t, lr, err, httpadapter.CategoryUnrecognizedValue, http.StatusOK)
	})
}

func TestLookupStatusValueValidation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		field, reason string
		lookup        httpadapter.LookupConfig
	}{
		{"Lookup.PendingValues", "needs Lookup.StatusPointer", httpadapter.LookupConfig{PendingValues: []string{"pending"}}},
		{"Lookup.FailedValues", "needs Lookup.StatusPointer", httpadapter.LookupConfig{FailedValues: []string{"failed"}}},
		{"Lookup.SucceededValues", "needs Lookup.StatusPointer", httpadapter.LookupConfig{SucceededValues: []string{"ok"}}},
		{"Lookup.FailedValues", `"x" is also in Lookup.PendingValues`, httpadapter.LookupConfig{StatusPointer: "/status",
			PendingValues: []string{"x"}, FailedValues: []string{"x"}}},
		{"Lookup.SucceededValues", `"x" is also in Lookup.PendingValues`, httpadapter.LookupConfig{StatusPointer: "/status",
			PendingValues: []string{"x"}, SucceededValues: []string{"x"}}},
		{"Lookup.SucceededValues", `"done" is also in Lookup.FailedValues`, httpadapter.LookupConfig{StatusPointer: "/status",
			FailedValues: []string{"failed", "done"}, SucceededValues: []string{"ok", "done"}}},
		{"Lookup.SucceededValues", "contains an empty value", httpadapter.LookupConfig{StatusPointer: "/status",
			SucceededValues: []string{"ok", ""}}},
	} {
		l := tc.lookup
		l.URL = "http://h/x?k={idempotency_key}"
		_, err := httpadapter.New(httpadapter.Config{URL: "http://h/x", Lookup: &l}, nil)
		require.ErrorIs(t, err, op.ErrInvalid, tc.field)
		var ce *httpadapter.ConfigError
		require.ErrorAs(t, err, &ce, tc.field)
		require.Equal(t, tc.field, ce.Field)
		require.Equal(t, tc.reason, ce.Reason)
	}

	// A value repeated within one list is harmless; all three lists together are fine.
	_, err := httpadapter.New(httpadapter.Config{URL: "http://h/x", Lookup: &httpadapter.LookupConfig{
		URL: "http://h/x", StatusPointer: "/status", PendingValues: []string{"p", "p"},
		FailedValues: []string{"f"}, SucceededValues: []string{"s"},
	}}, nil)
	require.NoError(t, err)
}
