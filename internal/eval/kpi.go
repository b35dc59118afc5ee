package eval

import (
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/opledger/opledger/pkg/op"
)

// Observations is everything a run saw, read back from the ledger, the
// vendors and the agent's side, in a form that does not depend on either:
// Compute turns it into KPIs, and tests fabricate it.
type Observations struct {
	Actions    []ActionObs
	Operations []OperationObs
	// Entities are the vendor's effects counted by a business entity that
	// does not depend on opledger's keys (a charge's order id, an email's
	// mailbox), with how many distinct actions of the corpus target it.
	Entities []EntityObs
	// UnattributedEffects counts effects the vendors performed under keys
	// no operation of the run has.
	UnattributedEffects int
	// JetStreamDeduped counts publishes JetStream acknowledged as
	// duplicates inside its window: they never reached the ledger.
	JetStreamDeduped int
	// VendorWrites and VendorLookups count requests at the vendors' write
	// and lookup routes, for the cost of reconciliation.
	VendorWrites, VendorLookups int
}

// ActionObs is one distinct business action of the corpus and what the
// ledger decided for each message that asked for it.
type ActionObs struct {
	ID       string
	Scenario string
	Tool     string
	// NearDuplicate marks an action built to look like another one (same
	// order, another amount) while being a different business action: the
	// probe for false dedupes.
	NearDuplicate bool
	Messages      []MessageObs
	// PublishedAt is when its first message was published (agent's clock).
	PublishedAt time.Time
}

// Message kinds: how a message relates to its action.
const (
	// MsgOriginal is the action's first tool call.
	MsgOriginal = "original"
	// MsgRedeliveryMsgID is the same event id again with Nats-Msg-Id.
	MsgRedeliveryMsgID = "redelivery_msgid"
	// MsgRedeliveryNoMsgID is the same event id again without Nats-Msg-Id.
	MsgRedeliveryNoMsgID = "redelivery_no_msgid"
	// MsgReplan is the same business action under a new event id, with
	// arguments that canonicalize alike (a re-planning agent).
	MsgReplan = "replan"
	// MsgReplanLookAlike is a re-plan whose identity fields look the same
	// and mean the same (invisible characters, an address in other cases):
	// identity normalization folds it onto the action.
	MsgReplanLookAlike = "replan_look_alike"
)

// MessageObs is one published message and the ledger's decision on it.
type MessageObs struct {
	EventID string
	Kind    string
	// Decision is the inbox's decision for the event id ("" if the event
	// never reached the ledger); OperationID the operation it names.
	Decision    op.Decision
	OperationID string
	// Redeliveries is how many times the event id reached the ledger again
	// after its first time (answered duplicate_event).
	Redeliveries int
	// Published says the agent published the message (at least once);
	// Answered that it received a result naming its event id.
	Published, Answered bool
}

// OperationObs is one operation of the run, as the ledger has it.
type OperationObs struct {
	ID       string
	Scenario string
	Tool     string
	State    op.State
	// Compensation marks an operation opledger created to compensate
	// another (not asked for by the corpus).
	Compensation bool
	// Effects is how many side effects the vendor performed under the
	// operation's idempotency key.
	Effects  int
	Events   []EventObs
	Attempts []AttemptObs
	// FinalResultAt is when the agent received the result that settled it
	// (zero if it did not).
	FinalResultAt time.Time
	// AskedFor marks an operation an action's messages were answered with
	// (not a compensation opledger made by itself): the agent is owed its
	// settling result.
	AskedFor bool
}

// EventObs is one row of an operation's history.
type EventObs struct {
	Event op.Event
	From  op.State
	To    op.State
	At    time.Time
	// Reason is the event's stated reason (a reconciler verdict, a
	// sweeper's reason), if any.
	Reason string
	// Actor is who wrote the event ("webhook:<provider>" for a webhook).
	Actor string
}

// AttemptObs is one dispatch attempt.
type AttemptObs struct {
	StartedAt, FinishedAt time.Time
	Outcome               op.Outcome
}

// EntityObs counts a vendor's effects on one business entity.
type EntityObs struct {
	Scenario string
	Kind     string // vendors.Kind*
	Entity   string
	Effects  int
	// Actions is how many distinct actions of the corpus target the entity:
	// the effects it should have if each happened once.
	Actions int
	// MustApply: every action on the entity must have its effect (a
	// set-back sequence), and WrongFinal says the entity does not hold
	// the value the last one set.
	MustApply, WrongFinal bool
}

