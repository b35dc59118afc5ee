package app

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/opledger/opledger/internal/bus"
	"github.com/opledger/opledger/internal/compensate"
	"github.com/opledger/opledger/internal/dispatch"
	"github.com/opledger/opledger/internal/evidence"
	"github.com/opledger/opledger/internal/ingest"
	"github.com/opledger/opledger/internal/maintain"
	"github.com/opledger/opledger/internal/outbox"
	"github.com/opledger/opledger/internal/reconcile"
	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/telemetry"
	"github.com/opledger/opledger/internal/webhook"
	"github.com/opledger/opledger/pkg/adapter"
	"github.com/opledger/opledger/pkg/adapter/mcpadapter"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/registry"
	"github.com/opledger/opledger/pkg/wire"
)

// Service names, as used on command lines and in Run.
const (
	PlannerIngest = "planner-ingest"
	Dispatcher    = "dispatcher"
	Reconciler    = "reconciler"
	Compensator   = "compensator"
)

// AllServices is every service, in start order.
var AllServices = []string{PlannerIngest, Dispatcher, Reconciler, Compensator}

// Parts of a service process that touch the ledger besides the service
// itself: every process runs outbox relays, the reconciler's process
// campaigns for maintenance, planner-ingest's serves the operators' API.
const (
	PartRelay      = "relay"
	PartMaintainer = "maintainer"
	PartAPI        = "api"
)

// DBRoles is the Postgres role (schema.Roles, granted in schema/grants.sql)
// of each service and part.
var DBRoles = map[string]string{
	PlannerIngest:  "opledger_ingest",
	Dispatcher:     "opledger_dispatcher",
	Reconciler:     "opledger_reconciler",
	Compensator:    "opledger_compensator",
	PartMaintainer: "opledger_maintainer",
	PartRelay:      "opledger_relay",
	PartAPI:        "opledger_operator",
}

// PublishPrefixes are the subjects each service's process publishes, as
// prefixes: what its parts write to the outbox, and so what its relays
// publish and deploy/nats/nats.conf lets its NATS user publish (the tests
// in internal/natsauth hold the two equal).
//
//   - planner-ingest: the answers to intents (results), their dispatch
//     commands, and the operators' API it serves: an approval or a
//     "not applied" verdict dispatches, a compensation is a new operation
//     (dispatch), "give up" fails the operation (failed), every change
//     answers the agent (results); and the vendors' webhooks it takes,
//     whose evidence settles an operation (what follows an outcome:
//     dispatch, unknown, failed, results) or flags an out-of-band effect
//     (alerts).
//   - dispatcher: an attempt's outcome and what follows it: a retry
//     (dispatch), an ambiguous outcome (unknown), a permanent failure
//     (failed), the agent's result.
//   - reconciler: a lookup's verdict and what follows it (as the
//     dispatcher's), webhook evidence it applies (as planner-ingest's,
//     alerts included), and the maintenance leader's sweeps (unknown),
//     re-drives (dispatch, unknown), expired approvals (results) and held
//     evidence.
//   - compensator: compensations (dispatch) and results.
//
// A process running one service relays only its own rows
// (outbox.Config.Subjects); a process running several relays every row.
var PublishPrefixes = map[string][]string{
	PlannerIngest: {wire.OpsSubjectPrefix + wire.KindDispatch + ".", wire.OpsSubjectPrefix + wire.KindUnknown + ".", wire.OpsSubjectPrefix + wire.KindFailed + ".", wire.ResultSubjectPrefix, wire.AlertSubjectPrefix},
	Dispatcher:    {wire.OpsSubjectPrefix + wire.KindDispatch + ".", wire.OpsSubjectPrefix + wire.KindUnknown + ".", wire.OpsSubjectPrefix + wire.KindFailed + ".", wire.ResultSubjectPrefix},
	Reconciler:    {wire.OpsSubjectPrefix + wire.KindDispatch + ".", wire.OpsSubjectPrefix + wire.KindUnknown + ".", wire.OpsSubjectPrefix + wire.KindFailed + ".", wire.ResultSubjectPrefix, wire.AlertSubjectPrefix},
	Compensator:   {wire.OpsSubjectPrefix + wire.KindDispatch + ".", wire.ResultSubjectPrefix},
}

