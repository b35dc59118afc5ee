package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

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

// runDBUsers is "opledger db-users": a login user per service process, in
// the Postgres roles of what that process runs, with its password from the
// environment. Run it as the migrator, after migrate.
func runDBUsers(ctx context.Context, args []string, env func(string) (string, bool), stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("opledger db-users", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: opledger db-users [flags]\n\nFor each service whose password is set in %s<SERVICE> (e.g. %sPLANNER_INGEST),\n"+
			"creates or updates the login user opledger_svc_<service> in exactly the roles its process needs, and with\n"+
			"%sAPI the operators' API's own login, opledger_svc_api (docs/security.md).\n\n",
			dbPasswordEnv, dbPasswordEnv, dbPasswordEnv)
		fs.PrintDefaults()
	}
	url := fs.String("database-url", getenv(env, "DATABASE_URL"), "the migrator's Postgres connection string (default $DATABASE_URL)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *url == "" {
		return errors.New("db-users: set DATABASE_URL or pass -database-url")
	}
	conn, err := pgx.Connect(ctx, *url)
	if err != nil {
		return fmt.Errorf("db-users: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	done := 0
	for _, svc := range app.DBLogins {
		pw := getenv(env, dbPasswordEnv+strings.ToUpper(strings.ReplaceAll(svc, "-", "_")))
		if pw == "" {
			continue
		}
		user := app.DBUserName(svc)
		if err := app.EnsureDBUser(ctx, conn, user, svc, pw); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s: login user %s in %s\n", svc, user, strings.Join(app.LoginDBRoles(svc), ", "))
		done++
	}
	if done == 0 {
		return fmt.Errorf("db-users: no %s<SERVICE> variable is set; nothing to do", dbPasswordEnv)
	}
	return nil
}

// dbPasswordEnv prefixes the variables holding the services' Postgres passwords.
const dbPasswordEnv = "OPLEDGER_DB_PASSWORD_"

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
