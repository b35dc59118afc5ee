package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/opledger/opledger/internal/app"
	"github.com/opledger/opledger/internal/eval"
)

// runEval is "opledger eval": the article's fault-injection scenario matrix
// against a whole opledger, and its KPIs. It fails when the vendors saw a
// duplicate side effect or an operation was left unsettled.
func runEval(ctx context.Context, args []string, env func(string) (string, bool), stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("opledger eval", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: opledger eval [flags]\n\nRuns the fault-injection scenario matrix (%s) against a whole opledger with several\ndispatchers and prints the KPIs; exits 1 on a duplicate side effect, a false suppression (a different action answered\nas a duplicate) or an unsettled operation. See docs/eval.md.\n\n",
			strings.Join(eval.DefaultScenarios, ", "))
		fs.PrintDefaults()
	}
	var cfg eval.Config
	n := fs.Int("n", 500, "business actions per scenario, spread over capture_payment, send_email and create_ticket (update_crm_record in set_back_sequences)")
	total := fs.Int("ops", 0, "business actions over all scenarios, split evenly and rounded up, so that at least this many run (overrides -n)")
	scenarios := fs.String("scenarios", strings.Join(eval.DefaultScenarios, ","), "comma-separated scenarios to run, in order")
	fs.Uint64Var(&cfg.Seed, "seed", 1, "seed of the corpus, its timing and the kills")
	fs.IntVar(&cfg.Dispatchers, "dispatchers", 3, "dispatcher instances (processes with -kill)")
	fs.IntVar(&cfg.DispatchWorkers, "dispatch-workers", 0, "concurrent vendor calls per dispatcher (0: the service default; in-process only)")
	fs.Float64Var(&cfg.Rate, "rate", 300, "business actions started per second, over the three tools' lanes")
	fs.DurationVar(&cfg.VisibilityDelay, "visibility-delay", time.Second, "how long the vendor's lookup misses an effect after a delayed-visibility 500")
	fs.DurationVar(&cfg.PhaseTimeout, "phase-timeout", 30*time.Second, "longest wait for one scenario's operations to settle before its lane moves on")
	fs.DurationVar(&cfg.SettleTimeout, "settle-timeout", 3*time.Minute, "longest wait at the end for every operation to settle")
	fs.BoolVar(&cfg.Kill, "kill", false, "run planner-ingest, the dispatchers and the reconciler as processes and SIGKILL them during the run, with failpoints armed")
	fs.DurationVar(&cfg.KillEvery, "kill-every", 5*time.Second, "with -kill: how often a process is killed")
	fs.DurationVar(&cfg.NATSRestartEvery, "nats-restart-every", 0, "restart the embedded NATS server (file storage, its store kept) this often while the scenarios run; 0: never")
	fs.BoolVar(&cfg.Infra.Durable, "durable", false, "private Postgres cluster keeps fsync on")
	jsonOut := fs.Bool("json", false, "print the report as one JSON object instead of tables")
	logLevel := fs.String("log", "error", "log level of the services: trace, debug, info, warn, error, disabled")
	logFormat := fs.String("log-format", app.LogAuto, "log format: json, console, or auto (console on a terminal)")
	if err := parse(fs, args); err != nil {
		return err
	}
	log, err := app.NewLogger(stderr, *logLevel, *logFormat)
	if err != nil {
		return err
	}
	for _, s := range strings.Split(*scenarios, ",") {
		if s = strings.TrimSpace(s); s != "" {
			cfg.Scenarios = append(cfg.Scenarios, s)
		}
	}
	cfg.PerScenario = *n
	if *total > 0 {
		k := len(cfg.Scenarios)
		if k == 0 {
			k = len(eval.DefaultScenarios)
		}
		cfg.PerScenario = (*total + k - 1) / k
	}
	cfg.Infra.DatabaseURL, cfg.Infra.NATSURL = getenv(env, "DATABASE_URL"), getenv(env, "NATS_URL")
	cfg.Infra.MemoryStreams = true
	cfg.Log, cfg.Infra.Log, cfg.Progress = log, log, stderr
	if cfg.Kill {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("eval: -kill runs this binary's hidden service command: %w", err)
		}
		cfg.ServiceCommand = []string{exe, "service"}
	}
	settings, err := cfg.Settings()
	if err != nil {
		fmt.Fprintln(stderr, err)
		return errUsage
	}
	command := strings.TrimSpace("opledger eval " + strings.Join(args, " "))
	if !*jsonOut {
		eval.WriteHeader(stdout, command, settings)
	}
	rep, err := eval.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if *jsonOut {
		if err := rep.WriteJSON(stdout, command); err != nil {
			return err
		}
	} else {
		rep.WriteText(stdout)
	}
	if rep.Failed() {
		return fmt.Errorf("eval: %s", rep.Verdict())
	}
	return nil
}
