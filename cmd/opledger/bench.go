package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/opledger/opledger/internal/app"
	"github.com/opledger/opledger/pkg/client"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// benchConfig configures runBench.
type benchConfig struct {
	// Ops is the number of intents in the throughput run.
	Ops int
	// LatencySamples is the number of sequential intents timed one by one.
	LatencySamples int
	// PGSeconds is how long the Postgres commit-rate baseline runs.
	PGSeconds float64
}

// runBench is "opledger bench": end-to-end throughput from intent to
// completed_success against an instant local vendor, the latency opledger adds
// over calling that vendor directly, and Postgres's own single-row-insert
// commit rate at 16 connections on the same cluster, for the ratio.
func runBench(ctx context.Context, args []string, env func(string) (string, bool), out, stderr io.Writer) error {
	fs := flag.NewFlagSet("opledger bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := newStackFlags(fs, env, "error")
	var cfg benchConfig
	sc := &f.cfg.Services
	fs.IntVar(&cfg.Ops, "ops", 5000, "intents in the throughput run")
	fs.IntVar(&cfg.LatencySamples, "latency-samples", 500, "sequential intents for the latency run")
	fs.Float64Var(&cfg.PGSeconds, "pg-seconds", 5, "duration of the Postgres baseline")
	fs.BoolVar(&f.cfg.Infra.Durable, "durable", true, "private cluster keeps fsync on (as in production)")
	fs.IntVar(&sc.Dispatchers, "dispatchers", 3, "dispatcher instances")
	fs.IntVar(&sc.Relays, "relays", 2, "outbox relays")
	fs.IntVar(&sc.IngestWorkers, "ingest-workers", 0, "concurrent intents in planner-ingest (0: the service default)")
	fs.IntVar(&sc.DispatchWorkers, "dispatch-workers", 32, "concurrent vendor calls per dispatcher")
	dbConns := fs.Int("db-conns", 0, "Postgres connections in the services' pool (0: the default)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the throughput run to this file")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := f.logger(stderr); err != nil {
		return err
	}
	f.cfg.Infra.MemoryStreams = true
	sc.DBMaxConns = int32(*dbConns)
	d, err := app.StartStack(ctx, f.cfg)
	if err != nil {
		return err
	}
	defer d.Close()
	for _, w := range d.Infra.Where {
		fmt.Fprintf(out, "# %s\n", w)
	}
	fmt.Fprintf(out, "# dispatchers=%d relays=%d ingest-workers=%d dispatch-workers=%d db-conns=%d durable=%v (0 = service default)\n",
		sc.Dispatchers, sc.Relays, sc.IngestWorkers, sc.DispatchWorkers, sc.DBMaxConns, f.cfg.Infra.Durable)

	cl, err := client.Connect(d.Infra.NATSURL, "bench")
	if err != nil {
		return err
	}
	defer cl.Close()

	// Warm up connections and caches.
	if _, err := benchRun(ctx, cl, "wf_warm", 200); err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	thr, err := benchRun(ctx, cl, "wf_bench", cfg.Ops)
	if *cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "throughput: %d operations intent→completed_success in %s = %.0f ops/s\n", cfg.Ops, thr.Round(time.Millisecond), float64(cfg.Ops)/thr.Seconds())
	if err := stageBreakdown(ctx, d.Infra.DatabaseURL, "wf_bench", out); err != nil {
		return err
	}

	e2e, err := benchLatency(ctx, cl, cfg.LatencySamples)
	if err != nil {
		return err
	}
	direct, err := directLatency(ctx, d.Vendors.URL(), cfg.LatencySamples)
	if err != nil {
		return err
	}
	p := func(xs []time.Duration, q float64) time.Duration { return xs[min(len(xs)-1, int(q*float64(len(xs))))] }
	fmt.Fprintf(out, "latency, intent→completed_success result (n=%d): p50 %s  p99 %s\n", len(e2e), p(e2e, .5), p(e2e, .99))
	fmt.Fprintf(out, "latency, direct vendor call        (n=%d): p50 %s  p99 %s\n", len(direct), p(direct, .5), p(direct, .99))
	fmt.Fprintf(out, "overhead added by opledger: p50 %s  p99 %s\n", p(e2e, .5)-p(direct, .5), p(e2e, .99)-p(direct, .99))

	rate, err := pgCommitRate(ctx, d.Infra.DatabaseURL, 16, time.Duration(cfg.PGSeconds*float64(time.Second)))
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "postgres single-row INSERT commits, 16 connections, same cluster: %.0f commits/s\n", rate)
	fmt.Fprintf(out, "ratio: opledger ops/s ÷ postgres commits/s = %.3f\n", float64(cfg.Ops)/thr.Seconds()/rate)
	return nil
}

func benchIntent(wf string, i int) wire.Intent {
	args := fmt.Sprintf(`{"order_id":"%s_%d","customer_id":"cust_%d","amount_cents":%d,"currency":"USD"}`, wf, i, i%97, 100+i%5000)
	return wire.Intent{EventID: fmt.Sprintf("%s:call_%d", wf, i), WorkflowID: wf, Tool: "capture_payment", Args: json.RawMessage(args)}
}

