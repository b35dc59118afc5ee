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
		Worker: a.Worker, StartedAt: a.StartedAt, DeadlineAt: a.DeadlineAt, Outcome: op.Outcome(a.Outcome),
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
// lease (epoch+1), counts the attempt and records the attempt row with its
// deadline (the database's now() plus timeout), in one statement that has
// committed when it returns, before any vendor call: from then on, a crash
// leaves the operation in dispatched for the sweeper, never silently re-sent.
//
// Errors: *op.StaleError when another worker claimed it first or it is no
// longer pending (a redelivered command); op.ErrNotFound.
func (s *Store) BeginAttempt(ctx context.Context, operationID string, epoch int64, worker string, timeout time.Duration) (*op.Operation, *op.Attempt, error) {
	if _, err := op.Transition(op.StatePendingDispatch, op.EventDispatch); err != nil {
		return nil, nil, err // the state machine and this statement must agree
	}
	attemptID := op.NewID("att")
	row, err := s.q.OperationDispatch(ctx, dbsqlc.OperationDispatchParams{
		ID: operationID, LeaseEpoch: epoch, AttemptID: attemptID, Worker: worker, Now: s.now(),
		TimeoutSeconds: timeout.Seconds(),
	})
	if err != nil {
		return nil, nil, s.staleOr(ctx, operationID, op.StatePendingDispatch, epoch, err)
	}
	o := toOperation(dbsqlc.Operation(row))
	return o, &op.Attempt{
		ID: attemptID, OperationID: o.ID, Number: o.AttemptCount, LeaseEpoch: o.LeaseEpoch,
		Worker: worker, StartedAt: o.UpdatedAt, DeadlineAt: o.UpdatedAt.Add(timeout),
	}, nil
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
