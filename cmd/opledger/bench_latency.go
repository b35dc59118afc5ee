package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/opledger/opledger/internal/benchkit"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// drainTimeout is -drain's default: how long an open-loop run waits, after
// its last arrival, for the answers still missing; those that do not come
// are counted lost.
const drainTimeout = 30 * time.Second

// answer is a result an arrival waits for.
type answer struct {
	at       time.Time
	status   string
	decision op.Decision
}

// answers hands the results of one workflow to the arrivals waiting for
// them, keyed by event id: a new intent waits for its completed_success
// result (or any other final one, a failure), a repeated one for the first
// answer with another decision than new (it is failed unless the decision
// is the one awaited).
type answers struct {
	mu      sync.Mutex
	waiting map[string]func(answer)
}

func newAnswers() *answers { return &answers{waiting: map[string]func(answer){}} }

// answerKey is what an arrival waits for: the operation's own progression
// (decision new) or an answer to a repeat of its event.
func answerKey(d op.Decision, eventID string) string {
	if d == op.DecisionNew {
		return "new " + eventID
	}
	return "repeat " + eventID
}

// watch subscribes to wf's results; the subscription ends with ctx.
func (b *bench) watch(ctx context.Context, wf string) (*answers, error) {
	results, err := b.cl.Results(ctx, wire.ResultSubject(wf))
	if err != nil {
		return nil, err
	}
	a := newAnswers()
	go func() {
		for r := range results {
			at := time.Now()
			if r.DedupeDecision == op.DecisionNew && r.Status != string(op.StateCompletedSuccess) && !r.Final {
				continue // a step on the way
			}
			a.deliver(answerKey(r.DedupeDecision, r.EventID), answer{at: at, status: r.Status, decision: r.DedupeDecision})
		}
	}()
	return a, nil
}

// expect registers a wait for key; register before publishing.
func (a *answers) expect(key string) <-chan answer {
	ch := make(chan answer, 1)
	a.expectFunc(key, func(ans answer) { ch <- ans })
	return ch
}

// expectFunc registers f to be called, on the subscription's goroutine,
// with key's answer: an arrival that waits this way holds no goroutine
// (a run that falls behind holds hundreds of thousands of them, whose
// stacks the collector scans at every cycle). Register before publishing.
func (a *answers) expectFunc(key string, f func(answer)) {
	a.mu.Lock()
	a.waiting[key] = f
	a.mu.Unlock()
}

func (a *answers) forget(key string) {
	a.mu.Lock()
	delete(a.waiting, key)
	a.mu.Unlock()
}

func (a *answers) deliver(key string, ans answer) {
	a.mu.Lock()
	f := a.waiting[key]
	delete(a.waiting, key)
	a.mu.Unlock()
	if f != nil {
		f(ans)
	}
}

// pending is how many arrivals still wait for their answers.
func (a *answers) pending() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.waiting)
}

// loopResult is what an open-loop run of intents measured.
type loopResult struct {
	// lat holds, per dedupe decision awaited, the latencies from each
	// arrival's due time to its answer.
	lat     map[op.Decision][]time.Duration
	lost    int // no answer within -drain of the last arrival
	failed  int // answered otherwise (another final state, another decision)
	maxLate time.Duration
	// done are the arrivals answered as expected, in no order.
	done []intentSent
}

