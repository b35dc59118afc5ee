package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opledger/opledger/internal/benchkit"
)

// baselineConns is the baseline's pool size: the services' default pool.
const baselineConns = 16

// baselineReport is the hand-rolled alternative measured in the same run.
type baselineReport struct {
	Workers     int                `json:"workers"`
	Connections int                `json:"connections"`
	Ops         int                `json:"ops"`
	Seconds     float64            `json:"seconds"`
	OpsPerSec   float64            `json:"ops_per_sec"`
	CPU         *cpuReport         `json:"cpu,omitempty"`
	Cluster     *clusterCostReport `json:"cluster,omitempty"`
	PGSS        *pgssReport        `json:"pgss,omitempty"`
	// Latency holds one run per load of opledger's latency runs, with the
	// same arrivals; Direct is opledger's run's direct vendor call.
	Latency []*latencyReport `json:"latency"`
	// Duplicate is the answer to a key already answered, at -rate.
	Duplicate     *benchkit.Dist `json:"duplicate,omitempty"`
	DuplicateRate float64        `json:"duplicate_rate,omitempty"`
}

// idemTable is the baseline: what a team writes first to make a tool call
// safe to retry, without opledger. An idempotency-key table in Postgres;
// per call, INSERT the key ON CONFLICT DO NOTHING; when the row is new, call
// the vendor with the key and UPDATE the row with the result; when it is
// not, read the recorded answer (or refuse the key reused with other
// arguments). No bus, no outbox, no ledger of events, no reconciliation: a
// crash between the vendor call and the UPDATE leaves a key "started"
// forever, which a person must sort out.
type idemTable struct {
	b    *bench
	pool *pgxpool.Pool
}

const idemDDL = `CREATE TABLE IF NOT EXISTS ` + benchSchema + `.idempotency_keys (
	key          text        PRIMARY KEY,
	request_hash text        NOT NULL,
	status       text        NOT NULL DEFAULT 'started',
	http_status  integer,
	response     text,
	created_at   timestamptz NOT NULL DEFAULT now(),
	updated_at   timestamptz NOT NULL DEFAULT now())`

// call makes one capture through the idempotency-key table; dup says the
// key had been seen.
func (t *idemTable) call(ctx context.Context, key string, body []byte) (dup bool, err error) {
	sum := sha256.Sum256(body)
	hash := hex.EncodeToString(sum[:])
	tag, err := t.pool.Exec(ctx, `INSERT INTO `+benchSchema+`.idempotency_keys (key, request_hash) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING`, key, hash)
	if err != nil {
		return false, fmt.Errorf("baseline: insert key: %w", err)
	}
	if tag.RowsAffected() == 0 {
		var status, known string
		if err := t.pool.QueryRow(ctx, `SELECT status, request_hash FROM `+benchSchema+`.idempotency_keys WHERE key = $1`, key).Scan(&status, &known); err != nil {
			return true, fmt.Errorf("baseline: read key: %w", err)
		}
		if known != hash {
			return true, fmt.Errorf("baseline: key %s reused with other arguments", key)
		}
		return true, nil
	}
	code, resp, err := t.b.vendorCall(ctx, key, body)
	status := "succeeded"
	if err != nil {
		status = "failed"
	}
	if _, uerr := t.pool.Exec(ctx, `UPDATE `+benchSchema+`.idempotency_keys SET status = $2, http_status = $3, response = $4, updated_at = now() WHERE key = $1`,
		key, status, code, string(resp)); uerr != nil {
		return false, fmt.Errorf("baseline: record result: %w", uerr)
	}
	return false, err
}

// baselineCall is the baseline's call i of a phase: the same capture
// opledger makes, under the same business key format.
func (b *bench) baselineCall(phase string, i int) (key string, body []byte) {
	order := fmt.Sprintf("%s_base_%s_%d", b.run, phase, i)
	return fmt.Sprintf("payment:%s:capture:%d:USD:v1", order, 100+i%5000), captureBody(order, i)
}

