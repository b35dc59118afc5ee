// Package eval runs the article's fault-injection scenario matrix against a
// whole opledger and measures what the article calls the real production
// KPIs: duplicate side effects per 10k operations, the unknown-outcome rate,
// the share of ambiguous outcomes resolved without a person, reconciliation
// time, the false-dedupe rate, the latency the safety controls add, and
// what was left unsettled or escalated, by reason.
//
// A run starts Postgres, NATS JetStream, the local stand-in vendors and all
// four services (several dispatchers), then plays one lane per tool
// (capture_payment, send_email, create_ticket), lanes side by side. A lane
// runs the scenarios in order; for each it injects the scenario's fault at
// the tool's vendor route for as many requests as it has actions, publishes
// the actions' intents at a steady rate, and waits until every one is
// settled before the next, so that each fault lands on its own scenario's
// operations. The KPIs are then computed from the ledger (operations,
// event rows and their timestamps, attempts, inbox decisions) and from the
// vendors' own effect counts, never from what opledger reported to the
// agent.
//
// docs/eval.md describes the scenarios and how each KPI is computed.
package eval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/opledger/opledger/examples"
	"github.com/opledger/opledger/internal/app"
	"github.com/opledger/opledger/internal/ingest"
	"github.com/opledger/opledger/internal/maintain"
	"github.com/opledger/opledger/internal/reconcile"
	"github.com/opledger/opledger/internal/regedit"
	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/pkg/client"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// Config configures a run. Zero values take the defaults.
type Config struct {
	// PerScenario is the number of distinct business actions per scenario,
	// spread over the three tools (required).
	PerScenario int
	// Scenarios to run, in order (default DefaultScenarios).
	Scenarios []string
	// Seed makes the corpus, its timing and the kills reproducible.
	Seed uint64
	// Dispatchers is the number of dispatcher instances (default 3).
	Dispatchers int
	// DispatchWorkers is the concurrent vendor calls per dispatcher (0: the
	// service default). Not applied to dispatcher processes in kill mode.
	DispatchWorkers int
	// Rate is the actions started per second, over all lanes (default 300).
	Rate float64
	// VisibilityDelay is how long the vendor's lookup misses an effect after
	// a delayed-visibility 500 (default 1s). The reconciler trusts "not
	// found" only after its settle delay: a longer visibility delay is a
	// vendor outside what the reconciler is configured for.
	VisibilityDelay time.Duration
	// ApplyBound is the apply bound the registry declares for tools whose
	// vendor does not deduplicate by our key (send_email): how long the
	// stand-in vendor may still apply a request after it was sent. The
	// slowest scenario applies at 3.5 times the tool's timeout, so the
	// default is four times the timeout of the slowest such tool.
	ApplyBound time.Duration
	// PhaseTimeout bounds the wait for one scenario's operations to settle
	// before a lane moves on (default 30s); SettleTimeout bounds the wait for
	// every operation at the end (default 3m).
	PhaseTimeout, SettleTimeout time.Duration

	// Kill runs the dispatchers and the reconciler as processes and kills
	// them with SIGKILL every KillEvery (default 5s), with failpoints armed.
	Kill      bool
	KillEvery time.Duration
	// NATSRestartEvery, when set, runs the eval's own NATS server (file
	// storage) and restarts it on its port and store this often while the
	// lanes run: every service and the agent must reconnect, and nothing
	// may be lost or left unanswered.
	NATSRestartEvery time.Duration
	// ServiceCommand starts one service in kill mode: the service's name
	// and its flags are appended (e.g. {"/path/opledger", "service"}). The
	// processes get only the environment the eval gives them (Postgres,
	// NATS, vendor URLs, log level, failpoints).
	ServiceCommand []string

	// Infra says where Postgres and NATS are, or that they are started.
	Infra app.InfraConfig
	// Reconcile and Maintain tune the in-process reconciler and maintenance
	// leader (service defaults when zero; kill mode's processes always use
	// the defaults).
	Reconcile reconcile.Config
	Maintain  maintain.Config
	Log       zerolog.Logger
	// Progress receives a line per second; nil prints none.
	Progress io.Writer
}

// Setting is one configuration value: Name for people, Key in the JSON
// report.
type Setting struct {
	Key, Name, Value string
}

