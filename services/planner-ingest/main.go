// Command planner-ingest runs opledger's planner-ingest against shared Postgres and NATS.
// Configure it with DATABASE_URL, NATS_URL, OPLEDGER_REGISTRY and
// OPLEDGER_VENDOR_<NAME>_URL; run it with -h for the flags.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/opledger/opledger/pkg/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := app.RunService(ctx, app.PlannerIngest, os.Args[1:]); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "planner-ingest:", err)
		os.Exit(1)
	}
}