// KPIs are the article's "metrics for eval success", and what a run needs
// to show them honestly.
type KPIs struct {
	Actions    int `json:"business_actions"`
	Messages   int `json:"messages"`
	Operations int `json:"operations"`

	// DuplicateEffects is effects beyond one per distinct business action:
	// the larger of the count by the actions' keys and by entity.
	DuplicateEffects         int     `json:"duplicate_effects"`
	DuplicateEffectsByKey    int     `json:"duplicate_effects_by_key"`
	DuplicateEffectsByEntity int     `json:"duplicate_effects_by_entity"`
	DuplicatesPer10k         float64 `json:"duplicates_per_10k_operations"`
	UnattributedEffects      int     `json:"unattributed_effects"`

	UnknownOutcomeOps  int     `json:"unknown_outcome_operations"`
	UnknownOutcomeRate float64 `json:"unknown_outcome_rate"`
	// ResolvedWithoutHuman counts operations that were ever in
	// unknown_outcome and ended completed_* or failed_*.
	ResolvedWithoutHuman      int     `json:"resolved_without_human"`
	ResolvedWithoutHumanShare float64 `json:"resolved_without_human_share"`
	UnknownEscalated          int     `json:"unknown_then_escalated"`
	// ResolvedByWebhook counts operations a vendor's webhook settled
	// (an event by actor webhook:<provider>), counted apart from attempts
	// and lookups.
	ResolvedByWebhook int `json:"resolved_by_webhook"`

	ReconciliationEpisodes int     `json:"reconciliation_episodes"`
	ReconciliationOpen     int     `json:"reconciliation_open_episodes"`
	ReconciliationMeanMS   float64 `json:"reconciliation_mean_ms"`
	ReconciliationP99MS    float64 `json:"reconciliation_p99_ms"`
	ReconciliationMaxMS    float64 `json:"reconciliation_max_ms"`

	NearDuplicateProbes int     `json:"near_duplicate_probes"`
	FalseDedupes        int     `json:"false_dedupes"`
	FalseDedupeRate     float64 `json:"false_dedupe_rate"`
	// FalseSuppressionsPer10k is FalseDedupes (a different action answered
	// as a duplicate and never run) per 10k business actions.
	FalseSuppressionsPer10k float64 `json:"false_suppressions_per_10k_actions"`
	// LostSetBacks counts set-back sequences whose record has fewer
	// changes than steps, or does not hold the last step's value.
	LostSetBacks int `json:"lost_set_backs"`
	// ReplansNotRecognized counts re-plans of an action (new event id,
	// same action) that the ledger did not give the operation of the
	// action's original message.
	ReplansNotRecognized int `json:"replans_not_recognized"`

	LatencySamples     int     `json:"latency_samples"`
	AddedLatencyP50MS  float64 `json:"added_latency_p50_ms"`
	AddedLatencyP99MS  float64 `json:"added_latency_p99_ms"`
	EndToEndP50MS      float64 `json:"end_to_end_p50_ms"`
	EndToEndP99MS      float64 `json:"end_to_end_p99_ms"`
	VendorTimeP50MS    float64 `json:"vendor_time_p50_ms"`
	UnansweredMessages int     `json:"unanswered_messages"`
	// UnansweredIntents counts event ids the agent published and never got
	// a result for, as the agent's own consumer of RESULTS saw it; a run
	// with any fails.
	UnansweredIntents int `json:"unanswered_intents"`
	// UntoldSettlements counts operations the agent asked for that the
	// ledger settled without the agent receiving a settling result (a
	// result lost, parked, never written); a run with any fails.
	UntoldSettlements int `json:"untold_settlements"`

	Unsettled    int      `json:"unsettled_operations"`
	UnsettledIDs []string `json:"unsettled_operation_ids,omitempty"`

	Escalations map[string]int `json:"escalations_by_reason"`
	FinalStates map[string]int `json:"final_states"`
	Decisions   map[string]int `json:"decisions"`

	// SuccessWithoutEffect counts operations the ledger calls
	// completed_success with no effect at the vendor; FailedWithEffect
	// those it calls failed_* with one. Both are ledger/vendor disagreements.
	SuccessWithoutEffect int `json:"success_without_effect"`
	FailedWithEffect     int `json:"failed_with_effect"`

	// VendorCallsPerOperation is write and lookup requests at the vendors
	// per operation: the cost of retries and reconciliation.
	VendorWritesPerOperation  float64 `json:"vendor_writes_per_operation"`
	VendorLookupsPerOperation float64 `json:"vendor_lookups_per_operation"`

	// DuplicateOperationIDs names the operations whose effects were counted
	// as duplicates (by key).
	DuplicateOperationIDs []string `json:"duplicate_operation_ids,omitempty"`
}

