package eval_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/eval"
	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/pkg/op"
)

// history builds an operation's events from (event, from, to, seconds after t0).
func history(t0 time.Time, rows ...any) []eval.EventObs {
	var out []eval.EventObs
	for i := 0; i < len(rows); i += 4 {
		out = append(out, eval.EventObs{Event: rows[i].(op.Event), From: rows[i+1].(op.State), To: rows[i+2].(op.State),
			At: t0.Add(time.Duration(rows[i+3].(float64) * float64(time.Second)))})
	}
	return out
}

// TestComputeFabricated checks every KPI's arithmetic on a ledger that
// never existed, with the answer worked out by hand.
func TestComputeFabricated(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 29, 2, 13, 0, 0, time.UTC)
	const (
		pd  = op.StatePendingDispatch
		dsp = op.StateDispatched
		unk = op.StateUnknownOutcome
		ok  = op.StateCompletedSuccess
		fr  = op.StateFailedRetryable
		esc = op.StateEscalated
	)
	obs := eval.Observations{
		Operations: []eval.OperationObs{
			// Clean: 10ms at the vendor, the agent had the final result 50ms after publishing.
			{ID: "op_a", Scenario: eval.ScenarioSuccess, State: ok, Effects: 1,
				Attempts:      []eval.AttemptObs{{StartedAt: t0.Add(20 * time.Millisecond), FinishedAt: t0.Add(30 * time.Millisecond), Outcome: op.OutcomeSuccess}},
				FinalResultAt: t0.Add(50 * time.Millisecond)},
			// Unknown for 2s, found: one episode. The vendor charged twice.
			{ID: "op_b", Scenario: eval.ScenarioTimeoutAfterCommit, State: ok, Effects: 2, Events: history(t0,
				op.EventDispatch, pd, dsp, 0.0, op.EventOutcomeUnknown, dsp, unk, 1.0, op.EventSucceed, unk, ok, 3.0)},
			// Two episodes, 1s then 3s, resolved by a retry.
			{ID: "op_c", Scenario: eval.ScenarioTimeoutBeforeCommit, State: ok, Effects: 1, Events: history(t0,
				op.EventOutcomeUnknown, dsp, unk, 0.0, op.EventFailRetryable, unk, fr, 1.0, op.EventRetry, fr, pd, 1.0,
				op.EventDispatch, pd, dsp, 1.5, op.EventOutcomeUnknown, dsp, unk, 2.0, op.EventSucceed, unk, ok, 5.0)},
			// Unknown, then a person: 4s, escalated with a reason.
			{ID: "op_d", Scenario: eval.ScenarioTimeoutAfterCommit, State: esc, Effects: 1, Events: []eval.EventObs{
				{Event: op.EventOutcomeUnknown, From: dsp, To: unk, At: t0},
				{Event: op.EventEscalate, From: unk, To: esc, At: t0.Add(4 * time.Second), Reason: "lookups keep failing: timed out"}}},
			// Still unknown at the end: an open episode, unsettled.
			{ID: "op_e", Scenario: eval.ScenarioTimeoutAfterCommit, State: unk, Events: history(t0,
				op.EventOutcomeUnknown, dsp, unk, 0.0)},
			// The ledger says success, the vendor has nothing.
			{ID: "op_f", Scenario: eval.ScenarioDuplicates, State: ok},
			// A compensation: not the corpus's, not a disagreement.
			{ID: "op_g", Scenario: eval.ScenarioDuplicates, State: ok, Compensation: true},
		},
		Actions: []eval.ActionObs{
			// The re-plan arrived first and created the operation: recognized all the same.
			{ID: "a", Scenario: eval.ScenarioSuccess, PublishedAt: t0, Messages: []eval.MessageObs{
				{EventID: "e1", Kind: eval.MsgOriginal, Decision: op.DecisionDuplicateOperation, OperationID: "op_a", Redeliveries: 2},
				{EventID: "e1", Kind: eval.MsgRedeliveryNoMsgID, Decision: op.DecisionDuplicateOperation, OperationID: "op_a", Redeliveries: 2},
				{EventID: "e2", Kind: eval.MsgReplan, Decision: op.DecisionNew, OperationID: "op_a"}}},
			{ID: "b", Scenario: eval.ScenarioTimeoutAfterCommit, Messages: []eval.MessageObs{
				{EventID: "e3", Kind: eval.MsgOriginal, Decision: op.DecisionNew, OperationID: "op_b"}}},
			// A re-plan the ledger took for a new action: a second operation, one more effect.
			{ID: "c", Scenario: eval.ScenarioTimeoutBeforeCommit, Messages: []eval.MessageObs{
				{EventID: "e4", Kind: eval.MsgOriginal, Decision: op.DecisionNew, OperationID: "op_c"},
				{EventID: "e5", Kind: eval.MsgReplan, Decision: op.DecisionNew, OperationID: "op_d"}}},
			{ID: "e", Scenario: eval.ScenarioTimeoutAfterCommit, Messages: []eval.MessageObs{
				{EventID: "e6", Kind: eval.MsgOriginal, Decision: op.DecisionNew, OperationID: "op_e"}}},
			{ID: "f", Scenario: eval.ScenarioDuplicates, Messages: []eval.MessageObs{
				{EventID: "e7", Kind: eval.MsgOriginal, Decision: op.DecisionNew, OperationID: "op_f"}}},
			// A near-duplicate wrongly taken for op_f: a false dedupe.
			{ID: "g", Scenario: eval.ScenarioDuplicates, NearDuplicate: true, Messages: []eval.MessageObs{
				{EventID: "e8", Kind: eval.MsgOriginal, Decision: op.DecisionDuplicateOperation, OperationID: "op_f"}}},
			// A near-duplicate answered conflict, and a message that never reached the ledger.
			{ID: "h", Scenario: eval.ScenarioDuplicates, NearDuplicate: true, Messages: []eval.MessageObs{
				{EventID: "e9", Kind: eval.MsgOriginal, Decision: op.DecisionConflict, OperationID: "op_f"},
				{EventID: "e10", Kind: eval.MsgReplan}}},
		},
		Entities: []eval.EntityObs{
			{Scenario: eval.ScenarioTimeoutAfterCommit, Kind: vendors.KindCapture, Entity: "ord_b", Effects: 2, Actions: 1},
			// Two distinct actions on one order, one effect each: no excess.
			{Scenario: eval.ScenarioDuplicates, Kind: vendors.KindCapture, Entity: "ord_f", Effects: 2, Actions: 2},
			{Scenario: eval.ScenarioDuplicates, Kind: vendors.KindEmail, Entity: "x@example.com", Effects: 4, Actions: 1},
		},
		UnattributedEffects: 1, JetStreamDeduped: 3, VendorWrites: 14, VendorLookups: 7,
	}
	k := eval.Compute(obs)

	require.Equal(t, 7, k.Actions)
	require.Equal(t, 7, k.Operations)
	require.Equal(t, 11, k.Messages)
	// By key: b has 2 effects (1 extra); c's two operations have 1 each (1 extra).
	require.Equal(t, 2, k.DuplicateEffectsByKey)
	// By entity: ord_b 2 for 1 action (1), the mailbox 4 for 1 (3).
	require.Equal(t, 4, k.DuplicateEffectsByEntity)
	require.Equal(t, 4, k.DuplicateEffects)
	require.InDelta(t, 4.0/7*10000, k.DuplicatesPer10k, 1e-9)
	require.Equal(t, []string{"op_b", "op_c", "op_d"}, k.DuplicateOperationIDs)
	require.Equal(t, 1, k.UnattributedEffects)

	// b, c, d and e were ever unknown; b and c were resolved, d escalated, e is open.
	require.Equal(t, 4, k.UnknownOutcomeOps)
	require.InDelta(t, 4.0/7, k.UnknownOutcomeRate, 1e-9)
	require.Equal(t, 2, k.ResolvedWithoutHuman)
	require.InDelta(t, 0.5, k.ResolvedWithoutHumanShare, 1e-9)
	require.Equal(t, 1, k.UnknownEscalated)
	// Episodes: 2s (b), 1s and 3s (c), 4s (d); e's is open.
	require.Equal(t, 4, k.ReconciliationEpisodes)
	require.Equal(t, 1, k.ReconciliationOpen)
	require.InDelta(t, 2500.0, k.ReconciliationMeanMS, 1e-9)
	require.InDelta(t, 4000.0, k.ReconciliationP99MS, 1e-9)
	require.InDelta(t, 4000.0, k.ReconciliationMaxMS, 1e-9)

	require.Equal(t, 2, k.NearDuplicateProbes)
	require.Equal(t, 2, k.FalseDedupes) // g and h
	require.InDelta(t, 2.0/7, k.FalseDedupeRate, 1e-9)
	require.Equal(t, 1, k.ReplansNotRecognized) // c's re-plan; h's never reached the ledger
	require.Equal(t, 1, k.UnansweredMessages)

	// a: 50ms to the final result, 10ms of it at the vendor.
	require.Equal(t, 1, k.LatencySamples)
	require.InDelta(t, 40.0, k.AddedLatencyP50MS, 1e-9)
	require.InDelta(t, 40.0, k.AddedLatencyP99MS, 1e-9)
	require.InDelta(t, 50.0, k.EndToEndP50MS, 1e-9)
	require.InDelta(t, 10.0, k.VendorTimeP50MS, 1e-9)

	require.Equal(t, 1, k.Unsettled)
	require.Equal(t, []string{"op_e"}, k.UnsettledIDs)
	require.Equal(t, map[string]int{"lookups keep failing": 1}, k.Escalations)
	require.Equal(t, map[string]int{"completed_success": 5, "escalated": 1, "unknown_outcome": 1}, k.FinalStates)
	require.Equal(t, map[string]int{"new": 6, "duplicate_operation": 2, "conflict": 1, "duplicate_event": 2, "jetstream_duplicate": 3}, k.Decisions)
	require.Equal(t, 1, k.SuccessWithoutEffect)
	require.Zero(t, k.FailedWithEffect)
	require.InDelta(t, 2.0, k.VendorWritesPerOperation, 1e-9)
	require.InDelta(t, 1.0, k.VendorLookupsPerOperation, 1e-9)

	// One scenario's share of the same observations.
	s := eval.Compute(obs.Filter(eval.ScenarioTimeoutAfterCommit))
	require.Equal(t, 2, s.Actions)
	require.Equal(t, 3, s.Operations)
	require.Equal(t, 1, s.DuplicateEffects)
	require.Equal(t, 3, s.UnknownOutcomeOps)
	require.Zero(t, s.LatencySamples)
}

