package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/opledger/opledger/internal/benchkit"
	"github.com/opledger/opledger/pkg/op"
)

// steadyReport is a -duration run: one entry per -interval, and whether the
// last intervals look like the first.
type steadyReport struct {
	Rate            float64          `json:"rate"`
	Arrivals        string           `json:"arrivals"`
	Seconds         float64          `json:"seconds"`
	IntervalSeconds float64          `json:"interval_seconds"`
	Direct          benchkit.Dist    `json:"direct"`
	Intervals       []steadyInterval `json:"intervals"`
	// Lost arrivals had no answer -drain after the last arrival;
	// DrainAnswered were answered after it.
	Lost int `json:"lost"`
	// LostPersisted of them were operations in the ledger that had not
	// settled yet at the end (waiting for a dispatcher, not lost by
	// opledger); the others were not in the ledger yet.
	LostPersisted int64         `json:"lost_persisted"`
	DrainAnswered int           `json:"drain_answered"`
	DrainSeconds  float64       `json:"drain_seconds"`
	Failed        int           `json:"failed"`
	Verdict       steadyVerdict `json:"verdict"`
	// NATSPid is the NATS server's own process (0: it ran in this one, or
	// NATS_URL named another server).
	NATSPid int `json:"nats_pid,omitempty"`
}

type steadyInterval struct {
	EndSeconds float64 `json:"end_seconds"`
	// Completed intents in this interval, and their latency from due time
	// to completed_success; overhead is that minus the direct call's.
	Completed   int           `json:"completed"`
	OpsPerSec   float64       `json:"ops_per_sec"`
	E2E         benchkit.Dist `json:"e2e"`
	OverheadP50 float64       `json:"overhead_p50_ms"`
	OverheadP99 float64       `json:"overhead_p99_ms"`
	// InFlight intents are published and not answered yet; OutboxUnsent
	// rows wait for a relay; Unsettled operations of this run are in no
	// final state.
	InFlight int `json:"in_flight"`
	// OldestUnansweredMs is the age, at the interval's end, of the oldest
	// arrival without an answer: a lower bound on latencies still to come.
	OldestUnansweredMs float64 `json:"oldest_unanswered_ms"`
	OutboxUnsent       int64   `json:"outbox_unsent"`
	Unsettled          int64   `json:"unsettled"`
	HeapLiveBytes      int64   `json:"heap_live_bytes"`
	RSSBytes           int64   `json:"rss_bytes"`
	Goroutines         int     `json:"goroutines"`
	// NATSRSSBytes is the resident set of the NATS server's own process
	// (absent when it runs in this one or elsewhere).
	NATSRSSBytes *int64      `json:"nats_rss_bytes,omitempty"`
	Tables       []tableStat `json:"tables"`
	// CPU is the CPU time the interval cost per operation completed in it
	// (absent when none completed); MachineBusy the share of all the
	// machine's CPU time that any process used in it (absent when
	// /proc/stat cannot be read). At a fixed rate a rising CPU per
	// operation is work that grows with time; a machine near 100% busy
	// has no room left for autovacuum's visits.
	CPU         *cpuReport `json:"cpu,omitempty"`
	MachineBusy *float64   `json:"machine_busy,omitempty"`
	// Group is how many writes shared each group-commit statement.
	Group *groupReport `json:"group_commit,omitempty"`
	// PGSS is what pg_stat_statements counted in this interval, per
	// operation completed in it (-pgss): at a fixed rate, statements or
	// execution time per operation that rise are work that grows with
	// time or with the tables.
	PGSS *pgssReport `json:"pgss,omitempty"`
	// Maintenance is the vacuums and analyzes seen running in the
	// interval (sampled every maintenancePeriod), MaintenanceError why
	// the progress views could not be read.
	Maintenance      []maintenanceSeen `json:"maintenance,omitempty"`
	MaintenanceError string            `json:"maintenance_error,omitempty"`
}

