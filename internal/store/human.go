package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/opledger/opledger/db/dbsqlc"
	"github.com/opledger/opledger/pkg/op"
)

// Filter selects operations for operators. Zero fields do not filter.
type Filter struct {
	State      op.State
	Tool       string
	WorkflowID string
	// OlderThan selects operations unchanged for at least this long, on the
	// database's clock.
	OlderThan time.Duration
	// Limit caps the rows (default 100, at most 1000).
	Limit int
}

// ListOperations returns operations matching f, the most recently changed first.
func (r reads) ListOperations(ctx context.Context, f Filter) ([]*op.Operation, error) {
	p := dbsqlc.OperationListParams{MaxRows: 100, Now: r.now()}
	if f.Limit > 0 {
		p.MaxRows = int32(min(f.Limit, 1000))
	}
	if f.State != "" {
		st := string(f.State)
		p.State = &st
	}
	if f.Tool != "" {
		p.Tool = &f.Tool
	}
	if f.WorkflowID != "" {
		p.WorkflowID = &f.WorkflowID
	}
	if f.OlderThan > 0 {
		secs := f.OlderThan.Seconds()
		p.OlderThanSeconds = &secs
	}
	rows, err := r.q.OperationList(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("list operations: %w", translate(err))
	}
	return toOperations(rows), nil
}

// OperationsByEntity returns a tenant's operations on one entity, oldest
// first.
func (r reads) OperationsByEntity(ctx context.Context, tenant, entityType, entityID string) ([]*op.Operation, error) {
	rows, err := r.q.OperationListByEntity(ctx, dbsqlc.OperationListByEntityParams{EntityType: entityType, EntityID: entityID, Tenant: tenant})
	if err != nil {
		return nil, fmt.Errorf("operations of %s %s: %w", entityType, entityID, translate(err))
	}
	return toOperations(rows), nil
}

// OperationsByExternalObject returns a tenant's operations of tool that
// made or touched the vendor object id, oldest first; tenant "" returns
// every tenant's (a vendor's webhook speaks of its own object, whoever's
// it is). Guards pass their operation's tenant.
func (r reads) OperationsByExternalObject(ctx context.Context, tenant, tool, objectID string) ([]*op.Operation, error) {
	rows, err := r.q.OperationListByExternalObject(ctx, dbsqlc.OperationListByExternalObjectParams{Tool: tool, ExternalObjectID: objectID, Tenant: tenant})
	if err != nil {
		return nil, fmt.Errorf("operations of %s on %s: %w", tool, objectID, translate(err))
	}
	return toOperations(rows), nil
}

// ApprovalRequest is what an operation awaiting approval waits for.
type ApprovalRequest struct {
	OperationID string    `json:"operation_id"`
	ArgsHash    string    `json:"args_hash"`
	Required    int       `json:"required"`
	RequestedAt time.Time `json:"requested_at"`
	ExpiresAt   time.Time `json:"expires_at"`
	// Status: pending, approved, denied, expired or cancelled.
	Status    string    `json:"status"`
	DecidedAt time.Time `json:"decided_at,omitzero"`
	// Expired is true when a pending request is past ExpiresAt on the
	// database's clock.
	Expired bool   `json:"expired,omitempty"`
	Votes   []Vote `json:"votes"`
}

// Vote is one approver's decision.
type Vote struct {
	Approver string    `json:"approver"`
	Decision string    `json:"decision"` // approve or deny
	ArgsHash string    `json:"args_hash"`
	Reason   string    `json:"reason"`
	At       time.Time `json:"at"`
}

func toApproval(r dbsqlc.ApprovalRequest) *ApprovalRequest {
	a := &ApprovalRequest{OperationID: r.OperationID, ArgsHash: r.ArgsHash, Required: int(r.Required), RequestedAt: r.RequestedAt,
		ExpiresAt: r.ExpiresAt, Status: r.Status}
	if r.DecidedAt != nil {
		a.DecidedAt = *r.DecidedAt
	}
	return a
}

// Approval returns an operation's approval request and its votes.
// Errors: op.ErrNotFound when it never needed approval.
func (r reads) Approval(ctx context.Context, operationID string) (*ApprovalRequest, error) {
	row, err := r.q.ApprovalRequestGet(ctx, operationID)
	if err != nil {
		return nil, fmt.Errorf("approval of %s: %w", operationID, translate(err))
	}
	a := toApproval(row)
	return a, r.votes(ctx, a)
}

func (r reads) votes(ctx context.Context, a *ApprovalRequest) error {
	rows, err := r.q.ApprovalVoteList(ctx, a.OperationID)
	if err != nil {
		return fmt.Errorf("votes on %s: %w", a.OperationID, translate(err))
	}
	a.Votes = make([]Vote, len(rows))
	for i, v := range rows {
		a.Votes[i] = Vote{Approver: v.Approver, Decision: v.Decision, ArgsHash: v.ArgsHash, Reason: v.Reason, At: v.At}
	}
	return nil
}