// ProcessDBRoles returns the roles the login user of a service's process
// must be a member of: the service's own and those of the parts its process
// runs (PartRelay always; PartMaintainer with the reconciler). The
// operators' API that planner-ingest serves is not among them: it has a
// login of its own (LoginDBRoles(PartAPI), ServiceConfig.APIDatabaseURL),
// so that intake's login cannot read attempts or the audit log. Unknown
// services have none.
func ProcessDBRoles(service string) []string {
	if !slices.Contains(AllServices, service) {
		return nil
	}
	roles := []string{DBRoles[service], DBRoles[PartRelay]}
	if service == Reconciler {
		roles = append(roles, DBRoles[PartMaintainer])
	}
	return roles
}

// DBLogins are the login users `opledger db-users` can make: one per
// service process, and the operators' API's.
var DBLogins = append(slices.Clone(AllServices), PartAPI)

// LoginDBRoles returns the roles of a login of DBLogins: a service's
// process's (ProcessDBRoles), or the API's, opledger_operator only.
func LoginDBRoles(login string) []string {
	if login == PartAPI {
		return []string{DBRoles[PartAPI]}
	}
	return ProcessDBRoles(login)
}

// ServicesConfig says which services to run in this process.
type ServicesConfig struct {
	DatabaseURL string
	NATSURL     string
	Registry    *registry.Registry
	// Run lists the services to start (AllServices when empty).
	Run []string
	// Instance prefixes instance names in attempt rows and logs (default the
	// host name and the process id).
	Instance string
	// Dispatchers is the number of dispatcher instances in this process
	// (default 1); each has its own NATS connection, as separate processes would.
	Dispatchers int
	// DispatchWorkers is the concurrent vendor calls per dispatcher (default 32).
	DispatchWorkers int
	// IngestWorkers is the concurrent intents per planner-ingest (default 64).
	IngestWorkers int
	// IngestMaxBacklog is planner-ingest's admission bound
	// (ingest.Config.MaxBacklog: 0 the default, negative off).
	IngestMaxBacklog int
	// Relays is the number of outbox relays in this process (default 1).
	Relays int
	// DBMaxConns caps the Postgres pool (default 16). Postgres does best with
	// few active connections per core: on 2 cores the bench measured ~1,450
	// ops/s at 12-16 connections, ~1,100 at 48 and ~1,000 at 96.
	DBMaxConns int32
	// GroupStatements is how many group-commit statements of one kind each
	// store runs at once (default store.DefaultGroupStatements).
	GroupStatements int
	// StatementTimeout bounds each ledger statement that has no deadline of
	// its own (default store.DefaultStatementTimeout).
	StatementTimeout time.Duration
	// Consumer overrides the AckWait, heartbeat and Nak delay of every
	// service's consumer in this process (zero fields keep each service's
	// defaults).
	Consumer bus.Tuning
	// DatabaseURLs, when set, gives a service or part (DBRoles' keys) its
	// own connection string, typically a login user in its role; the others
	// use DatabaseURL. Each part with a login or role of its own has its own
	// pool, capped at DBMaxConns.
	DatabaseURLs map[string]string
	// SetRoles has every service and part take its role (DBRoles) with SET
	// ROLE on its own pool, so that in one process each does only what its
	// role may. The login users must be members of the roles (a superuser
	// is, as in dev mode's private cluster).
	SetRoles  bool
	Reconcile reconcile.Config
	// Maintain tunes the maintenance leader that the reconciler process
	// campaigns for (sweeper, re-drive, retention).
	Maintain   maintain.Config
	HTTPClient *http.Client
	// MCPUpstreams reach the upstream MCP servers the registry's mcp tools
	// name (see MCPUpstreamsFromEnv); the dispatcher and reconciler need
	// one for each.
	MCPUpstreams map[string]mcpadapter.Upstream
	Metrics      *telemetry.Metrics
	Log          zerolog.Logger

	// NATSAuth is how every NATS connection of the process authenticates.
	// An empty InboxPrefix becomes ServiceInboxPrefix of the service when
	// the process runs one service (of "opledger" otherwise).
	NATSAuth bus.Auth

	// WebhookSecrets are the signing secrets of the registry's webhook
	// providers (WebhookSecrets), for planner-ingest's webhook intake.
	WebhookSecrets map[string][]webhook.Secret
}