// pipelineLoop publishes, on the schedule, the intent mk returns for each
// arrival, and waits for the answer with the decision mk says (new: the
// completed_success result).
func (b *bench) pipelineLoop(ctx context.Context, wf string, sched []time.Duration, mk func(i int) (wire.Intent, op.Decision)) (*loopResult, error) {
	last := time.Duration(0)
	if len(sched) > 0 {
		last = sched[len(sched)-1]
	}
	ctx, cancel := context.WithTimeout(ctx, last+b.cfg.Drain)
	defer cancel()
	a, err := b.watch(ctx, wf)
	if err != nil {
		return nil, err
	}
	res := &loopResult{lat: map[op.Decision][]time.Duration{}}
	var mu sync.Mutex
	var pubErr error
	res.maxLate, err = benchkit.OpenLoop(ctx, sched, func(i int, due time.Time) {
		in, want := mk(i)
		key := answerKey(want, in.EventID)
		ch := a.expect(key)
		if err := b.cl.Publish(ctx, in, ""); err != nil {
			a.forget(key)
			mu.Lock()
			pubErr = err
			mu.Unlock()
			return
		}
		select {
		case ans := <-ch:
			mu.Lock()
			defer mu.Unlock()
			if ans.decision != want || (want == op.DecisionNew && ans.status != string(op.StateCompletedSuccess)) {
				res.failed++
				return
			}
			res.lat[want] = append(res.lat[want], ans.at.Sub(due))
			res.done = append(res.done, intentSent{in: in, due: due})
		case <-ctx.Done():
			a.forget(key)
			mu.Lock()
			res.lost++
			mu.Unlock()
		}
	})
	if pubErr != nil {
		return nil, fmt.Errorf("bench: publish: %w", pubErr)
	}
	if err != nil && ctx.Err() == nil {
		return nil, err
	}
	return res, nil
}

// directLoop calls the vendor's capture straight, the way the adapter
// does, on the schedule; latencies from each due time.
func (b *bench) directLoop(ctx context.Context, sched []time.Duration, tag string) ([]time.Duration, time.Duration, error) {
	var mu sync.Mutex
	var lat []time.Duration
	var callErr error
	maxLate, err := benchkit.OpenLoop(ctx, sched, func(i int, due time.Time) {
		order := fmt.Sprintf("%s_direct_%s_%d", b.run, tag, i)
		err := b.vendorCapture(ctx, "direct:"+order, captureBody(order, i))
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			callErr = err
			return
		}
		lat = append(lat, time.Since(due))
	})
	if callErr != nil {
		return nil, 0, callErr
	}
	return lat, maxLate, err
}

// vendorCapture POSTs a capture to the local payments vendor under key.
func (b *bench) vendorCapture(ctx context.Context, key string, body []byte) error {
	_, _, err := b.vendorCall(ctx, key, body)
	return err
}

