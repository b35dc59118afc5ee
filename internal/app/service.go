package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"

	"github.com/opledger/opledger/internal/api"
	"github.com/opledger/opledger/internal/bus"
	"github.com/opledger/opledger/internal/failpoint"
	"github.com/opledger/opledger/internal/ingest"
	"github.com/opledger/opledger/internal/maintain"
	"github.com/opledger/opledger/internal/ops"
	redactpkg "github.com/opledger/opledger/internal/redact"
	"github.com/opledger/opledger/internal/telemetry"
	"github.com/opledger/opledger/internal/webhook"
	"github.com/opledger/opledger/schema"
)

// ServiceConfig is a service binary's configuration.
type ServiceConfig struct {
	Name        string // one of AllServices
	DatabaseURL string
	// APIDatabaseURL is the operators' API's own login (planner-ingest
	// only), a member of opledger_operator; "" shares DatabaseURL.
	APIDatabaseURL string
	NATSURL        string
	Registry       RegistryConfig
	Instance       string
	Instances      int // dispatcher instances in this process
	Relays         int
	Migrate        bool
	// SetRoles has each part of the process take its own Postgres role
	// (ServicesConfig.SetRoles); the login user must be a member of all.
	SetRoles  bool
	LogLevel  string
	LogFormat string
	// HTTPAddr serves /metrics, /healthz and /readyz, and for planner-ingest
	// the operators' API (internal/api).
	HTTPAddr string
	// APITokens is the path of the tokens file: its tokens (any role)
	// authenticate /metrics and /readyz, and planner-ingest's API. Without
	// it those answer 503 (only /healthz needs no token).
	APITokens string
	// HTTPOpenLoopback lets requests from a loopback address read /metrics
	// and /readyz without a token (a container's own healthcheck).
	HTTPOpenLoopback bool
	// IntentNATSSecrets is the directory of the agents' NATS passwords the
	// HTTP intent API connects with, one per tenant (planner-ingest only;
	// IntentNATS.SecretsDir); empty, it uses NATSAuth.
	IntentNATSSecrets string
	// IntentWait bounds the intent API's ?wait=final (0: 25s).
	IntentWait time.Duration
	// WebhookSecretFiles names, per webhook provider, a file holding its
	// signing secrets (planner-ingest only); see WebhookSecrets.
	WebhookSecretFiles map[string]string
	// ConnectTimeout bounds how long start-up waits for Postgres and NATS.
	ConnectTimeout time.Duration
	// Consumer tunes the service's JetStream consumer (AckWait, heartbeat,
	// Nak delay while the ledger is unreachable); zero fields keep the
	// service's defaults.
	Consumer bus.Tuning
	// StatementTimeout bounds ledger statements without a deadline.
	StatementTimeout time.Duration
	// MaxBacklog is planner-ingest's admission bound (ingest.Config.MaxBacklog).
	MaxBacklog int
	// RejectedRetention is how long the maintenance leader (reconciler
	// only) keeps the inbox rows of rejected intents (zero: maintain.Config's
	// default).
	RejectedRetention time.Duration
	// Stderr receives the logs.
	Stderr io.Writer

	// NATSAuth holds the NATS credentials and TLS settings (NATSAuthFlags).
	NATSAuth bus.Auth

	// Failpoints arms crash-test kill points (failpoint.Arm; the value of
	// OPLEDGER_FAILPOINTS). Empty in production.
	Failpoints string
}

