// Package adapter defines the contract between opledger's workers and the
// tools they call. An adapter absorbs a vendor's weirdness (status codes,
// idempotency headers, lookup endpoints) and answers in the ledger's terms:
// an op.Outcome with the vendor's identifiers.
package adapter

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/opledger/opledger/pkg/op"
)

// Request is one dispatch attempt as the adapter sees it.
type Request struct {
	OperationID    string
	AttemptID      string
	Tool           string
	IdempotencyKey string
	// Args is the canonical JSON of the arguments (what the key was derived from).
	Args json.RawMessage
	// Header carries trace context to the vendor (traceparent); may be nil.
	Header http.Header
}

// Result is the adapter's classification of one attempt. It never carries a
// secret: Error is safe to log and to store.
type Result struct {
	Outcome           op.Outcome
	HTTPStatus        int
	ExternalRequestID string
	ExternalObjectID  string
	// ErrorCategory is a short machine-readable cause: timeout, connection,
	// rate_limited, client_error, server_error, malformed_response.
	ErrorCategory string
	Error         string
	// RetryAfter is the vendor's requested delay, when it gave one.
	RetryAfter time.Duration
	// Replayed is true when the vendor said it answered from its idempotency cache.
	Replayed bool
	Latency  time.Duration
}

// LookupResult is what a vendor says about an earlier request, found by our
// idempotency key or client reference.
type LookupResult struct {
	// Found is true when the vendor has a record of the effect. A found
	// record is not by itself a success: read Outcome.
	Found bool
	// Outcome is the vendor's state of the found effect; meaningless when
	// Found is false. It is one of:
	//   - op.OutcomeSuccess: the effect happened;
	//   - op.OutcomeAcknowledged: the vendor has it but it is still pending
	//     (look again later);
	//   - op.OutcomePermanent: the vendor has it and reports that it failed
	//     for good (e.g. a charge with status "failed").
	// An answer a Looker cannot read as one of these (an unrecognised
	// vendor status, a found body without the expected id) is an error, not
	// a LookupResult.
	Outcome op.Outcome
	// ExternalObjectID is the vendor's id of the found record, when the
	// adapter knows where to read it; it may be set with any Outcome.
	ExternalObjectID string
	HTTPStatus       int
}

// Adapter calls a tool's vendor.
type Adapter interface {
	// Call performs the side effect. It always returns a Result; transport
	// failures are classified, not returned as errors.
	Call(ctx context.Context, req Request) Result
}

// Looker is implemented by adapters whose vendor can be asked whether an
// effect happened. An error means the lookup itself failed (retry it later);
// a definite "no record" is Found == false with a nil error.
type Looker interface {
	Lookup(ctx context.Context, req Request) (LookupResult, error)
}
