package store

import (
	"context"
	"fmt"

	"github.com/opledger/opledger/db/dbsqlc"
	"github.com/opledger/opledger/pkg/op"
)

// AgentFilter selects the operations an agent lists: one workflow of its
// tenant, optionally in one state.
type AgentFilter struct {
	Tenant     string // required; "default" for the default tenant
	WorkflowID string // required
	State      op.State
	// Limit caps the rows (default 100, at most 1000).
	Limit int
}

// ListAgentOperations returns the operations of f's workflow in f's
// tenant, the newest first. Errors: op.ErrInvalid without a tenant or a
// workflow.
func (r reads) ListAgentOperations(ctx context.Context, f AgentFilter) ([]*op.Operation, error) {
	if f.Tenant == "" || f.WorkflowID == "" {
		return nil, fmt.Errorf("list an agent's operations: a tenant and a workflow are required: %w", op.ErrInvalid)
	}
	p := dbsqlc.OperationListForAgentParams{Tenant: f.Tenant, WorkflowID: f.WorkflowID, MaxRows: 100}
	if f.Limit > 0 {
		p.MaxRows = int32(min(f.Limit, 1000))
	}
	if f.State != "" {
		st := string(f.State)
		p.State = &st
	}
	rows, err := r.q.OperationListForAgent(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("list operations of %s/%s: %w", f.Tenant, f.WorkflowID, translate(err))
	}
	return toOperations(rows), nil
}
