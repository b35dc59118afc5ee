package vendors

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/opledger/opledger/pkg/op"
)

// FaultKind is a way for a vendor request to go wrong. "Commit" is the
// vendor performing the side effect (for reads: handling the request).
type FaultKind string

const (
	// FaultTimeoutAfterCommit performs the effect, then holds the connection
	// without answering until the client gives up (or the stall ends, then closes it).
	FaultTimeoutAfterCommit FaultKind = "timeout_after_commit"
	// FaultTimeoutBeforeCommit stalls the same way without performing the effect.
	FaultTimeoutBeforeCommit FaultKind = "timeout_before_commit"
	// FaultError500AfterCommit performs the effect, then answers 500.
	FaultError500AfterCommit FaultKind = "error_500_after_commit"
	// FaultError500BeforeCommit answers 500 without performing the effect.
	FaultError500BeforeCommit FaultKind = "error_500_before_commit"
	// FaultRateLimit answers 429 with Retry-After: 1, no effect.
	FaultRateLimit FaultKind = "rate_limit"
	// FaultClientError refuses the request for good: 400
	// {"error":"invalid_request"}, no effect. It is the vendor saying the
	// request as sent can never succeed (a closed queue, a field it will
	// not take), which a client must not retry as it is.
	FaultClientError FaultKind = "client_error"
	// FaultResetAfterCommit performs the effect, then resets the TCP
	// connection without a response.
	FaultResetAfterCommit FaultKind = "reset_after_commit"
	// FaultMalformedAfterCommit performs the effect, then answers 200 with
	// invalid JSON.
	FaultMalformedAfterCommit FaultKind = "malformed_after_commit"
	// FaultLatency delays the request by Fault.Delay (default 1s), then
	// handles it normally — even if the client has given up meanwhile. It is
	// the vendor that takes Delay to apply a request (slow before commit, an
	// "apply delay"): until then the effect does not exist for lookups,
	// replays or Stats, and if the server closes first it never happens.
	// The key is not held meanwhile: a retry with the same Idempotency-Key
	// during the delay performs the effect itself and the slow request is
	// then replayed (Stripe would answer the retry 409 instead).
	FaultLatency FaultKind = "latency"

	// Hostile vendors: the effect happens and the answer is one a client
	// must survive without losing track of it.

	// FaultNULIDAfterCommit performs the effect, then answers with the
	// normal status and body except that the "id" has a U+0000 after its
	// prefix ("ch_\u0000…"). Only this answer is corrupted: replays and
	// lookups show the real id. Bodies without a string id are sent as they are.
	FaultNULIDAfterCommit FaultKind = "nul_id_after_commit"
	// FaultHugeHeaderAfterCommit performs the effect, then answers normally
	// with a Request-Id header of HugeHeaderBytes. Go's client accepts it
	// under its default Transport.MaxResponseHeaderBytes (10 MB); a client
	// with a lower limit gets an error ("server response headers exceeded
	// N bytes; aborted") and no response.
	FaultHugeHeaderAfterCommit FaultKind = "huge_header_after_commit"
	// FaultTruncatedBodyAfterCommit performs the effect, then answers with
	// the normal status and a Content-Length of the full body, writes only
	// its first half and closes the connection: the client reads a valid
	// status and headers, then gets io.ErrUnexpectedEOF from the body.
	FaultTruncatedBodyAfterCommit FaultKind = "truncated_body_after_commit"
	// FaultEndless performs nothing and never answers: the connection stays
	// open until the client gives up or the server closes, whatever
	// Fault.Delay and Options.Stall say.
	FaultEndless FaultKind = "endless"
	// FaultDelayedVisibility is a 500 from an eventually consistent vendor:
	// it performs the effect at once and answers 500 like
	// FaultError500AfterCommit, but lookups (and GET of a CRM record) do
	// not see what the request committed until Fault.Delay (default 1s) has
	// passed: they answer 404, or the CRM record as it was before. The
	// vendor's idempotency store is not delayed: a retry with the same
	// Idempotency-Key is replayed at once, as at Stripe. Stats, EffectsByKey,
	// EffectsBy and CRMRecord always show the truth.
	FaultDelayedVisibility FaultKind = "delayed_visibility"

	// Webhook faults apply to the webhooks a route's effects send (see
	// SetWebhooks), not to its requests: a request may have a fault of
	// each kind.

	// FaultWebhookDrop sends no webhook for the effect.
	FaultWebhookDrop FaultKind = "webhook_drop"
	// FaultWebhookDuplicate delivers the webhook twice (same id and body,
	// each send signed anew), as a vendor retrying after a lost answer.
	FaultWebhookDuplicate FaultKind = "webhook_duplicate"
	// FaultWebhookDelay sends the webhook Fault.Delay (default 1s) after
	// the effect: later webhooks overtake it.
	FaultWebhookDelay FaultKind = "webhook_delay"
	// FaultWebhookBeforeAnswer delivers the webhook, and waits for its
	// answer, before the API answers the request that made the effect: the
	// caller has not recorded its outcome yet when the webhook arrives.
	FaultWebhookBeforeAnswer FaultKind = "webhook_before_answer"
)

