package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/opledger/opledger/internal/api"
	"github.com/opledger/opledger/internal/app"
	"github.com/opledger/opledger/internal/ops"
	"github.com/opledger/opledger/pkg/wire"
)

// runDev is "opledger dev": everything in one process until interrupted.
func runDev(ctx context.Context, args []string, env func(string) (string, bool), stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("opledger dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := newStackFlags(fs, env, "info")
	f.cfg.Infra.Durable = true
	f.cfg.Infra.RoleUsers = true // each service with only its grants (private cluster)
	f.cfg.VendorWebhooks = true  // the stand-ins send signed webhooks to the intake
	fs.StringVar(&f.cfg.HTTPAddr, "http", "127.0.0.1:8480", "loopback address for /metrics, /healthz, /readyz and the operators' API")
	fs.IntVar(&f.cfg.Services.Dispatchers, "dispatchers", 3, "dispatcher instances")
	tokensFile := getenv(env, "OPLEDGER_API_TOKENS")
	if err := parse(fs, args); err != nil {
		return err
	}
	if !loopbackAddr(f.cfg.HTTPAddr) {
		// dev prints an admin token: its API stays on this machine.
		fmt.Fprintf(stderr, "opledger dev: -http must be a loopback address (127.0.0.1:PORT, [::1]:PORT, localhost:PORT), got %q\n", f.cfg.HTTPAddr)
		return errUsage
	}
	if err := f.logger(stderr); err != nil {
		return err
	}
	// The tokens file's actors, if one is named, and a dev token (admin)
	// that lives as long as this process.
	var entries []api.TokenEntry
	if tokensFile != "" {
		var err error
		if entries, err = api.ReadTokens(tokensFile); err != nil {
			return err
		}
	}
	devToken, devEntry, err := api.GenerateToken("dev", ops.RoleAdmin)
	if err != nil {
		return err
	}
	// And an agent token for the HTTP intent API (tenant default).
	agentToken, agentEntry, err := api.GenerateAgentToken("dev-agent", wire.DefaultTenant, "")
	if err != nil {
		return err
	}
	if f.cfg.APITokens, err = api.NewTokens(append(entries, devEntry, agentEntry)); err != nil {
		return err
	}
	d, err := app.StartStack(ctx, f.cfg)
	if err != nil {
		return err
	}
	defer d.Close()
	fmt.Fprintf(stdout, "opledger dev is running (Ctrl-C to stop)\n")
	for _, w := range d.Infra.Where {
		fmt.Fprintf(stdout, "  %s\n", w)
	}
	fmt.Fprintf(stdout, "  vendors: local stand-ins at %s (stats: %s/_admin/stats, from this host only)\n", d.Vendors.URL(), d.Vendors.URL())
	if d.HTTP != nil {
		u := d.HTTP.URL()
		fmt.Fprintf(stdout, "  http: %s/healthz (open)  %s/metrics  %s/readyz (with the token below)\n", u, u, u)
		fmt.Fprintf(stdout, "  api: %s/v1/operations (OpenAPI: %s/v1/openapi.yaml); dev token, admin, valid until dev stops:\n", u, u)
		fmt.Fprintf(stdout, "       export OPLEDGER_API_URL=%s OPLEDGER_API_TOKEN=%s\n", u, devToken)
		fmt.Fprintf(stdout, "       then: go run ./cmd/opledger ops list   or   curl -H \"Authorization: Bearer $OPLEDGER_API_TOKEN\" %s/metrics\n", u)
		if ps := d.Registry.Webhooks(); len(ps) > 0 {
			fmt.Fprintf(stdout, "  webhooks: POST %s/webhooks/{%s} (the stand-ins sign theirs with secrets made for this run; yours: OPLEDGER_WEBHOOK_SECRETS_<PROVIDER>)\n",
				u, strings.Join(ps, ","))
		}
		if tokensFile != "" {
			fmt.Fprintf(stdout, "       also accepted: the %d tokens of %s\n", len(entries), tokensFile)
		}

		fmt.Fprintf(stdout, "  intents: POST %s/v1/intents?wait=final with the agent token (dev-agent, tenant default; docs/protocol.md, \"Over HTTP\"):\n", u)
		fmt.Fprintf(stdout, "       export OPLEDGER_AGENT_TOKEN=%s\n", agentToken)
	}
	fmt.Fprintf(stdout, "  tools: %s\n", strings.Join(d.Registry.Names(), ", "))
	fmt.Fprintf(stdout, "  publish intents to opledger.intents.<workflow_id> (no Nats-Msg-Id needed: the ledger dedupes by event_id); results on opledger.results.<workflow_id>; see docs/protocol.md\n")
	<-ctx.Done()
	return nil
}

// loopbackAddr reports whether addr (host:port) listens on loopback only.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && loopback(host)
}
