// Package wire is opledger's message contract on NATS: the intent an agent
// publishes, the commands the ledger sends its workers and the normalized
// result an agent receives. docs/protocol.md describes it for clients; the
// JSON Schemas under schema/wire/ are the normative shapes, and this package's
// tests check that the Go types and the schemas agree.
package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/opledger/opledger/pkg/op"
)

// Spec versions carried in every message's "spec" field.
const (
	SpecIntent  = "opledger.intent.v1"
	SpecCommand = "opledger.command.v1"
	SpecResult  = "opledger.result.v1"
)

// Subjects and streams.
const (
	StreamIntents = "INTENTS" // opledger.intents.<workflow_id>
	StreamOps     = "OPS"     // opledger.ops.<kind>.<tool>.<operation_id>
	StreamResults = "RESULTS" // opledger.results.<workflow_id>

	IntentSubjectPrefix = "opledger.intents."
	OpsSubjectPrefix    = "opledger.ops."
	ResultSubjectPrefix = "opledger.results."

	// HeaderMsgID is JetStream's dedupe header; on intents it must equal event_id.
	HeaderMsgID = "Nats-Msg-Id"
	// HeaderTraceparent carries W3C trace context on every message.
	HeaderTraceparent = "traceparent"
	// HeaderAnswer marks a result that is the ledger's answer to a publish
	// of its event id (value "1"), as against a later result of the
	// operation that event id created, which carries the same event id. A
	// header rather than a field, so that clients that decode results
	// strictly still read them.
	HeaderAnswer = "Opledger-Answer"
)

// Command kinds, the second token of an ops subject.
const (
	KindDispatch  = "dispatch"
	KindUnknown   = "unknown"
	KindFailed    = "failed"
	KindCompleted = "completed"
)

// IntentSubject is where an agent publishes intents for a workflow.
func IntentSubject(workflowID string) string { return IntentSubjectPrefix + workflowID }

// ResultSubject is where results for a workflow are published.
func ResultSubject(workflowID string) string { return ResultSubjectPrefix + workflowID }

// OpsSubject is where a command of a kind for an operation of a tool is
// published. The OPS stream keeps at most one message per subject.
func OpsSubject(kind, tool, operationID string) string {
	return OpsSubjectPrefix + kind + "." + tool + "." + operationID
}

// OpsFilter matches every command of a kind.
func OpsFilter(kind string) string { return OpsSubjectPrefix + kind + ".>" }

// Intent is what an agent publishes: the model's proposed tool call.
type Intent struct {
	Spec string `json:"spec"`
	// EventID identifies this message: the model's tool-call id scoped by
	// conversation. A redelivery or a resend carries the same id.
	EventID    string `json:"event_id"`
	WorkflowID string `json:"workflow_id"`
	RunID      string `json:"run_id,omitempty"`
	Tool       string `json:"tool"`
	// Intent is a business label such as collect_payment_for_order (optional;
	// the registry's label is used when empty).
	Intent string          `json:"intent,omitempty"`
	Args   json.RawMessage `json:"args"`
	Actor  *Actor          `json:"actor,omitempty"`
	// Correlation is free metadata (conversation id, user request id).
	Correlation map[string]string `json:"correlation,omitempty"`
	// DedupeOverride runs the call despite its tool's semantic dedupe
	// window, with a reason the ledger records.
	DedupeOverride *Override `json:"dedupe_override,omitempty"`
	// Tenant is taken from the subject the intent was published on, never
	// from the body (see TenantIntentSubject).
	Tenant string `json:"-"`
}

// Override is a recorded reason to set a rule aside.
type Override struct {
	Reason string `json:"reason"`
}

// Actor says who proposed the intent.
type Actor struct {
	Type string `json:"type"` // agent, user, operator, system
	ID   string `json:"id"`
}

// Limits on identifiers in intents.
const (
	MaxIDLen     = 200
	MaxIntentLen = 1 << 20 // 1 MiB of JSON
)

// Limits on the free-text fields of intents.
const (
	MaxIntentLabelLen = 200
	MaxCorrelation    = 32  // entries
	MaxCorrelationLen = 200 // bytes per key and per value
)

// UnroutableSubject is where opledger answers an intent whose subject names
// no workflow it could answer on (invalid UTF-8, an over-long token): agents
// and operators that publish by hand can watch it. UnroutableWorkflow is
// reserved for it.
const (
	UnroutableWorkflow = "_unroutable"
	UnroutableSubject  = ResultSubjectPrefix + UnroutableWorkflow
)