// Services are running services.
type Services struct {
	// Store is on DatabaseURL as its user: the process's checks, and reads
	// for the tools and tests that run a stack.
	Store *store.Store
	// Webhooks is planner-ingest's webhook intake (POST /webhooks/{provider})
	// for the process's HTTP server to mount; nil without planner-ingest.
	Webhooks *webhook.Intake
	// parts are the stores of the services and parts that have their own
	// (DatabaseURLs, SetRoles); own are the stores to close.
	parts  map[string]*store.Store
	own    []*store.Store
	buses  []*bus.Bus
	stops  []func()
	pool   *mcpadapter.Pool
	cancel context.CancelFunc
	wg     sync.WaitGroup
	relays []string
}

// RelayIDs returns the ids of the process's outbox relays, which fence
// their claims.
func (s *Services) RelayIDs() []string { return slices.Clone(s.relays) }

// Ready runs the readiness checks of the process: Postgres answers, its
// schema has every migration this binary embeds, and every NATS connection
// is up with each durable consumer it consumes from still on the server.
func (s *Services) Ready(ctx context.Context) []Check {
	checks := []Check{{Name: "postgres", OK: true}, {Name: "schema", OK: true}, {Name: "nats", OK: true}}
	if err := s.Store.Ping(ctx); err != nil {
		checks[0] = Check{Name: "postgres", Detail: "unreachable: " + err.Error()}
		checks[1] = Check{Name: "schema", Detail: "unknown: postgres unreachable"}
	} else if err := s.Store.CheckSchema(ctx); err != nil {
		checks[1] = Check{Name: "schema", Detail: err.Error()}
	}
	var down []string // every connection that cannot do its work, not only the first
	for _, b := range s.buses {
		if err := b.Check(ctx); err != nil {
			down = append(down, b.Name()+": "+err.Error())
		}
	}
	if len(down) > 0 {
		checks[2] = Check{Name: "nats", Detail: strings.Join(down, "; ")}
	}
	return checks
}

