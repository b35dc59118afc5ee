package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/opledger/opledger/internal/app"
	"github.com/opledger/opledger/internal/benchkit"
	"github.com/opledger/opledger/pkg/client"
)

// benchConfig configures runBench; the flags say what each field does.
type benchConfig struct {
	Ops             int
	Warmup          int
	Concurrency     int
	PGSeconds       float64
	Rate            rateFlag
	HighLoad        float64
	LatencyDuration time.Duration
	Arrivals        benchkit.Arrivals
	Baseline        bool
	Floor           bool
	Preload         int
	PreloadWorkers  int
	PreloadChunk    int
	Duration        time.Duration
	Interval        time.Duration
	Drain           time.Duration
	PGSS            bool
	JSON            bool
	CPUProfile      string
	MemProfile      string
}

// rateFlag is an open-loop rate: ops/s ("100"), or a percentage of the
// throughput this run measures ("80%").
type rateFlag struct {
	value   float64
	percent bool
}

func (r *rateFlag) String() string {
	if r.percent {
		return strconv.FormatFloat(r.value, 'f', -1, 64) + "%"
	}
	return strconv.FormatFloat(r.value, 'f', -1, 64)
}

func (r *rateFlag) Set(s string) error {
	num, pct := strings.CutSuffix(s, "%")
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v <= 0 {
		return fmt.Errorf("want ops/s or a percentage of the measured throughput (100, 80%%), got %q", s)
	}
	r.value, r.percent = v, pct
	return nil
}

// arrivalsFlag is -arrivals.
type arrivalsFlag benchkit.Arrivals

func (a *arrivalsFlag) String() string { return string(*a) }

func (a *arrivalsFlag) Set(s string) error {
	if !benchkit.Arrivals(s).Valid() {
		return fmt.Errorf("want poisson or uniform, got %q", s)
	}
	*a = arrivalsFlag(s)
	return nil
}

// pgSettingsFlag is -pg name=value, repeatable: server settings of the
// private cluster.
type pgSettingsFlag map[string]string

