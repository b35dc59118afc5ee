// Package webhook is planner-ingest's door for vendor webhooks:
// POST /webhooks/{provider}.
//
// A delivery is authenticated before anything else is believed: its
// signature over the raw bytes (Standard Webhooks or Stripe-Signature, per
// the registry's provider) must match one of the provider's secrets
// (several, for rotation; compared with hmac.Equal) and its signed
// timestamp must be within the provider's tolerance, either way. The body
// is bounded, and read strictly (one JSON object, UTF-8, no NUL, no key
// twice, bounded depth). Anything else is answered 4xx with a stable reason
// (Reason* constants), counted in opledger_webhook_rejected_total by
// provider and reason, and never stored.
//
// An authentic delivery is recorded in the inbox under (webhook:<provider>,
// delivery id): a redelivery is answered 200 and changes nothing. An event
// type the registry maps is evidence about an operation (internal/evidence),
// written and decided in the same transaction as the inbox row.
package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/rs/zerolog"

	"github.com/opledger/opledger/internal/evidence"
	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/telemetry"
	"github.com/opledger/opledger/pkg/adapter"
	"github.com/opledger/opledger/pkg/registry"
	"github.com/opledger/opledger/pkg/wire"
)

// Reasons a delivery is refused: stable strings, the "code" of the error
// answer and the reason label of opledger_webhook_rejected_total.
const (
	ReasonUnknownProvider    = "unknown_provider"    // 404: the registry has no such provider
	ReasonNoSecret           = "no_secret"           // 503: the provider has no signing secret configured
	ReasonTooLarge           = "too_large"           // 413: the body is over the provider's max_body_bytes
	ReasonUnreadableBody     = "unreadable_body"     // 400: the body could not be read to its end
	ReasonRepeatedHeader     = "repeated_header"     // 400: a signature header appears more than once
	ReasonMissingSignature   = "missing_signature"   // 401: no signature header, or no v1 signature in it
	ReasonMalformedSignature = "malformed_signature" // 401: the signature header cannot be parsed
	ReasonBadSignature       = "bad_signature"       // 401: no signature matches any secret
	ReasonMissingTimestamp   = "missing_timestamp"   // 401: no signed timestamp
	ReasonMalformedTimestamp = "malformed_timestamp" // 401: the timestamp is not unix seconds
	ReasonStaleTimestamp     = "stale_timestamp"     // 401: signed longer ago than the tolerance (a replay)
	ReasonFutureTimestamp    = "future_timestamp"    // 401: signed further ahead than the tolerance
	ReasonMissingID          = "missing_id"          // 400: no delivery id
	ReasonInvalidID          = "invalid_id"          // 400: the delivery id is over 255 bytes, or not printable ASCII
	ReasonInvalidUTF8        = "invalid_utf8"        // 400: the payload is not UTF-8 (or escapes half a surrogate pair)
	ReasonNUL                = "nul"                 // 400: the payload holds a NUL, raw or escaped
	ReasonDuplicateKey       = "duplicate_key"       // 400: a key appears twice in one object
	ReasonTooDeep            = "too_deep"            // 400: nested deeper than the provider's max_depth
	ReasonMalformedJSON      = "malformed_json"      // 400: not JSON, or data after the object
	ReasonNotAnObject        = "not_an_object"       // 400: the payload is not a JSON object
	ReasonMissingType        = "missing_type"        // 400: no event type at the provider's type_pointer
	ReasonInvalidType        = "invalid_type"        // 400: the event type is not 1-200 bytes of text
	ReasonInvalidField       = "invalid_field"       // 400: a mapped event lacks the identity or object id its mapping names
	ReasonIDReused           = "id_reused"           // 409: the delivery id was recorded with other bytes
	ReasonUnavailable        = "unavailable"         // 503: the ledger could not record it; send it again
)

