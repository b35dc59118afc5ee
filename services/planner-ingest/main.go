// Command planner-ingest runs opledger's planner-ingest against shared Postgres and NATS.
// Configuration comes from flags and the environment (DATABASE_URL, NATS_URL,
// OPLEDGER_REGISTRY, OPLEDGER_VENDOR_<NAME>_URL, ...): run it with -h.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/opledger/opledger/internal/app"
)

func main() {
	app.TuneGC(os.LookupEnv)
	cfg, err := app.ParseServiceFlags(app.PlannerIngest, os.Args[1:], os.LookupEnv, os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return
	case err != nil:
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := app.RunService(ctx, cfg); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "planner-ingest:", err)
		os.Exit(1)
	}
}
