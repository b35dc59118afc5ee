// Package proctest runs opledger's service binaries as separate processes
// for crash and fault tests: each test gets its own Postgres database
// (internal/testdb), an embedded NATS server it can stop and start again on
// the same port (optionally on an empty store, a server that lost its disk),
// the stand-in vendors (internal/vendors) in the test process, and,
// optionally, an in-process Toxiproxy on every link between the services and
// their dependencies.
//
// The test starts, SIGKILLs and restarts processes; each process's output is
// kept and printed only if the test fails. An agent-side client
// (pkg/client) publishes intents and collects every result; the ledger is
// read through internal/store. WaitSettled waits, with a bound, for the
// promise under test — every accepted intent answered, every operation
// settled and its final result delivered — and reports what is missing with
// each operation's history. CheckEffects asserts on the vendor's own counts.
//
// Postgres behind Toxiproxy: the tests' private cluster (internal/pglocal)
// listens only on a unix socket, and Toxiproxy dials TCP. Each instance's
// Postgres link is therefore service → Toxiproxy → a small TCP-to-socket
// forwarder in the test process → Postgres, with DATABASE_URL rewritten to
// host=127.0.0.1 port=<proxy> sslmode=disable (Postgres sees a socket
// connection and trusts it, as usual). With DATABASE_URL set to a TCP
// server, the forwarder dials that instead. The forwarder also makes the
// partitions Toxiproxy cannot (PartitionPostgres).
//
// Environment: OPLEDGER_SOAK scales batches up (see Scaled);
// OPLEDGER_PROCTEST_SEED replays a run's random moments (see Rand);
// OPLEDGER_PROCTEST_LOGS=1 prints every process's output even when the
// test passes.
//
// A test package using it must call testdb.Main from its TestMain.
package proctest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/opledger/opledger/internal/api"
	"github.com/opledger/opledger/internal/app"
	"github.com/opledger/opledger/internal/ops"
	"github.com/opledger/opledger/internal/regedit"
	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/pkg/client"
	"github.com/opledger/opledger/pkg/wire"
)

// Options shape a System. The zero value runs one instance of each service
// against direct links.
type Options struct {
	// Dispatchers and Reconcilers are how many instances of each run
	// (default 1 each). One planner-ingest and one compensator always run.
	Dispatchers, Reconcilers int
	// Env adds environment variables (NAME=value) to the first run of the
	// named instance, e.g. {"dispatcher-1": {"OPLEDGER_FAILPOINTS=dispatch.after_call@3"}}.
	Env map[string][]string
	// Proxies puts a Toxiproxy proxy on every link: Postgres, the vendors,
	// and NATS (one link per service, see LinkNATS). The test's own client,
	// store and vendor counts use direct links.
	Proxies bool
	// Vendors configures the stand-in vendors.
	Vendors vendors.Options
	// LogLevel of the services (default info).
	LogLevel string
	// ReadyTimeout bounds each wait for a process to become ready (default 60s).
	ReadyTimeout time.Duration
}

// Instance names, as Options.Env and System.Proc take them.
const (
	Ingest1      = "ingest-1"
	Compensator1 = "compensator-1"
)

// DispatcherN and ReconcilerN name the nth instance, from 1.
func DispatcherN(n int) string { return fmt.Sprintf("dispatcher-%d", n) }

// ReconcilerN names the nth reconciler instance, from 1.
func ReconcilerN(n int) string { return fmt.Sprintf("reconciler-%d", n) }

// System is one test's opledger, as separate processes.
type System struct {
	t    testing.TB
	opts Options
	bin  string

	// DBURL is the test database (direct, over the unix socket).
	DBURL string
	// Store reads and writes the ledger directly.
	Store *store.Store
	// DB reads what the store API does not expose (outbox columns).
	DB *pgxpool.Pool
	// NATS is the server; NATS.Restart(true) loses its store.
	NATS *NATS
	// Vendors are the stand-in vendors with their effect counts.
	Vendors *vendors.Server
	// Client is the agent's client.
	Client *client.Client

	nc *nats.Conn // raw publishes (without Nats-Msg-Id) and stream reads
	js jetstream.JetStream

	registry string
	// probeToken reads every process's /readyz (role metrics, in the
	// tokens file OPLEDGER_API_TOKENS names).
	probeToken string
	tokensFile string
	svcDB      map[string]string     // DATABASE_URL per instance
	svcLogin   map[string]string     // the login user's connection string per service
	apiLogin   string                // the operators' API's login (planner-ingest)
	pgLinks    map[string]*forwarder // per instance
	svcNATS    map[string]string     // NATS_URL per instance
	vendorURL  string                // the vendors' base URL as the services get it
	px         *proxies

	procs map[string]*Proc
	order []string

	results *collector

	mu       sync.Mutex
	intents  map[string]wire.Intent // by event id
	accepted map[string]bool        // event ids JetStream stored at least once
}

