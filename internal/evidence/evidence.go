// Package evidence decides what vendor evidence does to the operation it
// names: a signed webhook that the registry maps to an operation (by key,
// client reference, operation id or vendor object id) and an outcome.
//
// Evidence about an operation in dispatched, acknowledged or
// unknown_outcome settles it: one decision, one commit (the transition, its
// event, the agent's result and the follow-up command, through
// internal/followup and the store's Change, fenced by state and lease
// epoch), with the evidence marked applied in the same transaction.
// Evidence about an operation that already reached the reported outcome is
// confirmed and changes nothing. Evidence that no operation the ledger sent
// explains, or that contradicts the settled outcome, is flagged and an
// alert is written with it (opledger.alerts.webhooks.<provider>). Evidence
// about an operation that cannot be settled yet (not created, not yet
// dispatched, escalated) is held: the intake, the reconciler (before it asks
// the vendor) and the maintenance leader's pass look at it again until its
// hold runs out, when it is flagged too.
package evidence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/rs/zerolog"

	"github.com/opledger/opledger/internal/followup"
	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/telemetry"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/registry"
	"github.com/opledger/opledger/pkg/wire"
)

// ErrDecided says the evidence was decided by another writer while this
// one looked at it: the transaction must roll back, and nothing is lost.
var ErrDecided = errors.New("evidence already decided")

// Actor is who a webhook's settlement is recorded as: "webhook:<provider>".
func Actor(provider string) string { return "webhook:" + provider }

// Settler decides evidence. It is safe for concurrent use.
type Settler struct {
	reg *registry.Registry
	m   *telemetry.Metrics
	log zerolog.Logger
}

// New returns a settler over the registry's tools.
func New(reg *registry.Registry, m *telemetry.Metrics, log zerolog.Logger) *Settler {
	return &Settler{reg: reg, m: m, log: log}
}

// Decision is what Settle made of evidence.
type Decision struct {
	// Status is the evidence's status after it: store.EvidenceHeld when it
	// waits.
	Status string
	// Operation is the operation it is about (as the decision left it),
	// nil when none matched.
	Operation *op.Operation
	// From is the operation's state before an applied decision.
	From   op.State
	Reason string
}

// Matches reports whether e names o: an operation of one of its tools
// with the identity it carries.
func Matches(e *store.Evidence, o *op.Operation) bool {
	if !slices.Contains(e.Tools, o.Tool) {
		return false
	}
	switch e.MatchBy {
	case registry.MatchIdempotencyKey, registry.MatchClientReference:
		return e.MatchValue == o.IdempotencyKey
	case registry.MatchOperationID:
		return e.MatchValue == o.ID
	case registry.MatchExternalObjectID:
		return o.ExternalObjectID != "" && e.MatchValue == o.ExternalObjectID
	}
	return false
}

// find returns the operation e names, or nil (with why) when there is none.
func (s *Settler) find(ctx context.Context, tx *store.Tx, e *store.Evidence) (*op.Operation, string, error) {
	var o *op.Operation
	var err error
	switch e.MatchBy {
	case registry.MatchIdempotencyKey, registry.MatchClientReference:
		o, err = tx.OperationByKey(ctx, e.MatchValue)
	case registry.MatchOperationID:
		o, err = tx.Operation(ctx, e.MatchValue)
	case registry.MatchExternalObjectID:
		for _, tool := range e.Tools {
			var ops []*op.Operation
			// The vendor's object id is the vendor's, unique there: any
			// tenant's operation may be the one (tenant "").
			if ops, err = tx.OperationsByExternalObject(ctx, "", tool, e.MatchValue); err != nil || len(ops) > 0 {
				if len(ops) > 0 {
					o = ops[0]
				}
				break
			}
		}
		if o == nil && err == nil {
			err = op.ErrNotFound
		}
	default:
		return nil, "", fmt.Errorf("evidence %s/%s: unknown match %q: %w", e.Provider, e.DeliveryID, e.MatchBy, op.ErrInvalid)
	}
	switch {
	case errors.Is(err, op.ErrNotFound):
		return nil, fmt.Sprintf("no operation has this %s", e.MatchBy), nil
	case err != nil:
		return nil, "", err
	case !slices.Contains(e.Tools, o.Tool):
		return nil, fmt.Sprintf("the operation with this %s (%s) is of tool %s, not %v", e.MatchBy, o.ID, o.Tool, e.Tools), nil
	}
	return o, "", nil
}

// event is the operation event an outcome stands for.
func event(outcome string) op.Event {
	switch outcome {
	case registry.WebhookNoop:
		return op.EventNoop
	case registry.WebhookFailed:
		return op.EventFailPermanent
	}
	return op.EventSucceed
}

// reached reports whether o is in the state the outcome leads to (or past
// it, being compensated).
func reached(outcome string, s op.State) bool {
	switch outcome {
	case registry.WebhookFailed:
		return s == op.StateFailedPermanent
	}
	return s == op.StateCompletedSuccess || s == op.StateCompletedNoop || s == op.StateCompensating || s == op.StateCompensated
}