// Report is a run's result.
type Report struct {
	RunID     string     `json:"run_id"`
	Settings  []Setting  `json:"config"`
	Where     []string   `json:"infrastructure"`
	KPIs      KPIs       `json:"kpis"`
	Scenarios []Scenario `json:"scenarios"`
	Kill      *KillStats `json:"kill,omitempty"`
	// NATSRestarts is how many times the NATS server was restarted.
	NATSRestarts int         `json:"nats_restarts,omitempty"`
	Findings     []Finding   `json:"findings,omitempty"`
	Seconds      float64     `json:"seconds"`
	Faults       []FaultPlan `json:"faults"`
}

// Scenario is one scenario's KPIs.
type Scenario struct {
	Name string `json:"name"`
	KPIs KPIs   `json:"kpis"`
}

// FaultPlan is a fault a lane injected.
type FaultPlan struct {
	Scenario string `json:"scenario"`
	Route    string `json:"route"`
	Fault    string `json:"fault"`
	Times    int    `json:"times"`
	DelayMS  int64  `json:"delay_ms,omitempty"`
}

// Finding is an operation that broke a guarantee: a duplicate side effect
// or an operation left unsettled, with its whole ledger history.
type Finding struct {
	Kind           string            `json:"kind"` // "duplicate_effect" or "unsettled"
	OperationID    string            `json:"operation_id"`
	Scenario       string            `json:"scenario"`
	Tool           string            `json:"tool"`
	State          op.State          `json:"state"`
	IdempotencyKey string            `json:"idempotency_key"`
	Effects        int               `json:"effects"`
	Events         []op.EventRecord  `json:"events"`
	Attempts       []*op.Attempt     `json:"attempts"`
	Messages       map[string]string `json:"messages,omitempty"` // event id → decision, of the actions it serves
}

// Failed reports whether the run found a duplicate side effect, a false
// suppression, a lost set-back, an unsettled operation, or an intent or a
// settlement the agent was never told about.
func (r *Report) Failed() bool {
	k := r.KPIs
	return k.DuplicateEffects > 0 || k.Unsettled > 0 || k.FalseDedupes > 0 || k.LostSetBacks > 0 ||
		k.UnansweredIntents > 0 || k.UntoldSettlements > 0
}

// Verdict says why a run failed, or that it passed.
func (r *Report) Verdict() string {
	k := r.KPIs
	if !r.Failed() {
		return "PASS: no duplicate side effect, no false suppression, every intent answered, every operation settled and its result received"
	}
	return fmt.Sprintf("FAIL: %d duplicate side effect(s), %d false suppression(s), %d lost set-back(s), %d unsettled operation(s), "+
		"%d unanswered intent(s), %d settlement(s) the agent never received",
		k.DuplicateEffects, k.FalseDedupes, k.LostSetBacks, k.Unsettled, k.UnansweredIntents, k.UntoldSettlements)
}

func (c *Config) setDefaults() error {
	if c.PerScenario < 1 {
		return fmt.Errorf("eval: at least one action per scenario: %w", op.ErrInvalid)
	}
	if len(c.Scenarios) == 0 {
		c.Scenarios = DefaultScenarios
	}
	for i, s := range c.Scenarios {
		if !slices.Contains(AllScenarios, s) {
			return fmt.Errorf("eval: unknown scenario %q (have %s): %w", s, strings.Join(AllScenarios, ", "), op.ErrInvalid)
		}
		if slices.Contains(c.Scenarios[:i], s) {
			return fmt.Errorf("eval: scenario %q named twice: %w", s, op.ErrInvalid)
		}
	}
	if c.Dispatchers <= 0 {
		c.Dispatchers = 3
	}
	if c.Rate <= 0 {
		c.Rate = 300
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.VisibilityDelay, time.Second)
	def(&c.PhaseTimeout, 30*time.Second)
	def(&c.SettleTimeout, 3*time.Minute)
	def(&c.KillEvery, 5*time.Second)
	if c.Kill && len(c.ServiceCommand) == 0 {
		return fmt.Errorf("eval: kill mode needs ServiceCommand: %w", op.ErrInvalid)
	}
	return nil
}

// Settings lists the configuration with its defaults applied, as a run
// would use it.
func (c Config) Settings() ([]Setting, error) {
	if err := c.setDefaults(); err != nil {
		return nil, err
	}
	return c.settings(), nil
}