func (p pgSettingsFlag) String() string {
	var out []string
	for k, v := range p {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

func (p pgSettingsFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" || v == "" {
		return fmt.Errorf("want a Postgres setting as name=value (shared_buffers=2GB), got %q", s)
	}
	p[k] = v
	return nil
}

// pgssSettings load pg_stat_statements into a private cluster (bench -pgss),
// counting planning time too.
var pgssSettings = map[string]string{"shared_preload_libraries": "pg_stat_statements", "pg_stat_statements.max": "10000",
	"pg_stat_statements.track_planning": "on"}

// runBench is "opledger bench". By default it measures, in one run against
// one stack:
//
//   - throughput: a closed loop of -ops intents, -concurrency publishes in
//     flight, intent → completed_success, with the ledger's stage times and
//     what each operation cost Postgres (write transactions and WAL, and
//     pg_stat_statements' figures with -pgss);
//   - Postgres's own single-row commit rate at 16 connections on the same
//     cluster right after, and the ratio;
//   - latency, open loop at -rate and at -high-load % of the throughput just
//     measured: end to end minus a direct vendor call at the same rate;
//   - the answer to a duplicate intent (same business key under a new event
//     id; the same event id again);
//   - the baseline a team would write first (an idempotency-key table in
//     Postgres, no bus) at the same concurrency and rates, beside opledger.
//
// -preload N first builds a ledger of N completed operations with COPY;
// -duration D instead runs at -rate for D, reporting every -interval whether
// latency, memory, backlog and the hot tables stay flat.
func runBench(ctx context.Context, args []string, env func(string) (string, bool), out, stderr io.Writer) error {
	fs := flag.NewFlagSet("opledger bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := newStackFlags(fs, env, "error")
	cfg := benchConfig{Rate: rateFlag{value: 100}, Arrivals: benchkit.Poisson}
	sc := &f.cfg.Services
	fs.IntVar(&cfg.Ops, "ops", 5000, "intents in the closed-loop throughput run (and the baseline's)")
	fs.IntVar(&cfg.Warmup, "warmup", 200, "intents run before anything is measured")
	fs.IntVar(&cfg.Concurrency, "concurrency", 64, "intents being published at once in the throughput run; the baseline's workers")
	fs.Float64Var(&cfg.PGSeconds, "pg-seconds", 3, "duration of the Postgres commit-rate measurement (0: skip)")
	fs.Var(&cfg.Rate, "rate", "open-loop rate of the moderate latency run and of -duration: ops/s, or N% of the throughput measured in this run")
	fs.Float64Var(&cfg.HighLoad, "high-load", 80, "second latency run at this percentage of the measured throughput (0: skip)")
	fs.DurationVar(&cfg.LatencyDuration, "latency-duration", 3*time.Second, "length of each open-loop latency run")
	fs.Var((*arrivalsFlag)(&cfg.Arrivals), "arrivals", "open-loop arrivals: poisson (independent callers) or uniform (evenly spaced)")
	fs.BoolVar(&cfg.Baseline, "baseline", true, "also run the hand-rolled baseline (idempotency-key table, no bus)")
	fs.BoolVar(&cfg.Floor, "floor", true, "also run the moderate latency run's and the duplicates' arrivals through the floor of their paths: the same JetStream hops and single-row statements with nothing of opledger's")
	fs.IntVar(&cfg.Preload, "preload", 0, "first build a ledger of this many completed operations (COPY), then measure on it")
	fs.IntVar(&cfg.PreloadWorkers, "preload-workers", 4, "connections copying the preload in parallel")
	fs.IntVar(&cfg.PreloadChunk, "preload-chunk", 20000, "operations per preload transaction")
	fs.DurationVar(&cfg.Duration, "duration", 0, "steady mode: run at -rate for this long instead of the default measurements")
	fs.DurationVar(&cfg.Interval, "interval", time.Minute, "steady mode: report every interval")
	fs.DurationVar(&cfg.Drain, "drain", drainTimeout, "how long an open-loop run waits for answers after its last arrival; one still without an answer then is lost to the bench")
	fs.BoolVar(&scatteredKeys, "scattered-keys", false, "order ids, and so idempotency keys and entity ids, begin with a hash instead of the run id, so that new keys land all over the ledger's key indexes as business keys do")
	fs.BoolVar(&cfg.PGSS, "pgss", false, "pg_stat_statements figures per operation (a private cluster preloads the extension)")
	fs.BoolVar(&cfg.JSON, "json", false, "print every figure as one JSON document on stdout (the text report goes to stderr)")
	fs.StringVar(&cfg.CPUProfile, "cpuprofile", "", "write a CPU profile of the throughput run (steady mode: of the steady run) to this file")
	fs.StringVar(&cfg.MemProfile, "memprofile", "", "write a heap profile of the bench process at the end to this file (steady mode: FILE.N at the end of every interval N)")
	fs.BoolVar(&f.cfg.Infra.Durable, "durable", true, "private cluster keeps fsync on (as in production)")
	fs.IntVar(&sc.Dispatchers, "dispatchers", 3, "dispatcher instances")
	fs.IntVar(&sc.Relays, "relays", 2, "outbox relays")
	fs.IntVar(&sc.IngestWorkers, "ingest-workers", 0, "concurrent intents in planner-ingest (0: the service default)")
	fs.IntVar(&sc.DispatchWorkers, "dispatch-workers", 32, "concurrent vendor calls per dispatcher")
	dbConns := fs.Int("db-conns", 0, "Postgres connections in the services' pool (0: the default)")
	fs.IntVar(&sc.IngestMaxBacklog, "max-backlog", 0, "planner-ingest's admission bound: dispatch commands waiting for a dispatcher above which new intents are held (0: the default, negative: off)")
	fs.IntVar(&sc.GroupStatements, "group-statements", 0, "group-commit statements of one kind each store runs at once (0: the default, 1)")
	pgSet := pgSettingsFlag{}
	fs.Var(pgSet, "pg", "a server setting of the private cluster as name=value (shared_buffers=2GB), repeatable; ignored with DATABASE_URL")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := cfg.validate(); err != nil {
		fmt.Fprintln(stderr, err)
		return errUsage
	}
	if err := f.logger(stderr); err != nil {
		return err
	}
	steady := cfg.Duration > 0
	// Streams in memory keep JetStream's disk out of the short runs; a
	// steady run keeps its streams on disk, as in production, or the
	// RESULTS and INTENTS streams (kept 1 h and 24 h) would grow the heap
	// it watches.
	f.cfg.Infra.MemoryStreams = !steady
	f.cfg.Infra.PGSettings = map[string]string{}
	if cfg.PGSS {
		maps.Copy(f.cfg.Infra.PGSettings, pgssSettings)
	}
	maps.Copy(f.cfg.Infra.PGSettings, pgSet)
	sc.DBMaxConns = int32(*dbConns)

	text := out
	if cfg.JSON {
		text = stderr
	}
	started := time.Now()
	b := &bench{cfg: cfg, out: text, run: benchkit.RunID(started),
		hc: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 512}}}
	b.rep = &benchReport{RunID: b.run, Started: started, Settings: benchSettings{
		Ops: cfg.Ops, Warmup: cfg.Warmup, Concurrency: cfg.Concurrency, Dispatchers: sc.Dispatchers, Relays: sc.Relays,
		IngestWorkers: sc.IngestWorkers, DispatchWorkers: sc.DispatchWorkers, DBConns: int(sc.DBMaxConns), GroupStatements: sc.GroupStatements,
		MaxBacklog: sc.IngestMaxBacklog, Durable: f.cfg.Infra.Durable, MemoryStreams: f.cfg.Infra.MemoryStreams, Arrivals: string(cfg.Arrivals),
		Floor: cfg.Floor, Rate: cfg.Rate.String(), HighLoadPercent: cfg.HighLoad, LatencySeconds: cfg.LatencyDuration.Seconds(),
		PGSeconds: cfg.PGSeconds, Preload: cfg.Preload, DurationSeconds: cfg.Duration.Seconds(), IntervalSeconds: cfg.Interval.Seconds(),
		PGSS: cfg.PGSS, CPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), GOGC: gcPercent(env), GoVersion: runtime.Version(),
	}}

	if steady && f.cfg.Infra.NATSURL == "" {
		// A steady run watches this process's memory: the NATS server runs
		// in a process of its own, as in production, and is watched apart
		// (its memory holds what the streams are configured to keep).
		store := ""
		if f.cfg.Infra.DataDir != "" {
			store = filepath.Join(f.cfg.Infra.DataDir, "nats")
		}
		np, err := startNATSProcess(ctx, store, stderr)
		if err != nil {
			return fmt.Errorf("bench: %w (set NATS_URL to use a running server)", err)
		}
		defer np.Close()
		b.nats = np
		f.cfg.Infra.NATSURL = np.URL
		fmt.Fprintf(text, "# nats: embedded JetStream in a process of its own (pid %d), so that this process's memory is opledger's\n", np.Pid)
	}
	d, err := app.StartStack(ctx, f.cfg)
	if err != nil {
		return err
	}
	defer d.Close()
	b.d = d
	b.rep.Where = d.Infra.Where
	if b.db, err = pgx.Connect(ctx, d.Infra.DatabaseURL); err != nil {
		return err
	}
	defer b.db.Close(context.WithoutCancel(ctx))
	if err := b.db.QueryRow(ctx, benchTag+`SELECT current_setting('server_version')`).Scan(&b.rep.Settings.PostgresVersion); err != nil {
		return err
	}
	for _, w := range d.Infra.Where {
		fmt.Fprintf(text, "# %s\n", w)
	}
	fmt.Fprintf(text, "# run %s: every workflow, event id and order id of this run starts with it\n", b.run)
	fmt.Fprintf(text, "# dispatchers=%d relays=%d ingest-workers=%d dispatch-workers=%d db-conns=%d group-statements=%d max-backlog=%d durable=%v concurrency=%d arrivals=%s (0 = service default); postgres %s, %d CPUs, GOGC=%s\n",
		sc.Dispatchers, sc.Relays, sc.IngestWorkers, sc.DispatchWorkers, sc.DBMaxConns, sc.GroupStatements, sc.IngestMaxBacklog, f.cfg.Infra.Durable, cfg.Concurrency, cfg.Arrivals,
		b.rep.Settings.PostgresVersion, runtime.NumCPU(), b.rep.Settings.GOGC)
	if len(pgSet) > 0 {
		fmt.Fprintf(text, "# private cluster settings: %s\n", pgSet)
	}

	if b.cl, err = client.Connect(d.Infra.NATSURL, "bench"); err != nil {
		return err
	}
	defer b.cl.Close()
	if err := b.setupPGSS(ctx); err != nil {
		return err
	}
	if cfg.Preload > 0 {
		if err := b.preload(ctx); err != nil {
			return err
		}
	}
	if cfg.Warmup > 0 {
		// Warm up connections, caches and prepared statements.
		if _, err := benchRun(ctx, b.cl, b.wf("warm"), cfg.Warmup, cfg.Concurrency); err != nil {
			return fmt.Errorf("bench: warm-up: %w", err)
		}
	}
	if steady {
		if cfg.Rate.percent {
			if err := b.throughput(ctx); err != nil {
				return err
			}
		}
		if err := b.steady(ctx); err != nil {
			return err
		}
		return b.finish(out, started)
	}
	if err := b.throughput(ctx); err != nil {
		return err
	}
	if err := b.commitRate(ctx); err != nil {
		return err
	}
	if err := b.latencies(ctx); err != nil {
		return err
	}
	if err := b.duplicates(ctx); err != nil {
		return err
	}
	if cfg.Baseline {
		if err := b.baseline(ctx); err != nil {
			return err
		}
	}
	b.sideBySide()
	if err := writeHeapProfile(cfg.MemProfile); err != nil {
		return err
	}
	return b.finish(out, started)
}

