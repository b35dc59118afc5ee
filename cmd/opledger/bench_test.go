package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/app"
	"github.com/opledger/opledger/internal/pglocal"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/pkg/client"
	"github.com/opledger/opledger/pkg/op"
)

// tinyBench are flags that run every phase of the bench at sizes that only
// prove the code paths work (these tests time nothing).
var tinyBench = []string{"-ops", "40", "-warmup", "5", "-pg-seconds", "0.2", "-latency-duration", "400ms", "-rate", "60", "-json"}

// runBenchJSON runs opledger bench with env and returns its JSON report and
// its text report.
func runBenchJSON(t *testing.T, env map[string]string, args ...string) (*benchReport, string) {
	t.Helper()
	var out, text strings.Builder
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	err := runBench(t.Context(), args, lookup, &out, &text)
	require.NoError(t, err, text.String())
	var rep benchReport
	require.NoError(t, json.Unmarshal([]byte(out.String()), &rep), out.String())
	return &rep, text.String()
}

// Two bench runs against one database: the first preloads a ledger and
// runs every default phase, the second runs in steady mode. Each run's
// operations are its own (no intent of the second is a duplicate of the
// first's), the preload's operations are answered by the pipeline like the
// operations it made itself, and every figure is in the JSON report.
func TestBenchRunsTwiceOnOneDatabase(t *testing.T) {
	t.Parallel()
	dbURL := testdb.New(t)
	env := map[string]string{"DATABASE_URL": dbURL}
	rep, text := runBenchJSON(t, env, append([]string{"-preload", "30", "-preload-chunk", "8", "-preload-workers", "2"}, tinyBench...)...)

	require.Equal(t, 40, rep.Throughput.Ops)
	require.Positive(t, rep.Throughput.OpsPerSec)
	require.Positive(t, rep.Throughput.Cluster.WriteTransactionsPerOp)
	require.Positive(t, rep.Throughput.Cluster.WALBytesPerOp)
	require.NotNil(t, rep.Throughput.Stages)
	// Each of the 40 operations was written by some statement of each kind.
	g := rep.Throughput.Group
	require.NotNil(t, g)
	for _, per := range []float64{g.Submit, g.Claim, g.Outcome} {
		require.GreaterOrEqual(t, per, 1.0, "writes per group statement")
	}
	require.Positive(t, rep.Postgres.CommitsPerSec)
	require.Positive(t, rep.Ratio)
	require.Len(t, rep.Latency, 2, "at -rate and at 80%% of the throughput")
	require.Equal(t, "moderate", rep.Latency[0].Label)
	require.Equal(t, 60.0, rep.Latency[0].Rate)
	require.InDelta(t, 0.8*rep.Throughput.OpsPerSec, rep.Latency[1].Rate, 1e-6)
	for _, l := range rep.Latency {
		require.Positive(t, l.Intents, l.Label)
		require.Equal(t, l.Intents, l.E2E.N, "%s: every intent answered completed_success", l.Label)
		require.Equal(t, l.Intents, l.Direct.N, l.Label)
		require.Zero(t, l.Lost+l.Failed, l.Label)
		require.InDelta(t, l.E2E.P50-l.Direct.P50, l.OverheadP50, 1e-9)
		require.NotNil(t, l.Stages, l.Label)
		require.Positive(t, l.Stages.RecordedToClaimedP50, l.Label)
		require.Positive(t, l.Stages.ClaimedToOutcomeP50, l.Label)
	}
	// The moderate run's arrivals went through the floor of a new intent's
	// path too, every one answered; the high load's did not.
	fl := rep.Latency[0].Floor
	require.NotNil(t, fl)
	require.Equal(t, floorReport{Hops: 3, Commits: 3, Vendor: true}, floorReport{Hops: fl.Hops, Commits: fl.Commits, Reads: fl.Reads, Vendor: fl.Vendor})
	require.Equal(t, rep.Latency[0].Intents, fl.E2E.N)
	require.Zero(t, fl.Lost)
	require.InDelta(t, fl.E2E.P50-rep.Latency[0].Direct.P50, fl.OverheadP50, 1e-9)
	require.Nil(t, rep.Latency[1].Floor)
	d := rep.Duplicates
	require.Positive(t, d.DuplicateOperation.N)
	require.Positive(t, d.DuplicateEvent.N)
	require.Equal(t, d.Intents, d.DuplicateOperation.N+d.DuplicateEvent.N, "each repeat answered with its decision")
	require.NotNil(t, d.Floor)
	require.Equal(t, floorReport{Hops: 2, Reads: 1}, floorReport{Hops: d.Floor.Hops, Commits: d.Floor.Commits, Reads: d.Floor.Reads, Vendor: d.Floor.Vendor})
	require.Equal(t, d.Intents, d.Floor.E2E.N)
	require.Contains(t, text, "floor of this path here (same arrivals through 3 JetStream hops, 3 single-row commits, the vendor call; no ledger)")
	bl := rep.Baseline
	require.Positive(t, bl.OpsPerSec)
	require.Len(t, bl.Latency, 2)
	require.Equal(t, rep.Latency[0].Intents, bl.Latency[0].E2E.N, "the baseline gets the same arrivals")
	require.Equal(t, rep.Latency[0].Direct, bl.Latency[0].Direct)
	require.Positive(t, bl.Duplicate.N)
	require.InDelta(t, 2, bl.Cluster.WriteTransactionsPerOp, 0.5, "insert the key, record the result")
	require.Nil(t, rep.Throughput.PGSS, "no -pgss")
	require.Contains(t, text, "side by side")

	p := rep.Preload
	require.Equal(t, 30, p.Ops)
	require.Equal(t, map[string]int{"operations": 1, "operation_events": 4, "attempts": 1, "inbox": 1}, p.RowsPerOp)
	require.EqualValues(t, 30*7, p.Rows)
	require.NotEmpty(t, p.Tables)

	conn, err := pgx.Connect(t.Context(), dbURL)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var floorTables int
	require.NoError(t, conn.QueryRow(t.Context(), `SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename LIKE 'floor%'`, benchSchema).Scan(&floorTables))
	require.Zero(t, floorTables, "the floor drops its tables")

	// The preloaded operations look like the template the pipeline made:
	// same state, version, events, attempt and inbox decision.
	type shape struct {
		State, Events, Attempt, Inbox string
		Version                       int64
	}
	shapeOf := func(where string, arg string) []shape {
		rows, err := conn.Query(t.Context(), `
			SELECT o.state, o.version,
			       (SELECT string_agg(e.event || ':' || e.from_state || '>' || e.to_state || '@' || e.lease_epoch, ' ' ORDER BY e.seq) FROM operation_events e WHERE e.operation_id = o.id),
			       (SELECT string_agg(a.outcome || '#' || a.number || '@' || a.lease_epoch || ':' || (a.finished_at IS NOT NULL) || ':' || (a.external_object_id = o.external_object_id), ' ') FROM attempts a WHERE a.operation_id = o.id),
			       (SELECT string_agg(i.decision || ':' || i.source || ':' || (i.event_id = o.origin_event_id), ' ') FROM inbox i WHERE i.operation_id = o.id)
			FROM operations o WHERE `+where+` ORDER BY o.id`, arg)
		require.NoError(t, err)
		out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (shape, error) {
			var s shape
			return s, r.Scan(&s.State, &s.Version, &s.Events, &s.Attempt, &s.Inbox)
		})
		require.NoError(t, err)
		return out
	}
	tpl := shapeOf("o.id = $1", p.Template)
	require.Len(t, tpl, 1)
	require.Equal(t, string(op.StateCompletedSuccess), tpl[0].State)
	pre := shapeOf("o.workflow_id LIKE $1", p.Prefix+"%")
	require.Len(t, pre, 30)
	for _, s := range pre {
		require.Equal(t, tpl[0], s)
	}
	var distinctIDs, distinctObjects, distinctTraces int
	var oldest, newest time.Time
	require.NoError(t, conn.QueryRow(t.Context(), `SELECT count(DISTINCT a.id), count(DISTINCT o.external_object_id), count(DISTINCT o.trace_id), min(o.created_at), max(o.created_at)
		FROM operations o JOIN attempts a ON a.operation_id = o.id WHERE o.workflow_id LIKE $1`, p.Prefix+"%").
		Scan(&distinctIDs, &distinctObjects, &distinctTraces, &oldest, &newest))
	require.Equal(t, []int{30, 30, 30}, []int{distinctIDs, distinctObjects, distinctTraces}, "every copy has its own attempt, charge and trace")
	require.WithinDuration(t, time.Now().Add(-time.Hour-preloadSpan), oldest, 5*time.Minute)
	require.WithinDuration(t, time.Now().Add(-time.Hour), newest, preloadSpan/30+5*time.Minute)

	// The second run, in steady mode at half the throughput it measures
	// first. None of its intents meets the first run's.
	rep2, text2 := runBenchJSON(t, env, "-duration", "1500ms", "-interval", "500ms", "-rate", "50%", "-ops", "30", "-warmup", "5",
		"-latency-duration", "300ms", "-json")
	require.NotEqual(t, rep.RunID, rep2.RunID)
	s := rep2.Steady
	require.InDelta(t, rep2.Throughput.OpsPerSec/2, s.Rate, 1e-6)
	require.NotEmpty(t, s.Intervals, text2)
	require.Zero(t, s.Lost+s.Failed)
	completed := 0
	for _, iv := range s.Intervals {
		completed += iv.Completed
		require.Len(t, iv.Tables, len(hotTables))
		require.Positive(t, iv.RSSBytes)
		if iv.Completed > 0 {
			require.NotNil(t, iv.CPU, "an interval that completed operations says what they cost")
			require.Positive(t, iv.CPU.ProcessMsPerOp)
		}
		require.NotNil(t, iv.Group)
		require.NotNil(t, iv.MachineBusy, "/proc/stat is read on Linux")
		require.InDelta(t, 0.5, *iv.MachineBusy, 0.5, "a share of the machine's CPU time")
	}
	require.Positive(t, completed)
	require.NotEmpty(t, s.Verdict.Tables)
	require.NotNil(t, s.Verdict.MachineBusy)
	require.Contains(t, text2, "steady")
	require.Contains(t, text2, "the machine's CPUs")

	for _, r := range []*benchReport{rep, rep2} {
		var intents, notNew, repeats int
		require.NoError(t, conn.QueryRow(t.Context(), `SELECT count(*), count(*) FILTER (WHERE decision <> 'new'), coalesce(sum(duplicate_count), 0)
			FROM inbox WHERE workflow_id LIKE $1`, r.RunID+"\\_%").Scan(&intents, &notNew, &repeats))
		wantNotNew, wantRepeats := 0, 0
		if r.Duplicates != nil {
			wantNotNew, wantRepeats = r.Duplicates.DuplicateOperation.N, r.Duplicates.DuplicateEvent.N
		}
		require.Positive(t, intents)
		require.Equal(t, wantNotNew, notNew, "run %s: only its deliberate duplicates are duplicates", r.RunID)
		require.Equal(t, wantRepeats, repeats, "run %s: only its deliberate repeats were delivered twice", r.RunID)
	}

	// The pipeline answers repeats of preloaded intents from the ledger:
	// the same event id is a duplicate event, a new event id with the same
	// arguments a duplicate operation, both naming the preloaded operation.
	d2, err := app.StartStack(t.Context(), app.StackConfig{Infra: app.InfraConfig{DatabaseURL: dbURL, MemoryStreams: true},
		Services: app.ServicesConfig{Dispatchers: 1, Relays: 1}})
	require.NoError(t, err)
	defer d2.Close()
	cl, err := client.Connect(d2.Infra.NATSURL, "bench-test")
	require.NoError(t, err)
	defer cl.Close()
	in := preloadIntent(p.Prefix, 7)
	var opID string
	require.NoError(t, conn.QueryRow(t.Context(), `SELECT id FROM operations WHERE origin_event_id = $1`, in.EventID).Scan(&opID))
	again, err := cl.Submit(t.Context(), in)
	require.NoError(t, err)
	require.Equal(t, op.DecisionDuplicateEvent, again.DedupeDecision, "the preloaded inbox row has the hash of these very bytes")
	require.Equal(t, opID, again.OperationID)
	retry := in
	retry.EventID += "_retry"
	dup, err := cl.Submit(t.Context(), retry)
	require.NoError(t, err)
	require.Equal(t, op.DecisionDuplicateOperation, dup.DedupeDecision, "the preloaded key and args hash are the registry's")
	require.Equal(t, opID, dup.OperationID)
	require.EqualValues(t, op.StateCompletedSuccess, dup.Status)
}

