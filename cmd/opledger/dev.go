package main

import (
	"context"
	"flag"
	"fmt"
	"github.com/opledger/opledger/internal/app"
	"io"
	"strings"
)

// runDev is "opledger dev": everything in one process until interrupted.
func runDev(ctx context.Context, args []string, env func(string) (string, bool), stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("opledger dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := newStackFlags(fs, env, "info")
	f.cfg.Infra.Durable = true
	fs.StringVar(&f.cfg.HTTPAddr, "http", "127.0.0.1:8480", "address for /metrics, /healthz, /readyz and /v1/operations/{id}")
	fs.IntVar(&f.cfg.Services.Dispatchers, "dispatchers", 3, "dispatcher instances")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := f.logger(stderr); err != nil {
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
	fmt.Fprintf(stdout, "  vendors: local stand-ins at %s (stats: %s/_admin/stats)\n", d.Vendors.URL(), d.Vendors.URL())
	if d.HTTP != nil {
		u := d.HTTP.URL()
		fmt.Fprintf(stdout, "  http: %s/metrics  %s/healthz  %s/readyz  %s/v1/operations/{id}\n", u, u, u, u)
	}
	fmt.Fprintf(stdout, "  tools: %s\n", strings.Join(d.Registry.Names(), ", "))
	fmt.Fprintf(stdout, "  publish intents to opledger.intents.<workflow_id> (Nats-Msg-Id = event_id); results on opledger.results.<workflow_id>; see docs/protocol.md\n")
	<-ctx.Done()
	return nil
}
