// Package followup decides what happens after an operation reaches a new
// state, for every worker that moves one (the dispatcher after an attempt,
// the reconciler after a lookup, the sweeper): the whole chain of events the
// decision makes (a retryable failure is retried at once, or fails for good
// when the budget is spent), the command that should follow (reconcile,
// retry, compensate) and the agent's result, so that the caller writes them
// all in one statement. Keeping it in one place makes every worker decide
// follow-ups the same way.
package followup

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/opledger/opledger/internal/outbox"
	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/telemetry"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/registry"
	"github.com/opledger/opledger/pkg/wire"
)

// AcknowledgedCheckDelay is how long after a vendor acknowledged a request
// without completing it the reconciler first asks the vendor about it.
const AcknowledgedCheckDelay = time.Minute

// Outcome is what a worker learned about an operation.
type Outcome struct {
	// Event is what happened: succeed, noop, acknowledge, fail_retryable,
	// fail_permanent, outcome_unknown or escalate.
	Event op.Event
	// Now is the database's clock when it happened (an attempt's start, or
	// a reconciler's reading of now()): the retry budget's elapsed time is
	// measured on it.
	Now time.Time
	// RetryAfter is the vendor's requested delay before another try.
	RetryAfter time.Duration
	// ErrorCategory and Error describe a failure.
	ErrorCategory, Error string
	// Reason explains the decision to the agent (the result's reason);
	// empty uses the operation's last error.
	Reason string
	// HTTPStatus is the vendor's status, for the result.
	HTTPStatus int
	// MayHaveApplied marks a retryable outcome that is not confirmed not
	// applied: an ambiguous write sent again because the vendor deduplicates
	// by our key. If the budget runs out, nothing can be said to have been
	// done or not: the operation goes to a person instead of failing.
	MayHaveApplied bool
}

// Plan is a decision ready to write: the events from the operation's current
// state and, through Messages, the follow-up command and the agent's result.
type Plan struct {
	Events               []op.Event
	ErrorCategory, Error string
	// Messages builds the outbox rows from the operation as it will be.
	Messages func(after *op.Operation) []store.Message
	// To is the state the operation ends in.
	To op.State
	// Detail goes with the last event's row: for an escalation, the
	// reason a person must act (the same as the agent's result says).
	// Writers add their own keys to it.
	Detail map[string]any
}