// Settle decides held evidence e in tx: it applies it to its operation,
// confirms or flags it, or keeps it held for later (flagging it instead
// when e.Expired). The evidence's new status, the operation's change and
// any alert commit with tx. Errors: ErrDecided when another writer decided
// e first (roll tx back); store errors.
func (s *Settler) Settle(ctx context.Context, tx *store.Tx, e *store.Evidence) (Decision, error) {
	for try := 0; ; try++ {
		o, why, err := s.find(ctx, tx, e)
		if err != nil {
			return Decision{}, err
		}
		if o == nil {
			if e.Expired {
				return s.flag(ctx, tx, e, nil, store.EvidenceOutOfBand,
					why+" within the hold ("+e.HoldUntil.Sub(e.ReceivedAt).String()+"): the ledger never dispatched this effect")
			}
			return s.hold(ctx, tx, e, nil, why+" yet")
		}
		d, err := s.decide(ctx, tx, e, o)
		var stale *op.StaleError
		if errors.As(err, &stale) && try < 3 {
			continue // the operation moved on while we looked: look again
		}
		return d, err
	}
}

func (s *Settler) decide(ctx context.Context, tx *store.Tx, e *store.Evidence, o *op.Operation) (Decision, error) {
	st := o.State
	switch {
	case st == op.StateDispatched || st == op.StateAcknowledged || st == op.StateUnknownOutcome:
		if e.ExternalObjectID != "" && o.ExternalObjectID != "" && e.ExternalObjectID != o.ExternalObjectID {
			return s.flag(ctx, tx, e, o, store.EvidenceContradicted,
				fmt.Sprintf("the vendor's answer named object %s; this webhook names %s", o.ExternalObjectID, e.ExternalObjectID))
		}
		return s.apply(ctx, tx, e, o)
	case reached(e.Outcome, st):
		if e.Outcome != registry.WebhookFailed && e.ExternalObjectID != "" && o.ExternalObjectID != "" && e.ExternalObjectID != o.ExternalObjectID {
			return s.flag(ctx, tx, e, o, store.EvidenceOutOfBand, fmt.Sprintf(
				"the operation completed with vendor object %s, and this webhook reports another, %s: a second effect the ledger did not make",
				o.ExternalObjectID, e.ExternalObjectID))
		}
		return s.decided(ctx, tx, e, o, store.EvidenceConfirmed, "the operation had already reached this outcome ("+string(st)+")")
	case st.Terminal() || st == op.StateCompensating:
		if !st.Sent() && o.AttemptCount == 0 {
			// Rejected or cancelled before anything was sent.
			return s.flag(ctx, tx, e, o, store.EvidenceOutOfBand,
				fmt.Sprintf("the operation was never sent (%s), yet the vendor reports %s: an effect made outside opledger", st, e.Outcome))
		}
		return s.flag(ctx, tx, e, o, store.EvidenceContradicted,
			fmt.Sprintf("the operation is %s, and the vendor reports %s", st, e.Outcome))
	}
	// Not settleable yet: planned, awaiting approval, pending dispatch,
	// waiting for a retry, or escalated to a person.
	if e.Expired {
		if o.AttemptCount > 0 || st.Sent() {
			return s.flag(ctx, tx, e, o, store.EvidenceExpired,
				fmt.Sprintf("the hold ran out with the operation %s: a person must decide with this evidence", st))
		}
		return s.flag(ctx, tx, e, o, store.EvidenceOutOfBand,
			fmt.Sprintf("the hold ran out with the operation %s and never sent: the ledger never dispatched this effect", st))
	}
	return s.hold(ctx, tx, e, o, "the operation is "+string(st)+": waiting until it may be settled")
}

// apply settles o with e's outcome.
func (s *Settler) apply(ctx context.Context, tx *store.Tx, e *store.Evidence, o *op.Operation) (Decision, error) {
	tool, err := s.reg.Tool(o.Tool)
	if err != nil {
		// This instance's registry lacks the tool (a rolling deploy): the
		// decisions made here need no more than a stand-in.
		tool = &registry.Tool{Name: o.Tool, Retry: registry.RetryPolicy{MaxAttempts: 1}}
	}
	why := fmt.Sprintf("the vendor reported %s by webhook (%s %s)", e.Outcome, e.EventType, e.DeliveryID)
	oc := followup.Outcome{Event: event(e.Outcome), Reason: why}
	if e.Outcome == registry.WebhookFailed {
		oc.ErrorCategory, oc.Error = "vendor_failed", why
	}
	tp := telemetry.FromTraceID(o.TraceID)
	plan, err := followup.Decide(tool, o, oc, o.OriginEventID, tp)
	if err != nil {
		return Decision{}, err
	}
	c := plan.Change(o, Actor(e.Provider), map[string]any{"webhook": e.Provider, "delivery_id": e.DeliveryID, "event_type": e.EventType, "verdict": why})
	c.ExternalObjectID = e.ExternalObjectID
	cur, err := plan.WriteIn(ctx, tx, c)
	if err != nil {
		return Decision{}, err
	}
	d, err := s.decided(ctx, tx, e, cur, store.EvidenceApplied, why)
	d.From = o.State
	return d, err
}

