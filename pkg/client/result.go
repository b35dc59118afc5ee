package client

import (
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// Status is a result's status: an operation's state (op.State), or
// StatusRejected for an intent that created nothing.
type Status string

// The statuses of docs/protocol.md ("Statuses"), one per op.State.
const (
	StatusPlanned          = Status(op.StatePlanned)
	StatusAwaitingApproval = Status(op.StateAwaitingApproval)
	StatusRejected         = Status(op.StateRejected)
	StatusPendingDispatch  = Status(op.StatePendingDispatch)
	StatusDispatched       = Status(op.StateDispatched)
	StatusAcknowledged     = Status(op.StateAcknowledged)
	StatusCompletedSuccess = Status(op.StateCompletedSuccess)
	StatusCompletedNoop    = Status(op.StateCompletedNoop)
	StatusFailedRetryable  = Status(op.StateFailedRetryable)
	StatusFailedPermanent  = Status(op.StateFailedPermanent)
	StatusUnknownOutcome   = Status(op.StateUnknownOutcome)
	StatusEscalated        = Status(op.StateEscalated)
	StatusCompensating     = Status(op.StateCompensating)
	StatusCompensated      = Status(op.StateCompensated)
	StatusCancelled        = Status(op.StateCancelled)
)

// State returns s as the domain's op.State.
func (s Status) State() op.State { return op.State(s) }

// Valid reports whether s is a status this client knows.
func (s Status) Valid() bool { return op.State(s).Valid() }

// Final reports whether the status will not change any more (op.State's
// Terminal): completed_success, completed_noop, failed_permanent, rejected,
// compensated, cancelled. (An operator may still compensate a completed or
// failed operation; that is a new operation.)
func (s Status) Final() bool { return op.State(s).Terminal() }

// NeedsPerson reports whether the operation waits on a person and will not
// move on by itself: awaiting_approval (someone must approve it) or escalated
// (someone owns it now).
func (s Status) NeedsPerson() bool {
	return s == StatusAwaitingApproval || s == StatusEscalated
}

// Result is one result message as the client delivers it: the wire message,
// its status typed, and the message's Nats-Msg-Id.
//
// The Status field shadows the embedded wire.Result's string Status (both
// hold the same value); DedupeDecision is already an op.Decision.
type Result struct {
	wire.Result
	Status Status
	// MsgID is the message's Nats-Msg-Id header, unique per result message.
	MsgID string
	// Earlier is true when the message was in the stream before the call
	// that read it began reading (Submit, SubmitAndWait, SubmitAndWatch):
	// an answer marked so answers an earlier publish of the same event id,
	// so the call itself started nothing new.
	Earlier bool
	// answer is true when the message is marked as the ledger's answer to
	// a publish (wire.HeaderAnswer); services before the mark send none.
	answer bool
}

// AtRest reports whether no further result is expected for the operation
// without someone acting: its status is Final or NeedsPerson, or opledger
// marked it final. SubmitAndWait returns at the first such result.
func (r Result) AtRest() bool {
	return r.Final || r.Status.Final() || r.Status.NeedsPerson()
}

// Decision is the dedupe decision: on an answer, what the ledger made of the
// intent; on every later result of an operation, op.DecisionNew.
func (r Result) Decision() op.Decision { return r.DedupeDecision }

// describesOperation reports whether r states the operation's state at
// r.Version. Refusals do not: a conflict (or a repeated answer to a refused
// event) names the operation holding the key but says "rejected" about the
// intent, with version 0.
func (r Result) describesOperation() bool {
	switch r.DedupeDecision {
	case op.DecisionConflict, op.DecisionRejected:
		return false
	}
	return r.OperationID != "" && r.Version > 0
}

// decodeResult reads a result message as wire.DecodeResult does: field
// names exact, none twice, valid UTF-8; unknown fields are ignored, as the
// protocol asks of clients. A message that is not read that way, or is not
// opledger.result.v1, is not a result.
func decodeResult(h nats.Header, data []byte) (Result, bool) {
	w, err := wire.DecodeResult(data)
	if err != nil {
		return Result{}, false
	}
	return Result{Result: *w, Status: Status(w.Status), MsgID: strings.TrimSpace(h.Get(wire.HeaderMsgID)),
		answer: h.Get(wire.HeaderAnswer) == "1"}, true
}

// Answer is the ledger's answer to an event id: the first result carrying it.
type Answer struct {
	Result
}

// Accepted reports whether the intent maps to an operation, new or existing
// (OperationID): the decision is new, duplicate_event or
// duplicate_operation. It is false for a refusal: conflict, rejected, or a
// duplicate_event repeating an earlier refusal.
func (a Answer) Accepted() bool { return a.describesOperation() }