// settings lists the configuration, effective defaults included.
func (c *Config) settings() []Setting {
	rc, mc := c.Reconcile, c.Maintain
	if c.Kill {
		rc, mc = reconcile.Config{}, maintain.Config{}
	}
	settle := cmpDur(rc.SettleDelay, 2*time.Second)
	sweep := cmpDur(mc.SweepInterval, time.Second)
	grace := cmpDur(mc.DispatchedGrace, 5*time.Second)
	workers := "service default (32)"
	if c.DispatchWorkers > 0 && !c.Kill {
		workers = fmt.Sprint(c.DispatchWorkers)
	}
	kill := "off"
	if c.Kill {
		kill = fmt.Sprintf("SIGKILL a dispatcher, the reconciler or planner-ingest process every %s, one random failpoint armed per process", c.KillEvery)
	}
	natsRestarts := "off"
	if c.NATSRestartEvery > 0 {
		natsRestarts = fmt.Sprintf("restart the NATS server (its store kept) every %s", c.NATSRestartEvery)
	}
	storage := map[bool]string{true: "memory", false: "file"}[c.Infra.MemoryStreams && c.NATSRestartEvery <= 0]
	return []Setting{
		{"actions_per_scenario", "actions per scenario", fmt.Sprint(c.PerScenario)},
		{"scenarios", "scenarios", strings.Join(c.Scenarios, ",")},
		{"tools", "tools", "capture_payment (irreversible, vendor idempotency key), send_email (non-idempotent), create_ticket (idempotent); update_crm_record (idempotent, key by entity version) in set_back_sequences"},
		{"seed", "seed", fmt.Sprint(c.Seed)},
		{"dispatchers", "dispatchers", fmt.Sprint(c.Dispatchers)},
		{"dispatch_workers", "dispatch workers per dispatcher", workers},
		{"rate", "rate", fmt.Sprintf("%.0f actions/s over 3 lanes", c.Rate)},
		{"visibility_delay", "delayed visibility", c.VisibilityDelay.String()},
		{"apply_bound", "declared vendor apply bound (send_email)", applyBoundText(c.ApplyBound)},
		{"settle_delay", "reconciler settle delay", settle.String()},
		{"sweep", "sweep interval / dispatched grace", sweep.String() + " / " + grace.String()},
		{"timeouts", "phase timeout / settle timeout", c.PhaseTimeout.String() + " / " + c.SettleTimeout.String()},
		{"kill", "kill", kill},
		{"nats_restarts", "nats restarts", natsRestarts},
		{"postgres_fsync", "postgres fsync", fmt.Sprint(c.Infra.Durable)},
		{"jetstream_storage", "jetstream storage", storage},
		{"machine", "machine", fmt.Sprintf("%s, GOMAXPROCS=%d, %s/%s", runtime.Version(), runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH)},
	}
}

func cmpDur(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// runner is one run in progress.
type runner struct {
	cfg      Config
	run      string
	stack    *app.Stack
	fleet    *fleet       // kill mode only
	nats     *restartable // with NATS restarts only
	store    *store.Store
	cl       *client.Client
	js       jetstream.JetStream
	tr       *tracker
	laneRate float64
	timeouts map[string]time.Duration
	log      zerolog.Logger

	mu     sync.Mutex
	faults []FaultPlan
}

// Run runs the matrix and returns the report. An error means the run could
// not be carried out; what it found is in the report (see Report.Failed).
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	began := time.Now()
	id := op.NewID("x")
	r := &runner{cfg: cfg, run: strings.ToLower(id[len(id)-8:]), log: cfg.Log, timeouts: map[string]time.Duration{}}
	rep := &Report{RunID: r.run, Settings: cfg.settings()}
	cleanup, err := r.start(ctx, rep)
	defer cleanup()
	if err != nil {
		return nil, err
	}

	lanes := buildCorpus(r.run, cfg.Scenarios, cfg.PerScenario, cfg.Seed)
	r.tr = newTracker(lanes)
	busy := 0
	var workflows []string
	for _, lane := range lanes {
		busy += min(len(lane), 1)
		for _, p := range lane {
			workflows = append(workflows, p.actions[0].workflow)
		}
	}
	r.laneRate = cfg.Rate / float64(max(busy, 1))

	stopFollowing, err := r.follow(ctx, began)
	defer stopFollowing()
	if err != nil {
		return nil, err
	}
	if err := r.play(ctx, lanes); err != nil {
		return nil, err
	}
	if err := r.settle(ctx, lanes, workflows); err != nil {
		return nil, err
	}
	if r.fleet != nil {
		r.fleet.stop()
		ks := r.fleet.snapshot()
		rep.Kill = &ks
	}
	if r.nats != nil {
		rep.NATSRestarts = r.nats.count()
	}
	stopFollowing()

	if err := r.measure(ctx, rep, lanes, workflows); err != nil {
		return nil, err
	}
	rep.Seconds = time.Since(began).Seconds()
	return rep, nil
}

