// Command opledger runs opledger: the whole system in one process on embedded
// defaults (dev), the 2:13 a.m. incident (demo), the end-to-end benchmark
// (bench), the fault-injection evaluation (eval), migrations (migrate), each
// service's Postgres login user (db-users), the local stand-in vendors
// (vendors), a healthcheck for containers (probe), the operators' human
// loop (ops, a client of the HTTP API, and token, which makes its tokens),
// and the MCP server and proxy for agents (mcp).
// The services also run one per process: see services/ (and the hidden
// "opledger service <name>", which eval -kill starts).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/opledger/opledger/internal/app"
)

const usage = `usage: opledger <command> [flags]

commands:
  dev       run Postgres (private cluster or DATABASE_URL), NATS JetStream
            (embedded or NATS_URL), the local vendors and all four services
  demo      run the 2:13 a.m. incident on embedded defaults and check the vendors
  bench     measure throughput (as a ratio to Postgres's commit rate), the latency opledger
            adds and a duplicate's answer, beside an idempotency-key-table baseline;
            -preload N builds a big ledger first, -duration D runs steady
  eval      run the fault-injection scenario matrix and print the KPIs (duplicates per
            10k, unknown outcomes, reconciliation time, false dedupes, added latency)
  migrate   apply the schema migrations and the grants (schema/grants.sql) to DATABASE_URL
  db-users  create or update each service's login user in its Postgres roles, passwords
            from OPLEDGER_DB_PASSWORD_<SERVICE> (docs/security.md)
  vendors   serve the local stand-in vendors (payments, email, tickets, crm, accounts)
  probe     GET a URL and exit 0 on 2xx (a healthcheck for containers without curl)
  ops       the human loop over the API: list, show, approve, deny, resolve, cancel,
            compensate operations ("opledger ops -h")
  token     make an API token for an actor and role, and its line for the tokens file
  mcp       an MCP server (serve) or proxy in front of an MCP server (proxy) whose
            tools/calls go through the ledger ("opledger mcp -h", docs/mcp.md)

Run "opledger <command> -h" for the flags of a command.
`

// command runs one subcommand. env is the program's environment, read here
// at the edge and nowhere else.
type command func(ctx context.Context, args []string, env func(string) (string, bool), stdout, stderr io.Writer) error

func main() {
	app.TuneGC(os.LookupEnv)
	os.Exit(run(os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr))
}

func run(args []string, env func(string) (string, bool), stdout, stderr io.Writer) int {
	if len(args) < 1 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	commands := map[string]command{"dev": runDev, "demo": runDemo, "bench": runBench, "eval": runEval, "migrate": runMigrate,
		"db-users": runDBUsers, "vendors": runVendors, "probe": runProbe, "ops": runOps, "token": runToken, "mcp": runMCP,
		// Hidden: eval -kill runs one service per process with service, and
		// bench -duration the NATS server in a process of its own with nats.
		"service": runService, "nats": runNATS}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "opledger: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := cmd(ctx, args[1:], env, stdout, stderr)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp), errors.Is(err, context.Canceled):
		return 0
	case errors.Is(err, errUsage):
		return 2
	}
	fmt.Fprintln(stderr, "opledger:", err)
	return 1
}

// asMainEnv makes a test binary of this package, re-executed, run as the
// opledger command itself (its TestMain); the opledger binary ignores it.
// Whatever re-executes this binary sets it, so that the same code runs
// under "go test".
const asMainEnv = "OPLEDGER_TEST_AS_MAIN"

// errUsage marks a bad command line; the flag package has printed why.
var errUsage = errors.New("usage")

// parse parses a subcommand's flags: -h returns flag.ErrHelp, a bad flag errUsage.
func parse(fs *flag.FlagSet, args []string) error {
	err := fs.Parse(args)
	switch {
	case err == nil && fs.NArg() > 0:
		fmt.Fprintf(fs.Output(), "unexpected argument %q\n", fs.Arg(0))
		return errUsage
	case err == nil, errors.Is(err, flag.ErrHelp):
		return err
	}
	return errUsage
}

// getenv returns the variable or "".
func getenv(env func(string) (string, bool), name string) string {
	v, _ := env(name)
	return v
}
