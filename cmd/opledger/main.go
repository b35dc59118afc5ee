// Command opledger runs opledger: the whole system in one process on embedded
// defaults (dev), the 2:13 a.m. incident (demo), migrations (migrate) and the
// end-to-end benchmark (bench).
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

const usage = `usage: opledger <command> [flags]

commands:
  dev       run Postgres (private cluster or DATABASE_URL), NATS JetStream
            (embedded or NATS_URL), the local vendors and all four services
  demo      run the 2:13 a.m. incident on embedded defaults and check the vendors
  migrate   apply the schema migrations to DATABASE_URL
  vendors   serve the local stand-in vendors (payments, email, tickets, crm, accounts)
  bench     measure intent→completed_success throughput and the latency opledger adds

Run "opledger <command> -h" for the flags of a command.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "dev":
		err = app.RunDev(ctx, os.Args[2:], os.Stdout)
	case "demo":
		err = app.RunDemo(ctx, os.Args[2:], os.Stdout)
	case "migrate":
		err = app.RunMigrate(ctx, os.Args[2:], os.Stdout)
	case "vendors":
		err = app.RunVendors(ctx, os.Args[2:], os.Stdout)
	case "bench":
		err = app.RunBench(ctx, os.Args[2:], os.Stdout)
	case "-h", "--help", "help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "opledger: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "opledger:", err)
		os.Exit(1)
	}
}
