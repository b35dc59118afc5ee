package main

import (
	"fmt"
	"io"
	"time"

	"github.com/opledger/opledger/internal/benchkit"
	"github.com/opledger/opledger/internal/store"
)

// benchReport is every figure of one bench run: what -json prints.
// Durations are in milliseconds (fields ending _ms) or seconds (_seconds).
type benchReport struct {
	RunID    string        `json:"run_id"`
	Started  time.Time     `json:"started"`
	Seconds  float64       `json:"seconds"`
	Settings benchSettings `json:"settings"`
	Where    []string      `json:"where"`
	// PGSSNote says why pg_stat_statements figures are missing, if they are.
	PGSSNote   string            `json:"pgss_note,omitempty"`
	Preload    *preloadReport    `json:"preload,omitempty"`
	Throughput *throughputReport `json:"throughput,omitempty"`
	Postgres   *commitRateReport `json:"postgres_commit_rate,omitempty"`
	// Ratio is opledger's throughput over Postgres's commit rate.
	Ratio      float64           `json:"ratio,omitempty"`
	Latency    []*latencyReport  `json:"latency,omitempty"`
	Duplicates *duplicatesReport `json:"duplicates,omitempty"`
	Baseline   *baselineReport   `json:"baseline,omitempty"`
	Steady     *steadyReport     `json:"steady,omitempty"`
}

type benchSettings struct {
	Ops             int     `json:"ops"`
	Warmup          int     `json:"warmup"`
	Concurrency     int     `json:"concurrency"`
	Dispatchers     int     `json:"dispatchers"`
	Relays          int     `json:"relays"`
	IngestWorkers   int     `json:"ingest_workers"`
	DispatchWorkers int     `json:"dispatch_workers"`
	DBConns         int     `json:"db_conns"`
	GroupStatements int     `json:"group_statements"`
	MaxBacklog      int     `json:"max_backlog"`
	Durable         bool    `json:"durable"`
	MemoryStreams   bool    `json:"memory_streams"`
	Arrivals        string  `json:"arrivals"`
	Floor           bool    `json:"floor"`
	Rate            string  `json:"rate"`
	HighLoadPercent float64 `json:"high_load_percent"`
	LatencySeconds  float64 `json:"latency_seconds"`
	PGSeconds       float64 `json:"pg_seconds"`
	Preload         int     `json:"preload"`
	DurationSeconds float64 `json:"duration_seconds,omitempty"`
	IntervalSeconds float64 `json:"interval_seconds,omitempty"`
	PGSS            bool    `json:"pgss"`
	CPUs            int     `json:"cpus"`
	GOMAXPROCS      int     `json:"gomaxprocs"`
	GOGC            string  `json:"gogc"`
	GoVersion       string  `json:"go_version"`
	PostgresVersion string  `json:"postgres_version"`
}

type throughputReport struct {
	Ops       int                `json:"ops"`
	Seconds   float64            `json:"seconds"`
	OpsPerSec float64            `json:"ops_per_sec"`
	Stages    *stageReport       `json:"stages,omitempty"`
	CPU       *cpuReport         `json:"cpu,omitempty"`
	Group     *groupReport       `json:"group_commit,omitempty"`
	Cluster   *clusterCostReport `json:"cluster,omitempty"`
	PGSS      *pgssReport        `json:"pgss,omitempty"`
}

// groupReport is how many writes of each kind shared a group-commit
// statement over a span of the run (store.GroupStats): each statement
// costs Postgres about as much whatever its rows, so the fewer writes per
// statement, the more each operation costs.
type groupReport struct {
	Submit  float64 `json:"submit_writes_per_statement"`
	Claim   float64 `json:"claim_writes_per_statement"`
	Outcome float64 `json:"outcome_writes_per_statement"`
}

func groupCost(before, after store.GroupStats) *groupReport {
	per := func(b, a store.GroupCounts) float64 {
		if a.Statements == b.Statements {
			return 0
		}
		return float64(a.Writes-b.Writes) / float64(a.Statements-b.Statements)
	}
	return &groupReport{Submit: per(before.Submits, after.Submits), Claim: per(before.Claims, after.Claims),
		Outcome: per(before.Outcomes, after.Outcomes)}
}

func (g *groupReport) String() string {
	return fmt.Sprintf("writes per group statement: intents %.1f, claims %.1f, outcomes %.1f", g.Submit, g.Claim, g.Outcome)
}

// stageReport is where the throughput run's operations spent their time,
// from the ledger's event times.
type stageReport struct {
	RecordedToClaimedP50 float64 `json:"recorded_to_claimed_p50_ms"`
	RecordedToClaimedP99 float64 `json:"recorded_to_claimed_p99_ms"`
	ClaimedToOutcomeP50  float64 `json:"claimed_to_outcome_p50_ms"`
	ClaimedToOutcomeP99  float64 `json:"claimed_to_outcome_p99_ms"`
	RecordedOverMs       float64 `json:"recorded_over_ms"`
}