// Reasons lists every refusal reason.
var Reasons = []string{ReasonUnknownProvider, ReasonNoSecret, ReasonTooLarge, ReasonUnreadableBody, ReasonRepeatedHeader,
	ReasonMissingSignature, ReasonMalformedSignature, ReasonBadSignature, ReasonMissingTimestamp, ReasonMalformedTimestamp,
	ReasonStaleTimestamp, ReasonFutureTimestamp, ReasonMissingID, ReasonInvalidID, ReasonInvalidUTF8, ReasonNUL,
	ReasonDuplicateKey, ReasonTooDeep, ReasonMalformedJSON, ReasonNotAnObject, ReasonMissingType, ReasonInvalidType,
	ReasonInvalidField, ReasonIDReused, ReasonUnavailable}

// Status is the HTTP status a refusal is answered with.
func Status(reason string) int {
	switch reason {
	case ReasonUnknownProvider:
		return http.StatusNotFound
	case ReasonNoSecret, ReasonUnavailable:
		return http.StatusServiceUnavailable
	case ReasonTooLarge:
		return http.StatusRequestEntityTooLarge
	case ReasonMissingSignature, ReasonMalformedSignature, ReasonBadSignature, ReasonMissingTimestamp,
		ReasonMalformedTimestamp, ReasonStaleTimestamp, ReasonFutureTimestamp:
		return http.StatusUnauthorized
	case ReasonIDReused:
		return http.StatusConflict
	}
	return http.StatusBadRequest
}

// Accepted results, the result label of opledger_webhook_deliveries_total
// and the "status" of a 200 answer.
const (
	ResultEvidence  = "evidence"  // a mapped event, recorded as evidence
	ResultUnmapped  = "unmapped"  // an event type the registry does not map: recorded only
	ResultDuplicate = "duplicate" // a redelivery: counted, nothing changed
)

// unknownLabel is the provider label of deliveries to providers the
// registry does not have: a caller chooses the path, and must not choose
// the metrics' label values.
const unknownLabel = "_unknown"

// bodyReadTimeout bounds the time a delivery's body may take to arrive.
const bodyReadTimeout = 10 * time.Second

// Pattern is the route the intake serves.
const Pattern = "POST /webhooks/{provider}"

// Config configures the intake.
type Config struct {
	Registry *registry.Registry
	// Secrets are each provider's signing secrets (ParseSecrets); a
	// provider without any refuses every delivery (no_secret).
	Secrets map[string][]Secret
	// Store records deliveries and evidence (planner-ingest's role).
	Store    *store.Store
	Evidence *evidence.Settler
	Metrics  *telemetry.Metrics
	Log      zerolog.Logger
	// Now is the clock signed timestamps are compared with (default time.Now).
	Now func() time.Time
}

// Intake serves POST /webhooks/{provider}.
type Intake struct {
	cfg Config
}