// StartServices connects and starts the configured services and relays.
func StartServices(ctx context.Context, cfg ServicesConfig) (_ *Services, err error) {
	if cfg.Registry == nil {
		return nil, fmt.Errorf("services: a registry is required")
	}
	run := cfg.Run
	if len(run) == 0 {
		run = AllServices
	}
	for _, name := range run {
		if !slices.Contains(AllServices, name) {
			return nil, fmt.Errorf("services: unknown service %q (have %v)", name, AllServices)
		}
	}
	if cfg.Instance == "" {
		cfg.Instance = DefaultInstance()
	}
	if cfg.Dispatchers <= 0 {
		cfg.Dispatchers = 1
	}
	if cfg.Relays <= 0 {
		cfg.Relays = 1
	}
	if cfg.DBMaxConns <= 0 {
		cfg.DBMaxConns = 16
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second}}
	}
	// Only the dispatcher and the reconciler call vendors: the others do not
	// need the upstreams of the registry's mcp tools configured.
	var adapters map[string]adapter.Adapter
	var pool *mcpadapter.Pool
	if slices.Contains(run, Dispatcher) || slices.Contains(run, Reconciler) {
		if pool, err = mcpadapter.NewPool(cfg.MCPUpstreams); err != nil {
			return nil, err
		}
		if adapters, err = cfg.Registry.AdaptersWith(registry.Dependencies{HTTP: cfg.HTTPClient, MCP: pool}); err != nil {
			pool.Close()
			return nil, err
		}
	}
	for part := range cfg.DatabaseURLs {
		if _, ok := DBRoles[part]; !ok {
			return nil, fmt.Errorf("services: database URL for unknown part %q", part)
		}
	}
	// What commits in this process is handed to its relays in memory.
	handoff := outbox.NewHandoff()
	kick := handoff.Give
	queues := make([]<-chan []store.Message, cfg.Relays) // taken now, so nothing committed before the relays start is missed
	for i := range queues {
		queues[i] = handoff.Take()
	}
	fallback := groupFallback(cfg.Metrics, cfg.Log)
	st, err := store.Open(ctx, cfg.DatabaseURL, store.Options{MaxConns: cfg.DBMaxConns, StatementTimeout: cfg.StatementTimeout, OnOutbox: kick,
		OnGroupFallback: fallback, GroupStatements: cfg.GroupStatements})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &Services{Store: st, cancel: cancel, parts: map[string]*store.Store{}, pool: pool}
	// storeFor opens the store of a service or part once, when it has its
	// own login or role.
	storeFor := func(part string) (*store.Store, error) {
		if ps, ok := s.parts[part]; ok {
			return ps, nil
		}
		url, role := cfg.DatabaseURL, ""
		if u := cfg.DatabaseURLs[part]; u != "" {
			url = u
		}
		if cfg.SetRoles {
			role = DBRoles[part]
		}
		if url == cfg.DatabaseURL && role == "" {
			return st, nil
		}
		ps, err := store.Open(ctx, url, store.Options{MaxConns: cfg.DBMaxConns, StatementTimeout: cfg.StatementTimeout, OnOutbox: kick, Role: role,
			OnGroupFallback: fallback, GroupStatements: cfg.GroupStatements})
		if err != nil {
			return nil, fmt.Errorf("services: %s's store: %w", part, err)
		}
		s.own = append(s.own, ps)
		s.parts[part] = ps
		return ps, nil
	}
	defer func() {
		if err != nil {
			s.Stop()
		}
	}()
	// Every line a part of the process logs says which service and which
	// instance it comes from.
	logFor := func(service, instance string) zerolog.Logger {
		return cfg.Log.With().Str("service", service).Str("instance", instance).Logger()
	}
	process := "opledger" // the service name of the process's shared parts
	if len(run) == 1 {
		process = run[0]
	}
	auth := cfg.NATSAuth
	if auth.InboxPrefix == "" {
		auth.InboxPrefix = ServiceInboxPrefix(process)
	}
	connect := func(name string, log zerolog.Logger) (*bus.Bus, error) {
		b, err := bus.ConnectAuth(ctx, cfg.NATSURL, name, auth, log)
		if err == nil {
			s.buses = append(s.buses, b)
		}
		return b, err
	}
	start := func(f func(context.Context) (func(), error)) error {
		stop, err := f(ctx)
		if err == nil {
			s.stops = append(s.stops, stop)
		}
		return err
	}
	// Services may start before anything created the streams (a fresh NATS).
	setup, err := connect(cfg.Instance+"/setup", logFor(process, cfg.Instance))
	if err != nil {
		return nil, err
	}
	if err := setup.EnsureStreams(ctx, bus.StreamOptions{}); err != nil {
		return nil, err
	}
	for _, name := range run {
		switch name {
		case PlannerIngest:
			log := logFor(name, cfg.Instance)
			b, err := connect(cfg.Instance+"/"+name, log)
			if err != nil {
				return nil, err
			}
			ps, err := storeFor(name)
			if err != nil {
				return nil, err
			}
			if _, err := storeFor(PartAPI); err != nil { // the process serves the operators' API
				return nil, err
			}
			if err := start(ingest.New(ingest.Config{Workers: cfg.IngestWorkers, MaxBacklog: cfg.IngestMaxBacklog, Tuning: cfg.Consumer}, ps, b, cfg.Registry, cfg.Metrics, log).Start); err != nil {
				return nil, err
			}
			// Webhooks come in through the process's HTTP server, as
			// planner-ingest, into the same inbox.
			wlog := log.With().Str("component", "webhooks").Logger()
			if s.Webhooks, err = webhook.New(webhook.Config{Registry: cfg.Registry, Secrets: cfg.WebhookSecrets, Store: ps,
				Evidence: evidence.New(cfg.Registry, cfg.Metrics, wlog), Metrics: cfg.Metrics, Log: wlog}); err != nil {
				return nil, err
			}
		case Dispatcher:
			ps, err := storeFor(name)
			if err != nil {
				return nil, err
			}
			for i := range cfg.Dispatchers {
				iname := cfg.Instance
				if cfg.Dispatchers > 1 {
					iname = fmt.Sprintf("%s/dispatcher-%d", cfg.Instance, i+1)
				}
				log := logFor(name, iname)
				b, err := connect(iname+"/"+name, log)
				if err != nil {
					return nil, err
				}
				d := dispatch.New(dispatch.Config{Name: iname, Workers: cfg.DispatchWorkers, Tuning: cfg.Consumer}, ps, b, cfg.Registry, adapters, cfg.Metrics, log)
				if err := start(d.Start); err != nil {
					return nil, err
				}
			}
		case Reconciler:
			log := logFor(name, cfg.Instance)
			b, err := connect(cfg.Instance+"/"+name, log)
			if err != nil {
				return nil, err
			}
			ps, err := storeFor(name)
			if err != nil {
				return nil, err
			}
			ms, err := storeFor(PartMaintainer)
			if err != nil {
				return nil, err
			}
			rc := cfg.Reconcile
			rc.Name = cfg.Instance + "/reconciler"
			if rc.Tuning == (bus.Tuning{}) {
				rc.Tuning = cfg.Consumer
			}
			if rc.Evidence == nil {
				rc.Evidence = evidence.New(cfg.Registry, cfg.Metrics, log)
			}
			if err := start(reconcile.New(rc, ps, b, cfg.Registry, adapters, cfg.Metrics, log).Start); err != nil {
				return nil, err
			}
			mc := cfg.Maintain
			mc.Name = cfg.Instance + "/reconciler"
			if mc.Evidence == nil {
				mc.Evidence = evidence.New(cfg.Registry, cfg.Metrics, log)
			}
			watch := func(ctx context.Context) (time.Time, error) { return b.StreamCreated(ctx, wire.StreamOps) }
			if err := start(maintain.New(mc, ms, cfg.Registry, watch, cfg.Metrics, log).Start); err != nil {
				return nil, err
			}
		case Compensator:
			log := logFor(name, cfg.Instance)
			b, err := connect(cfg.Instance+"/"+name, log)
			if err != nil {
				return nil, err
			}
			ps, err := storeFor(name)
			if err != nil {
				return nil, err
			}
			if err := start(compensate.New(compensate.Config{Name: cfg.Instance + "/compensator", Tuning: cfg.Consumer}, ps, b, cfg.Registry, cfg.Metrics, log).Start); err != nil {
				return nil, err
			}
		}
	}
	rs, err := storeFor(PartRelay)
	if err != nil {
		return nil, err
	}
	// A relay's id fences its claims (a relay marks only rows it still
	// holds, and deletes only those), so it must be unique even when two processes were given one
	// instance name: each process adds a random token of its own.
	token := op.NewID("")
	token = strings.ToLower(token[len(token)-6:])
	for i := range cfg.Relays {
		rname := fmt.Sprintf("%s/relay-%d-%s", cfg.Instance, i+1, token)
		log := logFor(process, cfg.Instance)
		b, err := connect(rname, log)
		if err != nil {
			return nil, err
		}
		var subjects []string
		if len(run) == 1 {
			subjects = PublishPrefixes[run[0]]
		}
		r := outbox.New(outbox.Config{ID: rname, Handoff: queues[i], Subjects: subjects}, rs, b, log)
		s.relays = append(s.relays, rname)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			_ = r.Run(ctx)
		}()
	}
	return s, nil
}

