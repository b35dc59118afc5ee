// Package followup decides what happens after an operation reaches a new
// state, for every worker that moves one (the dispatcher after an attempt,
// the reconciler after a lookup): the command that should follow (reconcile,
// retry, compensate), the retry budget and its backoff, and the completion of
// the operation a finished compensation was for. Keeping it in one place makes
// the dispatcher and the reconciler decide follow-ups the same way.
package followup

import (
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

// Commands are the commands that follow an operation reaching a
// state with nothing else to write: reconcile an unknown outcome now, an
// acknowledgement later, compensate a permanent failure.
func Commands(cur *op.Operation, eventID string, tp telemetry.Traceparent) []store.Message {
	switch cur.State {
	case op.StateUnknownOutcome:
		return []store.Message{outbox.Command(wire.KindUnknown, cur, eventID, tp, time.Time{})}
	case op.StateAcknowledged:
		// Completion should follow by itself; if it has not after a while,
		// the reconciler asks the vendor.
		return []store.Message{outbox.Command(wire.KindUnknown, cur, eventID, tp, time.Now().Add(AcknowledgedCheckDelay))}
	case op.StateFailedPermanent:
		return []store.Message{outbox.Command(wire.KindFailed, cur, eventID, tp, time.Time{})}
	}
	return nil
}

// FollowUp decides what happens after an operation reached cur.State from an
// attempt or a reconciliation, in tx: an unknown outcome gets a reconcile
// command, an acknowledgement a delayed one; a retryable failure goes back to pending_dispatch with a delayed
// dispatch command while the tool's retry budget lasts, then fails
// permanently; a permanent failure gets a compensate command; a completed
// compensation completes the operation it compensates. It returns the
// operation's state after that and the outbox messages to write.
func FollowUp(ctx context.Context, tx *store.Tx, tool *registry.Tool, cur *op.Operation, eventID string,
	tp telemetry.Traceparent, retryAfter time.Duration, actor string) (*op.Operation, []store.Message, error) {
	var err error
	switch cur.State {
	case op.StateFailedRetryable:
		if cur.AttemptCount < tool.Retry.MaxAttempts {
			if cur, err = tx.Transition(ctx, store.Change{OperationID: cur.ID, From: cur.State, LeaseEpoch: cur.LeaseEpoch,
				Event: op.EventRetry, Actor: actor, Detail: map[string]any{"attempt": cur.AttemptCount}}); err != nil {
				return nil, nil, err
			}
			due := time.Now().Add(RetryDelay(tool.Retry, cur.AttemptCount, retryAfter))
			return cur, []store.Message{outbox.Command(wire.KindDispatch, cur, eventID, tp, due)}, nil
		}
		if cur, err = tx.Transition(ctx, store.Change{OperationID: cur.ID, From: cur.State, LeaseEpoch: cur.LeaseEpoch,
			Event: op.EventFailPermanent, Actor: actor, ErrorCategory: "retries_exhausted",
			Error: fmt.Sprintf("gave up after %d attempts; last: %s", cur.AttemptCount, cur.LastError)}); err != nil {
			return nil, nil, err
		}
	case op.StateCompletedSuccess, op.StateCompletedNoop:
		if err := CompleteCompensation(ctx, tx, cur); err != nil {
			return nil, nil, err
		}
	}
	msgs := Commands(cur, eventID, tp)
	return cur, msgs, nil
}

// AcknowledgedCheckDelay is how long after a vendor acknowledged a request
// without completing it the reconciler first asks the vendor about it.
const AcknowledgedCheckDelay = time.Minute

// CompleteCompensation moves the operation that o compensates, if any, from
// compensating to compensated, in tx.
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
	_, err = tx.Transition(ctx, store.Change{OperationID: orig.ID, From: orig.State, LeaseEpoch: orig.LeaseEpoch,
		Event: op.EventCompensated, Actor: "compensation", Detail: map[string]string{"compensation_operation_id": o.ID}})
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