// ParseServiceFlags reads a service binary's configuration from its command
// line and environment (lookupEnv is os.LookupEnv at the program's edge).
// Flags win over the environment. It returns flag.ErrHelp after printing
// the usage for -h.
func ParseServiceFlags(name string, args []string, lookupEnv func(string) (string, bool), stderr io.Writer) (ServiceConfig, error) {
	env := func(k, def string) string {
		if v, ok := lookupEnv(k); ok && v != "" {
			return v
		}
		return def
	}
	cfg := ServiceConfig{Name: name, Stderr: stderr}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: %s [flags]\n\nRuns opledger's %s against shared Postgres and NATS. Flags override the environment variables named in brackets.\n\n", name, name)
		fs.PrintDefaults()
	}
	fs.StringVar(&cfg.DatabaseURL, "database-url", env("DATABASE_URL", ""), "Postgres connection string [DATABASE_URL]")
	if name == PlannerIngest {
		fs.StringVar(&cfg.APIDatabaseURL, "api-database-url", env("OPLEDGER_API_DATABASE_URL", ""),
			"the operators' API's own Postgres login (opledger_svc_api, in opledger_operator); unset, the API shares DATABASE_URL's [OPLEDGER_API_DATABASE_URL]")
	}
	fs.StringVar(&cfg.NATSURL, "nats-url", env("NATS_URL", ""), "NATS URL [NATS_URL]")
	natsAuth := NATSAuthFlags(fs, env)
	var registries []string
	if v := env("OPLEDGER_REGISTRY", ""); v != "" {
		registries = strings.Split(v, ",")
	}
	fromFlags := false
	fs.Func("registry", "tool registry file or directory, repeatable (default: the embedded example registry) [OPLEDGER_REGISTRY, comma-separated]", func(s string) error {
		if !fromFlags { // the flags replace the environment's list, as every other flag does
			registries, fromFlags = nil, true
		}
		if !slices.Contains(registries, s) {
			registries = append(registries, s)
		}
		return nil
	})
	fs.StringVar(&cfg.Instance, "instance", env("OPLEDGER_INSTANCE", DefaultInstance()), "instance name in logs and attempt rows (default: host name and process id) [OPLEDGER_INSTANCE]")
	// Each binary shows and takes only its own flags.
	cfg.Instances = 1
	if name == Dispatcher {
		fs.IntVar(&cfg.Instances, "instances", 1, "dispatcher instances in this process, each with its own NATS connection")
	}
	fs.IntVar(&cfg.Relays, "relays", 1, "outbox relays in this process")
	fs.BoolVar(&cfg.Migrate, "migrate", false, "apply schema migrations before starting (needs the migrator's DATABASE_URL, not a service's login user)")
	fs.BoolVar(&cfg.SetRoles, "set-roles", env("OPLEDGER_SET_ROLES", "") == "true",
		"each part of the process (the service, its relays, the maintainer, the API) takes its own Postgres role with SET ROLE; the login user must be a member of them all [OPLEDGER_SET_ROLES=true]")
	fs.StringVar(&cfg.LogLevel, "log", env("OPLEDGER_LOG", "info"), "log level: trace, debug, info, warn, error, disabled [OPLEDGER_LOG]")
	fs.StringVar(&cfg.LogFormat, "log-format", env("OPLEDGER_LOG_FORMAT", LogAuto), "log format: json, console, or auto (console on a terminal) [OPLEDGER_LOG_FORMAT]")
	fs.StringVar(&cfg.HTTPAddr, "http", env("OPLEDGER_HTTP_ADDR", "127.0.0.1:0"), "address of /metrics, /healthz and /readyz; port 0 picks a free one, logged at start [OPLEDGER_HTTP_ADDR]")
	fs.StringVar(&cfg.APITokens, "api-tokens", env("OPLEDGER_API_TOKENS", ""), "tokens file: any of its tokens (the metrics role included) reads /metrics, /readyz and /v1/openapi.yaml, and planner-ingest's operators' API takes them by role; unset, those answer 503 [OPLEDGER_API_TOKENS]")
	fs.BoolVar(&cfg.HTTPOpenLoopback, "http-open-loopback", env("OPLEDGER_HTTP_OPEN_LOOPBACK", "") == "true",
		"answer /metrics and /readyz without a token to requests from a loopback address (a container's own healthcheck); off by default [OPLEDGER_HTTP_OPEN_LOOPBACK=true]")
	cfg.WebhookSecretFiles = map[string]string{}
	if name == PlannerIngest {
		fs.StringVar(&cfg.IntentNATSSecrets, "intent-nats-secrets", env("OPLEDGER_INTENT_NATS_SECRETS", ""),
			"directory of the agents' NATS passwords (agent-<tenant>.password, as deploy/nats/genpasswd writes them) the HTTP intent API submits with, as each agent token's tenant; unset, it uses this service's NATS credentials [OPLEDGER_INTENT_NATS_SECRETS]")
		fs.Func("webhook-secrets-file", "PROVIDER=FILE: the signing secrets of a webhook provider, separated by white space (repeatable) "+
			"[OPLEDGER_WEBHOOK_SECRETS_<PROVIDER>_FILE, or the secrets themselves in OPLEDGER_WEBHOOK_SECRETS_<PROVIDER>]", func(s string) error {
			p, file, ok := strings.Cut(s, "=")
			if !ok || p == "" || file == "" {
				return fmt.Errorf("want PROVIDER=FILE, got %q", s)
			}
			cfg.WebhookSecretFiles[p] = file
			return nil
		})
	}
	if name == PlannerIngest {
		maxBacklog := 0
		if v := env("OPLEDGER_MAX_BACKLOG", ""); v != "" {
			var err error
			if maxBacklog, err = strconv.Atoi(v); err != nil {
				return cfg, fmt.Errorf("%s: OPLEDGER_MAX_BACKLOG=%q is not a whole number", name, v)
			}
		}
		fs.IntVar(&cfg.MaxBacklog, "max-backlog", maxBacklog, fmt.Sprintf("admission control: hold new intents (each at most %s) while more than this many dispatch commands wait for a dispatcher (0: %d; negative: never hold) [OPLEDGER_MAX_BACKLOG]", ingest.DefaultHoldFor, ingest.DefaultMaxBacklog))
	}
	connectTimeout := time.Minute
	if v := env("OPLEDGER_CONNECT_TIMEOUT", ""); v != "" {
		var err error
		if connectTimeout, err = time.ParseDuration(v); err != nil || connectTimeout <= 0 {
			return cfg, fmt.Errorf("%s: OPLEDGER_CONNECT_TIMEOUT=%q is not a positive duration like 1m", name, v)
		}
	}
	fs.DurationVar(&cfg.ConnectTimeout, "connect-timeout", connectTimeout, "how long start-up waits for Postgres and NATS, trying again with backoff [OPLEDGER_CONNECT_TIMEOUT]")
	durations := []struct {
		name, env, usage string
		to               *time.Duration
	}{
		{"ack-wait", "OPLEDGER_ACK_WAIT", "how long JetStream leaves a command with this process while nothing reports on it (0: " + defaultAckWait(name) + ")", &cfg.Consumer.AckWait},
		{"heartbeat", "OPLEDGER_HEARTBEAT", "how often a command still being handled is reported in progress (0: a third of the ack wait)", &cfg.Consumer.Heartbeat},
		{"nak-delay", "OPLEDGER_NAK_DELAY", "how long a command given back while Postgres is unreachable waits before redelivery (0: 1s)", &cfg.Consumer.NakDelay},
		{"intent-wait", "OPLEDGER_INTENT_WAIT", "how long POST /v1/intents?wait=final waits for the operation to come to rest (0: 25s, at most 10m)", &cfg.IntentWait},
		{"statement-timeout", "OPLEDGER_STATEMENT_TIMEOUT", "bound on each Postgres statement without a deadline of its own (0: 10s)", &cfg.StatementTimeout},
		{"rejected-retention", "OPLEDGER_REJECTED_RETENTION", "the maintenance leader's: how long the inbox rows of rejected intents are kept; their event ids are judged again as new after it (0: 168h)", &cfg.RejectedRetention},
	}
	for _, d := range durations {
		if strings.HasSuffix(d.name, "-retention") && name != Reconciler {
			continue // the maintenance leader's, which only reconcilers campaign for
		}
		if d.name == "intent-wait" && name != PlannerIngest {
			continue // the HTTP intent API's, which planner-ingest serves
		}
		def := time.Duration(0)
		if v := env(d.env, ""); v != "" {
			var err error
			if def, err = time.ParseDuration(v); err != nil || def < 0 {
				return cfg, fmt.Errorf("%s: %s=%q is not a duration like 10s", name, d.env, v)
			}
		}
		fs.DurationVar(d.to, d.name, def, d.usage+" ["+d.env+"]")
	}
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	for _, d := range durations {
		if *d.to < 0 {
			return cfg, fmt.Errorf("%s: -%s must not be negative", name, d.name)
		}
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("%s: unexpected argument %q", name, fs.Arg(0))
	}
	if cfg.DatabaseURL == "" || cfg.NATSURL == "" {
		return cfg, fmt.Errorf("%s: DATABASE_URL and NATS_URL are required (or -database-url, -nats-url)", name)
	}
	if cfg.ConnectTimeout <= 0 {
		return cfg, fmt.Errorf("%s: -connect-timeout must be positive", name)
	}
	if err := natsAuth.Validate(); err != nil {
		return cfg, fmt.Errorf("%s: %w", name, err)
	}
	cfg.NATSAuth = *natsAuth
	cfg.Registry = RegistryConfig{Paths: registries, LookupEnv: lookupEnv}
	cfg.Failpoints = env(failpoint.EnvVar, "")
	return cfg, nil
}

