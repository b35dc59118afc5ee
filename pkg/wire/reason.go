package wire

import "errors"

// Refusal reasons: the stable, machine-readable name of why a message was
// refused, for metrics (opledger_intents_refused_total{reason}) and
// dashboards. The refusal's text (Error) says the same for people and may
// change; these do not.
const (
	ReasonTooLarge          = "too_large"        // over MaxIntentLen
	ReasonInvalidUTF8       = "invalid_utf8"     // bytes or \u escapes that are not UTF-8
	ReasonNotJSON           = "not_json"         // a syntax error
	ReasonNotObject         = "not_object"       // the message, or a field that must be one, is not an object
	ReasonNotOneObject      = "not_one_object"   // something follows the object
	ReasonDuplicateField    = "duplicate_field"  // a key given twice
	ReasonUnknownField      = "unknown_field"    // a key that is not the message's (case included)
	ReasonWrongType         = "wrong_type"       // a field of the wrong JSON type
	ReasonBadSpec           = "bad_spec"         // spec is not opledger.intent.v1
	ReasonBadEventID        = "bad_event_id"     // event_id missing, too long or unprintable
	ReasonBadWorkflowID     = "bad_workflow_id"  // workflow_id missing or not a subject token
	ReasonBadField          = "bad_field"        // run_id, tool, intent, actor, correlation or dedupe_override out of bounds
	ReasonArgsNotObject     = "args_not_object"  // args is not a JSON object
	ReasonSubjectMismatch   = "subject_mismatch" // the subject names another workflow, or no valid one
	ReasonMsgIDMismatch     = "msg_id_mismatch"  // Nats-Msg-Id is not event_id
	ReasonBadHeader         = "bad_header"       // a header name or value is not UTF-8
	ReasonInvalid           = "invalid"          // any other refusal
	ReasonUnknownTool       = "unknown_tool"     // set by planner-ingest: the registry has no such tool
	ReasonInvalidArgs       = "invalid_args"     // set by planner-ingest: args fail the tool's schema or identity rules
	ReasonLedgerRefused     = "ledger_refused"   // set by planner-ingest: the ledger could not store the intent
	ReasonConflict          = "conflict"         // set by planner-ingest: the key or the event id holds other arguments
	ReasonGuard             = "refused_by_guard" // set by planner-ingest: a state guard of the tool refused it
	ReasonCommandNotCommand = "not_a_command"    // a command without its spec or operation id
)

// Refusal is an error with its stable reason.
type Refusal struct {
	Reason string
	Err    error
}

func (r *Refusal) Error() string { return r.Err.Error() }
func (r *Refusal) Unwrap() error { return r.Err }

func refuse(reason string, err error) error { return &Refusal{Reason: reason, Err: err} }

// RefusalReason is the stable reason of a refusal by DecodeIntent or
// DecodeCommand: one of the Reason constants, ReasonInvalid for an error
// that names none.
func RefusalReason(err error) string {
	var r *Refusal
	if errors.As(err, &r) {
		return r.Reason
	}
	var s *errStrict
	if errors.As(err, &s) && s.reason != "" {
		return s.reason
	}
	return ReasonInvalid
}