// -pgss on a private cluster started with pg_stat_statements: statements,
// rows, execution time and WAL per operation, for opledger and the
// baseline; and -cpuprofile writes a profile.
func TestBenchPGSS(t *testing.T) {
	t.Parallel()
	needPrivateCluster(t)
	prof := filepath.Join(t.TempDir(), "cpu.pprof")
	rep, text := runBenchJSON(t, map[string]string{}, append([]string{"-pgss", "-durable=false", "-high-load", "0", "-floor=false", "-cpuprofile", prof}, tinyBench...)...)
	require.Empty(t, rep.PGSSNote, text)
	for _, p := range []*pgssReport{rep.Throughput.PGSS, rep.Baseline.PGSS} {
		require.NotNil(t, p, text)
		require.Positive(t, p.StatementsPerOp)
		require.Positive(t, p.RowsPerOp)
		require.Positive(t, p.ExecMsPerOp)
		require.Positive(t, p.WALRecordsPerOp)
		require.Positive(t, p.WALBytesPerOp)
		require.NotEmpty(t, p.Top)
		for _, s := range p.Top {
			require.NotContains(t, s.Query, strings.TrimSpace(benchTag), "the bench's own statements are not counted")
		}
	}
	require.GreaterOrEqual(t, rep.Baseline.PGSS.StatementsPerOp, 2.0, "INSERT the key, UPDATE the result")
	require.Len(t, rep.Latency, 1, "-high-load 0")
	require.Nil(t, rep.Latency[0].Floor, "-floor=false")
	require.Nil(t, rep.Duplicates.Floor, "-floor=false")
	require.NotContains(t, text, "floor of this path")
	require.Contains(t, text, "pg_stat_statements per operation")
	st, err := os.Stat(prof)
	require.NoError(t, err)
	require.Positive(t, st.Size())
}