func (b *bench) vendorCall(ctx context.Context, key string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.d.Vendors.URL()+"/v1/payments/capture", bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := b.hc.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("bench: vendor call: %w", err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return 0, nil, fmt.Errorf("bench: vendor call: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, out, fmt.Errorf("bench: vendor call: HTTP %d", resp.StatusCode)
	}
	return resp.StatusCode, out, nil
}

// schedule is the arrivals of one open-loop run at rate for the latency
// duration; its seed comes from the run id and the phase, so the runs of
// one bench differ and a phase repeats within it (opledger and baseline
// get the same arrivals).
func (b *bench) schedule(phase string, rate float64, d time.Duration) []time.Duration {
	var seed uint64 = 14695981039346656037
	for _, c := range []byte(b.run + phase) {
		seed = (seed ^ uint64(c)) * 1099511628211
	}
	return benchkit.Schedule(b.cfg.Arrivals, rate, d, seed)
}

// latencies runs the open-loop latency runs: at -rate, and at -high-load %
// of the throughput just measured.
func (b *bench) latencies(ctx context.Context) error {
	for _, l := range b.loads() {
		r, err := b.latencyAt(ctx, l)
		if err != nil {
			return err
		}
		b.rep.Latency = append(b.rep.Latency, r)
	}
	return nil
}

// load is one offered load of the latency runs.
type load struct {
	label string // "moderate" or "high"
	rate  float64
	note  string
}

func (b *bench) loads() []load {
	ls := []load{{label: "moderate", rate: b.rate(b.cfg.Rate), note: "-rate " + b.cfg.Rate.String()}}
	if b.cfg.HighLoad > 0 && b.thr > 0 {
		ls = append(ls, load{label: "high", rate: b.thr * b.cfg.HighLoad / 100, note: fmt.Sprintf("%g%% of the throughput", b.cfg.HighLoad)})
	}
	return ls
}

// latencyAt measures opledger end to end and the direct vendor call at
// one load, with the same arrivals.
func (b *bench) latencyAt(ctx context.Context, l load) (*latencyReport, error) {
	sched := b.schedule(l.label, l.rate, b.cfg.LatencyDuration)
	r := &latencyReport{Label: l.label, Rate: l.rate, Arrivals: string(b.cfg.Arrivals), Seconds: b.cfg.LatencyDuration.Seconds(), Intents: len(sched)}
	if len(sched) == 0 {
		fmt.Fprintf(b.out, "latency at %.0f ops/s (%s): no arrival in %s, skipped\n", l.rate, l.note, b.cfg.LatencyDuration)
		return r, nil
	}
	wf := b.wf("lat_" + l.label)
	if l.label == "moderate" {
		if err := b.resetPGSS(ctx); err != nil {
			return nil, err
		}
	}
	res, err := b.pipelineLoop(ctx, wf, sched, func(i int) (wire.Intent, op.Decision) { return benchIntent(wf, i), op.DecisionNew })
	if err != nil {
		return nil, err
	}
	if l.label == "moderate" {
		b.answered = res.done
		if r.PGSS, err = b.snapshotPGSS(ctx, len(sched)); err != nil {
			return nil, err
		}
	}
	direct, directLate, err := b.directLoop(ctx, sched, l.label)
	if err != nil {
		return nil, err
	}
	r.E2E, r.Direct = benchkit.Summarize(res.lat[op.DecisionNew]), benchkit.Summarize(direct)
	r.Lost, r.Failed = res.lost, res.failed
	r.MaxLateMs, r.DirectMaxLateMs = msf(res.maxLate), msf(directLate)
	r.OverheadP50, r.OverheadP99 = r.E2E.P50-r.Direct.P50, r.E2E.P99-r.Direct.P99
	if r.Stages, err = b.stageBreakdown(ctx, wf); err != nil {
		return nil, err
	}
	if b.cfg.Floor && l.label == "moderate" {
		if r.Floor, err = b.floor(ctx, sched, "new", floorNewPath); err != nil {
			return nil, err
		}
		r.Floor.OverheadP50, r.Floor.OverheadP99 = r.Floor.E2E.P50-r.Direct.P50, r.Floor.E2E.P99-r.Direct.P99
	}
	r.print(b.out, l.note)
	return r, nil
}

// duplicates publishes, at -rate, intents already answered in the moderate
// latency run again: every other one under a new event id with the same
// arguments (the same business key: duplicate_operation), the others as
// they were (the same event id: duplicate_event). Both are answered from
// the ledger without a vendor call.
func (b *bench) duplicates(ctx context.Context) error {
	orig := b.answered
	rate := b.rate(b.cfg.Rate)
	sched := b.schedule("dup", rate, b.cfg.LatencyDuration)
	sched = sched[:min(len(sched), 2*len(orig))]
	dr := &duplicatesReport{Rate: rate, Arrivals: string(b.cfg.Arrivals), Intents: len(sched)}
	b.rep.Duplicates = dr
	if len(sched) == 0 {
		fmt.Fprintf(b.out, "duplicate answers: nothing answered to repeat, skipped\n")
		return nil
	}
	wf := orig[0].in.WorkflowID
	res, err := b.pipelineLoop(ctx, wf, sched, func(i int) (wire.Intent, op.Decision) {
		in := orig[i/2].in
		if i%2 == 0 {
			in.EventID = fmt.Sprintf("%s:retry_%d", wf, i/2)
			return in, op.DecisionDuplicateOperation
		}
		return in, op.DecisionDuplicateEvent
	})
	if err != nil {
		return err
	}
	dr.DuplicateOperation = benchkit.Summarize(res.lat[op.DecisionDuplicateOperation])
	dr.DuplicateEvent = benchkit.Summarize(res.lat[op.DecisionDuplicateEvent])
	dr.Lost, dr.Failed, dr.MaxLateMs = res.lost, res.failed, msf(res.maxLate)
	if b.cfg.Floor {
		if dr.Floor, err = b.floor(ctx, sched, "dup", floorRepeatPath); err != nil {
			return err
		}
	}
	dr.print(b.out)
	return nil
}

func msf(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
