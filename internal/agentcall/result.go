package agentcall

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/opledger/opledger/pkg/client"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// Result is what every agent-side door answers a call with: the normalized
// result of docs/protocol.md in the terms an agent acts on, with a
// receipt. The MCP server sends it as a tool's structured content, the
// HTTP intent API as its body; both doors share this one type so that an
// agent reads the same shape through either.
type Result struct {
	OperationID string `json:"operation_id,omitempty"`
	Tool        string `json:"tool"`
	WorkflowID  string `json:"workflow_id"`
	// Status is the operation's state (or rejected when nothing was made).
	Status string `json:"status"`
	// Final: the status will not change without a person or a new call.
	Final bool `json:"final"`
	// Decision is what the ledger made of this call: new, duplicate_event,
	// duplicate_operation, conflict, rejected or reopened (read for an
	// operation read rather than submitted).
	Decision string `json:"decision"`
	// Replayed: nothing new was started for this call; the answer is the
	// earlier call's operation (duplicate_event or duplicate_operation).
	Replayed            bool   `json:"replayed"`
	IdempotencyKey      string `json:"idempotency_key,omitempty"`
	ExternalObjectID    string `json:"external_object_id,omitempty"`
	ExternalRequestID   string `json:"external_request_id,omitempty"`
	Attempts            int    `json:"attempts"`
	RetryRecommendation string `json:"retry_recommendation"`
	SafeUserMessage     string `json:"safe_user_message"`
	Reason              string `json:"reason,omitempty"`
	Version             int64  `json:"version"`
	At                  string `json:"at,omitempty"`
	EventID             string `json:"event_id,omitempty"`
	// WaitEnded: the call's wait ended before the operation came to rest;
	// it goes on, follow it.
	WaitEnded bool `json:"wait_ended,omitempty"`
	// Next says, in a sentence for the model, what to do now.
	Next string `json:"next"`
	// Follow is the tool call that reads the operation later (MCP).
	Follow   *Follow   `json:"follow,omitempty"`
	Approval *Approval `json:"approval,omitempty"`
	Receipt  *Receipt  `json:"receipt,omitempty"`
}

// Follow is a tool call to make to learn more.
type Follow struct {
	Tool      string            `json:"tool"`
	Arguments map[string]string `json:"arguments"`
}

// Approval says where a person approves the call.
type Approval struct {
	// URL is the operation in the operators' HTTP API (an approver's
	// token is needed there: the link itself grants nothing).
	URL string `json:"url,omitempty"`
	// ElicitationID names the approval request: the operation and its
	// arguments hash; the same call always gets the same one (ApprovalID).
	ElicitationID string `json:"elicitation_id"`
	ArgsHash      string `json:"args_hash"`
	// Elicited says how the client was asked: url, form, or none.
	Elicited string `json:"elicited"`
}

// ApprovalID names an approval request: the operation and its arguments
// hash. The same call always gets the same one, across restarts.
func ApprovalID(opID, argsHash string) string {
	if len(argsHash) > 16 {
		argsHash = argsHash[:16]
	}
	return "opledger-approval-" + opID + "-" + argsHash
}

// Receipt is what an agent can show a person about an operation, and what
// an operator can check against the ledger: Digest is the SHA-256 of Line
// (the operation, tool, status, version, key, arguments hash and vendor
// id), so the same operation at the same version always has the same
// digest, whoever reports it. At is shown but not digested: results carry
// their writer's clock, the ledger its own.
type Receipt struct {
	OperationID      string `json:"operation_id"`
	Tool             string `json:"tool"`
	Status           string `json:"status"`
	Version          int64  `json:"version"`
	IdempotencyKey   string `json:"idempotency_key,omitempty"`
	ArgsHash         string `json:"args_hash,omitempty"`
	ExternalObjectID string `json:"external_object_id,omitempty"`
	At               string `json:"at,omitempty"`
	Digest           string `json:"digest"`
	Text             string `json:"text"`
	// Verify says how a person checks it.
	Verify string `json:"verify"`
}

// NewReceipt builds the receipt of an operation's state.
func NewReceipt(opID, tool, status string, version int64, key, argsHash, objectID string, at time.Time, verify string) *Receipt {
	r := &Receipt{OperationID: opID, Tool: tool, Status: status, Version: version, IdempotencyKey: key, ArgsHash: argsHash,
		ExternalObjectID: objectID, Verify: verify}
	if !at.IsZero() {
		r.At = at.UTC().Format(time.RFC3339Nano)
	}
	sum := sha256.Sum256([]byte(r.Line()))
	r.Digest = "sha256:" + hex.EncodeToString(sum[:])
	r.Text = fmt.Sprintf("opledger receipt %s: %s %s (version %d)", opID, tool, status, version)
	if objectID != "" {
		r.Text += ", vendor id " + objectID
	}
	if key != "" {
		r.Text += ", key " + key
	}
	r.Text += ", " + r.Digest[:7+16]
	return r
}

// Line is what the digest covers: the spec and the fields, one per line.
func (r *Receipt) Line() string {
	return strings.Join([]string{"opledger.receipt.v1", r.OperationID, r.Tool, r.Status, fmt.Sprint(r.Version),
		r.IdempotencyKey, r.ArgsHash, r.ExternalObjectID}, "\n")
}