// start starts the stack (and in kill mode the service processes) and
// connects the eval's own ledger reader and agent clients. cleanup undoes
// whatever was done, also after an error.
func (r *runner) start(ctx context.Context, rep *Report) (cleanup func(), err error) {
	var undo []func()
	cleanup = func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	cfg := r.cfg
	sc := app.ServicesConfig{Dispatchers: cfg.Dispatchers, DispatchWorkers: cfg.DispatchWorkers, Relays: 2, Instance: "eval",
		Reconcile: cfg.Reconcile, Maintain: cfg.Maintain}
	if cfg.Kill {
		sc.Run = []string{app.Compensator} // the others run as processes, to be killed
	}
	if cfg.NATSRestartEvery > 0 {
		// A NATS server of the eval's own, restarted on its port and its
		// store (file storage: a restart loses nothing).
		if cfg.Infra.NATSURL != "" {
			return cleanup, fmt.Errorf("eval: NATS restarts need the embedded server, not NATS_URL: %w", op.ErrInvalid)
		}
		if r.nats, err = startRestartable(); err != nil {
			return cleanup, err
		}
		undo = append(undo, r.nats.stop)
		cfg.Infra.NATSURL, cfg.Infra.MemoryStreams = r.nats.url(), false
		r.cfg.Infra.MemoryStreams = false
	}
	regYAML, bound, err := evalRegistry(cfg.ApplyBound)
	if err != nil {
		return cleanup, err
	}
	r.cfg.ApplyBound = bound
	rep.Settings = r.cfg.settings()
	if r.stack, err = app.StartStack(ctx, app.StackConfig{Infra: cfg.Infra, Services: sc, Log: cfg.Log,
		Registry: app.RegistryConfig{YAML: regYAML}}); err != nil {
		return cleanup, err
	}
	undo = append(undo, r.stack.Close)
	rep.Where = append(slices.Clone(r.stack.Infra.Where), "vendors: local stand-ins at "+r.stack.Vendors.URL())
	for _, t := range allTools {
		tool, err := r.stack.Registry.Tool(t.name)
		if err != nil {
			return cleanup, fmt.Errorf("eval: the registry must have the example tools: %w", err)
		}
		r.timeouts[t.name] = tool.Timeout
	}
	if cfg.Kill {
		if r.fleet, err = startFleet(ctx, cfg, regYAML, r.stack.Infra.DatabaseURL, r.stack.Infra.NATSURL, r.stack.Vendors.URL(), cfg.Seed); err != nil {
			return cleanup, err
		}
		undo = append(undo, r.fleet.stop)
		rep.Where = append(rep.Where, "service processes: logs in "+r.fleet.dir)
	}
	if r.store, err = store.Open(ctx, r.stack.Infra.DatabaseURL, store.Options{MaxConns: 8}); err != nil {
		return cleanup, err
	}
	undo = append(undo, r.store.Close)
	// The agent keeps reconnecting, as a NATS server may be restarted.
	reconnect := []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond)}
	if r.cl, err = client.Connect(r.stack.Infra.NATSURL, "opledger-eval", client.NATSOptions(reconnect...)); err != nil {
		return cleanup, err
	}
	undo = append(undo, r.cl.Close)
	nc, err := nats.Connect(r.stack.Infra.NATSURL, append(reconnect, nats.Name("opledger-eval-raw"))...)
	if err != nil {
		return cleanup, fmt.Errorf("eval: connect: %w", err)
	}
	undo = append(undo, nc.Close)
	if r.js, err = jetstream.New(nc); err != nil {
		return cleanup, fmt.Errorf("eval: jetstream: %w", err)
	}
	return cleanup, nil
}