// New returns the intake.
func New(cfg Config) (*Intake, error) {
	if cfg.Registry == nil || cfg.Store == nil || cfg.Evidence == nil {
		return nil, errors.New("webhook: the registry, the store and the evidence settler are required")
	}
	for p := range cfg.Secrets {
		if _, ok := cfg.Registry.Webhook(p); !ok {
			return nil, fmt.Errorf("webhook: secrets for provider %q, which the registry does not have (it has %v)", p, cfg.Registry.Webhooks())
		}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Intake{cfg: cfg}, nil
}

// Mount registers the intake's route on mux; a nil intake (a process
// without planner-ingest) registers nothing.
func (in *Intake) Mount(mux *http.ServeMux) {
	if in != nil {
		mux.Handle(Pattern, in)
	}
}

// Unconfigured returns the providers of the registry without a secret.
func (in *Intake) Unconfigured() []string {
	var out []string
	if in == nil {
		return nil
	}
	for _, p := range in.cfg.Registry.Webhooks() {
		if len(in.cfg.Secrets[p]) == 0 {
			out = append(out, p)
		}
	}
	return out
}

// Answer is the body of every answer: {"status"} when accepted,
// {"error": {"code", "message"}} when refused.
type Answer struct {
	Status string       `json:"status,omitempty"`
	Error  *AnswerError `json:"error,omitempty"`
}

// AnswerError is a refusal: Code is its Reason.
type AnswerError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// refusal is a delivery refused for a reason.
type refusal struct {
	reason, msg string
}

func refuse(reason, msg string) *refusal { return &refusal{reason: reason, msg: msg} }

// ServeHTTP handles one delivery.
func (in *Intake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	provider := r.PathValue("provider")
	hook, ok := in.cfg.Registry.Webhook(provider)
	if !ok {
		in.refused(w, r, unknownLabel, refuse(ReasonUnknownProvider, "no such webhook provider"), "")
		return
	}
	// A body that trickles in must not hold the connection: the server only
	// bounds the headers' time.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(bodyReadTimeout))
	result, deliveryID, ref := in.handle(r, hook)
	if ref != nil {
		in.refused(w, r, provider, ref, deliveryID)
		return
	}
	in.cfg.Metrics.WebhookDelivery(provider, result)
	writeAnswer(w, http.StatusOK, Answer{Status: result})
}

func (in *Intake) handle(r *http.Request, hook *registry.Webhook) (result, deliveryID string, _ *refusal) {
	secrets := in.cfg.Secrets[hook.Provider]
	if len(secrets) == 0 {
		return "", "", refuse(ReasonNoSecret, "no signing secret is configured for this provider")
	}
	if r.ContentLength > int64(hook.MaxBodyBytes) {
		return "", "", refuse(ReasonTooLarge, fmt.Sprintf("the body is over %d bytes", hook.MaxBodyBytes))
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, int64(hook.MaxBodyBytes)+1))
	if err != nil {
		return "", "", refuse(ReasonUnreadableBody, "the body could not be read")
	}
	if len(body) > hook.MaxBodyBytes {
		return "", "", refuse(ReasonTooLarge, fmt.Sprintf("the body is over %d bytes", hook.MaxBodyBytes))
	}
	v, reason := verify(hook, secrets, r.Header.Values, body, in.cfg.Now())
	if reason != "" {
		return "", "", refuse(reason, "the delivery is not authentic and fresh")
	}
	payload, err := decodePayload(body, hook.MaxDepth)
	var de *decodeError
	if errors.As(err, &de) {
		return "", v.id, refuse(de.reason, de.msg)
	} else if err != nil {
		return "", v.id, refuse(ReasonMalformedJSON, "not valid JSON")
	}
	deliveryID = v.id
	if hook.IDPointer != nil {
		id, ok := hook.IDPointer.Lookup(payload)
		s, isString := id.(string)
		switch {
		case !ok || !isString || s == "":
			return "", "", refuse(ReasonMissingID, "no delivery id (a string) at "+hook.IDPointer.String())
		case len(s) > maxIDLen || !printable(s):
			return "", "", refuse(ReasonInvalidID, "the delivery id at "+hook.IDPointer.String()+" is over 255 bytes or not printable")
		}
		deliveryID = s
	}
	typ, ok := hook.TypePointer.Lookup(payload)
	eventType, isString := typ.(string)
	switch {
	case !ok || !isString || eventType == "":
		return "", deliveryID, refuse(ReasonMissingType, "no event type (a string) at "+hook.TypePointer.String())
	case !wire.ValidText(eventType, 200):
		return "", deliveryID, refuse(ReasonInvalidType, "the event type is over 200 bytes or holds control characters")
	}
	var e *store.Evidence
	reason = "event type " + eventType + " is not mapped: recorded only"
	result = ResultUnmapped
	if ev := hook.Events[eventType]; ev != nil {
		if e, err = evidenceOf(hook, ev, deliveryID, payload); err != nil {
			return "", deliveryID, refuse(ReasonInvalidField, err.Error())
		}
		reason, result = "evidence: "+eventType, ResultEvidence
	}

	// The ledger's work commits or not as a whole, whether or not the
	// sender waits for the answer.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 15*time.Second)
	defer cancel()
	var d evidence.Decision
	var rec store.DeliveryRecord
	err = in.cfg.Store.InTx(ctx, func(tx *store.Tx) error {
		var err error
		if rec, err = tx.RecordDelivery(ctx, store.Delivery{Provider: hook.Provider, DeliveryID: deliveryID, Payload: body, Reason: reason}); err != nil {
			return err
		}
		if rec.Conflict {
			return errReused // refused: not even counted as a redelivery
		}
		if rec.Duplicate {
			return nil
		}
		if e == nil {
			return nil
		}
		if e, err = tx.InsertEvidence(ctx, *e, hook.Hold); err != nil {
			return err
		}
		d, err = in.cfg.Evidence.Settle(ctx, tx, e)
		return err
	})
	switch {
	case errors.Is(err, errReused):
		return "", deliveryID, refuse(ReasonIDReused, "this delivery id was recorded with other bytes")
	case err != nil:
		in.cfg.Log.Error().Err(err).Str("provider", hook.Provider).Str("delivery_id", wire.Clip(deliveryID)).Msg("webhook: could not record the delivery")
		return "", deliveryID, refuse(ReasonUnavailable, "the ledger could not record the delivery; send it again")
	case rec.Duplicate:
		return ResultDuplicate, deliveryID, nil
	}
	if e != nil {
		in.cfg.Evidence.Committed(e, d)
	}
	in.cfg.Log.Debug().Str("provider", hook.Provider).Str("delivery_id", deliveryID).Str("event_type", eventType).
		Str("result", result).Msg("webhook recorded")
	return result, deliveryID, nil
}