// Start sets up and starts everything for t and waits until every service
// is ready. Everything is stopped in t.Cleanup.
func Start(t testing.TB, opts Options) *System {
	t.Helper()
	if opts.Dispatchers <= 0 {
		opts.Dispatchers = 1
	}
	if opts.Reconcilers <= 0 {
		opts.Reconcilers = 1
	}
	if opts.LogLevel == "" {
		opts.LogLevel = "info"
	}
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = time.Minute
	}
	s := &System{t: t, opts: opts, bin: Binaries(t), procs: map[string]*Proc{},
		intents: map[string]wire.Intent{}, accepted: map[string]bool{}, svcNATS: map[string]string{},
		svcDB: map[string]string{}, svcLogin: map[string]string{}, pgLinks: map[string]*forwarder{}}
	root, err := repoRoot()
	if err != nil {
		t.Fatalf("proctest: %v", err)
	}
	if s.registry, err = writeRegistry(t.TempDir(), filepath.Join(root, "examples", "registry.yaml")); err != nil {
		t.Fatalf("proctest: %v", err)
	}

	if s.probeToken, s.tokensFile, err = writeProbeToken(t.TempDir()); err != nil {
		t.Fatalf("proctest: %v", err)
	}

	s.DBURL = testdb.New(t)
	ctx := context.Background()
	if s.Store, err = store.Open(ctx, s.DBURL, store.Options{MaxConns: 4}); err != nil {
		t.Fatalf("proctest: open store: %v", err)
	}
	t.Cleanup(s.Store.Close)
	pcfg, err := pgxpool.ParseConfig(s.DBURL)
	if err != nil {
		t.Fatalf("proctest: %v", err)
	}
	pcfg.MaxConns = 2
	if s.DB, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		t.Fatalf("proctest: pool: %v", err)
	}
	t.Cleanup(s.DB.Close)

	s.NATS = startNATS(t)
	if s.Vendors, err = vendors.Start(opts.Vendors); err != nil {
		t.Fatalf("proctest: vendors: %v", err)
	}
	t.Cleanup(s.Vendors.Close)

	s.vendorURL = s.Vendors.URL()
	if opts.Proxies {
		s.px = newProxies(t)
		u, err := url.Parse(s.Vendors.URL())
		if err != nil {
			t.Fatalf("proctest: %v", err)
		}
		s.vendorURL = "http://" + s.px.add(LinkVendor, u.Host)
	}

	if s.Client, err = client.Connect(s.NATS.URL(), t.Name()+"/agent"); err != nil {
		t.Fatalf("proctest: client: %v", err)
	}
	t.Cleanup(s.Client.Close)
	if s.nc, err = nats.Connect(s.NATS.URL(), nats.Name(t.Name()+"/raw"), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond)); err != nil {
		t.Fatalf("proctest: nats: %v", err)
	}
	t.Cleanup(s.nc.Close)
	if s.js, err = jetstream.New(s.nc); err != nil {
		t.Fatalf("proctest: jetstream: %v", err)
	}

	s.add(PlannerIngest, Ingest1)
	for i := 1; i <= opts.Dispatchers; i++ {
		s.add(Dispatcher, DispatcherN(i))
	}
	for i := 1; i <= opts.Reconcilers; i++ {
		s.add(Reconciler, ReconcilerN(i))
	}
	s.add(Compensator, Compensator1)
	for name := range opts.Env {
		if _, ok := s.procs[name]; !ok {
			t.Fatalf("proctest: Options.Env names %q, which is not an instance (have %v)", name, s.order)
		}
	}
	// Registered after everything they use, so it runs first: processes
	// go before the database, NATS and the vendors do.
	t.Cleanup(s.stopAll)
	for _, name := range s.order {
		s.procs[name].Start(opts.Env[name]...)
	}
	for _, name := range s.order {
		s.procs[name].WaitReady(opts.ReadyTimeout)
	}
	s.results = newCollector(s)
	return s
}

