package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/opledger/opledger/internal/agentcall"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// maxList bounds list_operations.
const maxList = 50

// ListResult is list_operations' structured content.
type ListResult struct {
	WorkflowID string `json:"workflow_id"`
	// ConversationID, when set, narrowed the list to the operations that
	// conversation's calls created.
	ConversationID string    `json:"conversation_id,omitempty"`
	Operations     []*Result `json:"operations"`
}

func (s *server) addReadTools() {
	no := false
	readOnly := &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, DestructiveHint: &no, OpenWorldHint: &no}
	s.mcp.AddTool(&mcp.Tool{Name: ToolGetOperation, Annotations: readOnly, OutputSchema: OutputSchema(),
		Description: "The current state of an operation of this workflow, with its receipt: follow a call that was unknown_outcome, awaiting approval or still in progress.",
		InputSchema: map[string]any{"type": "object", "additionalProperties": false, "required": []string{"operation_id"},
			"properties": map[string]any{"operation_id": map[string]any{"type": "string", "description": "op_… from a tool's result"}}}},
		s.getOperation)
	s.mcp.AddTool(&mcp.Tool{Name: ToolListOperations, Annotations: readOnly,
		Description: "The operations of this workflow (of this conversation, when the call carries its conversation id), most recently changed first, each with its receipt.",
		InputSchema: map[string]any{"type": "object", "additionalProperties": false, "properties": map[string]any{
			"limit":  map[string]any{"type": "integer", "minimum": 1, "maximum": maxList, "description": "at most this many (default 20)"},
			"status": map[string]any{"type": "string", "description": "only operations in this state"}}},
		OutputSchema: map[string]any{"type": "object", "required": []string{"workflow_id", "operations"}, "properties": map[string]any{
			"workflow_id": map[string]any{"type": "string"}, "conversation_id": map[string]any{"type": "string"},
			"operations": map[string]any{"type": "array", "items": OutputSchema()}}}},
		s.listOperations)
}

func (s *server) readFailed(reason string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: reason}}}
}

// visible reports whether the session may see o: its tenant and workflow.
func (s *server) visible(o *op.Operation, workflow string) bool {
	tenant := o.Tenant
	if tenant == "" {
		tenant = wire.DefaultTenant
	}
	return tenant == s.cfg.Door.Tenant() && o.WorkflowID == workflow
}

func (s *server) fromOperation(o *op.Operation) *Result {
	res := agentcall.FromOperation(o, s.verify(o.ID))
	if o.State == op.StateAwaitingApproval {
		res.Approval = &Approval{ElicitationID: ElicitationID(o.ID, o.ArgsHash), ArgsHash: o.ArgsHash, Elicited: "none"}
		if s.cfg.APIURL != "" {
			res.Approval.URL = s.cfg.APIURL + "/v1/operations/" + o.ID
		}
	}
	advise(res, true, "")
	return res
}

func (s *server) getOperation(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	id, _, err := s.identity(req.Params.Meta, nil)
	if err != nil {
		return s.readFailed(err.Error()), nil
	}
	m, err := strictArgs(req.Params.Arguments, "operation_id")
	if err != nil {
		return s.readFailed(wire.Clip200(err.Error())), nil
	}
	var opID string
	if err := json.Unmarshal(m["operation_id"], &opID); err != nil || !opIDOK(opID) {
		return s.readFailed("operation_id must be an operation id (op_…)"), nil
	}
	d, err := s.cfg.Reader.Show(ctx, opID)
	switch {
	case errors.Is(err, op.ErrNotFound):
		return s.readFailed("no operation " + opID + " in this workflow"), nil
	case err != nil:
		return nil, fmt.Errorf("opledger could not read the operation: %w", err)
	}
	if !s.visible(d.Operation, id.workflow) {
		// The same answer as for an operation that does not exist: the
		// session learns nothing about other workflows or tenants.
		return s.readFailed("no operation " + opID + " in this workflow"), nil
	}
	res := s.fromOperation(d.Operation)
	return &mcp.CallToolResult{StructuredContent: res, Content: []mcp.Content{&mcp.TextContent{Text: res.SafeUserMessage},
		&mcp.TextContent{Text: res.Receipt.Text + ". " + res.Next}}}, nil
}

func (s *server) listOperations(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	id, _, err := s.identity(req.Params.Meta, nil)
	if err != nil {
		return s.readFailed(err.Error()), nil
	}
	m, err := strictArgs(req.Params.Arguments, "limit", "status")
	if err != nil {
		return s.readFailed(wire.Clip200(err.Error())), nil
	}
	limit, status := 20, ""
	if raw, ok := m["limit"]; ok {
		if err := json.Unmarshal(raw, &limit); err != nil || limit < 1 || limit > maxList {
			return s.readFailed(fmt.Sprintf("limit must be an integer from 1 to %d", maxList)), nil
		}
	}
	if raw, ok := m["status"]; ok {
		if err := json.Unmarshal(raw, &status); err != nil || !op.State(status).Valid() {
			return s.readFailed("status must be an operation state such as completed_success"), nil
		}
	}
	list, err := s.cfg.Reader.List(ctx, id.workflow, 1000)
	if err != nil {
		return nil, fmt.Errorf("opledger could not list the operations: %w", err)
	}
	out := &ListResult{WorkflowID: id.workflow, ConversationID: id.conversation, Operations: []*Result{}}
	prefix := ""
	if id.conversation != "" {
		prefix = s.cfg.Door.ConversationEvents(id.conversation)
	}
	for _, o := range list {
		if len(out.Operations) == limit {
			break
		}
		if !s.visible(o, id.workflow) || (prefix != "" && !strings.HasPrefix(o.OriginEventID, prefix)) ||
			(status != "" && string(o.State) != status) {
			continue
		}
		out.Operations = append(out.Operations, s.fromOperation(o))
	}
	lines := []string{fmt.Sprintf("%d operation(s) of workflow %s", len(out.Operations), id.workflow)}
	for _, r := range out.Operations {
		lines = append(lines, r.Receipt.Text)
	}
	return &mcp.CallToolResult{StructuredContent: out, Content: []mcp.Content{&mcp.TextContent{Text: strings.Join(lines, "\n")}}}, nil
}

func opIDOK(s string) bool {
	if !strings.HasPrefix(s, "op_") || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}