// errReused rolls back a delivery whose id was recorded with other bytes.
var errReused = errors.New("delivery id reused with other bytes")

// evidenceOf reads what a mapped event says: the identity of the operation
// and, when the mapping names one, the vendor's object id. Both must be
// strings a vendor id may be (at most 255 bytes, no control characters).
func evidenceOf(hook *registry.Webhook, ev *registry.WebhookEvent, deliveryID string, payload map[string]any) (*store.Evidence, error) {
	e := &store.Evidence{Provider: hook.Provider, DeliveryID: deliveryID, EventType: ev.Type, Tools: ev.Tools,
		MatchBy: ev.MatchBy, Outcome: ev.Outcome}
	v, ok := ev.MatchPointer.Lookup(payload)
	s, isString := v.(string)
	if !ok || !isString || s == "" || !adapter.ValidVendorID(s) {
		return nil, fmt.Errorf("event %s needs its operation's %s, a string of at most 255 bytes, at %s", ev.Type, ev.MatchBy, ev.MatchPointer)
	}
	e.MatchValue = s
	if ev.ExternalIDPointer != nil {
		v, ok := ev.ExternalIDPointer.Lookup(payload)
		s, isString := v.(string)
		if !ok || !isString || s == "" || !adapter.ValidVendorID(s) {
			return nil, fmt.Errorf("event %s needs the vendor's object id, a string of at most 255 bytes, at %s", ev.Type, ev.ExternalIDPointer)
		}
		e.ExternalObjectID = s
	}
	return e, nil
}

// refused answers a refusal and counts it. Nothing of the delivery is
// logged but its provider, reason and (once authentic) its id.
func (in *Intake) refused(w http.ResponseWriter, r *http.Request, label string, ref *refusal, deliveryID string) {
	in.cfg.Metrics.WebhookRejected(label, ref.reason)
	ev := in.cfg.Log.Debug()
	if ref.reason == ReasonNoSecret {
		ev = in.cfg.Log.Error()
	}
	ev = ev.Str("provider", label).Str("reason", ref.reason).Str("remote", r.RemoteAddr)
	if deliveryID != "" {
		ev = ev.Str("delivery_id", wire.Clip(deliveryID))
	}
	ev.Msg("webhook refused")
	writeAnswer(w, Status(ref.reason), Answer{Error: &AnswerError{Code: ref.reason, Message: ref.msg}})
}

func writeAnswer(w http.ResponseWriter, status int, a Answer) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(a)
}