// writeHeapProfile writes the process's heap profile, as of a collection
// made now, to path (nothing when path is empty). The process includes the
// embedded NATS server, the stand-in vendor and the bench's own
// bookkeeping besides the services.
func writeHeapProfile(path string) error {
	if path == "" {
		return nil
	}
	runtime.GC()
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("bench: heap profile: %w", err)
	}
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return fmt.Errorf("bench: heap profile: %w", err)
	}
	return f.Close()
}

func (c *benchConfig) validate() error {
	switch {
	case c.Ops < 1:
		return fmt.Errorf("-ops must be at least 1")
	case c.Warmup < 0, c.Preload < 0:
		return fmt.Errorf("-warmup and -preload may not be negative")
	case c.Concurrency < 1, c.PreloadWorkers < 1, c.PreloadChunk < 1:
		return fmt.Errorf("-concurrency, -preload-workers and -preload-chunk must be at least 1")
	case c.LatencyDuration <= 0:
		return fmt.Errorf("-latency-duration must be positive")
	case c.HighLoad < 0:
		return fmt.Errorf("-high-load may not be negative")
	case c.Duration < 0 || (c.Duration > 0 && c.Interval <= 0):
		return fmt.Errorf("-duration may not be negative, and -interval must be positive")
	case c.Drain <= 0:
		return fmt.Errorf("-drain must be positive")
	}
	return nil
}