func (s *stageReport) print(w io.Writer, prefix string) {
	if s == nil {
		return
	}
	fmt.Fprintf(w, "  %s, recorded→claimed by a dispatcher: p50 %.1fms p99 %.1fms; claimed→outcome recorded: p50 %.1fms p99 %.1fms; intents recorded over %.0fms\n",
		prefix, s.RecordedToClaimedP50, s.RecordedToClaimedP99, s.ClaimedToOutcomeP50, s.ClaimedToOutcomeP99, s.RecordedOverMs)
}

// clusterCostReport is what the whole cluster wrote during a run, per
// operation: transaction ids assigned (write transactions) and WAL bytes.
type clusterCostReport struct {
	Ops                    int     `json:"ops"`
	WriteTransactionsPerOp float64 `json:"write_transactions_per_op"`
	WALBytesPerOp          float64 `json:"wal_bytes_per_op"`
	WALBytesPerSec         float64 `json:"wal_bytes_per_sec"`
}

func (c *clusterCostReport) print(w io.Writer, indent string) {
	if c == nil {
		return
	}
	fmt.Fprintf(w, "%sper operation, whole cluster: %.2f write transactions (transaction ids), %s WAL (%s/s)\n", indent,
		c.WriteTransactionsPerOp, bytesIEC(int64(c.WALBytesPerOp)), bytesIEC(int64(c.WALBytesPerSec)))
}

type commitRateReport struct {
	Connections   int     `json:"connections"`
	Seconds       float64 `json:"seconds"`
	CommitsPerSec float64 `json:"commits_per_sec"`
}

// latencyReport is one open-loop run at a fixed rate: opledger end to end
// (or the baseline's answer), a direct vendor call with the same arrivals,
// and the difference.
type latencyReport struct {
	Label    string  `json:"label"`
	Rate     float64 `json:"rate"`
	Arrivals string  `json:"arrivals"`
	Seconds  float64 `json:"seconds"`
	Intents  int     `json:"intents"`
	// E2E is intent → completed_success result (for the baseline: request
	// → recorded answer), from each arrival's due time.
	E2E    benchkit.Dist `json:"e2e"`
	Direct benchkit.Dist `json:"direct"`
	// OverheadP50 and OverheadP99 are E2E's quantiles minus Direct's.
	OverheadP50 float64 `json:"overhead_p50_ms"`
	OverheadP99 float64 `json:"overhead_p99_ms"`
	Lost        int     `json:"lost"`
	Failed      int     `json:"failed"`
	// MaxLateMs is how far behind its schedule the generator fell at
	// worst (already included in the latencies).
	MaxLateMs       float64 `json:"max_late_ms"`
	DirectMaxLateMs float64 `json:"direct_max_late_ms"`
	// PGSS is what the run's operations cost Postgres, statement by
	// statement (-pgss; the moderate load only).
	PGSS *pgssReport `json:"pgss,omitempty"`
	// Floor is the same arrivals through the floor of the path (-floor;
	// the moderate load only).
	Floor *floorReport `json:"floor,omitempty"`
	// Stages splits the run's time in the ledger by its own clock.
	Stages *stageReport `json:"stages,omitempty"`
}

func (r *latencyReport) print(w io.Writer, note string) {
	fmt.Fprintf(w, "latency at %.0f ops/s (%s, %s arrivals, %d intents in %s): intent→completed_success p50 %s p99 %s; direct vendor call p50 %s p99 %s\n",
		r.Rate, note, r.Arrivals, r.Intents, time.Duration(r.Seconds*float64(time.Second)), msStr(r.E2E.P50), msStr(r.E2E.P99), msStr(r.Direct.P50), msStr(r.Direct.P99))
	fmt.Fprintf(w, "  overhead added by opledger: p50 %s  p99 %s%s\n", msStr(r.OverheadP50), msStr(r.OverheadP99), r.trouble())
	r.Stages.print(w, "in the ledger")
	r.Floor.print(w)
	r.PGSS.print(w, "  ")
}

func (r *latencyReport) trouble() string {
	s := ""
	if r.Lost > 0 || r.Failed > 0 {
		s += fmt.Sprintf("  (%d without an answer within -drain of the last arrival, %d answered otherwise)", r.Lost, r.Failed)
	}
	if late := max(r.MaxLateMs, r.DirectMaxLateMs); late > 5 {
		s += fmt.Sprintf("  (the generator fell up to %s behind its schedule; included)", msStr(late))
	}
	return s
}

