package telemetry

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are opledger's Prometheus metrics. A nil *Metrics records nothing,
// so packages can be used without a registry (tests, embedding).
type Metrics struct {
	intents     *prometheus.CounterVec
	intentLat   *prometheus.HistogramVec
	attempts    *prometheus.CounterVec
	dispatchLat *prometheus.HistogramVec
	transitions *prometheus.CounterVec
	redelivered *prometheus.CounterVec
	reconciled  *prometheus.CounterVec
	redriven    *prometheus.CounterVec
	maintained  *prometheus.CounterVec
	capped      *prometheus.CounterVec
	parked      prometheus.Gauge
	leader      prometheus.Gauge
	refused     *prometheus.CounterVec
	fallbacks   *prometheus.CounterVec
	held        *prometheus.CounterVec
	backlog     prometheus.Gauge

	webhookDeliveries *prometheus.CounterVec
	webhookRejected   *prometheus.CounterVec
	webhookEvidence   *prometheus.CounterVec
	webhookSettled    *prometheus.CounterVec
}

// NewMetrics registers the metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		intents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "opledger_intents_total", Help: "Intents ingested, by tool and dedupe decision (new, duplicate_event, duplicate_operation, conflict, rejected).",
		}, []string{"tool", "decision"}),
		intentLat: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "opledger_intent_seconds", Help: "Time to record an intent in the ledger.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"decision"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "opledger_attempts_total", Help: "Dispatch attempts by tool, side-effect class, outcome and error category.",
		}, []string{"tool", "class", "outcome", "category"}),
		dispatchLat: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "opledger_vendor_call_seconds", Help: "Vendor call latency by tool and outcome.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"tool", "outcome"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "opledger_transitions_total", Help: "Operation state transitions by tool and target state.",
		}, []string{"tool", "to"}),
		redelivered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "opledger_commands_suppressed_total", Help: "Commands that arrived for an operation past the state they were written for and changed nothing (redeliveries, stale epochs).",
		}, []string{"kind", "tool"}),
		reconciled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "opledger_reconciliations_total", Help: "Reconciliation results by tool and verdict (found, not_found, pending, error, escalated; webhook: settled by a webhook that had already told, without a lookup).",
		}, []string{"tool", "verdict"}),
		redriven: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "opledger_commands_redriven_total", Help: "Commands written again because an operation waited too long with none in the outbox (a command lost after publish).",
		}, []string{"kind", "tool"}),
	}
	m.maintained = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "opledger_maintenance_rows_total", Help: "Rows the maintenance leader acted on, by task (sweep, strand, redrive, retention_outbox, retention_inbox).",
	}, []string{"task"})
	m.capped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "opledger_maintenance_capped_total", Help: "Maintenance passes that stopped at their batch cap with more rows waiting, by task.",
	}, []string{"task"})
	m.parked = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "opledger_outbox_parked", Help: "Outbox rows parked after repeated refusals by NATS; each needs a person.",
	})
	m.leader = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "opledger_maintenance_leader", Help: "1 while this process leads maintenance (sweeper, re-drive, retention).",
	})
	m.refused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "opledger_intents_refused_total", Help: "Intents refused (answered rejected or conflict), by stable reason (wire.Reason*: too_large, invalid_utf8, not_json, duplicate_field, unknown_field, unknown_tool, invalid_args, refused_by_guard, conflict, …).",
	}, []string{"reason"})
	m.webhookDeliveries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "opledger_webhook_deliveries_total", Help: "Signed webhook deliveries accepted, by provider and result (evidence, unmapped: an event type the registry does not map, duplicate: a redelivery that changed nothing).",
	}, []string{"provider", "result"})
	m.webhookRejected = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "opledger_webhook_rejected_total", Help: "Webhook deliveries refused and not stored, by provider (_unknown for a provider the registry does not have) and reason.",
	}, []string{"provider", "reason"})
	m.webhookEvidence = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "opledger_webhook_evidence_total", Help: "Webhook evidence decided, by provider and status (applied, confirmed, out_of_band, contradiction, expired).",
	}, []string{"provider", "status"})
	m.webhookSettled = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "opledger_webhook_settlements_total", Help: "Operations settled by a webhook rather than by their attempt or a lookup, by provider, tool and the state they reached.",
	}, []string{"provider", "tool", "to"})
	m.fallbacks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "opledger_group_fallbacks_total", Help: "Group-commit statements that failed, so that their writes went one by one, by kind (submit, claim, outcome) and cause (conflict: a known event id or key, expected for submits; retryable: a deadlock; other: worth a look).",
	}, []string{"kind", "cause"})
	reg.MustRegister(m.fallbacks)
	m.held = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "opledger_intents_held_total", Help: "Intents planner-ingest held back while the dispatch backlog was over its bound, by how the hold ended (admitted: the backlog fell; timed_out: the hold's bound passed and the intent went in anyway).",
	}, []string{"end"})
	m.backlog = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "opledger_dispatch_backlog", Help: "Dispatch commands no dispatcher has taken yet, as planner-ingest last read it (JetStream's pending count of the dispatchers' consumer).",
	})
	reg.MustRegister(m.held, m.backlog)
	reg.MustRegister(m.intents, m.intentLat, m.attempts, m.dispatchLat, m.transitions, m.redelivered, m.reconciled, m.redriven,
		m.maintained, m.capped, m.parked, m.leader, m.webhookDeliveries, m.webhookRejected, m.webhookEvidence, m.webhookSettled, m.refused)
	return m
}

