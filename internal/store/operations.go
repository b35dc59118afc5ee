package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/opledger/opledger/db/dbsqlc"
	"github.com/opledger/opledger/pkg/op"
)

func toOperation(r dbsqlc.Operation) *op.Operation {
	o := &op.Operation{
		ID:                r.ID,
		WorkflowID:        r.WorkflowID,
		RunID:             r.RunID,
		Tool:              r.Tool,
		ToolVersion:       int(r.ToolVersion),
		Intent:            r.Intent,
		EntityType:        r.EntityType,
		EntityID:          r.EntityID,
		Args:              json.RawMessage(r.ArgsCanonical),
		ArgsHash:          r.ArgsHash,
		Class:             op.SideEffectClass(r.SideEffectClass),
		IdempotencyKey:    r.IdempotencyKey,
		State:             op.State(r.State),
		Version:           r.Version,
		OriginEventID:     r.OriginEventID,
		AttemptCount:      int(r.AttemptCount),
		LeaseEpoch:        r.LeaseEpoch,
		ExternalRequestID: r.ExternalRequestID,
		ExternalObjectID:  r.ExternalObjectID,
		TraceID:           r.TraceID,
		LastErrorCategory: r.LastErrorCategory,
		LastError:         r.LastError,
		CreatedAt:         r.CreatedAt,
		UpdatedAt:         r.UpdatedAt,
	}
	if r.CompensatesOperationID != nil {
		o.CompensatesID = *r.CompensatesOperationID
	}
	return o
}

// Change is one conditional state change of an operation.
type Change struct {
	OperationID string
	// From and LeaseEpoch are what the writer believes the operation is in; the
	// write happens only if both still hold.
	From       op.State
	LeaseEpoch int64
	Event      op.Event
	// BumpEpoch takes the lease: the epoch increases, and writers holding the
	// old epoch are fenced off.
	BumpEpoch bool
	// NewAttempt counts a dispatch attempt.
	NewAttempt        bool
	ExternalRequestID string
	ExternalObjectID  string
	// ErrorCategory and Error, when ErrorCategory is set, replace the
	// operation's last error; a successful change clears them.
	ErrorCategory string
	Error         string
	AttemptID     string
	Actor         string
	// Detail is stored as JSON with the event row; nil stores nothing.
	Detail any
}

// Transition applies c: it checks the state machine, updates the operation
// only if it is still in c.From at c.LeaseEpoch, and appends the event row.
//
// Errors: *op.TransitionError (errors.Is op.ErrIllegalTransition) when the
// event is not allowed from c.From; *op.StaleError (op.ErrStale) when the
// operation has moved on, so a late or duplicate writer changes nothing;
// op.ErrNotFound when there is no such operation.
func (t *Tx) Transition(ctx context.Context, c Change) (*op.Operation, error) {
	to, err := op.Transition(c.From, c.Event)
	if err != nil {
		return nil, fmt.Errorf("operation %s: %w", c.OperationID, err)
	}
	clearErr := to == op.StateCompletedSuccess || to == op.StateCompletedNoop
	detail, err := encodeDetail(c.Detail)
	if err != nil {
		return nil, fmt.Errorf("operation %s: %w", c.OperationID, err)
	}
	row, err := t.q.OperationTransition(ctx, dbsqlc.OperationTransitionParams{
		ID:                c.OperationID,
		FromState:         string(c.From),
		LeaseEpoch:        c.LeaseEpoch,
		ToState:           string(to),
		BumpEpoch:         c.BumpEpoch,
		NewAttempt:        c.NewAttempt,
		ExternalRequestID: c.ExternalRequestID,
		ExternalObjectID:  c.ExternalObjectID,
		SetError:          c.ErrorCategory != "" || clearErr,
		ErrorCategory:     c.ErrorCategory,
		Error:             c.Error,
		Now:               t.now(),
		Event:             string(c.Event),
		AttemptID:         c.AttemptID,
		Actor:             c.Actor,
		Detail:            detail,
	})
	if err != nil {
		return nil, t.staleOr(ctx, c.OperationID, c.From, c.LeaseEpoch, err)
	}
	return toOperation(dbsqlc.Operation(row)), nil
}

