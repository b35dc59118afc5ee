package store

import (
	"context"
	"errors"
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
	return s.beginAttempt(ctx, s.reads, operationID, epoch, worker, timeout)
}

// ErrLeaseBusy: the operation's entity is leased to another operation, or
// an older operation on it may still be sent (it waits, is in flight, or
// its outcome is unknown) and goes first. Try again shortly; nothing
// changed.
var ErrLeaseBusy = errors.New("the entity's lease is held or an older operation waits for it")

// EntityLease asks BeginAttempt to take the operation's entity lease.
type EntityLease struct {
	// TTL of the lease; at least the tool's timeout.
	TTL time.Duration
	// Tools are the tools whose operations queue for the same leases: an
	// older operation of one of them that may still be sent goes first.
	Tools []string
}

// BeginLeasedAttempt is BeginAttempt for a tool whose operations hold their
// entity's lease while in flight, in one statement: the lease goes to the
// operation only if no older operation of the leased tools on the entity
// may still be sent (pending_dispatch, dispatched, acknowledged,
// unknown_outcome, failed_retryable: however long ago its lease expired,
// since the reconciler may send it again), and only if the lease is free, expired,
// or already this operation's; then the claim. An operation with
// no entity is claimed without a lease. Errors: ErrLeaseBusy, and those of
// BeginAttempt.
func (s *Store) BeginLeasedAttempt(ctx context.Context, operationID string, epoch int64, worker string, timeout time.Duration,
	lease EntityLease) (*op.Operation, *op.Attempt, error) {
	if _, err := op.Transition(op.StatePendingDispatch, op.EventDispatch); err != nil {
		return nil, nil, err // the state machine and this statement must agree
	}
	c := &claim{id: operationID, epoch: epoch, worker: worker, timeout: timeout, lease: lease, attemptID: op.NewID("att")}
	if s.claims != nil {
		if err := s.claims.do(ctx, c); err != nil {
			return nil, nil, err
		}
		return c.o, c.att, c.err
	}
	s.oneClaim(ctx, c)
	return c.o, c.att, c.err
}

// claim is one BeginLeasedAttempt: what it asks and, once taken, what it got.
type claim struct {
	id        string
	epoch     int64
	worker    string
	timeout   time.Duration
	lease     EntityLease
	attemptID string
	o         *op.Operation
	att       *op.Attempt
	err       error
}

// oneClaim takes c with its own OperationDispatchLeased.
func (s *Store) oneClaim(ctx context.Context, c *claim) {
	row, err := s.q.OperationDispatchLeased(ctx, dbsqlc.OperationDispatchLeasedParams{
		ID: c.id, LeaseEpoch: c.epoch, Tools: nonNil(c.lease.Tools), Now: s.now(),
		TtlSeconds: max(c.lease.TTL, c.timeout).Seconds(), AttemptID: c.attemptID, Worker: c.worker, TimeoutSeconds: c.timeout.Seconds(),
	})
	if err == nil {
		c.o, c.att, c.err = claimedAttempt(dbsqlc.Operation(row), c.attemptID, c.worker, c.timeout)
		return
	}
	if err = translate(err); !isNotFound(err) {
		c.err = fmt.Errorf("claim operation %s: %w", c.id, err)
		return
	}
	s.notClaimed(ctx, c)
}

// notClaimed explains a leased claim that took nothing by reading the
// operation: stale, claimed without a lease (it has no entity), or the
// lease busy.
func (s *Store) notClaimed(ctx context.Context, c *claim) {
	cur, err := s.Operation(ctx, c.id)
	switch {
	case err != nil:
		c.err = err
	case cur.State != op.StatePendingDispatch || cur.LeaseEpoch != c.epoch:
		c.err = &op.StaleError{OperationID: c.id, WantState: op.StatePendingDispatch, WantEpoch: c.epoch, GotState: cur.State, GotEpoch: cur.LeaseEpoch}
	case cur.EntityID == "":
		c.o, c.att, c.err = s.BeginAttempt(ctx, c.id, c.epoch, c.worker, c.timeout)
	default:
		c.err = ErrLeaseBusy
	}
}

func (s *Store) beginAttempt(ctx context.Context, r reads, operationID string, epoch int64, worker string, timeout time.Duration) (*op.Operation, *op.Attempt, error) {
	if _, err := op.Transition(op.StatePendingDispatch, op.EventDispatch); err != nil {
		return nil, nil, err // the state machine and this statement must agree
	}
	attemptID := op.NewID("att")
	row, err := r.q.OperationDispatch(ctx, dbsqlc.OperationDispatchParams{
		ID: operationID, LeaseEpoch: epoch, AttemptID: attemptID, Worker: worker, Now: r.now(),
		TimeoutSeconds: timeout.Seconds(),
	})
	if err != nil {
		return nil, nil, r.staleOr(ctx, operationID, op.StatePendingDispatch, epoch, err)
	}
	return claimedAttempt(dbsqlc.Operation(row), attemptID, worker, timeout)
}

// claimedAttempt is the operation a claim returned and the attempt it began.
func claimedAttempt(row dbsqlc.Operation, attemptID, worker string, timeout time.Duration) (*op.Operation, *op.Attempt, error) {
	o := toOperation(row)
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