// Decide plans what follows oc for o (in o.State, at o.LeaseEpoch): for a
// retryable failure, a retry under the same key with backoff while the
// tool's budget (attempts and elapsed time of the current generation) lasts,
// else a permanent failure that says nothing was done; for an unknown
// outcome, a reconcile command; for an acknowledgement, a delayed one; for a
// permanent failure, a compensate command. The result goes to the workflow
// for eventID.
func Decide(tool *registry.Tool, o *op.Operation, oc Outcome, eventID string, tp telemetry.Traceparent) (Plan, error) {
	p := Plan{Events: []op.Event{oc.Event}, ErrorCategory: oc.ErrorCategory, Error: oc.Error}
	to, err := op.Transition(o.State, oc.Event)
	if err != nil {
		return Plan{}, fmt.Errorf("operation %s: %w", o.ID, err)
	}
	var command func(after *op.Operation) store.Message
	switch to {
	case op.StateFailedRetryable:
		attempts := o.AttemptCount - o.GenerationAttemptBase
		elapsed := oc.Now.Sub(o.GenerationStartedAt)
		if attempts < tool.Retry.MaxAttempts && (tool.Retry.MaxElapsed <= 0 || elapsed < tool.Retry.MaxElapsed) {
			p.Events = append(p.Events, op.EventRetry)
			to = op.StatePendingDispatch
			delay := RetryDelay(tool.Retry, attempts, oc.RetryAfter)
			command = func(after *op.Operation) store.Message {
				return outbox.Command(wire.KindDispatch, after, eventID, tp, delay)
			}
			break
		}
		if oc.MayHaveApplied && o.Class != op.ClassPureRead {
			p.Events = append(p.Events, op.EventEscalate)
			to = op.StateEscalated
			p.ErrorCategory = "escalated"
			p.Error = fmt.Sprintf("the retry budget ran out (%d attempt(s) over %s) and the last outcome is unknown: a person must check; last: %s",
				attempts, elapsed.Round(time.Millisecond), oc.Error)
			oc.Reason = p.Error
			break
		}
		p.Events = append(p.Events, op.EventFailPermanent)
		to = op.StateFailedPermanent
		p.ErrorCategory = op.CategoryRetriesExhausted
		p.Error = fmt.Sprintf("nothing was done: %d attempt(s) over %s were all refused before any effect; last: %s",
			attempts, elapsed.Round(time.Millisecond), oc.Error)
		command = func(after *op.Operation) store.Message {
			return outbox.Command(wire.KindFailed, after, eventID, tp, 0)
		}
	case op.StateUnknownOutcome:
		command = func(after *op.Operation) store.Message {
			return outbox.Command(wire.KindUnknown, after, eventID, tp, 0)
		}
	case op.StateAcknowledged:
		// Completion should follow by itself; if it has not after a while,
		// the reconciler asks the vendor.
		command = func(after *op.Operation) store.Message {
			return outbox.Command(wire.KindUnknown, after, eventID, tp, AcknowledgedCheckDelay)
		}
	case op.StateFailedPermanent:
		command = func(after *op.Operation) store.Message {
			return outbox.Command(wire.KindFailed, after, eventID, tp, 0)
		}
	}
	p.To = to
	if to == op.StateEscalated {
		// Whichever worker escalates, the event says why, not only a log line.
		p.Detail = map[string]any{"reason": wire.Clip200(cmp.Or(oc.Reason, p.Error, o.LastError))}
	}
	p.Messages = func(after *op.Operation) []store.Message {
		var msgs []store.Message
		if command != nil {
			msgs = append(msgs, command(after))
		}
		r := wire.ResultFor(after, eventID, op.DecisionNew)
		r.RawStatusCode, r.Reason = oc.HTTPStatus, wire.Clip200(cmp.Or(oc.Reason, after.LastError))
		return append(msgs, outbox.Result(r, tp))
	}
	return p, nil
}

// Change turns the plan into the store change that writes it, from o at its
// lease epoch, with extra (the writer's own detail: the attempt, the
// verdict) added to the plan's detail for the last event's row.
func (p Plan) Change(o *op.Operation, actor string, extra map[string]any) store.Change {
	c := store.Change{OperationID: o.ID, From: o.State, LeaseEpoch: o.LeaseEpoch, Events: p.Events,
		ErrorCategory: p.ErrorCategory, Error: p.Error, Actor: actor, Outbox: p.Messages, Operation: o}
	if len(p.Detail)+len(extra) > 0 {
		d := make(map[string]any, len(p.Detail)+len(extra))
		for k, v := range extra {
			d[k] = v
		}
		for k, v := range p.Detail {
			d[k] = v
		}
		c.Detail = d
	}
	return c
}

// Write applies c (built by Change from p, with whatever the caller adds)
// as one decision in one statement; a completed compensation also
// completes the operation it compensates, in the same transaction.
func (p Plan) Write(ctx context.Context, st *store.Store, c store.Change) (*op.Operation, error) {
	completed := p.To == op.StateCompletedSuccess || p.To == op.StateCompletedNoop
	if c.Operation == nil || c.Operation.CompensatesID == "" || !completed {
		return st.Transition(ctx, c)
	}
	var cur *op.Operation
	err := st.InTx(ctx, func(tx *store.Tx) error {
		var err error
		cur, err = p.WriteIn(ctx, tx, c)
		return err
	})
	return cur, err
}

// WriteIn is Write inside tx, for a decision that commits with other
// writes (the webhook evidence that made it).
func (p Plan) WriteIn(ctx context.Context, tx *store.Tx, c store.Change) (*op.Operation, error) {
	cur, err := tx.Transition(ctx, c)
	if err != nil {
		return nil, err
	}
	if p.To == op.StateCompletedSuccess || p.To == op.StateCompletedNoop {
		if err := CompleteCompensation(ctx, tx, cur); err != nil {
			return nil, err
		}
	}
	return cur, nil
}