// staleOr explains a conditional write that matched no row: a *op.StaleError
// saying what the operation is now, or op.ErrNotFound. Other errors pass
// through, translated.
func (r reads) staleOr(ctx context.Context, id string, want op.State, wantEpoch int64, err error) error {
	err = translate(err)
	if !errors.Is(err, op.ErrNotFound) {
		return fmt.Errorf("transition operation %s: %w", id, err)
	}
	cur, gerr := r.q.OperationGet(ctx, id)
	if gerr != nil {
		return fmt.Errorf("transition operation %s: %w", id, translate(gerr))
	}
	return &op.StaleError{OperationID: id, WantState: want, WantEpoch: wantEpoch,
		GotState: op.State(cur.State), GotEpoch: cur.LeaseEpoch}
}

// encodeDetail renders an event's detail as JSON; nil stays NULL.
func encodeDetail(detail any) ([]byte, error) {
	if detail == nil {
		return nil, nil
	}
	raw, err := json.Marshal(detail)
	if err != nil {
		return nil, fmt.Errorf("encode event detail: %w", err)
	}
	return raw, nil
}

// Operation returns the operation with id. Errors: op.ErrNotFound.
func (r reads) Operation(ctx context.Context, id string) (*op.Operation, error) {
	row, err := r.q.OperationGet(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("get operation %s: %w", id, translate(err))
	}
	return toOperation(row), nil
}

// OperationByKey returns the operation with idempotency key. Errors: op.ErrNotFound.
func (r reads) OperationByKey(ctx context.Context, key string) (*op.Operation, error) {
	row, err := r.q.OperationGetByKey(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("get operation by key: %w", translate(err))
	}
	return toOperation(row), nil
}

// OperationsByWorkflow returns a workflow's operations, oldest first.
func (r reads) OperationsByWorkflow(ctx context.Context, workflowID string) ([]*op.Operation, error) {
	rows, err := r.q.OperationListByWorkflow(ctx, workflowID)
	if err != nil {
		return nil, fmt.Errorf("list operations of workflow %s: %w", workflowID, translate(err))
	}
	out := make([]*op.Operation, len(rows))
	for i, row := range rows {
		out[i] = toOperation(row)
	}
	return out, nil
}

// OperationsStuckDispatched returns up to limit operations still in
// dispatched whose current attempt started before cutoff, oldest first: the
// sweeper's candidates.
func (r reads) OperationsStuckDispatched(ctx context.Context, cutoff time.Time, limit int) ([]*op.Operation, error) {
	rows, err := r.q.OperationListStuckDispatched(ctx, dbsqlc.OperationListStuckDispatchedParams{
		OlderThan: cutoff, MaxRows: int32(limit),
	})
	if err != nil {
		return nil, fmt.Errorf("list stuck operations: %w", translate(err))
	}
	out := make([]*op.Operation, len(rows))
	for i, row := range rows {
		out[i] = toOperation(row)
	}
	return out, nil
}

// OperationsUnattended returns up to limit operations in pending_dispatch,
// unknown_outcome or acknowledged, unchanged since before cutoff, with no
// unsent outbox row: the command that should move them was lost after it
// was published. Oldest first.
func (r reads) OperationsUnattended(ctx context.Context, cutoff time.Time, limit int) ([]*op.Operation, error) {
	rows, err := r.q.OperationListUnattended(ctx, dbsqlc.OperationListUnattendedParams{OlderThan: cutoff, MaxRows: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("list unattended operations: %w", translate(err))
	}
	out := make([]*op.Operation, len(rows))
	for i, row := range rows {
		out[i] = toOperation(row)
	}
	return out, nil
}

// Events returns an operation's history in order.
func (r reads) Events(ctx context.Context, operationID string) ([]op.EventRecord, error) {
	rows, err := r.q.OperationEventList(ctx, operationID)
	if err != nil {
		return nil, fmt.Errorf("list events of operation %s: %w", operationID, translate(err))
	}
	out := make([]op.EventRecord, len(rows))
	for i, e := range rows {
		out[i] = op.EventRecord{
			Seq: int(e.Seq), OperationID: e.OperationID, Event: op.Event(e.Event),
			From: op.State(e.FromState), To: op.State(e.ToState), LeaseEpoch: e.LeaseEpoch,
			AttemptID: e.AttemptID, Actor: e.Actor, Detail: e.Detail, At: e.At,
		}
	}
	return out, nil
}

// CountByState returns how many operations are in each state.
func (r reads) CountByState(ctx context.Context) (map[op.State]int64, error) {
	rows, err := r.q.OperationCountByState(ctx)
	if err != nil {
		return nil, fmt.Errorf("count operations: %w", translate(err))
	}
	out := make(map[op.State]int64, len(rows))
	for _, row := range rows {
		out[op.State(row.State)] = row.N
	}
	return out, nil
}