// Settled reports whether an operation in s needs nothing more from
// automation: a final state, or one a person owns.
func Settled(s op.State) bool {
	return s.Terminal() || s == op.StateEscalated || s == op.StateAwaitingApproval
}

// Compute derives the KPIs from observations.
func Compute(o Observations) KPIs {
	k := KPIs{
		Actions: len(o.Actions), Operations: len(o.Operations), UnattributedEffects: o.UnattributedEffects,
		Escalations: map[string]int{}, FinalStates: map[string]int{}, Decisions: map[string]int{},
	}
	ops := make(map[string]*OperationObs, len(o.Operations))
	for i := range o.Operations {
		ops[o.Operations[i].ID] = &o.Operations[i]
	}
	if o.JetStreamDeduped > 0 {
		k.Decisions["jetstream_duplicate"] = o.JetStreamDeduped
	}

	// Decisions, duplicates by key, false dedupes, re-plans.
	dupOps := map[string]bool{}
	for _, a := range o.Actions {
		k.Messages += len(a.Messages)
		if a.NearDuplicate {
			k.NearDuplicateProbes++
		}
		mine := map[string]bool{} // operations the action's messages were answered with
		created, suppressed := false, false
		seen := map[string]bool{} // event ids: a redelivery shares the inbox row
		for _, m := range a.Messages {
			if seen[m.EventID] {
				continue
			}
			seen[m.EventID] = true
			if m.Published && !m.Answered {
				k.UnansweredIntents++
			}
			if m.Decision == "" {
				k.UnansweredMessages++
				continue
			}
			k.Decisions[string(m.Decision)]++
			if m.Redeliveries > 0 {
				k.Decisions[string(op.DecisionDuplicateEvent)] += m.Redeliveries
			}
			if m.OperationID != "" {
				mine[m.OperationID] = true
			}
			switch m.Decision {
			case op.DecisionNew, op.DecisionReopened:
				created = true
			case op.DecisionDuplicateOperation, op.DecisionConflict:
				suppressed = true
			}
		}
		// A re-plan is recognized when the ledger gave it the operation the
		// original got (whichever of them arrived first created it).
		var origOp string
		for _, m := range a.Messages {
			if m.Kind == MsgOriginal {
				origOp = m.OperationID
			}
		}
		for _, m := range a.Messages {
			if (m.Kind == MsgReplan || m.Kind == MsgReplanLookAlike) && m.Decision != "" &&
				(m.OperationID == "" || m.OperationID != origOp || m.Decision == op.DecisionConflict || m.Decision == op.DecisionRejected) {
				k.ReplansNotRecognized++
			}
		}
		if suppressed && !created {
			k.FalseDedupes++
		}
		effects := 0
		for id := range mine {
			if x := ops[id]; x != nil {
				effects += x.Effects
			}
		}
		if effects > 1 {
			k.DuplicateEffectsByKey += effects - 1
			for id := range mine {
				if x := ops[id]; x != nil && x.Effects > 0 {
					dupOps[id] = true
				}
			}
		}
	}
	k.DuplicateOperationIDs = slices.Sorted(maps.Keys(dupOps))
	for _, e := range o.Entities {
		if e.Effects > e.Actions {
			k.DuplicateEffectsByEntity += e.Effects - e.Actions
		}
		if e.MustApply && (e.Effects < e.Actions || e.WrongFinal) {
			k.LostSetBacks++
		}
	}
	k.DuplicateEffects = max(k.DuplicateEffectsByKey, k.DuplicateEffectsByEntity)
	k.DuplicatesPer10k = ratio(k.DuplicateEffects, k.Operations) * 10000
	k.FalseDedupeRate = ratio(k.FalseDedupes, k.Actions)
	k.FalseSuppressionsPer10k = ratio(k.FalseDedupes, k.Actions) * 10000

	// Operations: states, unknown outcomes, reconciliation, escalations.
	var recon []time.Duration
	for _, x := range o.Operations {
		k.FinalStates[string(x.State)]++
		if !Settled(x.State) {
			k.Unsettled++
			k.UnsettledIDs = append(k.UnsettledIDs, x.ID)
		} else if x.AskedFor && x.FinalResultAt.IsZero() {
			k.UntoldSettlements++
		}
		switch {
		case x.Compensation:
		case x.State == op.StateCompletedSuccess && x.Effects == 0:
			k.SuccessWithoutEffect++
		case (x.State == op.StateFailedPermanent || x.State == op.StateFailedRetryable) && x.Effects > 0:
			k.FailedWithEffect++
		}
		var entered time.Time
		wasUnknown := false
		for _, e := range x.Events {
			if e.Event == op.EventEscalate {
				k.Escalations[ReasonClass(e.Reason)]++
			}
			if strings.HasPrefix(e.Actor, "webhook:") && (e.Event == op.EventSucceed || e.Event == op.EventNoop || e.Event == op.EventFailPermanent) {
				k.ResolvedByWebhook++
			}
			if e.To == op.StateUnknownOutcome && e.From != op.StateUnknownOutcome {
				wasUnknown, entered = true, e.At
				continue
			}
			if e.From == op.StateUnknownOutcome && e.To != op.StateUnknownOutcome && !entered.IsZero() {
				recon = append(recon, max(e.At.Sub(entered), 0))
				entered = time.Time{}
			}
		}
		if !entered.IsZero() {
			k.ReconciliationOpen++
		}
		if wasUnknown {
			k.UnknownOutcomeOps++
			switch x.State {
			case op.StateCompletedSuccess, op.StateCompletedNoop, op.StateFailedPermanent, op.StateFailedRetryable:
				k.ResolvedWithoutHuman++
			case op.StateEscalated:
				k.UnknownEscalated++
			}
		}
	}
	slices.Sort(k.UnsettledIDs)
	k.UnknownOutcomeRate = ratio(k.UnknownOutcomeOps, k.Operations)
	k.ResolvedWithoutHumanShare = ratio(k.ResolvedWithoutHuman, k.UnknownOutcomeOps)
	k.ReconciliationEpisodes = len(recon)
	if len(recon) > 0 {
		slices.Sort(recon)
		var sum time.Duration
		for _, d := range recon {
			sum += d
		}
		k.ReconciliationMeanMS = ms(sum / time.Duration(len(recon)))
		k.ReconciliationP99MS = ms(Percentile(recon, 0.99))
		k.ReconciliationMaxMS = ms(recon[len(recon)-1])
	}

	// Added latency: on the clean path (one operation, one attempt, no
	// fault), the agent's wait minus the vendor's own time.
	var added, e2e, vendor []time.Duration
	for _, a := range o.Actions {
		if a.Scenario != ScenarioSuccess || a.PublishedAt.IsZero() {
			continue
		}
		var x *OperationObs
		for _, m := range a.Messages {
			if m.Kind == MsgOriginal && (m.Decision == op.DecisionNew || m.Decision == op.DecisionDuplicateOperation) {
				x = ops[m.OperationID]
			}
		}
		if x == nil || x.State != op.StateCompletedSuccess || len(x.Attempts) != 1 || x.FinalResultAt.IsZero() {
			continue
		}
		v := x.Attempts[0].FinishedAt.Sub(x.Attempts[0].StartedAt)
		total := x.FinalResultAt.Sub(a.PublishedAt)
		if v < 0 || total <= 0 {
			continue
		}
		added, e2e, vendor = append(added, max(total-v, 0)), append(e2e, total), append(vendor, v)
	}
	k.LatencySamples = len(added)
	if len(added) > 0 {
		for _, xs := range [][]time.Duration{added, e2e, vendor} {
			slices.Sort(xs)
		}
		k.AddedLatencyP50MS, k.AddedLatencyP99MS = ms(Percentile(added, 0.5)), ms(Percentile(added, 0.99))
		k.EndToEndP50MS, k.EndToEndP99MS = ms(Percentile(e2e, 0.5)), ms(Percentile(e2e, 0.99))
		k.VendorTimeP50MS = ms(Percentile(vendor, 0.5))
	}
	k.VendorWritesPerOperation = ratio(o.VendorWrites, k.Operations)
	k.VendorLookupsPerOperation = ratio(o.VendorLookups, k.Operations)
	return k
}

// Percentile is the nearest-rank q-quantile of sorted xs (0 for none).
func Percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// ReasonClass groups escalation reasons: the text before the first ": ",
// where the variable part (an error) begins.
func ReasonClass(reason string) string {
	if reason == "" {
		return "(no reason recorded)"
	}
	if i := strings.Index(reason, ": "); i > 0 {
		return reason[:i]
	}
	return reason
}

// Filter returns the observations of one scenario.
func (o Observations) Filter(scenario string) Observations {
	out := Observations{}
	for _, a := range o.Actions {
		if a.Scenario == scenario {
			out.Actions = append(out.Actions, a)
		}
	}
	for _, x := range o.Operations {
		if x.Scenario == scenario {
			out.Operations = append(out.Operations, x)
		}
	}
	for _, e := range o.Entities {
		if e.Scenario == scenario {
			out.Entities = append(out.Entities, e)
		}
	}
	return out
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/float64(time.Millisecond)*10) / 10 }