// A steady run with -pgss says, each interval, what the statements of the
// operations it completed cost: the bench's own reads are not counted.
func TestBenchSteadyPGSS(t *testing.T) {
	t.Parallel()
	needPrivateCluster(t)
	rep, text := runBenchJSON(t, map[string]string{}, "-pgss", "-durable=false", "-duration", "1500ms", "-interval", "500ms", "-rate", "60",
		"-latency-duration", "300ms", "-warmup", "5", "-json")
	require.Empty(t, rep.PGSSNote, text)
	s := rep.Steady
	require.NotNil(t, s, text)
	counted := 0
	for _, iv := range s.Intervals {
		if iv.Completed == 0 {
			require.Nil(t, iv.PGSS)
			continue
		}
		p := iv.PGSS
		require.NotNil(t, p, text)
		counted++
		require.Equal(t, iv.Completed, p.Ops)
		require.Positive(t, p.StatementsPerOp)
		require.Positive(t, p.ExecMsPerOp)
		require.Positive(t, p.WALRecordsPerOp)
		for _, st := range p.Top {
			require.NotContains(t, st.Query, strings.TrimSpace(benchTag), "the bench's own statements are not counted")
		}
	}
	require.Positive(t, counted, text)
	require.Contains(t, text, "pg_stat_statements per operation")

	// The NATS server ran in a process of its own, watched apart, and is
	// gone once the bench returns.
	require.Positive(t, s.NATSPid, text)
	require.NotEqual(t, os.Getpid(), s.NATSPid)
	for _, iv := range s.Intervals {
		require.NotNil(t, iv.NATSRSSBytes, text)
		require.Positive(t, *iv.NATSRSSBytes)
		if iv.CPU != nil {
			require.NotNil(t, iv.CPU.NATSMsPerOp, text)
		}
	}
	require.NotNil(t, s.Verdict.NATSRSS, text)
	require.Contains(t, text, "NATS server RSS")
	_, err := os.Stat(fmt.Sprintf("/proc/%d", s.NATSPid))
	require.True(t, os.IsNotExist(err), "the NATS server's process outlived the bench: %v", err)
}

