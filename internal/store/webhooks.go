package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/opledger/opledger/db/dbsqlc"
	"github.com/opledger/opledger/pkg/op"
)

// WebhookSource is the inbox source of a provider's webhook deliveries:
// delivery ids are unique per provider.
func WebhookSource(provider string) string { return "webhook:" + provider }

// Delivery is one signed webhook delivery to record in the inbox.
type Delivery struct {
	Provider, DeliveryID string
	// Payload is the raw body: the inbox keeps its SHA-256, never its bytes.
	Payload []byte
	// Reason is kept with the inbox row (what was made of the delivery).
	Reason string
}

// DeliveryRecord says what the inbox made of a delivery.
type DeliveryRecord struct {
	// Duplicate: the delivery id was recorded before, and this arrival
	// only counted (duplicate_count). Conflict: it was, with other bytes.
	Duplicate, Conflict bool
}

// RecordDelivery records d in the inbox under WebhookSource(d.Provider)
// and its delivery id, or counts it as a redelivery, in one statement.
func (r reads) RecordDelivery(ctx context.Context, d Delivery) (DeliveryRecord, error) {
	if d.Provider == "" || d.DeliveryID == "" {
		return DeliveryRecord{}, fmt.Errorf("record delivery: provider and delivery id are required: %w", op.ErrInvalid)
	}
	sum := sha256.Sum256(d.Payload)
	hash := hex.EncodeToString(sum[:])
	row, err := r.q.InboxRecordDelivery(ctx, dbsqlc.InboxRecordDeliveryParams{
		Source: WebhookSource(d.Provider), EventID: d.DeliveryID, PayloadHash: hash, Reason: d.Reason, Now: r.now(),
	})
	if err != nil {
		return DeliveryRecord{}, fmt.Errorf("record delivery %s/%s: %w", d.Provider, d.DeliveryID, translate(err))
	}
	return DeliveryRecord{Duplicate: row.Duplicate, Conflict: row.Duplicate && row.PayloadHash != hash}, nil
}

// Evidence statuses (webhook_evidence.status).
const (
	EvidenceHeld         = "held"
	EvidenceApplied      = "applied"
	EvidenceConfirmed    = "confirmed"
	EvidenceOutOfBand    = "out_of_band"
	EvidenceContradicted = "contradiction"
	EvidenceExpired      = "expired"
)

// EvidenceFlagged are the statuses a person should look at.
var EvidenceFlagged = []string{EvidenceOutOfBand, EvidenceContradicted, EvidenceExpired}

// Evidence is what one webhook delivery says about an operation, and what
// the ledger made of it.
type Evidence struct {
	Provider   string   `json:"provider"`
	DeliveryID string   `json:"delivery_id"`
	EventType  string   `json:"event_type"`
	Tools      []string `json:"tools"`
	// MatchBy and MatchValue name the operation (registry.Match* kinds).
	MatchBy    string `json:"match_by"`
	MatchValue string `json:"match_value"`
	// Outcome is what the vendor says happened (registry.Webhook* outcomes).
	Outcome          string `json:"outcome"`
	ExternalObjectID string `json:"external_object_id,omitempty"`
	Status           string `json:"status"`
	// OperationID is the operation it was found to be about, if any.
	OperationID string     `json:"operation_id,omitempty"`
	Reason      string     `json:"reason,omitempty"`
	ReceivedAt  time.Time  `json:"received_at"`
	HoldUntil   time.Time  `json:"hold_until"`
	DecidedAt   *time.Time `json:"decided_at,omitempty"`
	Checks      int        `json:"checks"`
	// Expired (reads of held evidence only): its hold ran out, on the
	// database's clock.
	Expired bool `json:"-"`
}

func toEvidence(r dbsqlc.WebhookEvidence, expired bool) *Evidence {
	e := &Evidence{Provider: r.Provider, DeliveryID: r.DeliveryID, EventType: r.EventType, Tools: r.Tools,
		MatchBy: r.MatchBy, MatchValue: r.MatchValue, Outcome: r.Outcome, ExternalObjectID: r.ExternalObjectID,
		Status: r.Status, Reason: r.Reason, ReceivedAt: r.ReceivedAt, HoldUntil: r.HoldUntil, DecidedAt: r.DecidedAt,
		Checks: int(r.Checks), Expired: expired}
	if r.OperationID != nil {
		e.OperationID = *r.OperationID
	}
	if e.Tools == nil {
		e.Tools = []string{}
	}
	return e
}

// InsertEvidence records held evidence, held for hold from now on the
// database's clock. Errors: op.ErrConflict when the delivery has evidence
// already; op.ErrInvalid when the database refuses a value.
func (r reads) InsertEvidence(ctx context.Context, e Evidence, hold time.Duration) (*Evidence, error) {
	row, err := r.q.WebhookEvidenceInsert(ctx, dbsqlc.WebhookEvidenceInsertParams{
		Provider: e.Provider, DeliveryID: e.DeliveryID, EventType: e.EventType, Tools: nonNil(e.Tools),
		MatchBy: e.MatchBy, MatchValue: e.MatchValue, Outcome: e.Outcome, ExternalObjectID: e.ExternalObjectID,
		HoldSeconds: hold.Seconds(), Now: r.now(),
	})
	if err != nil {
		return nil, fmt.Errorf("evidence %s/%s: %w", e.Provider, e.DeliveryID, translate(err))
	}
	return toEvidence(row, hold <= 0), nil
}

