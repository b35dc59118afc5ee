package app

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/opledger/opledger/internal/bus"
	"github.com/opledger/opledger/internal/compensate"
	"github.com/opledger/opledger/internal/dispatch"
	"github.com/opledger/opledger/internal/ingest"
	"github.com/opledger/opledger/internal/maintain"
	"github.com/opledger/opledger/internal/outbox"
	"github.com/opledger/opledger/internal/reconcile"
	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/telemetry"
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

// ServicesConfig says which services to run in this process.
type ServicesConfig struct {
	DatabaseURL string
	NATSURL     string
	Registry    *registry.Registry
	// Run lists the services to start (AllServices when empty).
	Run []string
	// Instance prefixes instance names in attempt rows and logs (default the host name).
	Instance string
	// Dispatchers is the number of dispatcher instances in this process
	// (default 1); each has its own NATS connection, as separate processes would.
	Dispatchers int
	// DispatchWorkers is the concurrent vendor calls per dispatcher (default 32).
	DispatchWorkers int
	// IngestWorkers is the concurrent intents per planner-ingest (default 64).
	IngestWorkers int
	// Relays is the number of outbox relays in this process (default 1).
	Relays int
	// DBMaxConns caps the Postgres pool (default 16). Postgres does best with
	// few active connections per core: on 2 cores the bench measured ~1,450
	// ops/s at 12-16 connections, ~1,100 at 48 and ~1,000 at 96.
	DBMaxConns int32
	// StatementTimeout bounds each ledger statement that has no deadline of
	// its own (default store.DefaultStatementTimeout).
	StatementTimeout time.Duration
	// Consumer overrides the AckWait, heartbeat and Nak delay of every
	// service's consumer in this process (zero fields keep each service's
	// defaults).
	Consumer  bus.Tuning
	Reconcile reconcile.Config
	// Maintain tunes the maintenance leader that the reconciler process
	// campaigns for (sweeper, re-drive, retention).
	Maintain   maintain.Config
	HTTPClient *http.Client
	Metrics    *telemetry.Metrics
	Log        zerolog.Logger

	// NATSAuth is how every NATS connection of the process authenticates.
	// An empty InboxPrefix becomes ServiceInboxPrefix of the service when
	// the process runs one service (of "opledger" otherwise).
	NATSAuth bus.Auth
}

// Services are running services.
type Services struct {
	Store  *store.Store
	buses  []*bus.Bus
	stops  []func()
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

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
	for _, b := range s.buses {
		if err := b.Check(ctx); err != nil {
			checks[2] = Check{Name: "nats", Detail: b.Name() + ": " + err.Error()}
			break
		}
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
		cfg.Instance = hostname()
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
	adapters, err := cfg.Registry.Adapters(cfg.HTTPClient)
	if err != nil {
		return nil, err
	}
	var waker *outbox.Waker
	st, err := store.Open(ctx, cfg.DatabaseURL, store.Options{MaxConns: cfg.DBMaxConns, StatementTimeout: cfg.StatementTimeout,
		OnOutbox: func() { waker.Kick() }})
	if err != nil {
		return nil, err
	}
	waker = outbox.NewWaker(st, 0)
	ctx, cancel := context.WithCancel(ctx)
	s := &Services{Store: st, cancel: cancel}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		waker.Run(ctx)
	}()
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
			if err := start(ingest.New(ingest.Config{Workers: cfg.IngestWorkers, Tuning: cfg.Consumer}, st, b, cfg.Registry, cfg.Metrics, log).Start); err != nil {
				return nil, err
			}
		case Dispatcher:
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
				d := dispatch.New(dispatch.Config{Name: iname, Workers: cfg.DispatchWorkers, Tuning: cfg.Consumer}, st, b, cfg.Registry, adapters, cfg.Metrics, log)
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
			rc := cfg.Reconcile
			rc.Name = cfg.Instance + "/reconciler"
			if rc.Tuning == (bus.Tuning{}) {
				rc.Tuning = cfg.Consumer
			}
			if err := start(reconcile.New(rc, st, b, cfg.Registry, adapters, cfg.Metrics, log).Start); err != nil {
				return nil, err
			}
			mc := cfg.Maintain
			mc.Name = cfg.Instance + "/reconciler"
			watch := func(ctx context.Context) (time.Time, error) { return b.StreamCreated(ctx, wire.StreamOps) }
			if err := start(maintain.New(mc, st, cfg.Registry, watch, cfg.Metrics, log).Start); err != nil {
				return nil, err
			}
		case Compensator:
			log := logFor(name, cfg.Instance)
			b, err := connect(cfg.Instance+"/"+name, log)
			if err != nil {
				return nil, err
			}
			if err := start(compensate.New(compensate.Config{Name: cfg.Instance + "/compensator", Tuning: cfg.Consumer}, st, b, cfg.Registry, cfg.Metrics, log).Start); err != nil {
				return nil, err
			}
		}
	}
	for i := range cfg.Relays {
		rname := fmt.Sprintf("%s/relay-%d", cfg.Instance, i+1)
		log := logFor(process, cfg.Instance)
		b, err := connect(rname, log)
		if err != nil {
			return nil, err
		}
		r := outbox.New(outbox.Config{ID: rname, Wake: waker.Subscribe()}, st, b, log)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			_ = r.Run(ctx)
		}()
	}
	return s, nil
}

// Stop stops every service, waits for work in flight, and closes connections.
func (s *Services) Stop() {
	s.cancel()
	for i := len(s.stops) - 1; i >= 0; i-- {
		s.stops[i]()
	}
	s.wg.Wait()
	for _, b := range s.buses {
		b.Close()
	}
	s.Store.Close()
}