// steadyVerdict compares the mean of the last third of the intervals with
// the first third's (benchkit.Ratio); the answers after the last arrival
// are not an interval.
type steadyVerdict struct {
	Flat     bool          `json:"flat"`
	NotFlat  []string      `json:"not_flat,omitempty"`
	P99      trend         `json:"overhead_p99_ms"`
	HeapLive trend         `json:"heap_live_bytes"`
	RSS      trend         `json:"rss_bytes"`
	Backlog  trend         `json:"backlog"`
	Tables   []tableTrends `json:"tables"`
	// CPUPerOp (this process's and Postgres's, per operation completed)
	// and MachineBusy are reported beside the verdict, not judged: they
	// tell a run that fell behind because the machine had no CPU left
	// from one whose work per operation grew.
	CPUPerOp    *trend `json:"cpu_ms_per_op,omitempty"`
	MachineBusy *trend `json:"machine_busy,omitempty"`
	// NATSRSS is the NATS server's own process, reported and not judged:
	// it holds what the streams are configured to keep (each stream's
	// Nats-Msg-Id window, an hour of results, a day of intents), which
	// grows for as long as those last, and the server is not opledger's.
	NATSRSS *trend `json:"nats_rss_bytes,omitempty"`
}

type trend struct {
	First float64 `json:"first"`
	Last  float64 `json:"last"`
	Ratio float64 `json:"ratio"`
	Flat  bool    `json:"flat"`
}

type tableTrends struct {
	Table string `json:"table"`
	// Small tables (under flatSmallTable live rows) and queue tables
	// (queueTables) are compared by total size.
	Small bool `json:"small"`
	Queue bool `json:"queue"`
	// BytesPerRow is total size over live rows (total size for a table
	// of under 1000 rows); DeadShare is dead over all tuples (not judged
	// for a small table).
	BytesPerRow trend `json:"bytes_per_row"`
	DeadShare   trend `json:"dead_share"`
	Flat        bool  `json:"flat"`
}

