package op

// Decision is what the ledger made of an inbound event at submit time.
type Decision string

const (
	// DecisionNew: a new operation was created for this event.
	DecisionNew Decision = "new"
	// DecisionDuplicateEvent: this (source, event id) was seen before; the
	// earlier answer stands.
	DecisionDuplicateEvent Decision = "duplicate_event"
	// DecisionDuplicateOperation: a new event, but an operation with the same
	// idempotency key and the same canonical arguments already exists.
	DecisionDuplicateOperation Decision = "duplicate_operation"
	// DecisionConflict: the idempotency key exists with different canonical
	// arguments, or the event id was reused with a different payload. Nothing
	// was created.
	DecisionConflict Decision = "conflict"
	// DecisionRejected: the event was invalid (malformed, unknown tool, args
	// failing the schema, policy denial). Recorded, nothing created.
	DecisionRejected Decision = "rejected"
	// DecisionReopened: a new event for the key of an operation that failed
	// without any effect (every attempt confirmed not applied): the
	// operation runs again under the same key, as a new attempt generation.
	DecisionReopened Decision = "reopened"
)

// Outcome is an adapter's classification of one dispatch attempt.
type Outcome string

const (
	// OutcomeSuccess: the vendor confirmed the effect.
	OutcomeSuccess Outcome = "success"
	// OutcomeNoop: the vendor confirmed nothing needed doing (e.g. idempotent replay).
	OutcomeNoop Outcome = "noop"
	// OutcomeAcknowledged: accepted, completion will be confirmed later.
	OutcomeAcknowledged Outcome = "acknowledged"
	// OutcomeRetryable: confirmed not applied (refused before any effect: 429, connect refused).
	OutcomeRetryable Outcome = "retryable"
	// OutcomePermanent: confirmed not applied and retrying the same request will not help (4xx).
	OutcomePermanent Outcome = "permanent"
	// OutcomeUnknown: the request may have been applied (timeout after send, 5xx, reset).
	OutcomeUnknown Outcome = "unknown"
)

// Event returns the ledger event that records outcome o.
func (o Outcome) Event() Event {
	switch o {
	case OutcomeSuccess:
		return EventSucceed
	case OutcomeNoop:
		return EventNoop
	case OutcomeAcknowledged:
		return EventAcknowledge
	case OutcomeRetryable:
		return EventFailRetryable
	case OutcomePermanent:
		return EventFailPermanent
	}
	return EventOutcomeUnknown
}

// RetryRecommendation tells the agent what, if anything, it should do next.
type RetryRecommendation string

const (
	RecommendNone                 RetryRecommendation = "none"                   // done; do not call again
	RecommendWait                 RetryRecommendation = "wait"                   // in flight; the result will follow
	RecommendReconcileBeforeRetry RetryRecommendation = "reconcile_before_retry" // outcome unknown; opledger is confirming it
	RecommendRetrySameKey         RetryRecommendation = "retry_same_key"         // opledger retries under the same key
	RecommendChangeArguments      RetryRecommendation = "change_arguments"       // permanent: only different args (a new operation) can help
	RecommendAwaitApproval        RetryRecommendation = "await_approval"         // a human must approve first
	RecommendEscalated            RetryRecommendation = "escalated"              // a human owns it
	// RecommendRetryLater: nothing was done (the vendor could not be reached
	// or refused to act for now); the same request, sent again later, runs
	// the operation again under the same key (DecisionReopened).
	RecommendRetryLater RetryRecommendation = "retry_later"
)

// Error categories the ledger itself records on operations (adapters add
// their own: timeout, connection, rate_limited, ...).
const (
	// CategoryRetriesExhausted: every attempt was confirmed not applied and
	// the retry budget (attempts or elapsed time) ran out. Nothing was done.
	CategoryRetriesExhausted = "retries_exhausted"
)

// Reopenable reports whether a new intent for o's key may run o again: it
// failed, and every attempt was confirmed not applied.
func (o *Operation) Reopenable() bool {
	return o.State == StateFailedPermanent && o.LastErrorCategory == CategoryRetriesExhausted
}

// Advise is Recommend for an operation: it also knows when a failure did
// nothing and may be tried again later.
func Advise(o *Operation) (RetryRecommendation, string) {
	if o.Reopenable() {
		return RecommendRetryLater, "Nothing was done: the request could not be completed right now. It can be sent again later."
	}
	return Recommend(o.State)
}

// Recommend returns the retry recommendation and a message safe to show a user
// for an operation in state s. The message never claims success or failure
// that the ledger has not confirmed.
func Recommend(s State) (RetryRecommendation, string) {
	switch s {
	case StatePlanned, StatePendingDispatch, StateDispatched:
		return RecommendWait, "The request is being processed."
	case StateAcknowledged:
		return RecommendWait, "The request was accepted and is being confirmed."
	case StateAwaitingApproval:
		return RecommendAwaitApproval, "The request is waiting for approval."
	case StateRejected:
		return RecommendChangeArguments, "The request was not approved and nothing was done."
	case StateCompletedSuccess:
		return RecommendNone, "The request was completed."
	case StateCompletedNoop:
		return RecommendNone, "Nothing needed to be done; it was already in place."
	case StateFailedRetryable:
		return RecommendRetrySameKey, "The request did not go through yet; it will be retried automatically."
	case StateFailedPermanent:
		return RecommendChangeArguments, "The request failed and nothing was done."
	case StateUnknownOutcome:
		return RecommendReconcileBeforeRetry, "The status is being confirmed. Please do not try again yet."
	case StateEscalated:
		return RecommendEscalated, "A specialist is reviewing this request."
	case StateCompensating:
		return RecommendWait, "A correction is in progress."
	case StateCompensated:
		return RecommendNone, "The request was reversed."
	case StateCancelled:
		return RecommendNone, "The request was cancelled and nothing was done."
	}
	return RecommendWait, "The request is being processed."
}
