package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/opledger/opledger/pkg/vendors"
)

// newLogger returns the process logger: JSON lines to stderr at level.
func newLogger(level string) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil || level == "" {
		return zerolog.Nop(), fmt.Errorf("unknown log level %q (use debug, info, warn, error, disabled)", level)
	}
	return zerolog.New(os.Stderr).Level(lvl).With().Timestamp().Logger(), nil
}

func infraFlags(fs *flag.FlagSet, cfg *InfraConfig) {
	fs.StringVar(&cfg.DataDir, "data", "", "keep Postgres and NATS data in this directory across runs (default: temporary)")
	cfg.DatabaseURL = os.Getenv("DATABASE_URL")
	cfg.NATSURL = os.Getenv("NATS_URL")
}

// RunDev is "opledger dev": everything in one process until interrupted.
func RunDev(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	var cfg DevConfig
	infraFlags(fs, &cfg.Infra)
	cfg.Infra.Durable = true
	fs.StringVar(&cfg.RegistryPath, "registry", "examples/registry.yaml", "tool registry")
	fs.StringVar(&cfg.HTTPAddr, "http", "127.0.0.1:8480", "address for /metrics, /healthz and /v1/operations/{id}")
	fs.IntVar(&cfg.Services.Dispatchers, "dispatchers", 3, "dispatcher instances")
	level := fs.String("log", "info", "log level (debug, info, warn, error, disabled)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log, err := newLogger(*level)
	if err != nil {
		return err
	}
	cfg.Log, cfg.Infra.Log = log, log
	d, err := StartDev(ctx, cfg)
	if err != nil {
		return err
	}
	defer d.Close()
	fmt.Fprintf(out, "opledger dev is running (Ctrl-C to stop)\n")
	for _, w := range d.Infra.Where {
		fmt.Fprintf(out, "  %s\n", w)
	}
	fmt.Fprintf(out, "  vendors: local stand-ins at %s (stats: %s/_admin/stats)\n", d.Vendors.URL(), d.Vendors.URL())
	if d.HTTPURL != "" {
		fmt.Fprintf(out, "  http: %s/metrics  %s/healthz  %s/v1/operations/{id}\n", d.HTTPURL, d.HTTPURL, d.HTTPURL)
	}
	fmt.Fprintf(out, "  tools: %s\n", strings.Join(d.Registry.Names(), ", "))
	fmt.Fprintf(out, "  publish intents to opledger.intents.<workflow_id> (Nats-Msg-Id = event_id); results on opledger.results.<workflow_id>; see docs/protocol.md\n")
	<-ctx.Done()
	return nil
}

// RunDemo is "opledger demo".
func RunDemo(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	var cfg DevConfig
	infraFlags(fs, &cfg.Infra)
	fs.StringVar(&cfg.RegistryPath, "registry", "examples/registry.yaml", "tool registry")
	level := fs.String("log", "disabled", "service log level on stderr (debug, info, warn, error, disabled)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log, err := newLogger(*level)
	if err != nil {
		return err
	}
	cfg.Log, cfg.Infra.Log = log, log
	cfg.Services.Dispatchers = 3
	cfg.Services.Reconcile.SweepInterval = 500 * time.Millisecond
	fmt.Fprintln(out, "Starting opledger on embedded defaults…")
	d, err := StartDev(ctx, cfg)
	if err != nil {
		return err
	}
	defer d.Close()
	for _, w := range d.Infra.Where {
		fmt.Fprintf(out, "  %s\n", w)
	}
	fmt.Fprintln(out)
	return Demo(ctx, d, out)
}

// RunMigrate is "opledger migrate".
func RunMigrate(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	url := fs.String("database-url", os.Getenv("DATABASE_URL"), "Postgres connection string (default $DATABASE_URL)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *url == "" {
		return errors.New("migrate: set DATABASE_URL or pass -database-url")
	}
	log := zerolog.New(out)
	if err := Migrate(ctx, *url, log); err != nil {
		return err
	}
	fmt.Fprintln(out, "schema is up to date")
	return nil
}

// RunService runs one service (or, for several dispatcher instances in one
// process, -instances N) against shared Postgres and NATS: the entry point of
// the binaries under services/. Configuration comes from flags and the
// environment: DATABASE_URL and NATS_URL are required, OPLEDGER_REGISTRY
// names the registry file, OPLEDGER_VENDOR_<NAME>_URL the vendors.
func RunService(ctx context.Context, name string, args []string) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	cfg := ServicesConfig{Run: []string{name}}
	dbURL := fs.String("database-url", os.Getenv("DATABASE_URL"), "Postgres connection string (default $DATABASE_URL)")
	natsURL := fs.String("nats-url", os.Getenv("NATS_URL"), "NATS URL (default $NATS_URL)")
	regPath := fs.String("registry", Getenv("OPLEDGER_REGISTRY", "examples/registry.yaml"), "tool registry (default $OPLEDGER_REGISTRY)")
	fs.StringVar(&cfg.Instance, "instance", os.Getenv("OPLEDGER_INSTANCE"), "instance name in logs and attempt rows (default the host name)")
	fs.IntVar(&cfg.Dispatchers, "instances", 1, "dispatcher instances in this process")
	fs.IntVar(&cfg.Relays, "relays", 1, "outbox relays in this process")
	migrate := fs.Bool("migrate", false, "apply schema migrations before starting")
	level := fs.String("log", Getenv("OPLEDGER_LOG", "info"), "log level")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dbURL == "" || *natsURL == "" {
		return fmt.Errorf("%s: DATABASE_URL and NATS_URL are required (or -database-url, -nats-url)", name)
	}
	log, err := newLogger(*level)
	if err != nil {
		return err
	}
	if *migrate {
		if err := Migrate(ctx, *dbURL, log); err != nil {
			return err
		}
	}
	reg, err := loadRegistry(*regPath)
	if err != nil {
		return err
	}
	cfg.DatabaseURL, cfg.NATSURL, cfg.Registry, cfg.Log = *dbURL, *natsURL, reg, log
	s, err := StartServices(ctx, cfg)
	if err != nil {
		return err
	}
	log.Info().Str("service", name).Str("instance", cfg.Instance).Msg("started")
	<-ctx.Done()
	s.Stop()
	log.Info().Str("service", name).Msg("stopped")
	return nil
}

// RunVendors is "opledger vendors": the local stand-in vendors on their own.
func RunVendors(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("vendors", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8090", "listen address")
	latency := fs.Duration("latency", 0, "delay every vendor request")
	if err := fs.Parse(args); err != nil {
		return err
	}
	v, err := vendors.Start(vendors.Options{Addr: *addr, Latency: *latency})
	if err != nil {
		return err
	}
	defer v.Close()
	fmt.Fprintf(out, "local vendors at %s (stats: %s/_admin/stats)\n", v.URL(), v.URL())
	<-ctx.Done()
	return nil
}
