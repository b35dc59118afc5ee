package store

import (
	"context"
	"fmt"
	"time"

	"github.com/opledger/opledger/db/dbsqlc"
	"github.com/opledger/opledger/pkg/op"
)

func toAttempt(a dbsqlc.Attempt) *op.Attempt {
	at := &op.Attempt{
		ID: a.ID, OperationID: a.OperationID, Number: int(a.Number), LeaseEpoch: a.LeaseEpoch,
		Worker: a.Worker, StartedAt: a.StartedAt, Outcome: op.Outcome(a.Outcome),
		ErrorCategory: a.ErrorCategory, Error: a.Error, HTTPStatus: int(a.HttpStatus),
		ExternalRequestID: a.ExternalRequestID, ExternalObjectID: a.ExternalObjectID,
	}
	if a.FinishedAt != nil {
		at.FinishedAt = *a.FinishedAt
	}
	return at
}

// BeginAttempt claims a pending operation for one dispatch try: it moves it
// from pending_dispatch to dispatched at the expected lease epoch, takes the
// lease (epoch+1), counts the attempt and records the attempt row, in one
// statement that has committed when it returns, before any vendor call: from
// then on, a crash leaves the operation in dispatched for the reconciler,
// never silently re-sent.
//
// Errors: *op.StaleError when another worker claimed it first or it is no
// longer pending (a redelivered command); op.ErrNotFound.
func (s *Store) BeginAttempt(ctx context.Context, operationID string, epoch int64, worker string) (*op.Operation, *op.Attempt, error) {
	if _, err := op.Transition(op.StatePendingDispatch, op.EventDispatch); err != nil {
		return nil, nil, err // the state machine and this statement must agree
	}
	attemptID := op.NewID("att")
	row, err := s.q.OperationDispatch(ctx, dbsqlc.OperationDispatchParams{
		ID: operationID, LeaseEpoch: epoch, AttemptID: attemptID, Worker: worker, Now: s.nowPtr(),
	})
	if err != nil {
		return nil, nil, s.staleOr(ctx, operationID, op.StatePendingDispatch, epoch, err)
	}
	o := toOperation(dbsqlc.Operation(row))
	return o, &op.Attempt{
		ID: attemptID, OperationID: o.ID, Number: o.AttemptCount, LeaseEpoch: o.LeaseEpoch,
		Worker: worker, StartedAt: o.UpdatedAt,
	}, nil
}

// Outcome is what RecordOutcome writes.
type Outcome struct {
	// Operation is the operation as BeginAttempt returned it (dispatched, at
	// the attempt's lease epoch).
	Operation *op.Operation
	// Attempt carries the classification: Outcome, ErrorCategory, Error,
	// HTTPStatus and the vendor's ids.
	Attempt *op.Attempt
	Actor   string
	Detail  any
	// Outbox builds the messages to write with the transition from the
	// operation as it will be after it (the agent's result, a follow-up).
	Outbox func(after *op.Operation) []Message
}

// RecordOutcome records an attempt's outcome in one statement, without an
// explicit transaction: it finishes the attempt row, and if the operation is
// still dispatched at the attempt's lease epoch, moves it by the outcome's
// event and writes the outbox messages. It returns the operation after the
// change. Errors: *op.StaleError when the operation moved on (the attempt is
// recorded all the same); *op.TransitionError for an outcome the state
// machine does not allow from dispatched.
func (s *Store) RecordOutcome(ctx context.Context, oc Outcome) (*op.Operation, error) {
	o, a := oc.Operation, oc.Attempt
	ev := a.Outcome.Event()
	to, err := op.Transition(op.StateDispatched, ev)
	if err != nil {
		return nil, fmt.Errorf("operation %s: %w", o.ID, err)
	}
	detail, err := encodeDetail(oc.Detail)
	if err != nil {
		return nil, fmt.Errorf("operation %s: %w", o.ID, err)
	}
	// The operation as the statement will leave it, for the outbox messages.
	after := *o
	after.State, after.Version = to, o.Version+1 // fenced: nothing else changes it in between
	if a.ExternalRequestID != "" {
		after.ExternalRequestID = a.ExternalRequestID
	}
	if a.ExternalObjectID != "" {
		after.ExternalObjectID = a.ExternalObjectID
	}
	switch {
	case a.ErrorCategory != "":
		after.LastErrorCategory, after.LastError = a.ErrorCategory, a.Error
	case to == op.StateCompletedSuccess || to == op.StateCompletedNoop:
		after.LastErrorCategory, after.LastError = "", ""
	}
	// The rows take the database's clock, like every other write; only the
	// result built here before the statement carries this host's clock.
	after.UpdatedAt = time.Now().UTC()
	if p := s.nowPtr(); p != nil {
		after.UpdatedAt = *p
	}
	var rows outboxRows
	if oc.Outbox != nil {
		if err := rows.add(oc.Outbox(&after)); err != nil {
			return nil, err
		}
	}
	row, err := s.q.OperationRecordOutcome(ctx, dbsqlc.OperationRecordOutcomeParams{
		Now: s.nowPtr(), Outcome: string(a.Outcome), ErrorCategory: a.ErrorCategory, Error: a.Error,
		HttpStatus: int32(a.HTTPStatus), ExternalRequestID: a.ExternalRequestID, ExternalObjectID: a.ExternalObjectID,
		AttemptID: a.ID, ToState: string(to), LastErrorCategory: after.LastErrorCategory, LastError: after.LastError,
		ID: o.ID, LeaseEpoch: o.LeaseEpoch, Event: string(ev), Actor: oc.Actor, Detail: detail,
		Subjects: nonNil(rows.subjects), MsgIds: nonNil(rows.msgIDs), Headers: nonNil(rows.headers),
		Payloads: nonNil(rows.payloads), OperationIds: nonNil(rows.operationIDs), AvailableAts: nonNil(rows.availableAts),
	})
	if err != nil {
		return nil, s.staleOr(ctx, o.ID, op.StateDispatched, o.LeaseEpoch, err)
	}
	if len(rows.msgIDs) > 0 && s.onOutbox != nil {
		s.onOutbox()
	}
	return toOperation(dbsqlc.Operation(row)), nil
}

// FinishAttempt records the outcome of an attempt, once, as a statement of
// its own. Errors: op.ErrNotFound when the attempt does not exist or is
// already finished.
func (s *Store) FinishAttempt(ctx context.Context, a *op.Attempt) (*op.Attempt, error) {
	row, err := s.q.AttemptFinish(ctx, dbsqlc.AttemptFinishParams{
		ID: a.ID, Outcome: string(a.Outcome), ErrorCategory: a.ErrorCategory, Error: a.Error,
		HttpStatus: int32(a.HTTPStatus), ExternalRequestID: a.ExternalRequestID,
		ExternalObjectID: a.ExternalObjectID, Now: s.nowPtr(),
	})
	if err != nil {
		return nil, fmt.Errorf("finish attempt %s: %w", a.ID, translate(err))
	}
	return toAttempt(row), nil
}

// Attempts returns an operation's attempts in order.
func (r reads) Attempts(ctx context.Context, operationID string) ([]*op.Attempt, error) {
	rows, err := r.q.AttemptList(ctx, operationID)
	if err != nil {
		return nil, fmt.Errorf("list attempts of operation %s: %w", operationID, translate(err))
	}
	out := make([]*op.Attempt, len(rows))
	for i, a := range rows {
		out[i] = toAttempt(a)
	}
	return out, nil
}
