package op

import "fmt"

// State is where an operation is in its life. The operation row in the ledger
// holds the current state; every change appends an event row.
type State string

// The article's state model, plus what approvals, escalation and cancellation need.
const (
	// StatePlanned: accepted and persisted, policy not yet applied.
	StatePlanned State = "planned"
	// StateAwaitingApproval: policy requires a human (or second control) first.
	StateAwaitingApproval State = "awaiting_approval"
	// StateRejected: policy or an approver refused it. Terminal; nothing was sent.
	StateRejected State = "rejected"
	// StatePendingDispatch: durable and ready; a dispatch command is in the outbox.
	StatePendingDispatch State = "pending_dispatch"
	// StateDispatched: a worker claimed it and recorded an attempt before calling the vendor.
	StateDispatched State = "dispatched"
	// StateAcknowledged: the vendor accepted the request; completion comes later (webhook, lookup).
	StateAcknowledged State = "acknowledged"
	// StateCompletedSuccess: the side effect happened, confirmed.
	StateCompletedSuccess State = "completed_success"
	// StateCompletedNoop: confirmed that nothing needed doing (already done, idempotent replay).
	StateCompletedNoop State = "completed_noop"
	// StateFailedRetryable: confirmed not applied; safe to try again under the same key.
	StateFailedRetryable State = "failed_retryable"
	// StateFailedPermanent: confirmed not applied and will not be retried as is.
	StateFailedPermanent State = "failed_permanent"
	// StateUnknownOutcome: we may or may not have caused the side effect; reconcile before anything else.
	StateUnknownOutcome State = "unknown_outcome"
	// StateEscalated: automation gave up deciding; a human owns it now.
	StateEscalated State = "escalated"
	// StateCompensating: an approved compensation for this operation is under way.
	StateCompensating State = "compensating"
	// StateCompensated: the compensation completed. Terminal.
	StateCompensated State = "compensated"
	// StateCancelled: withdrawn before anything was sent. Terminal.
	StateCancelled State = "cancelled"
)

// States lists every state, in lifecycle order.
var States = []State{
	StatePlanned, StateAwaitingApproval, StateRejected, StatePendingDispatch,
	StateDispatched, StateAcknowledged, StateCompletedSuccess, StateCompletedNoop,
	StateFailedRetryable, StateFailedPermanent, StateUnknownOutcome, StateEscalated,
	StateCompensating, StateCompensated, StateCancelled,
}

// Valid reports whether s is one of States.
func (s State) Valid() bool {
	for _, v := range States {
		if v == s {
			return true
		}
	}
	return false
}

// Terminal reports whether no further event can move s, other than an
// operator-initiated compensation of a completed or failed operation, or
// the reopening of a failure that did nothing.
func (s State) Terminal() bool {
	switch s {
	case StateRejected, StateCompletedSuccess, StateCompletedNoop,
		StateFailedPermanent, StateCompensated, StateCancelled:
		return true
	}
	return false
}

// Sent reports whether a request may have reached the vendor in this state,
// i.e. whether re-sending without reconciliation could duplicate the effect.
func (s State) Sent() bool {
	switch s {
	case StateDispatched, StateAcknowledged, StateCompletedSuccess, StateCompletedNoop,
		StateUnknownOutcome, StateEscalated, StateCompensating, StateCompensated:
		return true
	}
	return false
}

// Event is something that happens to an operation and may change its state.
type Event string

// Events, named for what happened rather than for the state they lead to.
const (
	// EventCreate is the first row of every operation's history (→ planned).
	// It is not a transition: no existing state accepts it.
	EventCreate          Event = "create"
	EventRequireApproval Event = "require_approval" // planned → awaiting_approval
	EventEnqueue         Event = "enqueue"          // planned → pending_dispatch
	EventApprove         Event = "approve"          // awaiting_approval → pending_dispatch
	EventReject          Event = "reject"           // planned|awaiting_approval → rejected
	EventDispatch        Event = "dispatch"         // pending_dispatch → dispatched
	EventAcknowledge     Event = "acknowledge"      // dispatched → acknowledged
	EventSucceed         Event = "succeed"          // dispatched|acknowledged|unknown_outcome|escalated|compensating → completed_success
	EventNoop            Event = "noop"             // dispatched|acknowledged|unknown_outcome|escalated → completed_noop
	EventFailRetryable   Event = "fail_retryable"   // dispatched|unknown_outcome → failed_retryable
	EventFailPermanent   Event = "fail_permanent"   // dispatched|acknowledged|unknown_outcome|failed_retryable|escalated|compensating → failed_permanent
	EventOutcomeUnknown  Event = "outcome_unknown"  // dispatched|acknowledged → unknown_outcome
	EventRetry           Event = "retry"            // failed_retryable → pending_dispatch
	EventEscalate        Event = "escalate"         // dispatched|acknowledged|unknown_outcome|failed_retryable|failed_permanent|compensating → escalated
	// EventCompensate: a compensation was requested. When it ends without
	// doing anything (denied, cancelled, its approval expired), the
	// original goes back to the state it was compensated from, by the event
	// that names that state: succeed (its effect stands), fail_permanent, or
	// escalate (a person still owns it).
	EventCompensate       Event = "compensate"        // completed_success|failed_permanent|escalated → compensating
	EventCompensated      Event = "compensated"       // compensating → compensated
	EventCompensationFail Event = "compensation_fail" // compensating → escalated
	EventCancel           Event = "cancel"            // planned|awaiting_approval|pending_dispatch|failed_retryable → cancelled
	// EventReopen runs a failed operation again under the same key: only
	// when every attempt was confirmed not applied (see Operation.Reopenable).
	EventReopen Event = "reopen" // failed_permanent → pending_dispatch
	// EventVote records one approver's approval that does not yet complete
	// the approvals the tool requires (dual control).
	EventVote Event = "vote" // awaiting_approval → awaiting_approval
	// EventRequeue: a person found an escalated operation was not applied;
	// it is sent again under the same key.
	EventRequeue Event = "requeue" // escalated → pending_dispatch
)