// baseline runs the hand-rolled alternative through the same phases as
// opledger: the closed loop (-ops calls, -concurrency workers), the
// latency runs with the same arrivals, and repeated keys.
func (b *bench) baseline(ctx context.Context) error {
	if _, err := b.db.Exec(ctx, benchTag+`CREATE SCHEMA IF NOT EXISTS `+benchSchema); err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	if _, err := b.db.Exec(ctx, benchTag+idemDDL); err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	pc, err := pgxpool.ParseConfig(b.d.Infra.DatabaseURL)
	if err != nil {
		return err
	}
	pc.MaxConns = baselineConns
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return err
	}
	defer pool.Close()
	t := &idemTable{b: b, pool: pool}
	r := &baselineReport{Workers: b.cfg.Concurrency, Connections: baselineConns, Ops: b.cfg.Ops}
	b.rep.Baseline = r
	fmt.Fprintf(b.out, "baseline: an idempotency-key table in Postgres (INSERT key ON CONFLICT DO NOTHING; if new, call the vendor with the key, UPDATE the row), %d workers, %d connections, no bus\n",
		r.Workers, r.Connections)

	// Warm the pool and the vendor connections as opledger's warm-up did.
	if _, err := t.closedLoop(ctx, "warm", min(b.cfg.Warmup, b.cfg.Ops)); err != nil {
		return err
	}
	before, err := b.clusterCounters(ctx)
	if err != nil {
		return err
	}
	if err := b.resetPGSS(ctx); err != nil {
		return err
	}
	dataDir := b.dataDirectory(ctx)
	cpu0 := sampleCPU(dataDir, b.natsPid())
	elapsed, err := t.closedLoop(ctx, "thr", b.cfg.Ops)
	if err != nil {
		return err
	}
	r.CPU = cpuCost(cpu0, sampleCPU(dataDir, b.natsPid()), b.cfg.Ops)
	r.Seconds, r.OpsPerSec = elapsed.Seconds(), float64(b.cfg.Ops)/elapsed.Seconds()
	if r.PGSS, err = b.snapshotPGSS(ctx, b.cfg.Ops); err != nil {
		return err
	}
	if r.Cluster, err = b.clusterCost(ctx, before, b.cfg.Ops); err != nil {
		return err
	}
	fmt.Fprintf(b.out, "  throughput: %d calls request→recorded answer in %s = %.0f ops/s (%.2f× opledger's)\n",
		b.cfg.Ops, elapsed.Round(time.Millisecond), r.OpsPerSec, r.OpsPerSec/b.thr)
	r.CPU.print(b.out, "  ")
	r.Cluster.print(b.out, "  ")
	r.PGSS.print(b.out, "  ")

	for i, l := range b.loads() {
		sched := b.schedule(l.label, l.rate, b.cfg.LatencyDuration)
		lr := &latencyReport{Label: l.label, Rate: l.rate, Arrivals: string(b.cfg.Arrivals), Seconds: b.cfg.LatencyDuration.Seconds(), Intents: len(sched)}
		if i < len(b.rep.Latency) {
			lr.Direct, lr.DirectMaxLateMs = b.rep.Latency[i].Direct, b.rep.Latency[i].DirectMaxLateMs
		}
		lat, late, failed, err := t.openLoop(ctx, "lat_"+l.label, sched, false)
		if err != nil {
			return err
		}
		lr.E2E, lr.MaxLateMs, lr.Failed = benchkit.Summarize(lat), msf(late), failed
		lr.OverheadP50, lr.OverheadP99 = lr.E2E.P50-lr.Direct.P50, lr.E2E.P99-lr.Direct.P99
		r.Latency = append(r.Latency, lr)
		fmt.Fprintf(b.out, "  latency at %.0f ops/s (%s): request→recorded answer p50 %s p99 %s; overhead over the direct call p50 %s p99 %s%s\n",
			l.rate, l.note, msStr(lr.E2E.P50), msStr(lr.E2E.P99), msStr(lr.OverheadP50), msStr(lr.OverheadP99), lr.trouble())
	}

	// Repeats of the keys the moderate run answered.
	rate := b.rate(b.cfg.Rate)
	sched := b.schedule("dup_base", rate, b.cfg.LatencyDuration/2)
	if answered := len(b.schedule("moderate", rate, b.cfg.LatencyDuration)); len(sched) > answered {
		sched = sched[:answered]
	}
	lat, _, failed, err := t.openLoop(ctx, "lat_moderate", sched, true)
	if err != nil {
		return err
	}
	d := benchkit.Summarize(lat)
	r.Duplicate, r.DuplicateRate = &d, rate
	fmt.Fprintf(b.out, "  duplicate key at %.0f ops/s (%d calls): recorded answer p50 %s p99 %s", rate, len(sched), msStr(d.P50), msStr(d.P99))
	if failed > 0 {
		fmt.Fprintf(b.out, " (%d failed)", failed)
	}
	fmt.Fprintln(b.out)
	return nil
}

// closedLoop makes n calls of phase with -concurrency workers.
func (t *idemTable) closedLoop(ctx context.Context, phase string, n int) (time.Duration, error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr error
	var mu sync.Mutex
	start := time.Now()
	for range t.b.cfg.Concurrency {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				key, body := t.b.baselineCall(phase, i)
				if dup, err := t.call(ctx, key, body); err != nil || dup {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
						if err == nil {
							firstErr = fmt.Errorf("baseline: key %s of this run already known", key)
						}
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start), firstErr
}

// openLoop makes the calls of phase on the schedule, latencies from each
// due time; wantDup says the keys are expected to be known already.
func (t *idemTable) openLoop(ctx context.Context, phase string, sched []time.Duration, wantDup bool) (lat []time.Duration, late time.Duration, failed int, err error) {
	var mu sync.Mutex
	var callErr error
	late, err = benchkit.OpenLoop(ctx, sched, func(i int, due time.Time) {
		key, body := t.b.baselineCall(phase, i)
		dup, err := t.call(ctx, key, body)
		d := time.Since(due)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			callErr = err
		case dup != wantDup:
			failed++
		default:
			lat = append(lat, d)
		}
	})
	if callErr != nil {
		return nil, 0, 0, callErr
	}
	return lat, late, failed, err
}
