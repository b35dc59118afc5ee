package eval

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteJSON writes the report as one JSON object, with the command line
// that produced it.
func (r *Report) WriteJSON(w io.Writer, command string) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	config := make(map[string]string, len(r.Settings))
	for _, s := range r.Settings {
		config[s.Key] = s.Value
	}
	return enc.Encode(struct {
		Command string            `json:"command"`
		Config  map[string]string `json:"config"`
		*Report
	}{command, config, r})
}

// WriteHeader writes the command line and the configuration, so that a run
// can be repeated.
func WriteHeader(w io.Writer, command string, settings []Setting) {
	fmt.Fprintf(w, "# %s\n", command)
	for _, s := range settings {
		fmt.Fprintf(w, "#   %-34s %s\n", s.Name+":", s.Value)
	}
}

// WriteText writes the KPIs, the scenarios, kill mode's counts and the
// findings as tables.
func (r *Report) WriteText(w io.Writer) {
	k := r.KPIs
	for _, s := range r.Where {
		fmt.Fprintf(w, "#   %s\n", s)
	}
	fmt.Fprintf(w, "# run %s took %s\n\n", r.RunID, (time.Duration(r.Seconds * float64(time.Second))).Round(100*time.Millisecond))

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(name, value, detail string) { fmt.Fprintf(tw, "%s\t%s\t%s\n", name, value, detail) }
	row("KPI", "value", "")
	row("duplicate side effects per 10k operations", fmt.Sprintf("%.2f", k.DuplicatesPer10k),
		fmt.Sprintf("%d effects beyond one per business action in %d operations (by key %d, by order/mailbox %d; %d unattributed)",
			k.DuplicateEffects, k.Operations, k.DuplicateEffectsByKey, k.DuplicateEffectsByEntity, k.UnattributedEffects))
	row("unknown-outcome rate", pct(k.UnknownOutcomeRate), fmt.Sprintf("%d of %d operations ever in unknown_outcome", k.UnknownOutcomeOps, k.Operations))
	row("ambiguous outcomes resolved without a human", pct(k.ResolvedWithoutHumanShare),
		fmt.Sprintf("%d of %d ended completed_* or failed_*; %d escalated; %d operations settled by a vendor webhook", k.ResolvedWithoutHuman, k.UnknownOutcomeOps, k.UnknownEscalated, k.ResolvedByWebhook))
	row("reconciliation time mean / p99", fmt.Sprintf("%s / %s", msStr(k.ReconciliationMeanMS), msStr(k.ReconciliationP99MS)),
		fmt.Sprintf("unknown_outcome entered → left, %d episodes, max %s, %d still open", k.ReconciliationEpisodes, msStr(k.ReconciliationMaxMS), k.ReconciliationOpen))
	row("false suppressions per 10k actions", fmt.Sprintf("%.2f", k.FalseSuppressionsPer10k),
		fmt.Sprintf("%d of %d business actions answered duplicate_operation/conflict without running (rate %s); %d near-duplicate probes; %d set-back sequence(s) lost",
			k.FalseDedupes, k.Actions, pct(k.FalseDedupeRate), k.NearDuplicateProbes, k.LostSetBacks))
	row("re-plans not recognized", fmt.Sprint(k.ReplansNotRecognized), "same action under a new event id, not given the original's operation")
	row("added latency p50 / p99", fmt.Sprintf("%s / %s", msStr(k.AddedLatencyP50MS), msStr(k.AddedLatencyP99MS)),
		fmt.Sprintf("intent published → final result minus the attempt's vendor call, clean path (n=%d); end to end p50 %s p99 %s, vendor p50 %s",
			k.LatencySamples, msStr(k.EndToEndP50MS), msStr(k.EndToEndP99MS), msStr(k.VendorTimeP50MS)))
	row("operations not settled", fmt.Sprint(k.Unsettled), "neither final nor owned by a person at the end of the bounded wait")
	row("unanswered intents / untold settlements", fmt.Sprintf("%d / %d", k.UnansweredIntents, k.UntoldSettlements),
		"event ids published without a result reaching the agent / operations settled without their settling result reaching it")
	row("escalations by reason", fmt.Sprint(sumMap(k.Escalations)), counts(k.Escalations, "none"))
	row("ledger/vendor disagreements", fmt.Sprint(k.SuccessWithoutEffect+k.FailedWithEffect),
		fmt.Sprintf("%d completed_success without an effect, %d failed with one", k.SuccessWithoutEffect, k.FailedWithEffect))
	row("vendor requests per operation", fmt.Sprintf("%.2f / %.2f", k.VendorWritesPerOperation, k.VendorLookupsPerOperation), "writes / lookups: the cost of retries and reconciliation")
	row("messages / unanswered", fmt.Sprintf("%d / %d", k.Messages, k.UnansweredMessages), "decisions: "+counts(k.Decisions, "none"))
	row("final states", "", counts(k.FinalStates, "none"))
	tw.Flush()

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "scenario\tactions\tops\tmsgs\tunknown\tresolved\trecon mean\trecon p99\tadded p50\tescalated\tunsettled\tdups\tfalse dedupes\t\n")
	for _, s := range r.Scenarios {
		x := s.KPIs
		added := "-"
		if x.LatencySamples > 0 {
			added = msStr(x.AddedLatencyP50MS)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t\n", s.Name, x.Actions, x.Operations, x.Messages,
			pct(x.UnknownOutcomeRate), fmt.Sprintf("%d/%d", x.ResolvedWithoutHuman, x.UnknownOutcomeOps),
			msStr(x.ReconciliationMeanMS), msStr(x.ReconciliationP99MS), added, sumMap(x.Escalations), x.Unsettled, x.DuplicateEffects, x.FalseDedupes)
	}
	tw.Flush()
	fmt.Fprintln(w)
	for _, s := range r.Scenarios {
		fmt.Fprintf(w, "  %-30s %s\n", s.Name, counts(s.KPIs.FinalStates, "none"))
	}

	if r.NATSRestarts > 0 {
		fmt.Fprintf(w, "\nnats: the server was restarted %d times (its store kept)\n", r.NATSRestarts)
	}
	if r.Kill != nil {
		fmt.Fprintf(w, "\nkills: SIGKILL sent %s; failpoint crashes %s; unexpected exits %s; restarts %d (logs in %s)\n",
			counts(r.Kill.Kills, "none"), counts(r.Kill.Crashes, "none"), counts(r.Kill.Exits, "none"), r.Kill.Restarts, r.Kill.LogDir)
	}
	for _, f := range r.Findings {
		fmt.Fprintf(w, "\nFINDING %s: operation %s (%s, %s) is %s with %d effect(s) at the vendor, key %s\n",
			f.Kind, f.OperationID, f.Scenario, f.Tool, f.State, f.Effects, f.IdempotencyKey)
		for _, id := range slices.Sorted(maps.Keys(f.Messages)) {
			fmt.Fprintf(w, "  message %s → %s\n", id, f.Messages[id])
		}
		for _, e := range f.Events {
			fmt.Fprintf(w, "  event %2d %-17s %-17s → %-17s epoch=%d %s %s %s\n", e.Seq, e.Event, e.From, e.To, e.LeaseEpoch,
				e.At.UTC().Format("15:04:05.000"), e.Actor, string(e.Detail))
		}
		for _, a := range f.Attempts {
			fmt.Fprintf(w, "  attempt %d %s epoch=%d worker=%s %s→%s outcome=%s http=%d %s %s\n", a.Number, a.ID, a.LeaseEpoch, a.Worker,
				a.StartedAt.UTC().Format("15:04:05.000"), a.FinishedAt.UTC().Format("15:04:05.000"), a.Outcome, a.HTTPStatus, a.ErrorCategory, a.Error)
		}
	}
	fmt.Fprintf(w, "\n%s\n", r.Verdict())
}

func pct(x float64) string { return fmt.Sprintf("%.2f%%", 100*x) }

func msStr(v float64) string {
	if v >= 1000 {
		return fmt.Sprintf("%.2fs", v/1000)
	}
	return fmt.Sprintf("%.1fms", v)
}

func sumMap(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// counts renders "a 3, b 1", largest first.
func counts(m map[string]int, none string) string {
	if len(m) == 0 {
		return none
	}
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int {
		if m[a] != m[b] {
			return m[b] - m[a]
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}