// benchRun publishes n intents as fast as JetStream takes them and waits for
// n completed_success results.
func benchRun(ctx context.Context, cl *client.Client, wf string, n int) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	results, err := cl.Results(ctx, wire.ResultSubject(wf))
	if err != nil {
		return 0, err
	}
	start := time.Now()
	var pubErr atomic.Value
	go func() {
		var wg sync.WaitGroup
		sem := make(chan struct{}, 64)
		for i := range n {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				if err := cl.Publish(ctx, benchIntent(wf, i), ""); err != nil {
					pubErr.Store(err)
				}
			}()
		}
		wg.Wait()
	}()
	done := map[string]bool{}
	for len(done) < n {
		select {
		case r := <-results:
			if r.Status == string(op.StateCompletedSuccess) {
				done[r.OperationID] = true
			} else if r.Final {
				return 0, fmt.Errorf("bench: operation %s ended %s: %s", r.OperationID, r.Status, r.Reason)
			}
		case <-ctx.Done():
			if e := pubErr.Load(); e != nil {
				return 0, e.(error)
			}
			return 0, fmt.Errorf("bench: %d of %d completed: %w", len(done), n, ctx.Err())
		}
	}
	return time.Since(start), nil
}

// benchLatency times n intents one at a time, from publish to the
// completed_success result.
func benchLatency(ctx context.Context, cl *client.Client, n int) ([]time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	wf := "wf_latency"
	results, err := cl.Results(ctx, wire.ResultSubject(wf))
	if err != nil {
		return nil, err
	}
	out := make([]time.Duration, 0, n)
	for i := range n {
		in := benchIntent(wf, i)
		start := time.Now()
		if err := cl.Publish(ctx, in, ""); err != nil {
			return nil, err
		}
		for {
			select {
			case r := <-results:
				if r.EventID != in.EventID || r.Status != string(op.StateCompletedSuccess) {
					continue
				}
			case <-ctx.Done():
				return nil, fmt.Errorf("bench: latency sample %d: %w", i, ctx.Err())
			}
			break
		}
		out = append(out, time.Since(start))
	}
	slices.Sort(out)
	return out, nil
}

// directLatency times n capture calls straight to the vendor, one at a time,
// the way the adapter makes them.
func directLatency(ctx context.Context, vendorURL string, n int) ([]time.Duration, error) {
	hc := &http.Client{Timeout: 5 * time.Second}
	out := make([]time.Duration, 0, n)
	for i := range n {
		body := []byte(fmt.Sprintf(`{"amount_cents":%d,"currency":"USD","customer_id":"c","order_id":"direct_%d"}`, 100+i, i))
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, vendorURL+"/v1/payments/capture", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", fmt.Sprintf("direct:%d", i))
		start := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			return nil, fmt.Errorf("bench: direct call: %w", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		out = append(out, time.Since(start))
	}
	slices.Sort(out)
	return out, nil
}

// pgCommitRate measures single-row INSERT commits per second with conns
// connections, each in autocommit, for d.
func pgCommitRate(ctx context.Context, url string, conns int, d time.Duration) (float64, error) {
	setup, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, err
	}
	defer setup.Close(ctx)
	if _, err := setup.Exec(ctx, `CREATE TABLE IF NOT EXISTS bench_commits (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v text NOT NULL)`); err != nil {
		return 0, err
	}
	var total atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	deadline := time.Now().Add(d)
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := pgx.Connect(ctx, url)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close(ctx)
			for time.Now().Before(deadline) {
				if _, err := c.Exec(ctx, `INSERT INTO bench_commits (v) VALUES ($1)`, "x"); err != nil {
					errs <- err
					return
				}
				total.Add(1)
			}
		}()
	}
	start := time.Now()
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	_, _ = setup.Exec(ctx, `DROP TABLE bench_commits`)
	return float64(total.Load()) / time.Since(start).Seconds(), nil
}

// stageBreakdown prints, from the ledger's own event times, how long
// operations of a workflow spent between recording and the dispatcher's claim
// (ingest commit → relay → JetStream → dispatcher) and between the claim and
// the recorded outcome (vendor call + recording).
func stageBreakdown(ctx context.Context, url, wf string, out io.Writer) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var q1, q2, q3, q4, span float64
	err = conn.QueryRow(ctx, `
		WITH t AS (
			SELECT o.id,
			       max(e.at) FILTER (WHERE e.event = 'create')   AS created,
			       max(e.at) FILTER (WHERE e.event = 'dispatch') AS claimed,
			       max(e.at) FILTER (WHERE e.event = 'succeed')  AS done
			FROM operations o JOIN operation_events e ON e.operation_id = o.id
			WHERE o.workflow_id = $1 GROUP BY o.id)
		SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM claimed - created)) * 1000,
		       percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM claimed - created)) * 1000,
		       percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM done - claimed)) * 1000,
		       percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM done - claimed)) * 1000,
		       extract(epoch FROM max(created) - min(created)) * 1000
		FROM t`, wf).Scan(&q1, &q2, &q3, &q4, &span)
	if err != nil {
		return fmt.Errorf("bench: stage breakdown: %w", err)
	}
	fmt.Fprintf(out, "  under load, recorded→claimed by a dispatcher: p50 %.1fms p99 %.1fms; claimed→outcome recorded: p50 %.1fms p99 %.1fms; intents recorded over %.0fms\n", q1, q2, q3, q4, span)
	return nil
}