// DecodeIntent parses and checks an intent from its subject, headers and body.
// It reads the message exactly one way: field names are exact (case
// included), a field appears at most once, unknown fields are refused, and
// bytes that are not UTF-8 (or escapes of unpaired surrogates) are refused,
// never replaced. Every text field is bounded and free of control
// characters. Errors wrap op.ErrInvalid and say what is wrong in words fit
// for a result's reason field.
func DecodeIntent(subject, msgID string, body []byte) (*Intent, error) {
	if len(body) > MaxIntentLen {
		return nil, refuse(ReasonTooLarge, fmt.Errorf("intent is %d bytes, over the %d limit: %w", len(body), MaxIntentLen, op.ErrInvalid))
	}
	var in Intent
	if err := decodeStrict(body, &in, intentFields, intentNested); err != nil {
		return nil, fmt.Errorf("intent is not valid JSON for %s: %w", SpecIntent, err)
	}
	switch {
	case in.Spec != SpecIntent:
		return nil, refuse(ReasonBadSpec, fmt.Errorf("spec must be %q, got %q: %w", SpecIntent, Clip(in.Spec), op.ErrInvalid))
	case !ValidID(in.EventID):
		return nil, refuse(ReasonBadEventID, fmt.Errorf("event_id is required (1-%d printable characters): %w", MaxIDLen, op.ErrInvalid))
	case !ValidWorkflowID(in.WorkflowID):
		return nil, refuse(ReasonBadWorkflowID, fmt.Errorf("workflow_id is required (1-%d printable characters, no '.', '*', '>' or spaces, not %q): %w",
			MaxIDLen, UnroutableWorkflow, op.ErrInvalid))
	case in.RunID != "" && !ValidID(in.RunID):
		return nil, refuse(ReasonBadField, fmt.Errorf("run_id must be 1-%d printable characters: %w", MaxIDLen, op.ErrInvalid))
	case in.Tool == "" || !ValidText(in.Tool, MaxIDLen):
		return nil, refuse(ReasonBadField, fmt.Errorf("tool is required (printable characters): %w", op.ErrInvalid))
	case !ValidText(in.Intent, MaxIntentLabelLen):
		return nil, refuse(ReasonBadField, fmt.Errorf("intent must be at most %d printable characters: %w", MaxIntentLabelLen, op.ErrInvalid))
	case in.Actor != nil && (!ValidText(in.Actor.Type, MaxIDLen) || !ValidText(in.Actor.ID, MaxIDLen)):
		return nil, refuse(ReasonBadField, fmt.Errorf("actor type and id must be printable characters: %w", op.ErrInvalid))
	case len(in.Correlation) > MaxCorrelation:
		return nil, refuse(ReasonBadField, fmt.Errorf("correlation has %d entries, over the %d limit: %w", len(in.Correlation), MaxCorrelation, op.ErrInvalid))
	case in.DedupeOverride != nil && (in.DedupeOverride.Reason == "" || !ValidText(in.DedupeOverride.Reason, 200)):
		return nil, refuse(ReasonBadField, fmt.Errorf("dedupe_override needs a reason of 1-200 printable characters: %w", op.ErrInvalid))
	case len(in.Args) == 0 || in.Args[0] != '{':
		return nil, refuse(ReasonArgsNotObject, fmt.Errorf("args must be a JSON object: %w", op.ErrInvalid))
	}
	in.Tenant = DefaultTenant
	if subject != "" {
		tenant, wf, ok := ParseIntentSubject(subject)
		if !ok || wf != in.WorkflowID {
			return nil, refuse(ReasonSubjectMismatch, fmt.Errorf("published on %q but workflow_id says %q: %w", Clip(subject), Clip(in.WorkflowID), op.ErrInvalid))
		}
		in.Tenant = tenant
	}
	switch {
	case msgID != "" && msgID != in.EventID:
		return nil, refuse(ReasonMsgIDMismatch, fmt.Errorf("Nats-Msg-Id header differs from event_id: %w", op.ErrInvalid))
	}
	for k, v := range in.Correlation {
		if !ValidText(k, MaxCorrelationLen) || !ValidText(v, MaxCorrelationLen) || k == "" {
			return nil, refuse(ReasonBadField, fmt.Errorf("correlation keys and values must be 1-%d printable characters: %w", MaxCorrelationLen, op.ErrInvalid))
		}
	}
	return &in, nil
}

// ValidWorkflowID reports whether s can name a workflow: a valid id that
// is one NATS subject token (no '.', '*', '>' or spaces), not reserved.
func ValidWorkflowID(s string) bool {
	return ValidID(s) && !strings.ContainsAny(s, ".*> \t") && s != UnroutableWorkflow
}

