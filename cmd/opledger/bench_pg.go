package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// benchSchema holds the bench's own tables (the commit-rate table, the
// baseline's idempotency keys), out of schema public, whose every table
// the migrator wants a grant decision for.
const benchSchema = "opledger_bench"

// pgCommitRate measures single-row INSERT commits per second with conns
// connections, each in autocommit, for d, into a table of this run that it
// drops afterwards.
func pgCommitRate(ctx context.Context, url string, conns int, d time.Duration) (float64, error) {
	setup, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, err
	}
	defer setup.Close(context.WithoutCancel(ctx))
	table := benchSchema + ".commits_" + strings.ToLower(strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "_"))
	if _, err := setup.Exec(ctx, benchTag+`CREATE SCHEMA IF NOT EXISTS `+benchSchema); err != nil {
		return 0, fmt.Errorf("bench: commit rate: %w", err)
	}
	if _, err := setup.Exec(ctx, benchTag+`CREATE TABLE `+table+` (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v text NOT NULL)`); err != nil {
		return 0, fmt.Errorf("bench: commit rate: %w", err)
	}
	defer func() { _, _ = setup.Exec(context.WithoutCancel(ctx), benchTag+`DROP TABLE `+table) }()
	var total atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	deadline := time.Now().Add(d)
	for range conns {
		wg.Go(func() {
			c, err := pgx.Connect(ctx, url)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close(context.WithoutCancel(ctx))
			for time.Now().Before(deadline) {
				if _, err := c.Exec(ctx, benchTag+`INSERT INTO `+table+` (v) VALUES ($1)`, "x"); err != nil {
					errs <- err
					return
				}
				total.Add(1)
			}
		})
	}
	start := time.Now()
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, fmt.Errorf("bench: commit rate: %w", err)
	}
	return float64(total.Load()) / time.Since(start).Seconds(), nil
}

// stageBreakdown reads, from the ledger's own event times, how long the
// operations of a workflow spent between recording and the dispatcher's
// claim (ingest commit → relay → JetStream → dispatcher) and between the
// claim and the recorded outcome (vendor call + recording).
func (b *bench) stageBreakdown(ctx context.Context, wf string) (*stageReport, error) {
	var s stageReport
	err := b.db.QueryRow(ctx, benchTag+`
		WITH t AS (
			SELECT o.id,
			       max(e.at) FILTER (WHERE e.event = 'create')   AS created,
			       max(e.at) FILTER (WHERE e.event = 'dispatch') AS claimed,
			       max(e.at) FILTER (WHERE e.event = 'succeed')  AS done
			FROM operations o JOIN operation_events e ON e.operation_id = o.id
			WHERE o.workflow_id = $1 GROUP BY o.id)
		SELECT coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM claimed - created)) * 1000, 0),
		       coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM claimed - created)) * 1000, 0),
		       coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM done - claimed)) * 1000, 0),
		       coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM done - claimed)) * 1000, 0),
		       coalesce(extract(epoch FROM max(created) - min(created)) * 1000, 0)
		FROM t`, wf).Scan(&s.RecordedToClaimedP50, &s.RecordedToClaimedP99, &s.ClaimedToOutcomeP50, &s.ClaimedToOutcomeP99, &s.RecordedOverMs)
	if err != nil {
		return nil, fmt.Errorf("bench: stage breakdown: %w", err)
	}
	return &s, nil
}

// clusterCounters are cluster-wide counters that are exact at once (no
// statistics flush delay): the WAL position and the next transaction id.
type clusterCounters struct {
	walBytes int64
	nextXID  int64
	at       time.Time
}

func (b *bench) clusterCounters(ctx context.Context) (clusterCounters, error) {
	c := clusterCounters{at: time.Now()}
	err := b.db.QueryRow(ctx, benchTag+`SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint,
		pg_snapshot_xmax(pg_current_snapshot())::text::bigint`).Scan(&c.walBytes, &c.nextXID)
	if err != nil {
		return c, fmt.Errorf("bench: WAL position and transaction ids: %w", err)
	}
	return c, nil
}

// bytesIEC prints a size as people read it: 512 B, 1.5 kB, 12.0 MB, 3.2 GB
// (powers of 1024).
func bytesIEC(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, suffix := float64(n), []string{"kB", "MB", "GB", "TB"}
	i := -1
	for v >= unit && i < len(suffix)-1 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %s", v, suffix[i])
}

// clusterCost divides what the cluster wrote since before by ops.
func (b *bench) clusterCost(ctx context.Context, before clusterCounters, ops int) (*clusterCostReport, error) {
	after, err := b.clusterCounters(ctx)
	if err != nil {
		return nil, err
	}
	secs := after.at.Sub(before.at).Seconds()
	return &clusterCostReport{Ops: ops,
		WriteTransactionsPerOp: float64(after.nextXID-before.nextXID) / float64(ops),
		WALBytesPerOp:          float64(after.walBytes-before.walBytes) / float64(ops),
		WALBytesPerSec:         float64(after.walBytes-before.walBytes) / secs}, nil
}
