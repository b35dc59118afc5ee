package vendors_test

import (
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/vendors"
)

func TestNULIDAfterCommit(t *testing.T) {
	t.Parallel()
	b := setup(t, vendors.Options{})
	require.NoError(t, b.srv.InjectFault(vendors.Fault{Route: vendors.RouteCapture, Kind: vendors.FaultNULIDAfterCommit}))
	rep := b.do("POST", "/v1/payments/capture", captureBody, "Idempotency-Key", "k")
	require.Equal(t, http.StatusOK, rep.status)
	require.Contains(t, rep.raw, `"id":"ch_\u0000`)
	id := rep.body["id"].(string)
	require.True(t, strings.HasPrefix(id, "ch_\x00"), "%q", id)
	require.Equal(t, "succeeded", rep.body["status"]) // the rest of the body is the normal one
	require.Equal(t, 1, b.srv.Stats().Captures)

	// The vendor's object has the real id; so do replays.
	clean := strings.Replace(id, "\x00", "", 1)
	require.Equal(t, clean, b.do("GET", "/v1/payments?idempotency_key=k", "").body["id"])
	replay := b.do("POST", "/v1/payments/capture", captureBody, "Idempotency-Key", "k")
	require.Equal(t, clean, replay.body["id"])

	// Other statuses are kept: a sent email is still a 202.
	require.NoError(t, b.srv.InjectFault(vendors.Fault{Route: vendors.RouteEmail, Kind: vendors.FaultNULIDAfterCommit}))
	msg := b.do("POST", "/v1/messages", `{"to":"a@example.com"}`)
	require.Equal(t, http.StatusAccepted, msg.status)
	require.True(t, strings.HasPrefix(msg.body["id"].(string), "msg_\x00"))
	require.Equal(t, 1, b.srv.Stats().Emails)
}

func TestHugeHeaderAfterCommit(t *testing.T) {
	t.Parallel()
	b := setup(t, vendors.Options{})
	require.NoError(t, b.srv.InjectFault(vendors.Fault{Route: vendors.RouteCapture, Kind: vendors.FaultHugeHeaderAfterCommit, Times: 2}))

	// Go's default client takes up to 10 MB of response headers.
	rep := b.do("POST", "/v1/payments/capture", captureBody, "Idempotency-Key", "k1")
	require.Equal(t, http.StatusOK, rep.status)
	require.Len(t, rep.header.Get("Request-Id"), vendors.HugeHeaderBytes)
	require.True(t, strings.HasPrefix(rep.body["id"].(string), "ch_"))

	// A client with a lower limit gets no response, and the charge exists.
	small := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxResponseHeaderBytes: 1 << 20}}
	_, err := b.try(small, "POST", "/v1/payments/capture", captureBody, "Idempotency-Key", "k2")
	require.Error(t, err)
	require.Equal(t, map[string]int{"k1": 1, "k2": 1}, b.srv.EffectsByKey(vendors.KindCapture))
}

func TestTruncatedBodyAfterCommit(t *testing.T) {
	t.Parallel()
	b := setup(t, vendors.Options{})
	require.NoError(t, b.srv.InjectFault(vendors.Fault{Route: vendors.RouteCapture, Kind: vendors.FaultTruncatedBodyAfterCommit}))
	req, err := http.NewRequest("POST", b.srv.URL()+"/v1/payments/capture", strings.NewReader(captureBody))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", "k")
	resp, err := b.client.Do(req)
	require.NoError(t, err, "status and headers arrive whole")
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	got, err := io.ReadAll(resp.Body)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	require.Less(t, int64(len(got)), resp.ContentLength)
	require.NotEmpty(t, got)

	require.Equal(t, 1, b.srv.Stats().Captures)
	full := b.do("GET", "/v1/payments?idempotency_key=k", "")
	require.EqualValues(t, len(full.raw), resp.ContentLength, "the declared length is the real body's")
	require.True(t, strings.HasPrefix(full.raw, string(got)), "what arrived is the start of the real body")
}

// TestEndless: the vendor holds the request past its stall setting until the
// client gives up: the client sees its own timeout, not a closed connection.
func TestEndless(t *testing.T) {
	t.Parallel()
	b := setup(t, vendors.Options{Stall: 10 * time.Millisecond})
	require.NoError(t, b.srv.InjectFault(vendors.Fault{Route: vendors.RouteCapture, Kind: vendors.FaultEndless, Delay: 10 * time.Millisecond}))
	_, err := b.try(&http.Client{Timeout: 300 * time.Millisecond}, "POST", "/v1/payments/capture", captureBody, "Idempotency-Key", "k")
	var ue *url.Error
	require.True(t, errors.As(err, &ue) && ue.Timeout(), "want a client timeout, got %v", err)
	st := b.srv.Stats()
	require.Zero(t, st.Captures)
	require.Equal(t, 1, st.Requests[vendors.RouteCapture])
	require.Equal(t, http.StatusOK, b.do("POST", "/v1/payments/capture", captureBody, "Idempotency-Key", "k").status)
	require.Equal(t, 1, b.srv.Stats().Captures)
}

// TestCloseReleasesEndless: a client with no timeout is let go when the vendor goes down.
func TestCloseReleasesEndless(t *testing.T) {
	t.Parallel()
	b := setup(t, vendors.Options{})
	require.NoError(t, b.srv.InjectFault(vendors.Fault{Route: vendors.RouteEmail, Kind: vendors.FaultEndless}))
	errc := make(chan error, 1)
	go func() {
		_, err := b.try(&http.Client{}, "POST", "/v1/messages", `{"to":"a@example.com"}`)
		errc <- err
	}()
	require.Eventually(t, func() bool { return b.srv.Stats().FaultsFired == 1 }, 5*time.Second, 5*time.Millisecond)
	b.srv.Close()
	select {
	case err := <-errc:
		require.Error(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("client still waiting after Close")
	}
	require.Zero(t, b.srv.Stats().Emails)
}
