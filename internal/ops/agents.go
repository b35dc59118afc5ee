package ops

import (
	"context"
	"fmt"
	"strings"

	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// RoleAgent is an agent's token for the HTTP intent API: bound to a tenant
// (Actor.Tenant) and optionally to the workflows whose ids start with a
// prefix (Actor.WorkflowPrefix), it submits intents and reads their
// operations there (the Agent methods below). It is no role of the human
// loop: ValidRole is false for it, so every other method of Service
// refuses it (ErrForbidden, audited for writes): an agent never approves,
// denies, resolves, cancels, compensates or reads the operators' views.
const RoleAgent Role = "agent"

// Sees reports whether a is an agent that may submit into and read the
// workflow of tenant ("" is the default tenant).
func (a Actor) Sees(tenant, workflow string) bool {
	if tenant == "" {
		tenant = wire.DefaultTenant
	}
	return a.Role == RoleAgent && a.ID != "" && a.Tenant != "" && tenant == a.Tenant && strings.HasPrefix(workflow, a.WorkflowPrefix)
}

// agent checks that a is an agent.
func agent(a Actor) error {
	if a.Role != RoleAgent || a.ID == "" || a.Tenant == "" {
		return fmt.Errorf("the intent API is for agent tokens (role agent, bound to a tenant); %s is %s: %w", a.ID, a.Role, ErrForbidden)
	}
	return nil
}

// AgentOperation returns operation id for agent a. Errors: ErrForbidden (a
// is no agent); op.ErrNotFound, also for an operation of another tenant
// or of a workflow outside a's prefix: an agent learns nothing of what it
// may not see.
func (s *Service) AgentOperation(ctx context.Context, a Actor, id string) (*op.Operation, error) {
	if err := agent(a); err != nil {
		return nil, err
	}
	o, err := s.st.Operation(ctx, id)
	if err != nil {
		return nil, err
	}
	if !a.Sees(o.Tenant, o.WorkflowID) {
		return nil, fmt.Errorf("no operation %s: %w", id, op.ErrNotFound)
	}
	return o, nil
}

// AgentList returns the operations of workflowID in a's tenant, the newest
// first, at most limit (default 100, at most 1000), only those in state
// when it is set. Errors: ErrForbidden (a is no agent, or the workflow is
// outside its prefix).
func (s *Service) AgentList(ctx context.Context, a Actor, workflowID string, state op.State, limit int) ([]*op.Operation, error) {
	if err := agent(a); err != nil {
		return nil, err
	}
	if !a.Sees(a.Tenant, workflowID) {
		return nil, fmt.Errorf("%s may read the workflows starting with %q only: %w", a.ID, a.WorkflowPrefix, ErrForbidden)
	}
	return s.st.ListAgentOperations(ctx, store.AgentFilter{Tenant: a.Tenant, WorkflowID: workflowID, State: state, Limit: limit})
}

// AuditAgent records an agent's write (an intent it submitted, or one
// refused) in the audit trail, as every operator write is: outcome is "ok"
// or why it was refused; detail says which intent and what the ledger
// made of it.
func (s *Service) AuditAgent(ctx context.Context, a Actor, action, operationID, outcome string, detail map[string]string) error {
	e := store.AuditEntry{Actor: a.ID, Role: string(a.Role), Action: action, OperationID: operationID, Outcome: wire.Clip200(outcome)}
	if len(detail) > 0 {
		e.Detail = detail
	}
	return s.st.Audit(ctx, e)
}