// follow reads every result of the run into the tracker and prints
// progress, until stop (idempotent).
func (r *runner) follow(ctx context.Context, began time.Time) (stop func(), err error) {
	ctx, cancel := context.WithCancel(ctx)
	results, err := r.cl.Results(ctx, wire.ResultSubjectPrefix+">")
	if err != nil {
		cancel()
		return func() {}, err
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case res, ok := <-results:
				if ok {
					if isOurs(res, r.run) {
						r.tr.result(res, time.Now())
					}
					continue
				}
				// The subscription ended (a NATS server restarted under
				// it): read RESULTS again from its start. Results seen
				// twice change nothing in the tracker.
				for ctx.Err() == nil {
					if results, err = r.cl.Results(ctx, wire.ResultSubjectPrefix+">"); err == nil {
						break
					}
					_ = sleep(ctx, 250*time.Millisecond)
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	if r.cfg.Progress != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.progress(ctx, began)
		}()
	}
	var once sync.Once
	return func() { once.Do(func() { cancel(); wg.Wait() }) }, nil
}

// play runs the lanes side by side, and the kills meanwhile.
func (r *runner) play(ctx context.Context, lanes [][]*phase) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if r.fleet != nil {
		kctx, stopKills := context.WithCancel(ctx)
		defer stopKills() // before the final wait: let it settle
		go r.fleet.killLoop(kctx)
	}
	if r.nats != nil {
		nctx, stopRestarts := context.WithCancel(ctx)
		restarted := make(chan struct{})
		defer func() { stopRestarts(); <-restarted }()
		go func() {
			defer close(restarted)
			r.nats.loop(nctx, r.cfg.NATSRestartEvery, r.log)
		}()
	}
	errs := make(chan error, len(lanes))
	var wg sync.WaitGroup
	for _, lane := range lanes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.runLane(ctx, lane); err != nil {
				errs <- err
				cancel() // the run is void: stop the other lanes too
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// measure reads the run back from the ledger and the vendors into the
// report.
func (r *runner) measure(ctx context.Context, rep *Report, lanes [][]*phase, workflows []string) error {
	ledger, err := readLedger(ctx, r.store, workflows)
	if err != nil {
		return err
	}
	eventIDs := slices.Collect(maps.Keys(r.tr.byEvent))
	inbox, err := inboxDecisions(ctx, r.store, eventIDs)
	if err != nil {
		return err
	}
	obs := observe(lanes, ledger, inbox, r.stack.Vendors, r.tr)
	rep.KPIs = Compute(obs)
	for _, s := range r.cfg.Scenarios {
		rep.Scenarios = append(rep.Scenarios, Scenario{Name: s, KPIs: Compute(obs.Filter(s))})
	}
	rep.Findings = findings(rep.KPIs, obs, ledger, inbox, lanes)
	rep.Faults = r.faults
	return nil
}

// runLane runs a lane's phases in order.
func (r *runner) runLane(ctx context.Context, lane []*phase) error {
	for _, p := range lane {
		if f, ok := faultFor(p.scenario, p.tool, len(p.actions), r.timeouts[p.tool.name], r.cfg.VisibilityDelay); ok {
			if err := r.stack.Vendors.InjectFault(f); err != nil {
				return err
			}
			r.mu.Lock()
			r.faults = append(r.faults, FaultPlan{Scenario: p.scenario, Route: f.Route, Fault: string(f.Kind), Times: f.Times, DelayMS: f.Delay.Milliseconds()})
			r.mu.Unlock()
		}
		if err := r.publishPhase(ctx, p); err != nil {
			return err
		}
		deadline := time.Now().Add(r.cfg.PhaseTimeout)
		for !r.tr.phaseSettled(p) && time.Now().Before(deadline) {
			if err := sleep(ctx, 100*time.Millisecond); err != nil {
				return err
			}
		}
	}
	return nil
}

// publishPhase publishes a phase's messages on schedule: actions at the
// lane's rate, each action's further messages after their delays.
func (r *runner) publishPhase(ctx context.Context, p *phase) error {
	if p.scenario == ScenarioSetBack {
		return r.publishSequences(ctx, p)
	}
	type item struct {
		at time.Duration
		a  *action
		m  message
	}
	var items []item
	interval := time.Duration(float64(time.Second) / r.laneRate)
	for i, a := range p.actions {
		for _, m := range a.msgs {
			items = append(items, item{at: time.Duration(i)*interval + m.delay, a: a, m: m})
		}
	}
	sort.SliceStable(items, func(i, j int) bool { return items[i].at < items[j].at })
	start := time.Now()
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for _, it := range items {
		if err := sleep(ctx, time.Until(start.Add(it.at))); err != nil {
			return err
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := r.publish(ctx, it.a, it.m); err != nil {
				mu.Lock()
				firstErr = cmpErr(firstErr, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return firstErr
}

// publishSequences publishes a set-back phase: the sequences (one record
// each) start at the lane's rate and run side by side; within one, every
// message is published once the one before it was answered, as an agent
// that waits for each answer does (the order of acceptance is what makes
// a step new or a repeat).
func (r *runner) publishSequences(ctx context.Context, p *phase) error {
	var seqs [][]*action
	for _, a := range p.actions {
		if a.step == 0 {
			seqs = append(seqs, nil)
		}
		seqs[len(seqs)-1] = append(seqs[len(seqs)-1], a)
	}
	interval := time.Duration(float64(time.Second) / r.laneRate)
	start := time.Now()
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for i, seq := range seqs {
		if err := sleep(ctx, time.Until(start.Add(time.Duration(i)*interval))); err != nil {
			return err
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			for _, a := range seq {
				for _, m := range a.msgs {
					err := r.publish(ctx, a, m)
					if err == nil {
						err = r.awaitAnswer(ctx, m.eventID)
					}
					if err != nil {
						mu.Lock()
						firstErr = cmpErr(firstErr, err)
						mu.Unlock()
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	return firstErr
}

// awaitAnswer waits until the agent has the answer to eventID, for at most
// the phase timeout; an answer that does not come shows in the KPIs
// (unanswered messages) rather than stopping the run.
func (r *runner) awaitAnswer(ctx context.Context, eventID string) error {
	for deadline := time.Now().Add(r.cfg.PhaseTimeout); !r.tr.isAnswered(eventID) && time.Now().Before(deadline); {
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// publish sends one message the way an agent does, and again (the same
// event id and bytes, as the protocol says is always safe) when it cannot
// tell whether JetStream stored it.
func (r *runner) publish(ctx context.Context, a *action, m message) error {
	in := wire.Intent{Spec: wire.SpecIntent, EventID: m.eventID, WorkflowID: a.workflow, Tool: a.tool.name, Args: m.args,
		Actor: &wire.Actor{Type: "agent", ID: "opledger-eval"}}
	var err error
	// Publish until JetStream stores it, for at most 30s (a NATS server
	// restarting): then the run is void.
	for try, until := 0, time.Now().Add(30*time.Second); try == 0 || time.Now().Before(until); try++ {
		at := time.Now()
		var dup bool
		if m.noMsgID {
			// The client sends no Nats-Msg-Id: only the ledger can drop it.
			err = r.cl.Publish(ctx, in, "")
		} else {
			// An agent of another make that sets Nats-Msg-Id: INTENTS
			// keeps no duplicate window, so the ledger answers every copy
			// (dup stays false unless a server keeps one).
			var data []byte
			if data, err = json.Marshal(in); err != nil {
				return err
			}
			m := nats.NewMsg(wire.IntentSubject(a.workflow))
			m.Data = data
			m.Header.Set(wire.HeaderMsgID, in.EventID)
			var ack *jetstream.PubAck
			if ack, err = r.js.PublishMsg(ctx, m); err == nil {
				dup = ack.Duplicate
			}
		}
		if err == nil {
			r.tr.sent(a, m, at, dup)
			return nil
		}
		r.log.Warn().Err(err).Str("event_id", m.eventID).Int("try", try+1).Msg("publish failed; publishing again")
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
	return fmt.Errorf("eval: publish %s: %w", m.eventID, err)
}

// settle waits, up to SettleTimeout, until the agent has a settling result
// for every action, the ledger has every operation of the run settled and
// has decided on every redelivery JetStream stored; then until the
// vendors' effect counts stop moving.
func (r *runner) settle(ctx context.Context, lanes [][]*phase, workflows []string) error {
	st := r.store
	deadline := time.Now().Add(r.cfg.SettleTimeout)
	for time.Now().Before(deadline) {
		done := true
		for _, lane := range lanes {
			for _, p := range lane {
				done = done && r.tr.phaseSettled(p)
			}
		}
		if done {
			break
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
	for {
		n, err := unsettledCount(ctx, st, workflows)
		if err != nil {
			return err
		}
		if n == 0 || !time.Now().Before(deadline) {
			break
		}
		if err := sleep(ctx, time.Second); err != nil {
			return err
		}
	}
	for resent := r.tr.resent(); len(resent) > 0 && time.Now().Before(deadline); {
		for id, n := range resent {
			e, err := st.InboxEntry(ctx, ingest.Source, id)
			if err != nil && !errors.Is(err, op.ErrNotFound) {
				return err
			}
			if e != nil && e.DuplicateCount+1 >= n {
				delete(resent, id)
			}
		}
		if len(resent) > 0 {
			if err := sleep(ctx, 200*time.Millisecond); err != nil {
				return err
			}
		}
	}
	// A slow vendor applies a request after the client gave up: let
	// anything still on its way land before counting.
	effects := func() int {
		s := r.stack.Vendors.Stats()
		return s.Captures + s.Emails + s.Tickets + s.Refunds + s.CRMWrites
	}
	last, stable := effects(), time.Now()
	for quiet := time.Now().Add(10 * time.Second); time.Now().Before(quiet) && time.Since(stable) < 2*time.Second; {
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
		if n := effects(); n != last {
			last, stable = n, time.Now()
		}
	}
	return nil
}

// progress prints a line per second until ctx ends.
func (r *runner) progress(ctx context.Context, began time.Time) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p := r.tr.snapshot()
		line := fmt.Sprintf("eval %4.0fs  published %d/%d  answered %d/%d event ids  settled %d/%d actions",
			time.Since(began).Seconds(), p.published, p.messages, p.answered, p.events, p.settled, p.actions)
		if r.fleet != nil {
			ks := r.fleet.snapshot()
			line += fmt.Sprintf("  kills %d  crashes %d", sumMap(ks.Kills), sumMap(ks.Crashes))
		}
		fmt.Fprintln(r.cfg.Progress, line)
	}
}

// findings lists the operations behind duplicate effects and unsettled
// operations, with their history, at most 20 of each.
func findings(k KPIs, obs Observations, ledger map[string]*ledgerOp, inbox map[string]*store.InboxEntry, lanes [][]*phase) []Finding {
	scen := map[string]string{}
	for _, x := range obs.Operations {
		scen[x.ID] = x.Scenario
	}
	effects := map[string]int{}
	for _, x := range obs.Operations {
		effects[x.ID] = x.Effects
	}
	msgs := map[string]map[string]string{}
	for _, lane := range lanes {
		for _, p := range lane {
			for _, a := range p.actions {
				for _, m := range a.msgs {
					if e := inbox[m.eventID]; e != nil && e.OperationID != "" {
						if msgs[e.OperationID] == nil {
							msgs[e.OperationID] = map[string]string{}
						}
						msgs[e.OperationID][m.eventID] = string(e.Decision)
					}
				}
			}
		}
	}
	var out []Finding
	add := func(kind string, ids []string) {
		for _, id := range ids[:min(len(ids), 20)] {
			l := ledger[id]
			if l == nil {
				continue
			}
			out = append(out, Finding{Kind: kind, OperationID: id, Scenario: scen[id], Tool: l.op.Tool, State: l.op.State,
				IdempotencyKey: l.op.IdempotencyKey, Effects: effects[id], Events: l.events, Attempts: l.attempts, Messages: msgs[id]})
		}
	}
	add("duplicate_effect", k.DuplicateOperationIDs)
	add("unsettled", k.UnsettledIDs)
	return out
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// evalRegistry is the example registry with the apply bound the stand-in
// vendors keep declared for the tools whose vendor does not deduplicate by
// our key. A zero bound is twice the longest timeout among those tools.
func evalRegistry(bound time.Duration) ([]byte, time.Duration, error) {
	if bound <= 0 {
		reg, err := app.LoadRegistry(app.RegistryConfig{Vendors: everyVendorAt("http://127.0.0.1:9")})
		if err != nil {
			return nil, 0, err
		}
		for _, name := range reg.Names() {
			if t, _ := reg.Tool(name); t.Class.External() && !t.Adapter.VendorIdempotency {
				bound = max(bound, 4*t.Timeout)
			}
		}
	}
	data, err := regedit.Set(examples.Registry, "apply_bound", bound.String(), func(t regedit.Tool) bool { return !t.VendorIdempotency })
	return data, bound, err
}

func everyVendorAt(url string) map[string]string {
	m := map[string]string{}
	for _, v := range app.VendorNames {
		m[v] = url
	}
	return m
}

func applyBoundText(d time.Duration) string {
	if d <= 0 {
		return "four times the tool's timeout"
	}
	return d.String()
}