// CompleteCompensation moves the operation that o compensates, if any, from
// compensating to compensated, in tx, with a result to its workflow.
func CompleteCompensation(ctx context.Context, tx *store.Tx, o *op.Operation) error {
	if o.CompensatesID == "" {
		return nil
	}
	orig, err := tx.Operation(ctx, o.CompensatesID)
	if err != nil {
		return err
	}
	if orig.State != op.StateCompensating {
		return nil
	}
	tp := telemetry.FromTraceID(orig.TraceID)
	_, err = tx.Transition(ctx, store.Change{OperationID: orig.ID, From: orig.State, LeaseEpoch: orig.LeaseEpoch,
		Events: []op.Event{op.EventCompensated}, Actor: "compensation", Operation: orig,
		Detail: map[string]string{"compensation_operation_id": o.ID},
		Outbox: func(after *op.Operation) []store.Message {
			return []store.Message{outbox.Result(wire.ResultFor(after, after.OriginEventID, op.DecisionNew), tp)}
		}})
	return err
}

// WithdrawCompensation returns the operation that comp compensates to the
// state it was compensated from, in tx, when comp has just ended without
// doing anything (denied, cancelled, its approval expired) and the
// original still waits on it: completed_success (its effect stands),
// failed_permanent, or escalated (a person still owns it). The event says
// why, and the original's workflow gets a result. It may be compensated
// again afterwards. Nothing happens for an operation that compensates
// nothing, or whose original has moved on or waits on another compensation.
func WithdrawCompensation(ctx context.Context, tx *store.Tx, comp *op.Operation, actor, why string) error {
	if comp.CompensatesID == "" {
		return nil
	}
	orig, err := tx.Operation(ctx, comp.CompensatesID)
	if err != nil {
		return err
	}
	if orig.State != op.StateCompensating || (orig.CompensationID != "" && orig.CompensationID != comp.ID) {
		return nil
	}
	events, err := tx.Events(ctx, orig.ID)
	if err != nil {
		return err
	}
	var before op.State
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].Event == op.EventCompensate {
			before = events[i].From
			break
		}
	}
	// The event that leads back names the state: succeed (the effect
	// stands), fail_permanent, or escalate, which is also the answer for
	// a history that says nothing (a person decides).
	ev := op.EventEscalate
	switch before {
	case op.StateCompletedSuccess:
		ev = op.EventSucceed
	case op.StateFailedPermanent:
		ev = op.EventFailPermanent
	}
	to, err := op.Transition(orig.State, ev)
	if err != nil {
		return err
	}
	reason := wire.Clip200(fmt.Sprintf("compensation %s ended without effect (%s); the operation is %s again and may be compensated again",
		comp.ID, why, to))
	tp := telemetry.FromTraceID(orig.TraceID)
	_, err = tx.Transition(ctx, store.Change{OperationID: orig.ID, From: orig.State, LeaseEpoch: orig.LeaseEpoch,
		Events: []op.Event{ev}, Actor: actor, Operation: orig,
		Detail: map[string]string{"compensation_operation_id": comp.ID, "reason": reason},
		Outbox: func(after *op.Operation) []store.Message {
			r := wire.ResultFor(after, after.OriginEventID, op.DecisionNew)
			r.Reason = reason
			return []store.Message{outbox.Result(r, tp)}
		}})
	return err
}

// RetryDelay is the wait before attempt number attempt+1: exponential backoff
// with jitter from the tool's policy, and never less than the vendor's
// Retry-After.
func RetryDelay(p registry.RetryPolicy, attempt int, retryAfter time.Duration) time.Duration {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.RandomizationFactor, b.Multiplier = p.InitialBackoff, p.MaxBackoff, p.Jitter, 2
	b.MaxElapsedTime = 0
	b.Reset()
	d := b.InitialInterval
	for range max(attempt, 1) {
		d = b.NextBackOff()
	}
	return max(d, retryAfter)
}