// groupFallback counts a group-commit statement that fell back to one
// write at a time, and logs it unless a known event id or key explains it
// (the expected case for new intents: a redelivery in the batch).
func groupFallback(m *telemetry.Metrics, log zerolog.Logger) func(kind string, writes int, err error) {
	return func(kind string, writes int, err error) {
		cause := "other"
		switch {
		case errors.Is(err, op.ErrConflict):
			cause = "conflict"
		case errors.Is(err, op.ErrRetryable):
			cause = "retryable"
		}
		m.GroupFallback(kind, cause)
		if cause != "conflict" {
			log.Warn().Err(err).Str("kind", kind).Int("writes", writes).Str("cause", cause).
				Msg("a group-commit statement failed; its writes went one by one")
		}
	}
}

// Stop stops every service, waits for work in flight, and closes connections.
func (s *Services) Stop() {
	s.cancel()
	for i := len(s.stops) - 1; i >= 0; i-- {
		s.stops[i]()
	}
	s.wg.Wait()
	if s.pool != nil {
		s.pool.Close()
	}
	for _, b := range s.buses {
		b.Close()
	}
	for _, ps := range s.own {
		ps.Close()
	}
	s.Store.Close()
}

// StoreFor returns the store a service or part (DBRoles' keys) of this
// process uses: its own when it has a login or role of its own, else Store.
func (s *Services) StoreFor(part string) *store.Store {
	if ps, ok := s.parts[part]; ok {
		return ps
	}
	return s.Store
}