// defaultAckWait is the AckWait of a service's consumer when none is set.
func defaultAckWait(service string) string {
	if service == Dispatcher || service == Reconciler {
		return "10s"
	}
	return "30s"
}

// RunService runs one service until ctx ends: it waits for Postgres and NATS
// (retrying with backoff up to ConnectTimeout, each try logged), refuses a
// database whose schema is not up to date unless Migrate is set, starts the
// service and its outbox relays, and serves /metrics, /healthz, /readyz and
// the API's document /v1/openapi.yaml (planner-ingest also the operators'
// API, behind cfg.APITokens, and the vendors' webhooks, POST
// /webhooks/{provider}).
func RunService(ctx context.Context, cfg ServiceConfig) error {
	if !slices.Contains(AllServices, cfg.Name) {
		return fmt.Errorf("unknown service %q (have %v)", cfg.Name, AllServices)
	}
	stderr := cfg.Stderr
	if stderr == nil {
		stderr = os.Stderr
	}
	base, err := NewLogger(stderr, cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		return err
	}
	log := base.With().Str("service", cfg.Name).Str("instance", cfg.Instance).Logger()
	if err := failpoint.Arm(cfg.Failpoints); err != nil {
		return err
	}
	reg, err := LoadRegistry(cfg.Registry)
	if err != nil {
		return err
	}
	upstreams, err := MCPUpstreamsFromEnv(reg, cfg.Registry.LookupEnv)
	if err != nil {
		return err
	}
	// The tokens authenticate /metrics, /readyz, the document and
	// planner-ingest's API; a bad tokens file stops the service here,
	// before it waits for anything.
	var tokens *api.Tokens
	if cfg.APITokens != "" {
		if tokens, err = api.LoadTokens(cfg.APITokens); err != nil {
			return err
		}
	}
	// It also takes the vendors' webhooks: their signing secrets come from
	// the environment or files, and a bad one stops it here too.
	var webhookSecrets map[string][]webhook.Secret
	if cfg.Name == PlannerIngest {
		if webhookSecrets, err = WebhookSecrets(reg, cfg.Registry.LookupEnv, cfg.WebhookSecretFiles); err != nil {
			return err
		}
	}
	// /healthz, /metrics and /readyz answer from the first moment: while
	// start-up waits, /readyz says for what.
	promReg := prometheus.NewRegistry()
	promReg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Every route but /healthz needs a token of the tokens file (or, for
	// /metrics and /readyz, a loopback peer with -http-open-loopback).
	guard, err := api.NewGuard(api.GuardConfig{Tokens: tokens, OpenOnLoopback: cfg.HTTPOpenLoopback, Registerer: promReg, Log: log})
	if err != nil {
		return err
	}
	bt := newBoot()
	h, err := ServeHTTP(HTTPConfig{Addr: cfg.HTTPAddr, Gatherer: promReg, Ready: bt.ready, Guard: guard, Log: log,
		Routes: func(mux *http.ServeMux) { mux.Handle("/", bt) }})
	if err != nil {
		return err
	}
	defer h.Close()
	log.Info().Str("http", h.URL()).Msg("serving /healthz, /readyz and /metrics; waiting for postgres and nats")
	if err := waitForDependencies(ctx, cfg, log, bt); err != nil {
		return err
	}
	bt.set(checkStart, false, "starting")
	if cfg.Migrate {
		if err := Migrate(ctx, cfg.DatabaseURL, log); err != nil {
			return err
		}
	}
	var dbURLs map[string]string
	if cfg.Name == PlannerIngest && cfg.APIDatabaseURL != "" {
		dbURLs = map[string]string{PartAPI: cfg.APIDatabaseURL}
	} else if cfg.Name == PlannerIngest {
		log.Warn().Msg("the operators' API shares planner-ingest's Postgres login (no OPLEDGER_API_DATABASE_URL): " +
			"that login needs opledger_operator, which also reads attempts and the audit log")
	}
	s, err := StartServices(ctx, ServicesConfig{
		DatabaseURL: cfg.DatabaseURL, DatabaseURLs: dbURLs, NATSURL: cfg.NATSURL, NATSAuth: cfg.NATSAuth, Registry: reg, Run: []string{cfg.Name},
		Instance: cfg.Instance, Dispatchers: cfg.Instances, Relays: cfg.Relays, SetRoles: cfg.SetRoles,
		Consumer: cfg.Consumer, StatementTimeout: cfg.StatementTimeout, IngestMaxBacklog: cfg.MaxBacklog, MCPUpstreams: upstreams, WebhookSecrets: webhookSecrets,
		Maintain: maintain.Config{RejectedRetention: cfg.RejectedRetention},
		Metrics:  telemetry.NewMetrics(promReg), Log: base,
	})
	if err != nil {
		return err
	}
	defer stopServices(s, log)
	routes := http.NewServeMux()
	if cfg.Name == PlannerIngest {
		a, err := api.New(api.Config{Ops: ops.New(s.StoreFor(PartAPI), reg), Tokens: tokens, Registerer: promReg,
			Guard: guard, Log: log})
		if err != nil {
			return err
		}
		base := cfg.NATSAuth
		if base.InboxPrefix == "" {
			base.InboxPrefix = ServiceInboxPrefix(cfg.Name)
		}
		doors := newTenantDoors(IntentNATS{URL: cfg.NATSURL, Base: base, SecretsDir: cfg.IntentNATSSecrets}, reg,
			intentWait(cfg.IntentWait), log)
		defer doors.Close()
		intents, err := api.NewIntents(api.IntentsConfig{API: a, Doors: doors, Wait: intentWait(cfg.IntentWait), Registerer: promReg, Log: log})
		if err != nil {
			return err
		}
		a.Mount(routes)
		intents.Mount(routes)
		s.Webhooks.Mount(routes)
		for _, p := range s.Webhooks.Unconfigured() {
			log.Warn().Str("provider", p).Str("env", WebhookSecretsEnv(p)).Msg("no signing secret for this webhook provider: its deliveries are refused (503 no_secret)")
		}
	} else {
		// Every service hands out the API's document; planner-ingest
		// serves the API itself.
		api.MountDocument(routes, guard)
	}
	if tokens == nil {
		what := "/metrics, /readyz and /v1/openapi.yaml answer 503"
		if cfg.HTTPOpenLoopback {
			what = "/metrics and /readyz answer only loopback, /v1/openapi.yaml 503"
		}
		if cfg.Name == PlannerIngest {
			what += ", and the operators' API 503"
		}
		log.Warn().Msg("no API tokens configured (OPLEDGER_API_TOKENS): " + what)
	}
	bt.started(s, routes)
	log.Info().Str("http", h.URL()).Strs("tools", reg.Names()).Msg("started")
	<-ctx.Done()
	log.Info().Msg("stopping")
	return nil
}

// waitForDependencies retries connecting to Postgres and NATS with backoff
// until both answer or cfg.ConnectTimeout passes, then checks the schema:
// a database without opledger's schema is refused (unless cfg.Migrate), so
// that a service never runs against tables that are not there. Each try's
// verdict goes to bt, for /readyz; the error after the last try names what
// each unreachable dependency last answered.
func waitForDependencies(ctx context.Context, cfg ServiceConfig, log zerolog.Logger, bt *boot) error {
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.MaxElapsedTime = 250*time.Millisecond, 5*time.Second, 0
	try := 0
	var failing []string        // the dependencies the last try did not reach
	said := map[string]string{} // what each last answered before the time ran out
	fail := func(dep, msg string) {
		failing = append(failing, dep)
		if ctx.Err() == nil || said[dep] == "" {
			said[dep] = msg
		}
	}
	op := func() error {
		try++
		failing = failing[:0]
		tctx, tcancel := context.WithTimeout(ctx, 5*time.Second)
		defer tcancel()
		var serr error
		conn, perr := pgx.Connect(tctx, cfg.DatabaseURL)
		if perr != nil {
			msg := redactErr(perr, cfg.DatabaseURL)
			log.Warn().Int("try", try).Str("dependency", "postgres").Str("error", msg).Msg("waiting for dependency")
			bt.set(checkPostgres, false, fmt.Sprintf("waiting: %s (try %d)", msg, try))
			fail("postgres", msg)
		} else {
			_, serr = schema.Pending(tctx, conn)
			conn.Close(context.WithoutCancel(ctx))
			bt.set(checkPostgres, true, "")
			switch {
			case serr == nil:
				bt.set(checkSchema, true, "")
			case cfg.Migrate:
				bt.set(checkSchema, false, "migrating: "+serr.Error())
			default:
				bt.set(checkSchema, false, serr.Error())
				// A schema that is behind does not catch up by waiting.
				return backoff.Permanent(fmt.Errorf("postgres: %w", serr))
			}
		}
		aopts, err := cfg.NATSAuth.Options()
		if err != nil {
			return backoff.Permanent(err) // a missing secret file does not appear by waiting
		}
		dialer := &lastDialError{d: net.Dialer{Timeout: 5 * time.Second}}
		nc, nerr := nats.Connect(cfg.NATSURL, append([]nats.Option{nats.Name(cfg.Instance + "/probe"), nats.Timeout(5 * time.Second), nats.SetCustomDialer(dialer)}, aopts...)...)
		if nerr != nil {
			if errors.Is(nerr, nats.ErrNoServers) && dialer.err != nil {
				// "no servers available" hides why: say what the dial said.
				nerr = fmt.Errorf("%w: %w", nerr, dialer.err)
			}
			msg := redactErr(nerr, cfg.NATSURL)
			log.Warn().Int("try", try).Str("dependency", "nats").Str("nats_url", bus.RedactURL(cfg.NATSURL)).
				Str("nats_credential", cfg.NATSAuth.Kind()).Str("error", msg).Msg("waiting for dependency")
			bt.set(checkNATS, false, fmt.Sprintf("waiting: %s (try %d)", msg, try))
			fail("nats", msg)
		} else {
			nc.Close()
			bt.set(checkNATS, true, "")
		}
		if len(failing) > 0 {
			return fmt.Errorf("%s not reachable", strings.Join(failing, " and "))
		}
		return nil
	}
	err := backoff.Retry(op, backoff.WithContext(b, ctx))
	var perm *backoff.PermanentError
	if errors.As(err, &perm) {
		return perm.Err
	}
	if err != nil {
		if parent.Err() != nil {
			return parent.Err() // told to stop while waiting
		}
		why := make([]string, 0, len(failing))
		for _, dep := range failing {
			why = append(why, dep+": "+said[dep])
		}
		if len(why) == 0 { // the time ran out before a try could say
			why = append(why, ctxOr(ctx, err).Error())
		}
		return fmt.Errorf("not reachable within %s (try %d): %s", cfg.ConnectTimeout, try, strings.Join(why, "; "))
	}
	return nil
}

// lastDialError is a NATS dialer that keeps the last dial's error.
type lastDialError struct {
	d   net.Dialer
	err error
}

func (l *lastDialError) Dial(network, address string) (net.Conn, error) {
	c, err := l.d.Dial(network, address)
	if err != nil {
		l.err = err
	}
	return c, err
}

func ctxOr(ctx context.Context, err error) error {
	if ctx.Err() != nil && err == nil {
		return ctx.Err()
	}
	return err
}

// redactErr renders err without the credentials of url, should the driver
// have quoted it, whole or in parts.
func redactErr(err error, url string) string { return redactpkg.Error(err, url) }