func TestComputeEmpty(t *testing.T) {
	t.Parallel()
	k := eval.Compute(eval.Observations{})
	require.Zero(t, k.DuplicatesPer10k)
	require.Zero(t, k.UnknownOutcomeRate)
	require.Zero(t, k.ResolvedWithoutHumanShare)
	require.Zero(t, k.ReconciliationMeanMS)
	require.Zero(t, k.FalseDedupeRate)
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	var xs []time.Duration
	for i := 1; i <= 200; i++ {
		xs = append(xs, time.Duration(i)*time.Millisecond)
	}
	require.Equal(t, 100*time.Millisecond, eval.Percentile(xs, 0.5))
	require.Equal(t, 198*time.Millisecond, eval.Percentile(xs, 0.99))
	require.Equal(t, 200*time.Millisecond, eval.Percentile(xs, 1))
	require.Equal(t, time.Millisecond, eval.Percentile(xs, 0))
	require.Equal(t, 7*time.Millisecond, eval.Percentile([]time.Duration{7 * time.Millisecond}, 0.99))
	require.Zero(t, eval.Percentile(nil, 0.5))
}

func TestReasonClass(t *testing.T) {
	t.Parallel()
	require.Equal(t, "lookups keep failing", eval.ReasonClass("lookups keep failing: httpadapter: lookup failed: timed out"))
	require.Equal(t, "the vendor offers no lookup; a person must check", eval.ReasonClass("the vendor offers no lookup; a person must check"))
	require.Equal(t, "(no reason recorded)", eval.ReasonClass(""))
}

