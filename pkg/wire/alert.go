package wire

import "time"

// SpecAlert is the spec of the alerts opledger publishes for operators.
const SpecAlert = "opledger.alert.v1"

// Alerts: stream ALERTS, subjects opledger.alerts.<source>.<name>. They are
// for operators, never for agents (the shipped NATS configuration keeps
// them out of agents' accounts), and carry what a person needs to look.
const (
	StreamAlerts       = "ALERTS" // opledger.alerts.>
	AlertSubjectPrefix = "opledger.alerts."
)

// Alert kinds.
const (
	// AlertWebhookOutOfBand: a signed webhook reports an effect no operation
	// the ledger sent explains (none matches after the hold, or the one that
	// matches was never sent, or completed with another vendor object): a
	// possible duplicate made outside opledger.
	AlertWebhookOutOfBand = "webhook_out_of_band"
	// AlertWebhookContradiction: a webhook contradicts its operation's
	// settled outcome (the vendor reports success for an operation that
	// failed, or failure for one that completed).
	AlertWebhookContradiction = "webhook_contradiction"
	// AlertWebhookExpired: a webhook's hold ran out with its operation in a
	// state no webhook may settle (escalated, still being retried).
	AlertWebhookExpired = "webhook_expired"
)

// AlertKinds lists every alert kind.
var AlertKinds = []string{AlertWebhookOutOfBand, AlertWebhookContradiction, AlertWebhookExpired}

// WebhookAlertSubject is where alerts about a provider's webhooks go.
func WebhookAlertSubject(provider string) string { return AlertSubjectPrefix + "webhooks." + provider }

// Alert is a message for operators on opledger.alerts.*.
type Alert struct {
	Spec string `json:"spec"`
	Kind string `json:"kind"`
	// Provider, DeliveryID, EventType and Outcome say which webhook and
	// what it reported; MatchBy and MatchValue which operation it named.
	Provider   string `json:"provider"`
	DeliveryID string `json:"delivery_id"`
	EventType  string `json:"event_type"`
	Outcome    string `json:"outcome"`
	MatchBy    string `json:"match_by"`
	MatchValue string `json:"match_value"`
	// ExternalObjectID is the vendor's object id the webhook reported.
	ExternalObjectID string `json:"external_object_id,omitempty"`
	// OperationID, Tool and State describe the operation it matched, if any.
	OperationID string `json:"operation_id,omitempty"`
	Tool        string `json:"tool,omitempty"`
	State       string `json:"state,omitempty"`
	// OperationExternalObjectID is the vendor object the operation has.
	OperationExternalObjectID string    `json:"operation_external_object_id,omitempty"`
	Reason                    string    `json:"reason"`
	At                        time.Time `json:"at"`
}