func msStr(ms float64) string { return fmt.Sprintf("%.2fms", ms) }

// duplicatesReport is how fast repeated intents are answered.
type duplicatesReport struct {
	Rate     float64 `json:"rate"`
	Arrivals string  `json:"arrivals"`
	Intents  int     `json:"intents"`
	// DuplicateOperation: an answered intent again under a new event id,
	// same business key. DuplicateEvent: the same event id again.
	DuplicateOperation benchkit.Dist `json:"duplicate_operation"`
	DuplicateEvent     benchkit.Dist `json:"duplicate_event"`
	Lost               int           `json:"lost"`
	Failed             int           `json:"failed"`
	MaxLateMs          float64       `json:"max_late_ms"`
	// Floor is the same arrivals through the floor of a repeat's path
	// (-floor).
	Floor *floorReport `json:"floor,omitempty"`
}

func (d *duplicatesReport) print(w io.Writer) {
	fmt.Fprintf(w, "duplicate answers at %.0f ops/s (%s arrivals, %d intents): same business key under a new event id (duplicate_operation) p50 %s p99 %s; same event id (duplicate_event) p50 %s p99 %s",
		d.Rate, d.Arrivals, d.Intents, msStr(d.DuplicateOperation.P50), msStr(d.DuplicateOperation.P99), msStr(d.DuplicateEvent.P50), msStr(d.DuplicateEvent.P99))
	if d.Lost > 0 || d.Failed > 0 {
		fmt.Fprintf(w, " (%d without an answer, %d answered otherwise)", d.Lost, d.Failed)
	}
	fmt.Fprintln(w)
	d.Floor.print(w)
}

// sideBySide prints opledger's figures beside the baseline's.
func (b *bench) sideBySide() {
	bl := b.rep.Baseline
	if bl == nil || b.rep.Throughput == nil {
		return
	}
	w := b.out
	fmt.Fprintf(w, "side by side (same run, same vendor, same concurrency and arrivals):  %12s %12s\n", "opledger", "baseline")
	fmt.Fprintf(w, "  %-68s %12.0f %12.0f\n", "throughput, ops/s", b.rep.Throughput.OpsPerSec, bl.OpsPerSec)
	if c, bc := b.rep.Throughput.CPU, bl.CPU; c != nil && bc != nil {
		fmt.Fprintf(w, "  %-68s %12.3f %12.3f\n", "CPU ms per operation, this process", c.ProcessMsPerOp, bc.ProcessMsPerOp)
		if c.PostgresMsPerOp != nil && bc.PostgresMsPerOp != nil {
			fmt.Fprintf(w, "  %-68s %12.3f %12.3f\n", "CPU ms per operation, Postgres", *c.PostgresMsPerOp, *bc.PostgresMsPerOp)
		}
	}
	if c, bc := b.rep.Throughput.Cluster, bl.Cluster; c != nil && bc != nil {
		fmt.Fprintf(w, "  %-68s %12.2f %12.2f\n", "write transactions per operation", c.WriteTransactionsPerOp, bc.WriteTransactionsPerOp)
		fmt.Fprintf(w, "  %-68s %12.0f %12.0f\n", "WAL bytes per operation", c.WALBytesPerOp, bc.WALBytesPerOp)
	}
	if p, bp := b.rep.Throughput.PGSS, bl.PGSS; p != nil && bp != nil {
		fmt.Fprintf(w, "  %-68s %12.1f %12.1f\n", "statements per operation", p.StatementsPerOp, bp.StatementsPerOp)
		fmt.Fprintf(w, "  %-68s %12.3f %12.3f\n", "Postgres execution ms per operation", p.ExecMsPerOp, bp.ExecMsPerOp)
	}
	for i, l := range b.rep.Latency {
		if i >= len(bl.Latency) {
			break
		}
		o := bl.Latency[i]
		fmt.Fprintf(w, "  %-68s %12s %12s\n", fmt.Sprintf("overhead p50 at %.0f ops/s", l.Rate), msStr(l.OverheadP50), msStr(o.OverheadP50))
		fmt.Fprintf(w, "  %-68s %12s %12s\n", fmt.Sprintf("overhead p99 at %.0f ops/s", l.Rate), msStr(l.OverheadP99), msStr(o.OverheadP99))
	}
	if d := b.rep.Duplicates; d != nil && bl.Duplicate != nil {
		fmt.Fprintf(w, "  %-68s %12s %12s\n", "duplicate answer p50 (same business key)", msStr(d.DuplicateOperation.P50), msStr(bl.Duplicate.P50))
		fmt.Fprintf(w, "  %-68s %12s %12s\n", "duplicate answer p99 (same business key)", msStr(d.DuplicateOperation.P99), msStr(bl.Duplicate.P99))
	}
}
