package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/opledger/opledger/internal/app"
	"github.com/opledger/opledger/internal/vendors"
)

// runDemo is "opledger demo".
func runDemo(ctx context.Context, args []string, env func(string) (string, bool), stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("opledger demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f := newStackFlags(fs, env, "disabled")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := f.logger(stderr); err != nil {
		return err
	}
	f.cfg.Services.Dispatchers = 3
	f.cfg.Services.Maintain.SweepInterval = 500 * time.Millisecond
	fmt.Fprintln(stdout, "Starting opledger on embedded defaults…")
	d, err := app.StartStack(ctx, f.cfg)
	if err != nil {
		return err
	}
	defer d.Close()
	for _, w := range d.Infra.Where {
		fmt.Fprintf(stdout, "  %s\n", w)
	}
	fmt.Fprintln(stdout)
	return Demo(ctx, d, stdout)
}

// runMigrate is "opledger migrate".
func runMigrate(ctx context.Context, args []string, env func(string) (string, bool), stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("opledger migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("database-url", getenv(env, "DATABASE_URL"), "Postgres connection string (default $DATABASE_URL)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *url == "" {
		return errors.New("migrate: set DATABASE_URL or pass -database-url")
	}
	log, err := app.NewLogger(stderr, "info", app.LogAuto)
	if err != nil {
		return err
	}
	if err := app.Migrate(ctx, *url, log); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "schema is up to date")
	return nil
}

// runVendors is "opledger vendors": the local stand-in vendors on their own.
func runVendors(ctx context.Context, args []string, _ func(string) (string, bool), stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("opledger vendors", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8090", "listen address")
	latency := fs.Duration("latency", 0, "delay every vendor request")
	if err := parse(fs, args); err != nil {
		return err
	}
	v, err := vendors.Start(vendors.Options{Addr: *addr, Latency: *latency})
	if err != nil {
		return err
	}
	defer v.Close()
	fmt.Fprintf(stdout, "local vendors at %s (stats: %s/_admin/stats)\n", v.URL(), v.URL())
	<-ctx.Done()
	return nil
}