// A set-back sequence whose third step was answered duplicate_operation
// (the ledger took "active" again for a repeat of the first step) is a
// false suppression, and its record keeps "suspended": the run fails.
// Breaking it: counting only duplicates would let the lost step pass.
func TestSetBackLostIsAFailure(t *testing.T) {
	t.Parallel()
	msg := func(id string, d op.Decision, opID string) eval.MessageObs {
		return eval.MessageObs{EventID: id, Kind: eval.MsgOriginal, Decision: d, OperationID: opID}
	}
	obs := eval.Observations{
		Actions: []eval.ActionObs{
			{ID: "s0", Scenario: eval.ScenarioSetBack, Tool: "update_crm_record", Messages: []eval.MessageObs{msg("e0", op.DecisionNew, "op_0")}},
			{ID: "s1", Scenario: eval.ScenarioSetBack, Tool: "update_crm_record", Messages: []eval.MessageObs{msg("e1", op.DecisionNew, "op_1")}},
			{ID: "s2", Scenario: eval.ScenarioSetBack, Tool: "update_crm_record", Messages: []eval.MessageObs{msg("e2", op.DecisionDuplicateOperation, "op_0")}},
		},
		Operations: []eval.OperationObs{
			{ID: "op_0", Scenario: eval.ScenarioSetBack, Tool: "update_crm_record", State: op.StateCompletedSuccess, Effects: 1},
			{ID: "op_1", Scenario: eval.ScenarioSetBack, Tool: "update_crm_record", State: op.StateCompletedSuccess, Effects: 1},
		},
		Entities: []eval.EntityObs{{Scenario: eval.ScenarioSetBack, Kind: vendors.KindCRM, Entity: "rec_1", Effects: 2, Actions: 3,
			MustApply: true, WrongFinal: true}},
	}
	k := eval.Compute(obs)
	require.Equal(t, 1, k.FalseDedupes)
	require.InDelta(t, 10000.0/3, k.FalseSuppressionsPer10k, 0.01)
	require.Equal(t, 1, k.LostSetBacks)
	require.Zero(t, k.DuplicateEffects)
	rep := &eval.Report{KPIs: k}
	require.True(t, rep.Failed())
	require.Contains(t, rep.Verdict(), "1 false suppression(s)")
}