// gcPercent is the collector's target the process runs with: GOGC as set,
// or the binaries' default (app.TuneGC).
func gcPercent(env func(string) (string, bool)) string {
	if v, set := env("GOGC"); set {
		return v
	}
	return strconv.Itoa(app.DefaultGCPercent)
}

// bench is one run of opledger bench.
type bench struct {
	cfg benchConfig
	d   *app.Stack
	cl  *client.Client
	// db is the bench's own connection (statistics, pg_stat_statements);
	// its statements carry benchTag, so they are told apart from the
	// pipeline's.
	db  *pgx.Conn
	run string
	out io.Writer // the text report
	rep *benchReport
	hc  *http.Client
	// nats is the NATS server's own process in steady mode (nil when it
	// runs in this one, or NATS_URL names another).
	nats *natsProcess

	pgss bool // pg_stat_statements is usable
	// thr is the throughput measured in this run (ops/s), for the
	// percentage rates.
	thr float64
	// answered are intents of the moderate latency run that completed,
	// for the duplicates run.
	answered []intentSent
}

// natsPid is the NATS server's own process, or 0 when it has none.
func (b *bench) natsPid() int {
	if b.nats == nil {
		return 0
	}
	return b.nats.Pid
}

// benchTag starts every statement of the bench's own connection.
const benchTag = "/* opledger bench */ "

