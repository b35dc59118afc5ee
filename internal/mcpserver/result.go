package mcpserver

import (
	"fmt"
	"time"

	"github.com/opledger/opledger/internal/agentcall"
	"github.com/opledger/opledger/pkg/client"
)

// Result is the structured content of every ledger-backed tool's answer:
// the normalized result every agent-side door answers with
// (agentcall.Result, also the HTTP intent API's body). Its JSON Schema is
// OutputSchema.
type Result = agentcall.Result

// Follow is a tool call to make to learn more.
type Follow = agentcall.Follow

// Approval says where a person approves the call.
type Approval = agentcall.Approval

// Receipt is what an agent can show a person about an operation
// (agentcall.Receipt).
type Receipt = agentcall.Receipt

// NewReceipt builds the receipt of an operation's state.
func NewReceipt(opID, tool, status string, version int64, key, argsHash, objectID string, at time.Time, verify string) *Receipt {
	return agentcall.NewReceipt(opID, tool, status, version, key, argsHash, objectID, at, verify)
}

// fromClient builds a Result from the ledger's newest result and its answer.
func fromClient(r, ans client.Result, argsHash, verify string) *Result {
	return agentcall.FromClient(r, ans, argsHash, verify)
}

// advise fills Next and Follow: what the model should do now. With
// followTool, an operation is followed with get_operation; else with
// sameCall (the call again).
func advise(res *Result, followTool bool, sameCall string) {
	if res.OperationID != "" && followTool {
		res.Follow = &Follow{Tool: ToolGetOperation, Arguments: map[string]string{"operation_id": res.OperationID}}
	}
	follow := sameCall
	if res.Follow != nil {
		follow = fmt.Sprintf("call %s with operation_id %s", ToolGetOperation, res.OperationID)
	}
	res.Advise(follow)
}

// OutputSchema is the JSON Schema of Result: every ledger-backed tool's
// outputSchema.
func OutputSchema() map[string]any {
	str := func(d string) map[string]any { return map[string]any{"type": "string", "description": d} }
	receipt := map[string]any{"type": "object", "required": []string{"operation_id", "tool", "status", "version", "digest", "text", "verify"},
		"properties": map[string]any{
			"operation_id": str("the operation"), "tool": str("the tool"), "status": str("its state at this version"),
			"version": map[string]any{"type": "integer", "minimum": 0}, "idempotency_key": str("its business key"),
			"args_hash": str("SHA-256 of its canonical arguments"), "external_object_id": str("the vendor's object id"),
			"at": str("when it last changed (RFC 3339)"), "digest": str("sha256: of the receipt's fields"),
			"text": str("one line to show a person"), "verify": str("how a person checks it"),
		}}
	return map[string]any{
		"type":     "object",
		"required": []string{"tool", "workflow_id", "status", "final", "decision", "replayed", "attempts", "retry_recommendation", "safe_user_message", "version", "next"},
		"properties": map[string]any{
			"operation_id":         str("the operation (op_…); absent when nothing was created"),
			"tool":                 str("the tool"),
			"workflow_id":          str("the workflow"),
			"status":               str("the operation's state: completed_success, unknown_outcome, awaiting_approval, …"),
			"final":                map[string]any{"type": "boolean", "description": "the status will not change by itself"},
			"decision":             str("what the ledger made of this call: new, duplicate_event, duplicate_operation, conflict, rejected, reopened"),
			"replayed":             map[string]any{"type": "boolean", "description": "nothing new was started: this is an earlier call's operation"},
			"idempotency_key":      str("the business key"),
			"external_object_id":   str("the vendor's object id"),
			"external_request_id":  str("the vendor's request id"),
			"attempts":             map[string]any{"type": "integer", "minimum": 0},
			"retry_recommendation": str("none, wait, reconcile_before_retry, retry_same_key, change_arguments, await_approval, escalated, retry_later"),
			"safe_user_message":    str("a sentence to show the user"),
			"reason":               str("why, for people and logs"),
			"version":              map[string]any{"type": "integer", "minimum": 0},
			"at":                   str("when the operation last changed"),
			"event_id":             str("the event this call was recorded under"),
			"wait_ended":           map[string]any{"type": "boolean", "description": "the wait ended before the operation came to rest"},
			"next":                 str("what to do now"),
			"follow": map[string]any{"type": "object", "properties": map[string]any{
				"tool": str("the tool to call"), "arguments": map[string]any{"type": "object"}}},
			"approval": map[string]any{"type": "object", "properties": map[string]any{
				"url": str("the approval in the operators' API"), "elicitation_id": str("the approval request"),
				"args_hash": str("the arguments approved"), "elicited": str("url, form or none")}},
			"receipt": receipt,
		},
	}
}
