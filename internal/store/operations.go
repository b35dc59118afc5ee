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
		ID:                    r.ID,
		WorkflowID:            r.WorkflowID,
		RunID:                 r.RunID,
		Tool:                  r.Tool,
		ToolVersion:           int(r.ToolVersion),
		Intent:                r.Intent,
		EntityType:            r.EntityType,
		EntityID:              r.EntityID,
		Args:                  json.RawMessage(r.ArgsCanonical),
		ArgsHash:              r.ArgsHash,
		Class:                 op.SideEffectClass(r.SideEffectClass),
		IdempotencyKey:        r.IdempotencyKey,
		State:                 op.State(r.State),
		Version:               r.Version,
		OriginEventID:         r.OriginEventID,
		ProposedBy:            r.ProposedBy,
		Tenant:                r.Tenant,
		DedupeKey:             r.DedupeKey,
		AttemptCount:          int(r.AttemptCount),
		LeaseEpoch:            r.LeaseEpoch,
		ExternalRequestID:     r.ExternalRequestID,
		ExternalObjectID:      r.ExternalObjectID,
		TraceID:               r.TraceID,
		LastErrorCategory:     r.LastErrorCategory,
		LastError:             r.LastError,
		CreatedAt:             r.CreatedAt,
		UpdatedAt:             r.UpdatedAt,
		Generation:            int(r.Generation),
		GenerationStartedAt:   r.CreatedAt,
		GenerationAttemptBase: int(r.GenerationAttemptBase),
	}
	if r.GenerationStartedAt != nil {
		o.GenerationStartedAt = *r.GenerationStartedAt
	}
	if r.CompensatesOperationID != nil {
		o.CompensatesID = *r.CompensatesOperationID
	}
	if r.CompensationOperationID != nil {
		o.CompensationID = *r.CompensationOperationID
	}
	return o
}

// Change is one conditional state change of an operation: one decision,
// written in one statement with everything that goes with it.
type Change struct {
	OperationID string
	// From and LeaseEpoch are what the writer believes the operation is in; the
	// write happens only if both still hold.
	From       op.State
	LeaseEpoch int64
	// Events are applied in order from From (usually one; a retryable failure
	// that is retried at once is fail_retryable then retry). Each gets its
	// event row.
	Events []op.Event
	// BumpEpoch takes the lease: the epoch increases, and writers holding the
	// old epoch are fenced off.
	BumpEpoch bool
	// Reopen starts a new generation (with EventReopen).
	Reopen            bool
	ExternalRequestID string
	ExternalObjectID  string
	// CompensationID, when set, links the operation to its compensation
	// (the original moving to compensating).
	CompensationID string
	// ErrorCategory and Error, when ErrorCategory is set, replace the
	// operation's last error; a change that completes the operation clears them.
	ErrorCategory string
	Error         string
	AttemptID     string
	Actor         string
	// Detail is stored as JSON with the last event's row; nil stores nothing.
	Detail any
	// Finish, when set, finishes this attempt with its outcome in the same
	// statement, whether or not the operation still matches From and
	// LeaseEpoch: a fenced-off attempt keeps what the vendor answered.
	Finish *op.Attempt
	// RequireLease (with Finish) writes the change only while the
	// operation still holds its entity's lease, unexpired on the database's
	// clock: a holder whose lease expired (and another operation may have
	// taken) is fenced off with ErrLeaseLost, its attempt keeping the answer.
	RequireLease bool
	// Outbox builds the messages written with the change (the agent's
	// result, a follow-up command) from the operation as it will be after it;
	// nothing is written if the operation does not change.
	Outbox func(after *op.Operation) []Message
	// Operation is the operation as the writer read it (in From at
	// LeaseEpoch), from which the messages' view of it after the change is
	// derived; nil reads it first.
	Operation *op.Operation
}

// Transition applies c in one statement on the pool: see Tx.Transition.
// A change that finishes an attempt (an outcome) may share its statement
// with others that come at the same time (group commit, runOutcomes).
func (s *Store) Transition(ctx context.Context, c Change) (*op.Operation, error) {
	if c.Finish != nil && s.outcomes != nil {
		p, rows, err := s.reads.prepareChange(ctx, c)
		if err != nil {
			return nil, err
		}
		oc := &outcome{c: c, p: p, rows: rows}
		if err := s.outcomes.do(ctx, oc); err != nil {
			return nil, err
		}
		return oc.after, nil
	}
	o, due, err := s.reads.transition(ctx, c)
	if err == nil {
		s.handOff(due)
	}
	return o, err
}

