package op

import (
	"encoding/json"
	"time"
)

// Operation is the envelope of one logical action: the unit of execution that
// the ledger tracks independently of any model turn.
type Operation struct {
	ID string `json:"operation_id"`
	// Tenant is the namespace the operation belongs to ("default" unless
	// the intent came in on a tenant's subject).
	Tenant      string          `json:"tenant,omitempty"`
	WorkflowID  string          `json:"workflow_id"`
	RunID       string          `json:"run_id,omitempty"`
	Tool        string          `json:"tool"`
	ToolVersion int             `json:"tool_version"`
	Intent      string          `json:"intent,omitempty"`
	EntityType  string          `json:"entity_type,omitempty"`
	EntityID    string          `json:"entity_id,omitempty"`
	Args        json.RawMessage `json:"arguments_canonical"`
	ArgsHash    string          `json:"args_hash"` // hex SHA-256 of Args
	// RedactedArgs, on an operation shown to people, names the sensitive
	// arguments whose values Args shows as "***" (its hash is of the
	// arguments as they are). Never stored.
	RedactedArgs   []string        `json:"arguments_redacted,omitempty"`
	Class          SideEffectClass `json:"side_effect_class"`
	IdempotencyKey string          `json:"idempotency_key"`
	State          State           `json:"status"`
	// Version increases with every change of the operation, so that anything
	// describing it (results reach agents out of order) can be ordered.
	Version      int64 `json:"version"`
	AttemptCount int   `json:"attempt_count"`
	// Generation counts the operation's runs: 1, then +1 each time a new
	// intent reopens it after a failure that did nothing. Its retry budget
	// counts attempts from GenerationAttemptBase and time from
	// GenerationStartedAt (CreatedAt for the first).
	Generation            int       `json:"generation"`
	GenerationStartedAt   time.Time `json:"generation_started_at"`
	GenerationAttemptBase int       `json:"-"`
	// LeaseEpoch increases each time a worker claims the operation; a write
	// carrying an older epoch changes nothing.
	LeaseEpoch int64 `json:"lease_epoch"`
	// ExternalRequestID and ExternalObjectID are the vendor's identifiers.
	ExternalRequestID string `json:"external_request_id,omitempty"`
	ExternalObjectID  string `json:"external_object_id,omitempty"`
	// OriginEventID is the inbound event that created the operation.
	OriginEventID string `json:"origin_event_id,omitempty"`
	// ProposedBy is who asked for it (the intent's actor), when known.
	ProposedBy string `json:"proposed_by,omitempty"`
	// DedupeKey is the tool's semantic dedupe key, when it has a window.
	DedupeKey string `json:"dedupe_key,omitempty"`
	// CompensatesID links a compensation to the operation it compensates.
	CompensatesID string `json:"compensates_operation_id,omitempty"`
	// CompensationID links an operation to its latest compensation (the
	// other direction of CompensatesID), once one was requested.
	CompensationID string `json:"compensation_operation_id,omitempty"`
	TraceID        string `json:"trace_id,omitempty"`
	// LastErrorCategory and LastError describe the most recent failed attempt.
	LastErrorCategory string    `json:"last_error_category,omitempty"`
	LastError         string    `json:"last_error,omitempty"`
	CreatedAt         time.Time `json:"created_at"`
	UpdatedAt         time.Time `json:"updated_at"`
}

// Attempt is one dispatch try of an operation.
type Attempt struct {
	ID          string    `json:"attempt_id"`
	OperationID string    `json:"operation_id"`
	Number      int       `json:"number"`
	LeaseEpoch  int64     `json:"lease_epoch"`
	Worker      string    `json:"worker,omitempty"`
	StartedAt   time.Time `json:"started_at"`
	// DeadlineAt is when the attempt must have ended, on the database's clock
	// (started_at plus the tool's timeout); the sweeper fences it off after.
	DeadlineAt        time.Time `json:"deadline_at"`
	FinishedAt        time.Time `json:"finished_at,omitzero"`
	Outcome           Outcome   `json:"outcome,omitempty"`
	ErrorCategory     string    `json:"error_category,omitempty"`
	Error             string    `json:"error,omitempty"`
	HTTPStatus        int       `json:"http_status,omitempty"`
	ExternalRequestID string    `json:"external_request_id,omitempty"`
	ExternalObjectID  string    `json:"external_object_id,omitempty"`
}

// EventRecord is one appended row of an operation's history.
type EventRecord struct {
	Seq         int             `json:"seq"`
	OperationID string          `json:"operation_id"`
	Event       Event           `json:"event"`
	From        State           `json:"from,omitempty"`
	To          State           `json:"to"`
	LeaseEpoch  int64           `json:"lease_epoch"`
	AttemptID   string          `json:"attempt_id,omitempty"`
	Actor       string          `json:"actor,omitempty"`
	Detail      json.RawMessage `json:"detail,omitempty"`
	At          time.Time       `json:"at"`
}
