package main

import (
	"flag"
	"io"
	"slices"

	"github.com/opledger/opledger/internal/app"
)

// stackFlags are the flags of the commands that run a whole stack in this
// process (dev, demo, bench).
type stackFlags struct {
	cfg       app.StackConfig
	logLevel  string
	logFormat string
}

func newStackFlags(fs *flag.FlagSet, env func(string) (string, bool), defaultLog string) *stackFlags {
	f := &stackFlags{}
	f.cfg.Infra.DatabaseURL = getenv(env, "DATABASE_URL")
	f.cfg.Infra.NATSURL = getenv(env, "NATS_URL")
	f.cfg.Registry.LookupEnv = env
	fs.StringVar(&f.cfg.Infra.DataDir, "data", "", "keep Postgres and NATS data in this directory across runs (default: temporary)")
	fs.Func("registry", "tool registry file or directory, repeatable (default: the embedded examples/registry.yaml)", func(s string) error {
		if !slices.Contains(f.cfg.Registry.Paths, s) {
			f.cfg.Registry.Paths = append(f.cfg.Registry.Paths, s)
		}
		return nil
	})
	fs.StringVar(&f.logLevel, "log", defaultLog, "log level: trace, debug, info, warn, error, disabled")
	fs.StringVar(&f.logFormat, "log-format", app.LogAuto, "log format: json, console, or auto (console on a terminal)")
	return f
}

// logger builds the stack's logger on w, after parsing.
func (f *stackFlags) logger(w io.Writer) error {
	log, err := app.NewLogger(w, f.logLevel, f.logFormat)
	if err != nil {
		return err
	}
	// The services add their own service and instance to each line; the
	// process's own lines (infrastructure, migrations) say "opledger".
	f.cfg.Services.Instance = "dev"
	f.cfg.Log = log
	f.cfg.Infra.Log = log.With().Str("service", "opledger").Str("instance", f.cfg.Services.Instance).Logger()
	return nil
}