// ValidID reports whether s can serve as an event, workflow or run id: 1 to
// MaxIDLen bytes of valid UTF-8 without control characters.
func ValidID(s string) bool {
	if s == "" || len(s) > MaxIDLen || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

// Clip shortens untrusted text before it goes into an error message or a
// log line: at most 64 bytes of valid UTF-8 without control characters, cut
// on a rune boundary.
func Clip(s string) string { return clip(s, 64) }

// Clip200 is Clip with room for 200 bytes: error texts stored in the ledger.
func Clip200(s string) string { return clip(s, 200) }

func clip(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func shortJSONError(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("syntax error at byte %d", se.Offset)
	case errors.As(err, &te):
		return fmt.Sprintf("field %s must be %s", te.Field, te.Type)
	}
	return Clip(err.Error())
}

// Command is what the ledger publishes to its workers on opledger.ops.*.
// Workers treat it as a hint: they load the operation from the ledger and act
// only if its state and lease epoch still call for it.
type Command struct {
	Spec           string `json:"spec"`
	Kind           string `json:"kind"`
	OperationID    string `json:"operation_id"`
	Tool           string `json:"tool"`
	IdempotencyKey string `json:"idempotency_key"`
	// LeaseEpoch is the epoch the operation had when the command was written.
	LeaseEpoch int64  `json:"lease_epoch"`
	WorkflowID string `json:"workflow_id"`
	// EventID is the inbound event that created the operation.
	EventID string `json:"event_id,omitempty"`
	// State is the state the command was written in.
	State op.State `json:"state"`
}

// Result is the normalized answer an agent receives on opledger.results.<workflow_id>.
type Result struct {
	Spec string `json:"spec"`
	// Tenant is the operation's tenant; absent for the default tenant.
	Tenant      string `json:"tenant,omitempty"`
	OperationID string `json:"operation_id,omitempty"`
	EventID     string `json:"event_id"`
	WorkflowID  string `json:"workflow_id"`
	Tool        string `json:"tool"`
	Status      string `json:"status"` // an op.State, or "rejected" when no operation exists
	// Version orders the results of one operation: a higher version
	// supersedes a lower one. 0 when no operation was created.
	Version        int64       `json:"version"`
	DedupeDecision op.Decision `json:"dedupe_decision"`
	IdempotencyKey string      `json:"idempotency_key,omitempty"`
	// Final is true when the status will not change without a new intent.
	Final               bool                   `json:"final"`
	ExternalRequestID   string                 `json:"external_request_id,omitempty"`
	ExternalObjectID    string                 `json:"external_object_id,omitempty"`
	RetryRecommendation op.RetryRecommendation `json:"retry_recommendation"`
	SafeUserMessage     string                 `json:"safe_user_message"`
	Reason              string                 `json:"reason,omitempty"`
	AttemptCount        int                    `json:"attempt_count"`
	RawStatusCode       int                    `json:"raw_status_code,omitempty"`
	At                  time.Time              `json:"at"`
}

// ResultFor builds the result describing operation o's current state, as an
// answer to event eventID with the given dedupe decision.
func ResultFor(o *op.Operation, eventID string, d op.Decision) Result {
	rec, msg := op.Advise(o)
	return Result{
		Spec: SpecResult, Tenant: ResultTenant(o.Tenant), OperationID: o.ID, EventID: eventID, WorkflowID: o.WorkflowID, Tool: o.Tool,
		Status: string(o.State), Version: o.Version, DedupeDecision: d, IdempotencyKey: o.IdempotencyKey,
		Final: o.State.Terminal(), ExternalRequestID: o.ExternalRequestID, ExternalObjectID: o.ExternalObjectID,
		RetryRecommendation: rec, SafeUserMessage: msg, AttemptCount: o.AttemptCount, At: o.UpdatedAt.UTC(),
	}
}

// ResultTenant is what results say of a tenant: nothing for the default one.
func ResultTenant(t string) string {
	if t == DefaultTenant {
		return ""
	}
	return t
}

// Rejection builds the result for an intent that created nothing.
func Rejection(eventID, workflowID, tool, reason string, d op.Decision, at time.Time) Result {
	msg := "The request was not accepted and nothing was done."
	return Result{
		Spec: SpecResult, EventID: eventID, WorkflowID: workflowID, Tool: tool, Status: string(op.StateRejected),
		DedupeDecision: d, Final: true, RetryRecommendation: op.RecommendChangeArguments,
		SafeUserMessage: msg, Reason: reason, At: at.UTC(),
	}
}