// steady runs at -rate for -duration, reporting every -interval. The local
// vendor forgets its charges at every interval (it keeps them in this
// process's memory, which is watched here).
func (b *bench) steady(ctx context.Context) error {
	rate := b.rate(b.cfg.Rate)
	s := &steadyReport{Rate: rate, Arrivals: string(b.cfg.Arrivals), Seconds: b.cfg.Duration.Seconds(), IntervalSeconds: b.cfg.Interval.Seconds()}
	b.rep.Steady = s
	s.NATSPid = b.natsPid()
	directFor := min(b.cfg.LatencyDuration, b.cfg.Duration)
	direct, _, err := b.directLoop(ctx, b.schedule("steady_direct", rate, directFor), "steady")
	if err != nil {
		return err
	}
	s.Direct = benchkit.Summarize(direct)
	fmt.Fprintf(b.out, "steady: %.0f ops/s (%s arrivals) for %s, a report every %s; direct vendor call at that rate: p50 %s p99 %s\n",
		rate, b.cfg.Arrivals, b.cfg.Duration, b.cfg.Interval, msStr(s.Direct.P50), msStr(s.Direct.P99))
	outboxQuery, err := b.outboxUnsentQuery(ctx)
	if err != nil {
		return err
	}

	wf := b.wf("steady")
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	a, err := b.watch(runCtx, wf)
	if err != nil {
		return err
	}
	// Every arrival waits for its answer however late it comes (a late
	// answer counts, in the interval it arrives, with its whole latency);
	// one still unanswered -drain after the last arrival is lost.
	var (
		mu      sync.Mutex
		lat     []time.Duration
		pending = map[int]time.Time{}
		pubErr  error
		ended   bool
	)
	// What the run costs is sampled from its start, as each interval ends.
	stopProfile, err := b.startCPUProfile()
	if err != nil {
		return err
	}
	defer stopProfile()
	dataDir := b.dataDirectory(ctx)
	if err := b.resetPGSS(ctx); err != nil {
		return err
	}
	maint := &maintenanceLog{}
	if err := watchMaintenance(runCtx, b.d.Infra.DatabaseURL, maint); err != nil {
		return err
	}
	cpuPrev, groupPrev := sampleCPU(dataDir, b.natsPid()), b.d.Services.Store.GroupStats()
	busyPrev, totalPrev, machErr := machineCPU()
	sched := benchkit.Schedule(b.cfg.Arrivals, rate, b.cfg.Duration, uint64(time.Now().UnixNano()))
	loopDone := make(chan error, 1)
	start := time.Now()
	go func() {
		// Each arrival's goroutine ends once its intent is published; its
		// answer is taken on the subscription's goroutine.
		_, err := benchkit.OpenLoop(runCtx, sched, func(i int, due time.Time) {
			in := benchIntent(wf, i)
			key := answerKey(op.DecisionNew, in.EventID)
			mu.Lock()
			pending[i] = due
			mu.Unlock()
			a.expectFunc(key, func(ans answer) {
				mu.Lock()
				defer mu.Unlock()
				if _, ok := pending[i]; !ok || ended {
					return
				}
				delete(pending, i)
				if ans.status == string(op.StateCompletedSuccess) {
					lat = append(lat, ans.at.Sub(due))
				} else {
					s.Failed++
				}
			})
			if err := b.cl.Publish(runCtx, in, ""); err != nil {
				a.forget(key)
				mu.Lock()
				delete(pending, i)
				if runCtx.Err() == nil {
					pubErr = err
				}
				mu.Unlock()
			}
		})
		loopDone <- err
	}()

	end := start.Add(b.cfg.Duration)
	prev := start
	for prev.Before(end) {
		next := minTime(prev.Add(b.cfg.Interval), end)
		if end.Sub(next) < b.cfg.Interval/2 {
			next = end // no stub interval at the end: the last one is longer
		}
		select {
		case <-time.After(time.Until(next)):
		case <-ctx.Done():
			return ctx.Err()
		}
		now := time.Now()
		mu.Lock()
		got := lat
		lat = nil
		inFlight := len(pending)
		oldest := oldestDue(pending, now)
		err := pubErr
		mu.Unlock()
		if err != nil {
			return fmt.Errorf("bench: steady: publish: %w", err)
		}
		iv := steadyInterval{EndSeconds: now.Sub(start).Seconds(), Completed: len(got), OpsPerSec: float64(len(got)) / now.Sub(prev).Seconds(),
			E2E: benchkit.Summarize(got), InFlight: inFlight, OldestUnansweredMs: msf(now.Sub(oldest)), Goroutines: runtime.NumGoroutine()}
		prev = now
		if iv.Completed > 0 {
			iv.OverheadP50, iv.OverheadP99 = iv.E2E.P50-s.Direct.P50, iv.E2E.P99-s.Direct.P99
		}
		cpuNow := sampleCPU(dataDir, b.natsPid())
		if iv.Completed > 0 {
			iv.CPU = cpuCost(cpuPrev, cpuNow, iv.Completed)
		}
		cpuPrev = cpuNow
		groupNow := b.d.Services.Store.GroupStats()
		iv.Group = groupCost(groupPrev, groupNow)
		groupPrev = groupNow
		if busy, total, err := machineCPU(); err == nil && machErr == nil && total > totalPrev {
			share := float64(busy-busyPrev) / float64(total-totalPrev)
			iv.MachineBusy = &share
			busyPrev, totalPrev = busy, total
		}
		if err := b.db.QueryRow(ctx, outboxQuery).Scan(&iv.OutboxUnsent); err != nil {
			return fmt.Errorf("bench: steady: outbox: %w", err)
		}
		if iv.Unsettled, err = b.unsettledSince(ctx, wf, oldest); err != nil {
			return err
		}
		iv.HeapLiveBytes, iv.RSSBytes = memory()
		if b.nats != nil {
			if r, err := b.nats.rss(); err == nil {
				iv.NATSRSSBytes = &r
			}
		}
		if b.cfg.MemProfile != "" {
			if err := writeHeapProfile(fmt.Sprintf("%s.%d", b.cfg.MemProfile, len(s.Intervals)+1)); err != nil {
				return err
			}
		}
		if iv.Completed > 0 {
			// What the statements above cost is the bench's own
			// (benchTag), left out of the count.
			if iv.PGSS, err = b.snapshotPGSS(ctx, iv.Completed); err != nil {
				return err
			}
		}
		if err := b.resetPGSS(ctx); err != nil {
			return err
		}
		if iv.Tables, err = b.tableStats(ctx, hotTables); err != nil {
			return err
		}
		seen, merr := maint.take()
		iv.Maintenance = seen
		if merr != nil {
			iv.MaintenanceError = merr.Error()
		}
		b.d.Vendors.Reset()
		s.Intervals = append(s.Intervals, iv)
		iv.print(b.out)
	}

	// After the last arrival: the answers still to come.
	drainStart := time.Now()
	for {
		mu.Lock()
		n := len(pending)
		mu.Unlock()
		if n == 0 || time.Since(drainStart) > b.cfg.Drain {
			break
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	mu.Lock()
	ended = true // answers from now on are not counted
	s.Lost = len(pending)
	oldest := oldestDue(pending, time.Now())
	s.DrainAnswered, s.DrainSeconds = len(lat), time.Since(drainStart).Seconds()
	mu.Unlock()
	cancel()
	<-loopDone
	drained := time.Since(drainStart).Round(time.Millisecond)
	if s.Lost > 0 {
		// An arrival is answered once its operation settles, so the
		// run's operations not settled are arrivals without an answer
		// that the ledger holds.
		if s.LostPersisted, err = b.unsettledSince(ctx, wf, oldest); err != nil {
			return err
		}
		fmt.Fprintf(b.out, "after the last arrival: %d more answered in %s, %d not within %s (lost to the bench; %d of them operations in the ledger not settled yet)\n",
			s.DrainAnswered, drained, s.Lost, b.cfg.Drain, s.LostPersisted)
	} else {
		fmt.Fprintf(b.out, "after the last arrival: %d more answered in %s, none lost\n", s.DrainAnswered, drained)
	}
	s.Verdict = verdict(s)
	s.Verdict.print(b.out, s)
	return nil
}

// outboxUnsentQuery counts the outbox rows a relay is still to publish.
// While the outbox marks rows sent (and parks refused ones) that is the
// predicate of its partial index of unsent rows, so the count reads only
// that index, not the hour of published rows retention keeps; once it
// deletes rows instead, it is every row.
func (iv *steadyInterval) print(w io.Writer) {
	lat := "no answer in this interval"
	if iv.Completed > 0 {
		lat = fmt.Sprintf("overhead p50 %s p99 %s", msStr(iv.OverheadP50), msStr(iv.OverheadP99))
	}
	natsRSS := ""
	if iv.NATSRSSBytes != nil {
		natsRSS = "  NATS server RSS " + bytesIEC(*iv.NATSRSSBytes)
	}
	fmt.Fprintf(w, "[%8s] %6.0f ops/s (%d completed)  %s  in flight %d (oldest %s)  outbox unsent %d  unsettled %d  Go heap %s  RSS %s  goroutines %d%s\n",
		time.Duration(iv.EndSeconds*float64(time.Second)).Round(time.Second), iv.OpsPerSec, iv.Completed, lat, iv.InFlight,
		time.Duration(iv.OldestUnansweredMs*float64(time.Millisecond)).Round(time.Millisecond), iv.OutboxUnsent, iv.Unsettled,
		bytesIEC(iv.HeapLiveBytes), bytesIEC(iv.RSSBytes), iv.Goroutines, natsRSS)
	var cpu []string
	if iv.CPU != nil {
		c := fmt.Sprintf("CPU per operation %.3f ms in this process", iv.CPU.ProcessMsPerOp)
		if iv.CPU.NATSMsPerOp != nil {
			c += fmt.Sprintf(", %.3f ms in the NATS server", *iv.CPU.NATSMsPerOp)
		}
		if iv.CPU.PostgresMsPerOp != nil {
			c += fmt.Sprintf(", %.3f ms in Postgres", *iv.CPU.PostgresMsPerOp)
		}
		cpu = append(cpu, c)
	}
	if iv.MachineBusy != nil {
		cpu = append(cpu, fmt.Sprintf("the machine's CPUs %.0f%% busy", 100**iv.MachineBusy))
	}
	if iv.Group != nil {
		cpu = append(cpu, iv.Group.String())
	}
	if len(cpu) > 0 {
		fmt.Fprintf(w, "           %s\n", strings.Join(cpu, "; "))
	}
	if iv.PGSS != nil {
		iv.PGSS.printShort(w, "           ", 3)
	}
	printTables(w, "           ", iv.Tables)
	printMaintenance(w, "           ", iv.Maintenance, iv.MaintenanceError)
}

// oldestDue is the earliest due time of the arrivals pending, or now when
// none is.
func oldestDue(pending map[int]time.Time, now time.Time) time.Time {
	oldest := now
	for _, due := range pending {
		oldest = minTime(oldest, due)
	}
	return oldest
}

// unsettledSince counts the run's operations (workflow wf) in no final state
// created since oldest, the due time of the oldest arrival without an
// answer (an operation is answered only when it has settled), with a margin
// for clocks: only those may still be unsettled. Planned for these values
// (QueryExecModeExec: no cached generic plan), so that it reads
// operations_workflow_idx from since on: every operation of the run has this
// workflow id, and a generic plan, which cannot know how recent since is,
// scanned the whole table every interval (137 ms at 60,000 operations); and
// since no longer reaches back a whole interval (a minute of operations to
// read when nothing waits).
func (b *bench) unsettledSince(ctx context.Context, wf string, oldest time.Time) (int64, error) {
	var n int64
	if err := b.db.QueryRow(ctx, benchTag+`SELECT count(*) FROM operations WHERE workflow_id = $1 AND created_at >= $2 AND state <> ALL($3)`,
		pgx.QueryExecModeExec, wf, oldest.Add(-5*time.Second), terminalStates()).Scan(&n); err != nil {
		return 0, fmt.Errorf("bench: steady: unsettled operations: %w", err)
	}
	return n, nil
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func (b *bench) outboxUnsentQuery(ctx context.Context) (string, error) {
	var sent, parked, batches bool
	err := b.db.QueryRow(ctx, benchTag+`SELECT
		EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'public.outbox'::regclass AND attname = 'sent_at' AND NOT attisdropped),
		EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'public.outbox'::regclass AND attname = 'parked_at' AND NOT attisdropped),
		to_regclass('public.outbox_batches') IS NOT NULL`).Scan(&sent, &parked, &batches)
	if err != nil {
		return "", fmt.Errorf("bench: outbox columns: %w", err)
	}
	switch {
	case batches:
		return benchTag + `SELECT (SELECT count(*) FROM outbox WHERE sent_at IS NULL AND parked_at IS NULL)
			+ (SELECT coalesce(sum(cardinality(msg_ids)), 0) FROM outbox_batches)`, nil
	case sent && parked:
		return benchTag + `SELECT count(*) FROM outbox WHERE sent_at IS NULL AND parked_at IS NULL`, nil
	case sent:
		return benchTag + `SELECT count(*) FROM outbox WHERE sent_at IS NULL`, nil
	}
	return benchTag + `SELECT count(*) FROM outbox`, nil
}

func terminalStates() []string {
	var out []string
	for _, s := range op.States {
		if s.Terminal() {
			out = append(out, string(s))
		}
	}
	return out
}

// memory returns the live Go heap at the last GC and the process's resident
// set (0 where /proc is not).
func memory() (heapLive, rss int64) {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(sample)
	if sample[0].Value.Kind() == metrics.KindUint64 {
		heapLive = int64(sample[0].Value.Uint64())
	}
	rss, _ = statmRSS("/proc/self/statm")
	return heapLive, rss
}

// statmRSS reads a process's resident set size from its /proc statm file.
func statmRSS(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0, fmt.Errorf("%s unreadable", path)
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s unreadable", path)
	}
	return pages * int64(os.Getpagesize()), nil
}

// Flatness rules: a figure is flat when its last third's mean is within
// these of its first third's (ratio, or an absolute slack for small
// figures, whose ratios are noise).
const (
	flatP99Ratio     = 1.5
	flatP99SlackMs   = 2.0
	flatMemRatio     = 1.25
	flatMemSlack     = 32 << 20
	flatBytesRatio   = 1.25
	flatSmallTable   = 1000    // rows: below, compare total size
	flatSmallSlack   = 8 << 20 // bytes a small table may grow
	flatDeadSlack    = 0.10    // dead share may grow by this
	flatDeadCeiling  = 0.20    // and may always be up to this
	flatBacklogRatio = 1.5
	flatBacklogSlack = 0.25 // seconds of arrivals the backlog may grow by
)

func mkTrend(xs []float64, ratio, slack float64) trend {
	first, last, r := benchkit.Ratio(xs)
	if math.IsInf(r, 0) || math.IsNaN(r) {
		r = -1 // JSON has no infinity
	}
	return trend{First: first, Last: last, Ratio: r, Flat: last <= first*ratio || last-first <= slack}
}

// queueTables hold work in flight: a row leaves when its work is done (an
// entity's lease when its operation settles, a message once published).
// Their live rows follow the backlog, not the ledger's size, so their size
// per live row rises whenever the backlog falls; they are judged by their
// total size (and a dead share says as little as a small table's).
var queueTables = map[string]bool{"outbox": true, "outbox_batches": true, "entity_leases": true}

func verdict(s *steadyReport) steadyVerdict {
	var p99, heap, rss, backlog []float64
	for _, iv := range s.Intervals {
		// An arrival still unanswered at the interval's end has waited at
		// least its age: an interval whose answers stopped coming is not
		// a fast one.
		p99 = append(p99, math.Max(iv.OverheadP99, iv.OldestUnansweredMs))
		heap = append(heap, float64(iv.HeapLiveBytes))
		rss = append(rss, float64(iv.RSSBytes))
		backlog = append(backlog, float64(iv.InFlight)+float64(iv.OutboxUnsent))
	}
	var cpu, busy, natsRSS []float64
	for _, iv := range s.Intervals {
		if iv.CPU != nil {
			if t, ok := iv.CPU.totalMsPerOp(); ok {
				cpu = append(cpu, t)
			}
		}
		if iv.NATSRSSBytes != nil {
			natsRSS = append(natsRSS, float64(*iv.NATSRSSBytes))
		}
		if iv.MachineBusy != nil {
			busy = append(busy, *iv.MachineBusy)
		}
	}
	v := steadyVerdict{P99: mkTrend(p99, flatP99Ratio, flatP99SlackMs), HeapLive: mkTrend(heap, flatMemRatio, flatMemSlack),
		RSS: mkTrend(rss, flatMemRatio, flatMemSlack), Backlog: mkTrend(backlog, flatBacklogRatio, s.Rate*flatBacklogSlack)}
	if len(cpu) > 0 {
		t := mkTrend(cpu, 1, 0)
		v.CPUPerOp = &t
	}
	if len(busy) > 0 {
		t := mkTrend(busy, 1, 0)
		v.MachineBusy = &t
	}
	if len(natsRSS) > 0 {
		t := mkTrend(natsRSS, flatMemRatio, flatMemSlack)
		v.NATSRSS = &t
	}
	for _, f := range []struct {
		name string
		ok   bool
	}{{"p99", v.P99.Flat}, {"Go heap", v.HeapLive.Flat}, {"RSS", v.RSS.Flat}, {"backlog", v.Backlog.Flat}} {
		if !f.ok {
			v.NotFlat = append(v.NotFlat, f.name)
		}
	}
	for _, table := range hotTables {
		var perRow, dead []float64
		small, queue := true, queueTables[table]
		for _, iv := range s.Intervals {
			for _, t := range iv.Tables {
				if t.Table != table {
					continue
				}
				if t.LiveTuples >= flatSmallTable {
					small = false
				}
				dead = append(dead, float64(t.DeadTuples)/math.Max(float64(t.LiveTuples+t.DeadTuples), 1))
			}
		}
		if len(dead) == 0 {
			continue
		}
		byTotal := small || queue
		for _, iv := range s.Intervals {
			for _, t := range iv.Tables {
				if t.Table == table {
					if byTotal {
						perRow = append(perRow, float64(t.TotalBytes))
					} else {
						perRow = append(perRow, float64(t.TotalBytes)/math.Max(float64(t.LiveTuples), 1))
					}
				}
			}
		}
		tt := tableTrends{Table: table, Small: small, Queue: queue, DeadShare: mkTrend(dead, 1, flatDeadSlack)}
		if byTotal {
			tt.BytesPerRow = mkTrend(perRow, flatBytesRatio, flatSmallSlack)
		} else {
			tt.BytesPerRow = mkTrend(perRow, flatBytesRatio, 0)
		}
		// A small table's dead share says nothing (a few live rows, each
		// deleted soon: entity leases); its size does.
		tt.DeadShare.Flat = tt.DeadShare.Flat || tt.DeadShare.Last <= flatDeadCeiling || byTotal
		tt.Flat = tt.BytesPerRow.Flat && tt.DeadShare.Flat
		if !tt.Flat {
			v.NotFlat = append(v.NotFlat, table)
		}
		v.Tables = append(v.Tables, tt)
	}
	v.Flat = len(v.NotFlat) == 0
	return v
}

func (v *steadyVerdict) print(w io.Writer, s *steadyReport) {
	word := func(t trend) string {
		if t.Flat {
			return "flat"
		}
		return "GROWING"
	}
	fmt.Fprintf(w, "steady, last third of the intervals against the first (lost %d, failed %d):\n", s.Lost, s.Failed)
	fmt.Fprintf(w, "  overhead p99 (or the oldest unanswered arrival's age, when greater) %s → %s: %s\n", msStr(v.P99.First), msStr(v.P99.Last), word(v.P99))
	fmt.Fprintf(w, "  Go heap (live) %s → %s: %s; RSS %s → %s: %s\n", bytesIEC(int64(v.HeapLive.First)), bytesIEC(int64(v.HeapLive.Last)), word(v.HeapLive),
		bytesIEC(int64(v.RSS.First)), bytesIEC(int64(v.RSS.Last)), word(v.RSS))
	fmt.Fprintf(w, "  backlog (in flight + outbox unsent) %.0f → %.0f: %s\n", v.Backlog.First, v.Backlog.Last, word(v.Backlog))
	if v.CPUPerOp != nil {
		who := "this process and Postgres"
		if v.NATSRSS != nil {
			who = "this process, the NATS server and Postgres"
		}
		fmt.Fprintf(w, "  CPU per operation, %s, %.3f → %.3f ms (not judged)\n", who, v.CPUPerOp.First, v.CPUPerOp.Last)
	}
	if v.MachineBusy != nil {
		fmt.Fprintf(w, "  the machine's CPUs busy %.0f%% → %.0f%% (not judged)\n", 100*v.MachineBusy.First, 100*v.MachineBusy.Last)
	}
	if v.NATSRSS != nil {
		fmt.Fprintf(w, "  the NATS server's own process, RSS %s → %s (%s by the same rule; not judged: it keeps what its streams are configured to keep, see README)\n",
			bytesIEC(int64(v.NATSRSS.First)), bytesIEC(int64(v.NATSRSS.Last)), strings.ToLower(word(*v.NATSRSS)))
	}
	for _, t := range v.Tables {
		what := "size per live row"
		switch {
		case t.Queue:
			what = "size (work in flight)"
		case t.Small:
			what = "size (small table)"
		}
		fmt.Fprintf(w, "  %-17s %s %s → %s: %s; dead tuples %.1f%% → %.1f%%: %s\n", t.Table, what,
			bytesIEC(int64(t.BytesPerRow.First)), bytesIEC(int64(t.BytesPerRow.Last)), word(t.BytesPerRow), 100*t.DeadShare.First, 100*t.DeadShare.Last, word(t.DeadShare))
	}
	if v.Flat {
		fmt.Fprintln(w, "steady: p99, memory, backlog and the hot tables stayed flat")
	} else {
		fmt.Fprintf(w, "steady: NOT flat: %s\n", strings.Join(v.NotFlat, ", "))
	}
}