func (s *System) add(service, instance string) {
	s.procs[instance] = &Proc{sys: s, Service: service, Instance: instance, log: &logBuffer{}}
	s.order = append(s.order, instance)
	// Each service logs in as a user of its own, a member of the Postgres
	// roles of what its process runs (app.ProcessDBRoles), as deployed.
	login, ok := s.svcLogin[service]
	if !ok {
		login = testdb.User(s.t, s.DBURL, app.ProcessDBRoles(service)...)
		s.svcLogin[service] = login
	}
	if service == PlannerIngest && s.apiLogin == "" {
		// The operators' API it serves logs in as a user of its own.
		s.apiLogin = testdb.User(s.t, s.DBURL, app.LoginDBRoles(app.PartAPI)...)
	}
	s.svcNATS[instance], s.svcDB[instance] = s.NATS.URL(), login
	if s.px == nil {
		return
	}
	// Each instance has links of its own, so that one can be cut off alone.
	network, addr := postgresUpstream(s.t, s.DBURL)
	f := newForwarder(s.t, network, addr)
	s.pgLinks[instance] = f
	var err error
	s.svcDB[instance], err = withHostPort(login, s.px.add(LinkPostgresOf(instance), f.Addr(), LinkPostgres, LinkPostgresOf(service)), network == "unix")
	if err != nil {
		s.t.Fatalf("proctest: %v", err)
	}
	s.svcNATS[instance] = "nats://" + s.px.add(LinkNATS(instance), s.NATS.Addr(), LinkNATS(service))
}

// stopAll kills every process and, if the test failed, prints their logs.
func (s *System) stopAll() {
	for _, name := range s.order {
		s.procs[name].Kill()
	}
	if s.t.Failed() || os.Getenv("OPLEDGER_PROCTEST_LOGS") != "" {
		for _, name := range s.order {
			s.t.Logf("===== output of %s =====\n%s", name, s.procs[name].Logs())
		}
	}
}

// Proc returns the process of an instance (Ingest1, DispatcherN(1), ...).
func (s *System) Proc(instance string) *Proc {
	s.t.Helper()
	p, ok := s.procs[instance]
	if !ok {
		s.t.Fatalf("proctest: no instance %q (have %v)", instance, s.order)
	}
	return p
}

// writeProbeToken makes a token of role metrics and the tokens file that
// holds its hash, in dir: the processes' /readyz needs a credential.
func writeProbeToken(dir string) (token, file string, err error) {
	token, entry, err := api.GenerateToken("proctest-probe", ops.RoleMetrics)
	if err != nil {
		return "", "", err
	}
	file = filepath.Join(dir, "tokens.yaml")
	if err := os.WriteFile(file, []byte(entry.Line()+"\n"), 0o600); err != nil {
		return "", "", fmt.Errorf("tokens file: %w", err)
	}
	return token, file, nil
}

// baseEnv is the environment of every run of a process: the test's own,
// less anything opledger reads, plus the system's links.
func (s *System) baseEnv(service, instance string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "DATABASE_URL" || k == "NATS_URL" || strings.HasPrefix(k, "OPLEDGER_") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env,
		"DATABASE_URL="+withParam(s.svcDB[instance], "application_name", instance),
		"NATS_URL="+s.svcNATS[instance],
		"OPLEDGER_REGISTRY="+s.registry,
		"OPLEDGER_INSTANCE="+instance,
		"OPLEDGER_LOG="+s.opts.LogLevel,
		"OPLEDGER_LOG_FORMAT=json",
		"OPLEDGER_HTTP_ADDR=127.0.0.1:0",
		"OPLEDGER_API_TOKENS="+s.tokensFile,
	)
	if service == PlannerIngest {
		env = append(env, "OPLEDGER_API_DATABASE_URL="+s.apiLogin)
	}
	for _, v := range []string{"PAYMENTS", "EMAIL", "TICKETS", "CRM", "ACCOUNTS"} {
		env = append(env, "OPLEDGER_VENDOR_"+v+"_URL="+s.vendorURL)
	}
	return env
}