// Intent counts an ingested intent.
func (m *Metrics) Intent(tool, decision string, d time.Duration) {
	if m == nil {
		return
	}
	m.intents.WithLabelValues(tool, decision).Inc()
	m.intentLat.WithLabelValues(decision).Observe(d.Seconds())
}

// IntentHeld counts an intent held by admission control; timedOut says it
// went in because its hold ran out rather than because the backlog fell.
func (m *Metrics) IntentHeld(timedOut bool) {
	if m == nil {
		return
	}
	end := "admitted"
	if timedOut {
		end = "timed_out"
	}
	m.held.WithLabelValues(end).Inc()
}

// DispatchBacklog records the dispatch backlog planner-ingest last read.
func (m *Metrics) DispatchBacklog(n uint64) {
	if m == nil {
		return
	}
	m.backlog.Set(float64(n))
}

// IntentRefused counts an intent refused for reason (a wire.Reason*).
func (m *Metrics) IntentRefused(reason string) {
	if m == nil {
		return
	}
	m.refused.WithLabelValues(reason).Inc()
}

// Attempt counts a finished dispatch attempt.
func (m *Metrics) Attempt(tool, class, outcome, category string, d time.Duration) {
	if m == nil {
		return
	}
	m.attempts.WithLabelValues(tool, class, outcome, category).Inc()
	m.dispatchLat.WithLabelValues(tool, outcome).Observe(d.Seconds())
}

// Transition counts a state change.
func (m *Metrics) Transition(tool, to string) {
	if m == nil {
		return
	}
	m.transitions.WithLabelValues(tool, to).Inc()
}

// Suppressed counts a command that changed nothing because the ledger had moved on.
func (m *Metrics) Suppressed(kind, tool string) {
	if m == nil {
		return
	}
	m.redelivered.WithLabelValues(kind, tool).Inc()
}

// Reconciled counts a reconciliation verdict.
func (m *Metrics) Reconciled(tool, verdict string) {
	if m == nil {
		return
	}
	m.reconciled.WithLabelValues(tool, verdict).Inc()
}

// Redriven counts a command written again for an unattended operation.
func (m *Metrics) Redriven(kind, tool string) {
	if m == nil {
		return
	}
	m.redriven.WithLabelValues(kind, tool).Inc()
}

// Maintained counts rows a maintenance task acted on.
func (m *Metrics) Maintained(task string, n int) {
	if m == nil || n == 0 {
		return
	}
	m.maintained.WithLabelValues(task).Add(float64(n))
}

// GroupFallback counts a group-commit statement whose writes went one by one.
func (m *Metrics) GroupFallback(kind, cause string) {
	if m == nil {
		return
	}
	m.fallbacks.WithLabelValues(kind, cause).Inc()
}

// Capped counts a maintenance pass that hit its batch cap.
func (m *Metrics) Capped(task string) {
	if m == nil {
		return
	}
	m.capped.WithLabelValues(task).Inc()
}

// Parked sets the number of parked outbox rows.
func (m *Metrics) Parked(n int64) {
	if m == nil {
		return
	}
	m.parked.Set(float64(n))
}

// Leader records whether this process leads maintenance.
func (m *Metrics) Leader(leading bool) {
	if m == nil {
		return
	}
	v := 0.0
	if leading {
		v = 1
	}
	m.leader.Set(v)
}

// WebhookDelivery counts a signed delivery accepted from provider.
func (m *Metrics) WebhookDelivery(provider, result string) {
	if m == nil {
		return
	}
	m.webhookDeliveries.WithLabelValues(provider, result).Inc()
}

// WebhookRejected counts a delivery refused for reason.
func (m *Metrics) WebhookRejected(provider, reason string) {
	if m == nil {
		return
	}
	m.webhookRejected.WithLabelValues(provider, reason).Inc()
}

// WebhookEvidence counts evidence decided with status.
func (m *Metrics) WebhookEvidence(provider, status string) {
	if m == nil {
		return
	}
	m.webhookEvidence.WithLabelValues(provider, status).Inc()
}

// WebhookSettled counts an operation of tool settled by a webhook of provider.
func (m *Metrics) WebhookSettled(provider, tool, to string) {
	if m == nil {
		return
	}
	m.webhookSettled.WithLabelValues(provider, tool, to).Inc()
}