// wf returns the workflow id of one phase of this run.
func (b *bench) wf(phase string) string { return b.run + "_" + phase }

// rate resolves a rate flag against the throughput measured in this run.
func (b *bench) rate(r rateFlag) float64 {
	if r.percent {
		return b.thr * r.value / 100
	}
	return r.value
}

// finish prints the JSON document (with -json) and the wall time.
func (b *bench) finish(out io.Writer, started time.Time) error {
	b.rep.Seconds = time.Since(started).Seconds()
	fmt.Fprintf(b.out, "# bench took %s\n", time.Since(started).Round(time.Millisecond))
	if !b.cfg.JSON {
		return nil
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(b.rep)
}

// startCPUProfile starts the CPU profile -cpuprofile asks for, if any;
// stop ends it and may be called more than once.
func (b *bench) startCPUProfile() (stop func(), err error) {
	if b.cfg.CPUProfile == "" {
		return func() {}, nil
	}
	f, err := os.Create(b.cfg.CPUProfile)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			pprof.StopCPUProfile()
			f.Close()
		})
	}, nil
}

// throughput runs the closed loop: -ops intents, -concurrency publishes in
// flight, until every one has its completed_success result; with what each
// operation cost Postgres.
func (b *bench) throughput(ctx context.Context) error {
	wf := b.wf("thr")
	before, err := b.clusterCounters(ctx)
	if err != nil {
		return err
	}
	if err := b.resetPGSS(ctx); err != nil {
		return err
	}
	stopProfile, err := b.startCPUProfile()
	if err != nil {
		return err
	}
	defer stopProfile()
	dataDir := b.dataDirectory(ctx)
	cpu0, group0 := sampleCPU(dataDir, b.natsPid()), b.d.Services.Store.GroupStats()
	elapsed, err := benchRun(ctx, b.cl, wf, b.cfg.Ops, b.cfg.Concurrency)
	cpu1, group1 := sampleCPU(dataDir, b.natsPid()), b.d.Services.Store.GroupStats()
	stopProfile()
	if err != nil {
		return err
	}
	t := &throughputReport{Ops: b.cfg.Ops, Seconds: elapsed.Seconds(), OpsPerSec: float64(b.cfg.Ops) / elapsed.Seconds(),
		CPU: cpuCost(cpu0, cpu1, b.cfg.Ops), Group: groupCost(group0, group1)}
	b.rep.Throughput, b.thr = t, t.OpsPerSec
	fmt.Fprintf(b.out, "throughput: %d operations intent→completed_success in %s = %.0f ops/s (closed loop, %d publishes in flight)\n",
		b.cfg.Ops, elapsed.Round(time.Millisecond), t.OpsPerSec, b.cfg.Concurrency)
	if t.PGSS, err = b.snapshotPGSS(ctx, b.cfg.Ops); err != nil {
		return err
	}
	if t.Cluster, err = b.clusterCost(ctx, before, b.cfg.Ops); err != nil {
		return err
	}
	if t.Stages, err = b.stageBreakdown(ctx, wf); err != nil {
		return err
	}
	t.Stages.print(b.out, "under load")
	t.CPU.print(b.out, "  ")
	fmt.Fprintf(b.out, "  %s\n", t.Group)
	t.Cluster.print(b.out, "  ")
	t.PGSS.print(b.out, "  ")
	return nil
}

// commitRate measures Postgres's single-row commit rate on the same cluster,
// right after the throughput run, and the ratio.
func (b *bench) commitRate(ctx context.Context) error {
	if b.cfg.PGSeconds <= 0 {
		return nil
	}
	rate, err := pgCommitRate(ctx, b.d.Infra.DatabaseURL, 16, time.Duration(b.cfg.PGSeconds*float64(time.Second)))
	if err != nil {
		return err
	}
	b.rep.Postgres = &commitRateReport{Connections: 16, Seconds: b.cfg.PGSeconds, CommitsPerSec: rate}
	b.rep.Ratio = b.thr / rate
	fmt.Fprintf(b.out, "postgres single-row INSERT commits, 16 connections, same cluster: %.0f commits/s\n", rate)
	fmt.Fprintf(b.out, "ratio: opledger ops/s ÷ postgres commits/s = %.3f\n", b.rep.Ratio)
	return nil
}