// Events lists every event.
var Events = []Event{
	EventCreate, EventRequireApproval, EventEnqueue, EventApprove, EventReject, EventDispatch,
	EventAcknowledge, EventSucceed, EventNoop, EventFailRetryable, EventFailPermanent,
	EventOutcomeUnknown, EventRetry, EventEscalate, EventCompensate, EventCompensated,
	EventCompensationFail, EventCancel, EventReopen, EventVote, EventRequeue,
}

// transitions is the whole state machine: for each event, the states it may
// leave from and the state it leads to. Anything not listed is illegal.
var transitions = map[Event]struct {
	from []State
	to   State
}{
	EventRequireApproval:  {[]State{StatePlanned}, StateAwaitingApproval},
	EventEnqueue:          {[]State{StatePlanned}, StatePendingDispatch},
	EventApprove:          {[]State{StateAwaitingApproval}, StatePendingDispatch},
	EventReject:           {[]State{StatePlanned, StateAwaitingApproval}, StateRejected},
	EventDispatch:         {[]State{StatePendingDispatch}, StateDispatched},
	EventAcknowledge:      {[]State{StateDispatched}, StateAcknowledged},
	EventSucceed:          {[]State{StateDispatched, StateAcknowledged, StateUnknownOutcome, StateEscalated, StateCompensating}, StateCompletedSuccess},
	EventNoop:             {[]State{StateDispatched, StateAcknowledged, StateUnknownOutcome, StateEscalated}, StateCompletedNoop},
	EventFailRetryable:    {[]State{StateDispatched, StateUnknownOutcome}, StateFailedRetryable},
	EventFailPermanent:    {[]State{StateDispatched, StateAcknowledged, StateUnknownOutcome, StateFailedRetryable, StateEscalated, StateCompensating}, StateFailedPermanent},
	EventOutcomeUnknown:   {[]State{StateDispatched, StateAcknowledged}, StateUnknownOutcome},
	EventRetry:            {[]State{StateFailedRetryable}, StatePendingDispatch},
	EventEscalate:         {[]State{StateDispatched, StateAcknowledged, StateUnknownOutcome, StateFailedRetryable, StateFailedPermanent, StateCompensating}, StateEscalated},
	EventCompensate:       {[]State{StateCompletedSuccess, StateFailedPermanent, StateEscalated}, StateCompensating},
	EventCompensated:      {[]State{StateCompensating}, StateCompensated},
	EventCompensationFail: {[]State{StateCompensating}, StateEscalated},
	EventCancel:           {[]State{StatePlanned, StateAwaitingApproval, StatePendingDispatch, StateFailedRetryable}, StateCancelled},
	EventReopen:           {[]State{StateFailedPermanent}, StatePendingDispatch},
	EventVote:             {[]State{StateAwaitingApproval}, StateAwaitingApproval},
	EventRequeue:          {[]State{StateEscalated}, StatePendingDispatch},
}

// Transition returns the state that event ev leads to from state from. It is a
// pure function. An illegal pair returns a *TransitionError (which matches
// ErrIllegalTransition with errors.Is) naming both.
func Transition(from State, ev Event) (State, error) {
	t, ok := transitions[ev]
	if ok && from.Valid() {
		for _, s := range t.from {
			if s == from {
				return t.to, nil
			}
		}
	}
	return "", &TransitionError{From: from, Event: ev}
}

// TransitionError says that an event is not allowed in a state.
type TransitionError struct {
	From  State
	Event Event
}

func (e *TransitionError) Error() string {
	if _, ok := transitions[e.Event]; !ok {
		return fmt.Sprintf("unknown event %q in state %q", e.Event, e.From)
	}
	if !e.From.Valid() {
		return fmt.Sprintf("event %q in unknown state %q", e.Event, e.From)
	}
	return fmt.Sprintf("event %q is not allowed in state %q", e.Event, e.From)
}

// Unwrap makes errors.Is(err, ErrIllegalTransition) true.
func (e *TransitionError) Unwrap() error { return ErrIllegalTransition }