// The NATS server's process stops once the process that started it is
// gone (its standard input closes), however that one went.
func TestNATSProcessStopsWithItsParent(t *testing.T) {
	t.Parallel()
	var stderr strings.Builder
	p, err := startNATSProcess(t.Context(), "", &stderr)
	require.NoError(t, err, stderr.String())
	t.Cleanup(p.Close)
	require.True(t, strings.HasPrefix(p.URL, "nats://127.0.0.1:"), p.URL)
	nc, err := nats.Connect(p.URL)
	require.NoError(t, err)
	nc.Close()
	rss, err := p.rss()
	require.NoError(t, err)
	require.Positive(t, rss)

	require.NoError(t, p.stdin.Close()) // what the parent's death does
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		t.Fatal("the NATS server's process did not stop when its standard input closed")
	}
}

// A steady run whose arrivals are not answered within -drain says how many
// of them the ledger holds as operations not settled yet: one dispatcher
// with one worker falls behind arrivals at 3,000 a second, and the bench
// waits 1 ms for the rest.
func TestBenchSteadyUnansweredArePersisted(t *testing.T) {
	t.Parallel()
	needPrivateCluster(t)
	rep, text := runBenchJSON(t, map[string]string{}, "-durable=false", "-dispatchers", "1", "-dispatch-workers", "1", "-warmup", "0",
		"-duration", "1s", "-interval", "500ms", "-rate", "3000", "-latency-duration", "100ms", "-drain", "1ms", "-json")
	s := rep.Steady
	require.NotNil(t, s, text)
	require.Positive(t, s.Lost, text)
	require.Positive(t, s.LostPersisted, "arrivals waiting for the dispatcher are operations in the ledger: %s", text)
	require.LessOrEqual(t, s.LostPersisted, int64(s.Lost), "an operation not settled is an arrival not answered")
	require.Contains(t, text, "operations in the ledger not settled yet")
}

// needPrivateCluster skips a test that starts a private cluster of its own
// (no DATABASE_URL) where PostgreSQL's binaries are not installed, and
// fails it when CI=true.
func needPrivateCluster(t *testing.T) {
	t.Helper()
	if _, err := pglocal.BinDir(); errors.Is(err, pglocal.ErrBinariesNotFound) {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatal(err)
		}
		t.Skip(err)
	}
}