// RestartNATS stops the NATS server and starts it again on the same port,
// on an empty store when emptyStore is set, and has the agent's client read
// results again from the start of RESULTS (an ordered consumer cannot follow
// a stream that was recreated). Services are not touched: they must recover
// by themselves. down is how long the server stays down.
func (s *System) RestartNATS(emptyStore bool, down time.Duration) {
	s.t.Helper()
	s.NATS.Stop()
	time.Sleep(down) // the outage itself is what is being tested
	s.NATS.Start(emptyStore)
	s.results.resubscribe()
}

// AddToxic adds a Toxiproxy toxic to a link: LinkVendor, LinkPostgres (every
// instance's), or LinkPostgresOf and LinkNATS of a service (every instance
// of it) or of one instance. It needs Options.Proxies.
// RemoveToxic takes it off.
func (s *System) AddToxic(link string, tx Toxic) {
	s.t.Helper()
	if tx.Toxicity == 0 {
		tx.Toxicity = 1
	}
	b, err := json.Marshal(tx)
	if err != nil {
		s.t.Fatalf("proctest: toxic: %v", err)
	}
	for _, px := range s.px.link(link) {
		if _, err := px.Toxics.AddToxicJson(strings.NewReader(string(b))); err != nil {
			s.t.Fatalf("proctest: add toxic %s to %s: %v", tx.Name, px.Name, err)
		}
	}
}

// RemoveToxic takes a toxic off a link.
func (s *System) RemoveToxic(link, name string) {
	s.t.Helper()
	for _, px := range s.px.link(link) {
		if err := px.Toxics.RemoveToxic(context.Background(), name); err != nil {
			s.t.Fatalf("proctest: remove toxic %s from %s: %v", name, px.Name, err)
		}
	}
}

// CutLink closes a link: every connection through it is closed and new ones
// are refused, as when a dependency goes down. The link keeps its port
// while cut (holdPort), so that RestoreLink can listen there again.
func (s *System) CutLink(link string) {
	s.t.Helper()
	for _, px := range s.px.link(link) {
		px.Stop()
		if err := s.px.hold(px); err != nil {
			s.t.Fatalf("proctest: cut link %s: %v", px.Name, err)
		}
	}
}

// RestoreLink opens a cut link again on the same address.
func (s *System) RestoreLink(link string) {
	s.t.Helper()
	for _, px := range s.px.link(link) {
		s.px.release(px)
		if err := px.Start(); err != nil {
			s.t.Fatalf("proctest: restore link %s: %v", px.Name, err)
		}
	}
}

// PartitionPostgres cuts an instance off from Postgres the way a network
// split or its host losing power does: no data goes through and no
// connection is closed, so Postgres keeps that side's sessions, and what
// they hold (locks), until it ends them itself. HealPostgres ends the
// partition. Both need Options.Proxies.
func (s *System) PartitionPostgres(instance string) {
	s.t.Helper()
	s.pgLink(instance).Freeze()
}

// HealPostgres ends a partition; the connections that lived through it are
// closed.
func (s *System) HealPostgres(instance string) {
	s.t.Helper()
	s.pgLink(instance).Heal()
}

func (s *System) pgLink(instance string) *forwarder {
	s.t.Helper()
	f, ok := s.pgLinks[instance]
	if !ok {
		s.t.Fatalf("proctest: no Postgres link for %q (is Options.Proxies set?)", instance)
	}
	return f
}