// FromClient builds a Result from the ledger's newest result r about a call
// and the answer to the call's event. argsHash goes into the receipt,
// verify says how a person checks it.
func FromClient(r, ans client.Result, argsHash, verify string) *Result {
	out := &Result{OperationID: r.OperationID, Tool: r.Tool, WorkflowID: r.WorkflowID, Status: string(r.Status),
		Final: r.Final || r.Status.Final(), Decision: string(ans.DedupeDecision), IdempotencyKey: r.IdempotencyKey,
		ExternalObjectID: r.ExternalObjectID, ExternalRequestID: r.ExternalRequestID, Attempts: r.AttemptCount,
		RetryRecommendation: string(r.RetryRecommendation), SafeUserMessage: r.SafeUserMessage, Reason: r.Reason,
		Version: r.Version, EventID: ans.EventID}
	if out.Decision == "" {
		out.Decision = string(r.DedupeDecision)
	}
	out.Replayed = ans.DedupeDecision == op.DecisionDuplicateEvent || ans.DedupeDecision == op.DecisionDuplicateOperation
	if ans.Earlier && ans.EventID != "" && out.OperationID != "" {
		// The answer was there before this call: it answered an earlier
		// send of the same event, and the ledger answers this one
		// duplicate_event.
		out.Replayed = true
		if ans.DedupeDecision == op.DecisionNew || ans.DedupeDecision == op.DecisionReopened {
			out.Decision = string(op.DecisionDuplicateEvent)
		}
	}
	if !r.At.IsZero() {
		out.At = r.At.UTC().Format(time.RFC3339Nano)
	}
	if r.OperationID != "" && r.Version > 0 {
		out.Receipt = NewReceipt(r.OperationID, r.Tool, string(r.Status), r.Version, r.IdempotencyKey, argsHash, r.ExternalObjectID, r.At, verify)
	}
	return out
}

// FromOperation builds the Result of an operation as the ledger holds it
// (decision "read"): its state, what to do about it, and its receipt. A
// door adds how to approve and how to follow.
func FromOperation(o *op.Operation, verify string) *Result {
	rec, msg := op.Advise(o)
	res := &Result{OperationID: o.ID, Tool: o.Tool, WorkflowID: o.WorkflowID, Status: string(o.State), Final: o.State.Terminal(),
		Decision: "read", IdempotencyKey: o.IdempotencyKey, ExternalObjectID: o.ExternalObjectID, ExternalRequestID: o.ExternalRequestID,
		Attempts: o.AttemptCount, RetryRecommendation: string(rec), SafeUserMessage: msg, Version: o.Version, EventID: o.OriginEventID}
	if o.LastError != "" && !o.State.Terminal() || o.State == op.StateFailedPermanent {
		res.Reason = wire.Clip200(o.LastError)
	}
	if !o.UpdatedAt.IsZero() {
		res.At = o.UpdatedAt.UTC().Format(time.RFC3339Nano)
	}
	res.Receipt = NewReceipt(o.ID, o.Tool, string(o.State), o.Version, o.IdempotencyKey, o.ArgsHash, o.ExternalObjectID, o.UpdatedAt, verify)
	return res
}

// Refused is the Result of a call the door refused before sending
// anything (an *InvalidError): rejected, final, nothing was done.
func Refused(tool, workflow, eventID string, inv *InvalidError) *Result {
	return &Result{Tool: tool, WorkflowID: workflow, Status: string(op.StateRejected), Final: true, Decision: string(op.DecisionRejected),
		RetryRecommendation: string(op.RecommendChangeArguments), SafeUserMessage: "The request was not accepted and nothing was done.",
		Reason: inv.Reason, EventID: eventID}
}

// Advise fills Next: what the model should do now. follow says how it
// learns the outcome later ("call get_operation with operation_id op_…",
// "GET /v1/intents/operations/op_…").
func (res *Result) Advise(follow string) {
	switch op.RetryRecommendation(res.RetryRecommendation) {
	case op.RecommendNone:
		res.Next = "Done. Report safe_user_message; do not call this tool again for this action."
	case op.RecommendReconcileBeforeRetry:
		res.Next = "The outcome is not known yet and opledger is confirming it with the vendor. Do NOT call this tool again, " +
			"not even with a new tool-call id: it would not run twice anyway. To learn the outcome, " + follow + "."
	case op.RecommendWait, op.RecommendRetrySameKey:
		res.Next = "In progress; nothing needs to be sent again. To learn the outcome, " + follow + "."
	case op.RecommendAwaitApproval:
		res.Next = "A person must approve this call first; it runs by itself once approved. Tell the user, and do not call again. To learn the outcome, " + follow + "."
	case op.RecommendEscalated:
		res.Next = "A person owns this operation now; hand over to a human or wait. To learn the outcome, " + follow + "."
	case op.RecommendChangeArguments:
		res.Next = "This call will not succeed as it is: only a call with different arguments can. Read reason."
	case op.RecommendRetryLater:
		res.Next = "Nothing was done. The same call may be sent again later, with the same arguments."
	default:
		res.Next = "Read status and safe_user_message."
	}
}

// DefinitiveFailure reports whether a result is a failure that will not
// change: rejected, failed_permanent, cancelled (MCP's isError).
func (res *Result) DefinitiveFailure() bool {
	switch op.State(res.Status) {
	case op.StateRejected, op.StateFailedPermanent, op.StateCancelled:
		return true
	}
	return false
}