// decided records e's final status.
func (s *Settler) decided(ctx context.Context, tx *store.Tx, e *store.Evidence, o *op.Operation, status, why string) (Decision, error) {
	id := ""
	if o != nil {
		id = o.ID
	}
	ok, err := tx.DecideEvidence(ctx, e.Provider, e.DeliveryID, status, id, wire.Clip200(why))
	if err != nil {
		return Decision{}, err
	}
	if !ok {
		return Decision{}, ErrDecided
	}
	return Decision{Status: status, Operation: o, Reason: why}, nil
}

// flag decides e as a status a person must look at, and writes the alert
// with it.
func (s *Settler) flag(ctx context.Context, tx *store.Tx, e *store.Evidence, o *op.Operation, status, why string) (Decision, error) {
	d, err := s.decided(ctx, tx, e, o, status, why)
	if err != nil {
		return d, err
	}
	kind := map[string]string{store.EvidenceOutOfBand: wire.AlertWebhookOutOfBand,
		store.EvidenceContradicted: wire.AlertWebhookContradiction, store.EvidenceExpired: wire.AlertWebhookExpired}[status]
	a := wire.Alert{Spec: wire.SpecAlert, Kind: kind, Provider: e.Provider, DeliveryID: e.DeliveryID, EventType: e.EventType,
		Outcome: e.Outcome, MatchBy: e.MatchBy, MatchValue: e.MatchValue, ExternalObjectID: e.ExternalObjectID,
		Reason: wire.Clip200(why), At: time.Now().UTC()}
	m := store.Message{Subject: wire.WebhookAlertSubject(e.Provider), MsgID: op.NewID("msg")}
	if o != nil {
		a.OperationID, a.Tool, a.State, a.OperationExternalObjectID = o.ID, o.Tool, string(o.State), o.ExternalObjectID
		m.OperationID = o.ID
	}
	m.Payload, _ = json.Marshal(a) // plain struct: cannot fail
	return d, tx.Enqueue(ctx, m)
}

// hold keeps e held, to be looked at again later.
func (s *Settler) hold(ctx context.Context, tx *store.Tx, e *store.Evidence, o *op.Operation, why string) (Decision, error) {
	id := ""
	if o != nil {
		id = o.ID
	}
	if err := tx.PostponeEvidence(ctx, e.Provider, e.DeliveryID, id, wire.Clip200(why)); err != nil {
		return Decision{}, err
	}
	return Decision{Status: store.EvidenceHeld, Operation: o, Reason: why}, nil
}

// SettleIn runs Settle for e in a transaction of its own and records the
// decision once it committed. Evidence another writer decided first is
// reported with an empty Status and no error.
func (s *Settler) SettleIn(ctx context.Context, st *store.Store, e *store.Evidence) (Decision, error) {
	var d Decision
	err := st.InTx(ctx, func(tx *store.Tx) error {
		var err error
		d, err = s.Settle(ctx, tx, e)
		return err
	})
	if errors.Is(err, ErrDecided) {
		return Decision{}, nil
	}
	if err != nil {
		return Decision{}, err
	}
	s.Committed(e, d)
	return d, nil
}

// Committed counts and logs a decision once its transaction committed.
func (s *Settler) Committed(e *store.Evidence, d Decision) {
	log := s.log.With().Str("provider", e.Provider).Str("delivery_id", e.DeliveryID).Str("event_type", e.EventType).
		Str("evidence", d.Status).Logger()
	if d.Operation != nil {
		log = log.With().Str("operation_id", d.Operation.ID).Str("tool", d.Operation.Tool).
			Str("idempotency_key", d.Operation.IdempotencyKey).Logger()
	}
	switch d.Status {
	case store.EvidenceHeld, "":
		log.Debug().Str("reason", d.Reason).Msg("webhook evidence held")
		return
	case store.EvidenceApplied:
		s.m.WebhookSettled(e.Provider, d.Operation.Tool, string(d.Operation.State))
		s.m.Transition(d.Operation.Tool, string(d.Operation.State))
		log.Info().Str("state_transition", string(d.From)+"->"+string(d.Operation.State)).
			Str("external_object_id", e.ExternalObjectID).Msg("webhook settled the operation")
	case store.EvidenceConfirmed:
		log.Info().Msg("webhook confirms the operation's outcome")
	default:
		log.Warn().Str("reason", d.Reason).Msg("webhook flagged: a person should look")
	}
	s.m.WebhookEvidence(e.Provider, d.Status)
}