// Transition applies c: it checks the chain of events against the state
// machine, updates the operation only if it is still in c.From at
// c.LeaseEpoch, appends an event row per event, finishes c.Finish and writes
// c.Outbox's messages, all in one statement. It returns the operation after
// the change.
//
// Errors: *op.TransitionError (errors.Is op.ErrIllegalTransition) when an
// event is not allowed where the chain has it; *op.StaleError (op.ErrStale)
// when the operation has moved on, so a late or duplicate writer changes
// nothing (c.Finish is recorded all the same); op.ErrNotFound when there is
// no such operation; op.ErrInvalid when the database refuses a value.
func (t *Tx) Transition(ctx context.Context, c Change) (*op.Operation, error) {
	o, due, err := t.reads.transition(ctx, c)
	if err == nil {
		t.due = append(t.due, due...)
	}
	return o, err
}

// transition returns, besides the operation, the messages due at once it
// queued (none when the operation did not change).
func (r reads) transition(ctx context.Context, c Change) (_ *op.Operation, due []Message, err error) {
	p, rows, err := r.prepareChange(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	var row dbsqlc.Operation
	due = rows.due
	if c.Finish != nil {
		// Only writers that finish an attempt name the attempts table: the
		// roles that may not update attempts run OperationTransitionFinishing,
		// which writes the messages due at once in a batch.
		b := newBatch(r.handoff)
		b.add(&rows, 0)
		var fr dbsqlc.OperationTransitionFinishingRow
		fr, err = r.q.OperationTransitionFinishing(ctx, finishingParams(p, c, b))
		row, due = dbsqlc.Operation(fr), b.due
	} else {
		var tr dbsqlc.OperationTransitionRow
		tr, err = r.q.OperationTransition(ctx, p)
		row = dbsqlc.Operation(tr)
	}
	if err != nil {
		return nil, nil, r.unchanged(ctx, c, err)
	}
	return toOperation(row), due, nil
}

// prepareChange checks c and builds the statement's parameters and the
// outbox rows it writes.
func (r reads) prepareChange(ctx context.Context, c Change) (p dbsqlc.OperationTransitionParams, rows outboxRows, err error) {
	if len(c.Events) == 0 {
		return p, rows, fmt.Errorf("operation %s: a change needs at least one event: %w", c.OperationID, op.ErrInvalid)
	}
	p = dbsqlc.OperationTransitionParams{
		ID: c.OperationID, FromState: string(c.From), LeaseEpoch: c.LeaseEpoch, BumpEpoch: c.BumpEpoch, Reopen: c.Reopen,
		ExternalRequestID: c.ExternalRequestID, ExternalObjectID: c.ExternalObjectID,
		AttemptID: c.AttemptID, Actor: c.Actor, Now: r.now(),
	}
	if c.CompensationID != "" {
		p.CompensationOperationID = &c.CompensationID
	}
	from := c.From
	for i, ev := range c.Events {
		to, err := op.Transition(from, ev)
		if err != nil {
			return p, rows, fmt.Errorf("operation %s: %w", c.OperationID, err)
		}
		var detail []byte
		if i == len(c.Events)-1 {
			if detail, err = encodeDetail(c.Detail); err != nil {
				return p, rows, fmt.Errorf("operation %s: %w", c.OperationID, err)
			}
		}
		p.Events, p.FromStates, p.ToStates = append(p.Events, string(ev)), append(p.FromStates, string(from)), append(p.ToStates, string(to))
		p.Details = append(p.Details, detail)
		from = to
	}
	p.ToState = string(from)
	// An operation no longer in flight (done, failed, withdrawn, or back
	// waiting for a retry) gives its entity's lease back.
	switch from {
	case op.StateCompletedSuccess, op.StateCompletedNoop, op.StateFailedPermanent, op.StateRejected,
		op.StateCancelled, op.StateCompensated, op.StatePendingDispatch, op.StateCompensating:
		p.ReleaseLease = true
	}
	completed := from == op.StateCompletedSuccess || from == op.StateCompletedNoop
	p.SetError, p.ErrorCategory, p.Error = c.ErrorCategory != "" || completed, c.ErrorCategory, c.Error
	// An outcome (OperationTransitionFinishing) writes its messages due at
	// once in a batch; the other transitions write rows.
	rows = outboxRows{grace: r.handoff, batched: c.Finish != nil}
	if c.Outbox != nil {
		// The operation as the statement will leave it, for the messages:
		// the write is fenced, so nothing else changes it in between.
		var after op.Operation
		if c.Operation != nil {
			after = *c.Operation
		} else {
			cur, err := r.q.OperationGet(ctx, c.OperationID)
			if err != nil {
				return p, rows, fmt.Errorf("operation %s: %w", c.OperationID, translate(err))
			}
			after = *toOperation(cur)
		}
		applyChange(&after, c, from, r.now())
		if err := rows.add(c.Outbox(&after)); err != nil {
			return p, rows, err
		}
	}
	p.Subjects, p.MsgIds, p.Headers, p.Payloads, p.OperationIds, p.Delays = rows.columns()
	if c.RequireLease && c.Finish == nil {
		return p, rows, fmt.Errorf("operation %s: a change that requires the lease finishes an attempt: %w", c.OperationID, op.ErrInvalid)
	}
	return p, rows, nil
}

// finishingParams are OperationTransitionFinishing's parameters for c,
// its messages due at once written as b.
func finishingParams(p dbsqlc.OperationTransitionParams, c Change, b *batch) dbsqlc.OperationTransitionFinishingParams {
	a := c.Finish
	f := dbsqlc.OperationTransitionFinishingParams{
		Now: p.Now, Outcome: string(a.Outcome), AttemptErrorCategory: a.ErrorCategory, AttemptError: a.Error,
		HttpStatus: int32(a.HTTPStatus), AttemptExternalRequestID: a.ExternalRequestID, AttemptExternalObjectID: a.ExternalObjectID,
		FinishAttemptID: a.ID, ToState: p.ToState, Events: p.Events, BumpEpoch: p.BumpEpoch, Reopen: p.Reopen,
		ExternalRequestID: p.ExternalRequestID, ExternalObjectID: p.ExternalObjectID,
		CompensationOperationID: p.CompensationOperationID, SetError: p.SetError,
		ErrorCategory: p.ErrorCategory, Error: p.Error, ID: p.ID, FromState: p.FromState, LeaseEpoch: p.LeaseEpoch,
		ReleaseLease: p.ReleaseLease, AttemptID: p.AttemptID, Actor: p.Actor, FromStates: p.FromStates, ToStates: p.ToStates,
		Details: p.Details, Subjects: p.Subjects, MsgIds: p.MsgIds, Headers: p.Headers, Payloads: p.Payloads,
		OperationIds: p.OperationIds, Delays: p.Delays, RequireLease: c.RequireLease, BatchID: b.id,
	}
	f.BatchSubjects, f.BatchMsgIds, f.BatchHeaders, f.BatchPayloads, f.BatchOperationIds, f.BatchDelaySeconds = b.columns()
	return f
}

// unchanged explains a change whose statement failed or matched no
// operation: see staleOr; a change that requires the lease and finds the
// operation as it expected lost the lease (ErrLeaseLost).
func (r reads) unchanged(ctx context.Context, c Change, err error) error {
	err = r.staleOr(ctx, c.OperationID, c.From, c.LeaseEpoch, err)
	var stale *op.StaleError
	if c.RequireLease && errors.As(err, &stale) && stale.GotState == c.From && stale.GotEpoch == c.LeaseEpoch {
		// The operation is as the writer expected: what it lacks is
		// its entity's lease.
		return fmt.Errorf("operation %s: %w", c.OperationID, ErrLeaseLost)
	}
	return err
}

// ErrLeaseLost: a change that requires its operation's entity lease found
// the lease expired on the database's clock, or taken by another operation.
// Nothing but the attempt row changed.
var ErrLeaseLost = errors.New("the entity's lease expired or was taken by another operation")

// applyChange predicts the operation after c, the way OperationTransition
// writes it, for the messages built before the statement runs.
func applyChange(o *op.Operation, c Change, to op.State, now *time.Time) {
	o.State, o.Version = to, o.Version+int64(len(c.Events))
	if c.BumpEpoch {
		o.LeaseEpoch++
	}

	if c.ExternalRequestID != "" {
		o.ExternalRequestID = c.ExternalRequestID
	}
	if c.ExternalObjectID != "" {
		o.ExternalObjectID = c.ExternalObjectID
	}
	if c.CompensationID != "" {
		o.CompensationID = c.CompensationID
	}
	switch {
	case c.ErrorCategory != "":
		o.LastErrorCategory, o.LastError = c.ErrorCategory, c.Error
	case to == op.StateCompletedSuccess || to == op.StateCompletedNoop:
		o.LastErrorCategory, o.LastError = "", ""
	}
	// The row takes the database's clock; the messages, built before the
	// statement, carry this host's reading of it.
	o.UpdatedAt = time.Now().UTC()
	if now != nil {
		o.UpdatedAt = *now
	}
	if c.Reopen {
		o.Generation++
		o.GenerationAttemptBase, o.GenerationStartedAt = o.AttemptCount, o.UpdatedAt
	}
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

// Stuck is an operation in dispatched whose attempt passed its deadline.
type Stuck struct {
	Operation  *op.Operation
	AttemptID  string
	DeadlineAt time.Time
}

// OperationsStuckDispatched returns up to limit operations still in
// dispatched whose current attempt passed its deadline more than grace ago
// on the database's clock, the earliest deadline first: the sweeper's
// candidates.
func (r reads) OperationsStuckDispatched(ctx context.Context, grace time.Duration, limit int) ([]Stuck, error) {
	rows, err := r.q.OperationListStuckDispatched(ctx, dbsqlc.OperationListStuckDispatchedParams{
		GraceSeconds: grace.Seconds(), MaxRows: int32(limit), Now: r.now(),
	})
	if err != nil {
		return nil, fmt.Errorf("list stuck operations: %w", translate(err))
	}
	out := make([]Stuck, len(rows))
	for i, row := range rows {
		out[i] = Stuck{Operation: toOperation(row.Operation), AttemptID: row.AttemptID, DeadlineAt: row.DeadlineAt}
	}
	return out, nil
}

// OperationsDispatchedUnclaimed returns up to limit operations in dispatched
// that no unfinished attempt at their lease epoch holds, past the deadline of
// their latest attempt at that epoch (or, without one, the time they entered
// dispatched) plus grace on the database's clock: stranded whatever their
// attempts say. Open attempts past their deadline are
// OperationsStuckDispatched's. It reads only unsettled operations
// (operations_unsettled_idx), however large the ledger.
func (r reads) OperationsDispatchedUnclaimed(ctx context.Context, grace time.Duration, limit int) ([]*op.Operation, error) {
	rows, err := r.q.OperationListDispatchedUnclaimed(ctx, dbsqlc.OperationListDispatchedUnclaimedParams{
		GraceSeconds: grace.Seconds(), MaxRows: int32(limit), Now: r.now(),
	})
	if err != nil {
		return nil, fmt.Errorf("list stranded operations: %w", translate(err))
	}
	return toOperations(rows), nil
}

// OperationsUnattended returns up to limit operations in pending_dispatch,
// unknown_outcome or acknowledged, unchanged for olderThan on the database's
// clock, with no unsent outbox row (and no reconcile command only held back
// by the reconciler): the command that should move them was lost after it
// was published. Oldest first; after, when not nil, is the last operation
// of the page before (a pass reads page after page).
func (r reads) OperationsUnattended(ctx context.Context, olderThan time.Duration, after *op.Operation, limit int) ([]*op.Operation, error) {
	p := dbsqlc.OperationListUnattendedParams{OlderThanSeconds: olderThan.Seconds(), MaxRows: int32(limit), Now: r.now()}
	if after != nil {
		at := after.UpdatedAt
		p.AfterUpdatedAt, p.AfterID = &at, after.ID
	}
	rows, err := r.q.OperationListUnattended(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("list unattended operations: %w", translate(err))
	}
	return toOperations(rows), nil
}

func toOperations(rows []dbsqlc.Operation) []*op.Operation {
	out := make([]*op.Operation, len(rows))
	for i, row := range rows {
		out[i] = toOperation(row)
	}
	return out
}

// DBNow returns the database's clock (or the injected one), against which
// every deadline is measured.
func (r reads) DBNow(ctx context.Context) (time.Time, error) {
	t, err := r.q.DBNow(ctx, r.now())
	if err != nil {
		return time.Time{}, fmt.Errorf("read the database clock: %w", translate(err))
	}
	return t, nil
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

// CompensationCount returns how many compensations operation id has had.
func (r reads) CompensationCount(ctx context.Context, id string) (int, error) {
	n, err := r.q.OperationCompensationCount(ctx, &id)
	if err != nil {
		return 0, fmt.Errorf("compensations of %s: %w", id, translate(err))
	}
	return int(n), nil
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