// LockApproval returns the approval request locked until tx ends, with its
// votes. Errors: op.ErrNotFound.
func (t *Tx) LockApproval(ctx context.Context, operationID string) (*ApprovalRequest, error) {
	row, err := t.q.ApprovalRequestLock(ctx, dbsqlc.ApprovalRequestLockParams{OperationID: operationID, Now: t.now()})
	if err != nil {
		return nil, fmt.Errorf("approval of %s: %w", operationID, translate(err))
	}
	a := toApproval(dbsqlc.ApprovalRequest{OperationID: row.OperationID, ArgsHash: row.ArgsHash, Required: row.Required,
		RequestedAt: row.RequestedAt, ExpiresAt: row.ExpiresAt, Status: row.Status, DecidedAt: row.DecidedAt})
	a.Expired = row.Expired && row.Status == "pending"
	return a, t.votes(ctx, a)
}

// AddVote records an approver's vote. It reports false when this approver
// already voted on the operation.
func (t *Tx) AddVote(ctx context.Context, operationID string, v Vote) (bool, error) {
	_, err := t.q.ApprovalVoteInsert(ctx, dbsqlc.ApprovalVoteInsertParams{OperationID: operationID, Approver: v.Approver,
		Decision: v.Decision, ArgsHash: v.ArgsHash, Reason: v.Reason, Now: t.now()})
	switch err = translate(err); {
	case err == nil:
		return true, nil
	case isNotFound(err):
		return false, nil
	}
	return false, fmt.Errorf("vote on %s: %w", operationID, err)
}

// CloseApproval settles a pending approval request with status.
func (t *Tx) CloseApproval(ctx context.Context, operationID, status string) error {
	if err := t.q.ApprovalRequestClose(ctx, dbsqlc.ApprovalRequestCloseParams{OperationID: operationID, Status: status, Now: t.now()}); err != nil {
		return fmt.Errorf("close approval of %s: %w", operationID, translate(err))
	}
	return nil
}

// ExpiredApprovals returns up to limit operations whose pending approval
// request has expired on the database's clock, the earliest first.
func (r reads) ExpiredApprovals(ctx context.Context, limit int) ([]string, error) {
	ids, err := r.q.ApprovalListExpired(ctx, dbsqlc.ApprovalListExpiredParams{MaxRows: int32(limit), Now: r.now()})
	if err != nil {
		return nil, fmt.Errorf("expired approvals: %w", translate(err))
	}
	return ids, nil
}

// AuditEntry is one operator write, whatever its outcome.
type AuditEntry struct {
	At          time.Time `json:"at"`
	Actor       string    `json:"actor"`
	Role        string    `json:"role"`
	Action      string    `json:"action"`
	OperationID string    `json:"operation_id,omitempty"`
	Reason      string    `json:"reason,omitempty"`
	// Outcome is "ok" or why the write was refused.
	Outcome string `json:"outcome"`
	Detail  any    `json:"detail,omitempty"`
}

// Audit records an operator write in tx.
func (t *Tx) Audit(ctx context.Context, e AuditEntry) error {
	return audit(ctx, t.q, t.now(), e)
}

// Audit records an operator write on its own (a refused write, whose
// transaction rolled back).
func (s *Store) Audit(ctx context.Context, e AuditEntry) error {
	return audit(ctx, s.q, s.now(), e)
}

func audit(ctx context.Context, q *dbsqlc.Queries, now *time.Time, e AuditEntry) error {
	detail, err := encodeDetail(e.Detail)
	if err != nil {
		return err
	}
	err = q.AuditInsert(ctx, dbsqlc.AuditInsertParams{Actor: e.Actor, Role: e.Role, Action: e.Action, OperationID: e.OperationID,
		Reason: e.Reason, Outcome: e.Outcome, Detail: detail, Now: now})
	if err != nil {
		return fmt.Errorf("audit %s: %w", e.Action, translate(err))
	}
	return nil
}

// AuditTrail returns the operator writes about an operation, oldest first.
func (r reads) AuditTrail(ctx context.Context, operationID string) ([]AuditEntry, error) {
	rows, err := r.q.AuditListByOperation(ctx, operationID)
	if err != nil {
		return nil, fmt.Errorf("audit of %s: %w", operationID, translate(err))
	}
	out := make([]AuditEntry, len(rows))
	for i, a := range rows {
		out[i] = AuditEntry{At: a.At, Actor: a.Actor, Role: a.Role, Action: a.Action, OperationID: a.OperationID,
			Reason: a.Reason, Outcome: a.Outcome}
		if len(a.Detail) > 0 {
			out[i].Detail = json.RawMessage(a.Detail)
		}
	}
	return out, nil
}