// Publish sends an intent as an agent does (pkg/client), retrying for up to
// a minute while NATS does not acknowledge it: resending the same bytes
// under the same event id is always safe.
func (s *System) Publish(in wire.Intent) {
	s.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := s.TryPublish(in)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("proctest: publish %s: %v", in.EventID, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// PublishWithoutMsgID sends the same bytes as Publish but without
// Nats-Msg-Id, so that JetStream cannot drop a resend and only the ledger's
// inbox stands between it and a second operation.
func (s *System) PublishWithoutMsgID(in wire.Intent) {
	s.t.Helper()
	s.remember(in)
	if in.Spec == "" {
		in.Spec = wire.SpecIntent
	}
	data, err := json.Marshal(in) // as pkg/client encodes it: the same bytes
	if err != nil {
		s.t.Fatalf("proctest: encode intent: %v", err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := s.js.Publish(ctx, wire.IntentSubject(in.WorkflowID), data)
		cancel()
		if err == nil {
			s.accept(in.EventID)
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("proctest: publish %s without Nats-Msg-Id: %v", in.EventID, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// TryPublish sends an intent as an agent does (pkg/client), once, and
// returns the publish's error. An intent a full INTENTS refused
// (client.ErrIntentsFull) was not stored, and nothing waits for its answer;
// any other, even one whose publish failed (it may have been stored all
// the same), is waited for.
func (s *System) TryPublish(in wire.Intent) error {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.Client.Publish(ctx, in, "")
	if errors.Is(err, client.ErrIntentsFull) {
		return err
	}
	s.remember(in)
	if err == nil {
		s.accept(in.EventID)
	}
	return err
}

// accept records that JetStream stored the intent of eventID.
func (s *System) accept(eventID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.accepted[eventID] = true
}

// BoundIntents sets the INTENTS stream's bound, as an operator would
// (nats stream edit INTENTS --max-bytes): the services keep it.
func (s *System) BoundIntents(maxBytes int64) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := s.js.Stream(ctx, wire.StreamIntents)
	if err != nil {
		s.t.Fatalf("proctest: INTENTS: %v", err)
	}
	cfg := st.CachedInfo().Config
	cfg.MaxBytes = maxBytes
	if _, err := s.js.UpdateStream(ctx, cfg); err != nil {
		s.t.Fatalf("proctest: bound INTENTS: %v", err)
	}
}

func (s *System) remember(in wire.Intent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.intents[in.EventID] = in
}

// Accepted returns the event ids of every intent JetStream stored, sorted.
func (s *System) Accepted() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for id := range s.accepted {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// WaitFor polls cond every 100ms until it holds, failing the test with what
// after timeout. Tests wait on the ledger and on results this way, never on
// a fixed sleep.
func (s *System) WaitFor(what string, timeout time.Duration, cond func() bool) {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			s.t.Fatalf("proctest: timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Count runs a counting query on the ledger (e.g. "SELECT count(*) FROM
// attempts WHERE worker = $1").
func (s *System) Count(query string, args ...any) int {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n int
	if err := s.DB.QueryRow(ctx, query, args...).Scan(&n); err != nil {
		s.t.Fatalf("proctest: %s: %v", query, err)
	}
	return n
}

// Leader is who holds the maintenance leadership ("" before anyone did),
// e.g. "reconciler-1/reconciler".
func (s *System) Leader() string {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	holder, _, err := s.Store.Leader(ctx)
	if err != nil {
		s.t.Fatalf("proctest: leader: %v", err)
	}
	return holder
}

// CheckNoRestarts fails the test if any process was started more than once
// or is not running: recovery must not need a restart.
func (s *System) CheckNoRestarts() {
	s.t.Helper()
	for _, name := range s.order {
		p := s.procs[name]
		if p.Runs() != 1 || !p.Running() {
			s.t.Errorf("proctest: %s was started %d times and is running=%v (%v): it should have recovered by itself",
				name, p.Runs(), p.Running(), p.State())
		}
	}
}

// Procs returns every process, in start order.
func (s *System) Procs() []*Proc {
	out := make([]*Proc, 0, len(s.order))
	for _, name := range s.order {
		out = append(out, s.procs[name])
	}
	return out
}

// VendorApplyBound is the apply_bound the harness declares for tools whose
// vendor does not dedupe by our key: the stand-in vendors apply a request
// within a latency fault's delay, which these tests keep below it (the
// shipped registry promises a real mail vendor's 90 s).
const VendorApplyBound = 10 * time.Second

// writeRegistry writes the example registry with VendorApplyBound into dir
// and returns the file's path; everything else is exactly what ships.
func writeRegistry(dir, example string) (string, error) {
	data, err := os.ReadFile(example)
	if err != nil {
		return "", err
	}
	data, err = regedit.Set(data, "apply_bound", VendorApplyBound.String(), func(tl regedit.Tool) bool { return !tl.VendorIdempotency })
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "registry.yaml")
	return path, os.WriteFile(path, data, 0o600)
}