// webhookFault reports whether k applies to webhooks rather than requests.
func webhookFault(k FaultKind) bool {
	switch k {
	case FaultWebhookDrop, FaultWebhookDuplicate, FaultWebhookDelay, FaultWebhookBeforeAnswer:
		return true
	}
	return false
}

// HugeHeaderBytes is the length of the Request-Id header that
// FaultHugeHeaderAfterCommit sends.
const HugeHeaderBytes = 2 << 20

// FaultKinds lists every fault.
var FaultKinds = []FaultKind{
	FaultTimeoutAfterCommit, FaultTimeoutBeforeCommit, FaultError500AfterCommit,
	FaultError500BeforeCommit, FaultRateLimit, FaultClientError, FaultResetAfterCommit,
	FaultMalformedAfterCommit, FaultLatency,
	FaultNULIDAfterCommit, FaultHugeHeaderAfterCommit, FaultTruncatedBodyAfterCommit, FaultEndless,
	FaultDelayedVisibility,
	FaultWebhookDrop, FaultWebhookDuplicate, FaultWebhookDelay, FaultWebhookBeforeAnswer,
}

// Fault is applied to the next Times requests on Route. Faults queue: for a
// request, the oldest matching fault with uses left applies.
type Fault struct {
	// Route is a Route constant, or RouteAny.
	Route string    `json:"route"`
	Kind  FaultKind `json:"fault"`
	// Times is how many requests the fault applies to; 0 means 1.
	Times int `json:"times"`
	// Delay is the latency fault's delay (default 1s), the timeout faults'
	// stall (default Options.Stall), how long delayed_visibility hides an
	// effect (default 1s) or how late webhook_delay sends a webhook (default
	// 1s); other faults ignore it. In JSON: "delay_ms".
	Delay time.Duration `json:"-"`
}

type pendingFault struct {
	Fault
	left int
}

// InjectFault queues f. An unknown route or kind, or negative Times or
// Delay, returns an error wrapping op.ErrInvalid.
func (s *Server) InjectFault(f Fault) error {
	if f.Route != RouteAny && !slices.Contains(routes, f.Route) {
		return fmt.Errorf("vendors: fault route %q: %w", f.Route, op.ErrInvalid)
	}
	if !slices.Contains(FaultKinds, f.Kind) {
		return fmt.Errorf("vendors: fault kind %q: %w", f.Kind, op.ErrInvalid)
	}
	if f.Times < 0 || f.Delay < 0 {
		return fmt.Errorf("vendors: fault times and delay must not be negative: %w", op.ErrInvalid)
	}
	if f.Times == 0 {
		f.Times = 1
	}
	if (f.Kind == FaultLatency || f.Kind == FaultDelayedVisibility || f.Kind == FaultWebhookDelay) && f.Delay == 0 {
		f.Delay = time.Second
	}
	s.mu.Lock()
	if webhookFault(f.Kind) {
		s.st.webhookFaults = append(s.st.webhookFaults, &pendingFault{Fault: f, left: f.Times})
	} else {
		s.st.faults = append(s.st.faults, &pendingFault{Fault: f, left: f.Times})
	}
	s.mu.Unlock()
	return nil
}

// ClearFaults drops every pending fault.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	s.st.faults, s.st.webhookFaults = nil, nil
	s.mu.Unlock()
}

// begin counts a request on route and takes one use of the first matching
// fault; the zero Fault means none.
func (s *Server) begin(route string) Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.stats.Requests[route]++
	for i, pf := range s.st.faults {
		if pf.Route != route && pf.Route != RouteAny {
			continue
		}
		pf.left--
		if pf.left == 0 {
			s.st.faults = slices.Delete(s.st.faults, i, i+1)
		}
		s.st.stats.FaultsFired++
		return pf.Fault
	}
	return Fault{}
}

// adminFault is POST /_admin/faults: {"route":"capture","fault":"timeout_after_commit","times":1,"delay_ms":0}.
func (s *Server) adminFault(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Route   string    `json:"route"`
		Fault   FaultKind `json:"fault"`
		Times   int       `json:"times"`
		DelayMS int64     `json:"delay_ms"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		writeResult(w, errorResult(http.StatusBadRequest, "invalid_json"))
		return
	}
	f := Fault{Route: in.Route, Kind: in.Fault, Times: in.Times, Delay: time.Duration(in.DelayMS) * time.Millisecond}
	if err := s.InjectFault(f); err != nil {
		writeResult(w, jsonResult(http.StatusBadRequest, map[string]string{"error": "invalid_fault", "message": err.Error()}))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
