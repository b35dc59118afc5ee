package store

import (
	"context"
	"fmt"

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
// lease (epoch+1), counts the attempt and records the attempt row. Commit this
// before calling the vendor: from then on, a crash leaves the operation in
// dispatched for the reconciler, never silently re-sent.
//
// Errors: *op.StaleError when another worker claimed it first or it is no
// longer pending (a redelivered command); op.ErrNotFound.
func (t *Tx) BeginAttempt(ctx context.Context, operationID string, epoch int64, worker string) (*op.Operation, *op.Attempt, error) {
	if _, err := op.Transition(op.StatePendingDispatch, op.EventDispatch); err != nil {
		return nil, nil, err // the state machine and this statement must agree
	}
	attemptID := op.NewID("att")
	row, err := t.q.OperationDispatch(ctx, dbsqlc.OperationDispatchParams{
		ID: operationID, LeaseEpoch: epoch, AttemptID: attemptID, Worker: worker, Now: t.now(),
	})
	if err != nil {
		return nil, nil, t.staleOr(ctx, operationID, op.StatePendingDispatch, epoch, err)
	}
	o := toOperation(dbsqlc.Operation(row))
	return o, &op.Attempt{
		ID: attemptID, OperationID: o.ID, Number: o.AttemptCount, LeaseEpoch: o.LeaseEpoch,
		Worker: worker, StartedAt: o.UpdatedAt,
	}, nil
}

// FinishAttempt records the outcome of an attempt, once. Errors:
// op.ErrNotFound when the attempt does not exist or is already finished.
func (t *Tx) FinishAttempt(ctx context.Context, a *op.Attempt) (*op.Attempt, error) {
	row, err := t.q.AttemptFinish(ctx, dbsqlc.AttemptFinishParams{
		ID: a.ID, Outcome: string(a.Outcome), ErrorCategory: a.ErrorCategory, Error: a.Error,
		HttpStatus: int32(a.HTTPStatus), ExternalRequestID: a.ExternalRequestID,
		ExternalObjectID: a.ExternalObjectID, Now: t.now(),
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

// BeginAttemptTx runs Tx.BeginAttempt in its own transaction.
func (s *Store) BeginAttemptTx(ctx context.Context, operationID string, epoch int64, worker string) (*op.Operation, *op.Attempt, error) {
	var o *op.Operation
	var a *op.Attempt
	err := s.InTx(ctx, func(tx *Tx) error {
		var err error
		o, a, err = tx.BeginAttempt(ctx, operationID, epoch, worker)
		return err
	})
	return o, a, err
}