// DecideEvidence settles held evidence with status (and the operation it
// was about, "" for none). It reports false, changing nothing, when the
// evidence is no longer held: another writer decided it first.
func (r reads) DecideEvidence(ctx context.Context, provider, deliveryID, status, operationID, reason string) (bool, error) {
	p := dbsqlc.WebhookEvidenceDecideParams{Status: status, Reason: reason, Provider: provider, DeliveryID: deliveryID, Now: r.now()}
	if operationID != "" {
		p.OperationID = &operationID
	}
	_, err := r.q.WebhookEvidenceDecide(ctx, p)
	switch err = translate(err); {
	case err == nil:
		return true, nil
	case isNotFound(err):
		return false, nil
	}
	return false, fmt.Errorf("decide evidence %s/%s: %w", provider, deliveryID, err)
}

// PostponeEvidence keeps evidence held, to be looked at again later (with
// backoff), recording the operation it names (if found) and why it waits.
func (r reads) PostponeEvidence(ctx context.Context, provider, deliveryID, operationID, reason string) error {
	p := dbsqlc.WebhookEvidencePostponeParams{Reason: reason, Provider: provider, DeliveryID: deliveryID, Now: r.now()}
	if operationID != "" {
		p.OperationID = &operationID
	}
	if err := r.q.WebhookEvidencePostpone(ctx, p); err != nil {
		return fmt.Errorf("postpone evidence %s/%s: %w", provider, deliveryID, translate(err))
	}
	return nil
}

// DueEvidence returns up to limit held evidence due for another look,
// the longest waiting first; Expired marks those whose hold ran out.
func (r reads) DueEvidence(ctx context.Context, limit int) ([]*Evidence, error) {
	rows, err := r.q.WebhookEvidenceListDue(ctx, dbsqlc.WebhookEvidenceListDueParams{MaxRows: int32(limit), Now: r.now()})
	if err != nil {
		return nil, fmt.Errorf("list due evidence: %w", translate(err))
	}
	out := make([]*Evidence, len(rows))
	for i, row := range rows {
		out[i] = toEvidence(row.WebhookEvidence, row.Expired)
	}
	return out, nil
}

// HeldEvidenceAbout returns the held evidence whose match value is one of
// o's identities (its key, its id, its vendor object id), oldest first.
// The caller checks that each one's kind of match is that identity.
func (r reads) HeldEvidenceAbout(ctx context.Context, o *op.Operation) ([]*Evidence, error) {
	values := []string{o.IdempotencyKey, o.ID}
	if o.ExternalObjectID != "" {
		values = append(values, o.ExternalObjectID)
	}
	rows, err := r.q.WebhookEvidenceListHeld(ctx, dbsqlc.WebhookEvidenceListHeldParams{MatchValues: values, Now: r.now()})
	if err != nil {
		return nil, fmt.Errorf("held evidence about %s: %w", o.ID, translate(err))
	}
	out := make([]*Evidence, len(rows))
	for i, row := range rows {
		out[i] = toEvidence(row.WebhookEvidence, row.Expired)
	}
	return out, nil
}

// EvidenceFilter selects evidence for operators.
type EvidenceFilter struct {
	// Statuses selects these statuses (all when empty).
	Statuses []string
	// Provider selects one provider (all when empty).
	Provider string
	// Limit caps the rows (default 100, at most 1000).
	Limit int
}

// ListEvidence returns evidence matching f, the most recently decided (or
// received) first.
func (r reads) ListEvidence(ctx context.Context, f EvidenceFilter) ([]*Evidence, error) {
	p := dbsqlc.WebhookEvidenceListParams{Statuses: nonNil(f.Statuses), Provider: f.Provider, MaxRows: 100}
	if f.Limit > 0 {
		p.MaxRows = int32(min(f.Limit, 1000))
	}
	rows, err := r.q.WebhookEvidenceList(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("list evidence: %w", translate(err))
	}
	out := make([]*Evidence, len(rows))
	for i, row := range rows {
		out[i] = toEvidence(row, false)
	}
	return out, nil
}

// EvidenceOf returns the evidence found to be about an operation, oldest first.
func (r reads) EvidenceOf(ctx context.Context, operationID string) ([]*Evidence, error) {
	rows, err := r.q.WebhookEvidenceListByOperation(ctx, &operationID)
	if err != nil {
		return nil, fmt.Errorf("evidence of %s: %w", operationID, translate(err))
	}
	out := make([]*Evidence, len(rows))
	for i, row := range rows {
		out[i] = toEvidence(row, false)
	}
	return out, nil
}

// EvidenceGet returns one delivery's evidence. Errors: op.ErrNotFound.
func (r reads) EvidenceGet(ctx context.Context, provider, deliveryID string) (*Evidence, error) {
	row, err := r.q.WebhookEvidenceGet(ctx, dbsqlc.WebhookEvidenceGetParams{Provider: provider, DeliveryID: deliveryID})
	if err != nil {
		return nil, fmt.Errorf("evidence %s/%s: %w", provider, deliveryID, translate(err))
	}
	return toEvidence(row, false), nil
}