// What the agent was never told fails a run: an intent published whose
// answer never reached the agent's consumer of RESULTS (its inbox row may
// exist: the answer was parked, say), and an operation the agent asked for
// that the ledger settled while its settling result never arrived. A
// message JetStream dropped as a copy shares its original's answer; a
// compensation nobody asked for is owed nothing.
//
// Breaking it: counting "answered" from the inbox (as the eval did) passes
// both runs below.
func TestComputeCountsWhatTheAgentWasNotTold(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 29, 2, 13, 0, 0, time.UTC)
	obs := eval.Observations{
		Actions: []eval.ActionObs{
			{ID: "a", Scenario: eval.ScenarioSuccess, Messages: []eval.MessageObs{
				{EventID: "e1", Kind: eval.MsgOriginal, Decision: op.DecisionNew, OperationID: "op_a", Published: true, Answered: true},
				{EventID: "e1", Kind: eval.MsgRedeliveryMsgID, Published: true, Answered: true}}},
			{ID: "b", Scenario: eval.ScenarioSuccess, Messages: []eval.MessageObs{
				{EventID: "e2", Kind: eval.MsgOriginal, Decision: op.DecisionNew, OperationID: "op_b", Published: true}}},
		},
		Operations: []eval.OperationObs{
			{ID: "op_a", Scenario: eval.ScenarioSuccess, State: op.StateCompletedSuccess, Effects: 1, AskedFor: true, FinalResultAt: t0},
			{ID: "op_b", Scenario: eval.ScenarioSuccess, State: op.StateCompletedSuccess, Effects: 1, AskedFor: true},
			{ID: "op_c", Scenario: eval.ScenarioSuccess, State: op.StateCompletedSuccess, Compensation: true},
		},
	}
	k := eval.Compute(obs)
	require.Equal(t, 1, k.UnansweredIntents)
	require.Equal(t, 1, k.UntoldSettlements)
	require.Zero(t, k.UnansweredMessages, "the ledger decided on every message")
	rep := &eval.Report{KPIs: k}
	require.True(t, rep.Failed())
	require.Contains(t, rep.Verdict(), "1 unanswered intent(s), 1 settlement(s) the agent never received")
}
