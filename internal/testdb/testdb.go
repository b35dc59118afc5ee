// Package testdb gives every test its own migrated PostgreSQL database.
//
// A package with Postgres tests wires it up once:
//
//	func TestMain(m *testing.M) { testdb.Main(m) }
//
// and each test calls New (a connection string) or NewPool. The server is
// $DATABASE_URL when set (its role needs CREATEDB), otherwise a private
// pglocal cluster started for this test binary: unix socket only, never the
// machine's PostgreSQL. The first New builds a template database with every
// migration applied (schema.Migrate); each test's database is a cheap
// CREATE DATABASE … TEMPLATE of it, dropped WITH (FORCE) when the test ends.
//
// User adds a login user in given roles (opledger's group roles, see
// schema.Roles) and returns the connection string logged in as it, so tests
// run services with only their grants; with DATABASE_URL its role then also
// needs CREATEROLE.
//
// When no PostgreSQL is available, New skips the test with the reason and
// the fix, except under CI=true, where it fails: CI must not go green by
// skipping.
package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opledger/opledger/internal/pglocal"
	"github.com/opledger/opledger/schema"
)

const (
	setupTimeout = 2 * time.Minute
	dropTimeout  = 30 * time.Second
	// minServerVersion is the first release with DROP DATABASE … WITH (FORCE).
	minServerVersion = 130000
)

// h is the harness of this test binary. Package-level state is the point of
// a TestMain helper: Main and New share one server and template per binary.
var h harness

type harness struct {
	mainCalled atomic.Bool
	setupOnce  sync.Once
	setupErr   error

	cluster    *pglocal.Cluster // nil when using DATABASE_URL
	admin      *pgxpool.Pool    // on the server's maintenance database
	connString func(dbname string) (string, error)
	prefix     string // testdb_<pid>_<random>: unique per test binary
	template   string
	created    bool // the template database exists (dropped by teardown)
	seq        atomic.Int64
	usersMu    sync.Mutex
	users      []string // login users made by User, dropped by teardown
}

// Main runs the tests of a package whose tests use New or NewPool, then
// drops the template database and stops the private cluster, if any. Call
// it from TestMain; it does not return (os.Exit with m.Run's code).
//
// The server is set up lazily by the first New, so a run that selects no
// Postgres test starts nothing.
func Main(m *testing.M) {
	h.mainCalled.Store(true)
	code := m.Run()
	if err := h.teardown(); err != nil {
		fmt.Fprintf(os.Stderr, "testdb: teardown: %v\n", err)
	}
	os.Exit(code)
}

// New returns the connection string of a fresh database for this test, with
// all migrations applied and isolated from every other test's, dropped (WITH
// (FORCE), so open connections do not block it) in t.Cleanup.
//
// If PostgreSQL is unavailable it calls t.Skip with the reason and the fix,
// or t.Fatal when CI=true.
func New(t testing.TB) string {
	t.Helper()
	if !h.mainCalled.Load() {
		t.Fatal("testdb: the package's TestMain must call testdb.Main(m) before tests use testdb.New")
	}
	h.setupOnce.Do(func() { h.setupErr = h.setup() })
	if h.setupErr != nil {
		unavailable(t, h.setupErr)
	}

	name := fmt.Sprintf("%s_%d", h.prefix, h.seq.Add(1))
	began := time.Now()
	_, err := h.admin.Exec(t.Context(), "CREATE DATABASE "+ident(name)+" TEMPLATE "+ident(h.template))
	if err != nil {
		t.Fatalf("testdb: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), dropTimeout)
		defer cancel()
		if _, err := h.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+ident(name)+" WITH (FORCE)"); err != nil {
			t.Errorf("testdb: drop database %s: %v", name, err)
		}
	})
	cs, err := h.connString(name)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	if testing.Verbose() {
		t.Logf("testdb: database %s created in %s", name, time.Since(began).Round(time.Microsecond))
	}
	return cs
}

// NewPool is New plus a pgxpool.Pool on the database, closed in t.Cleanup
// (before the database is dropped).
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	cs := New(t)
	pool, err := pgxpool.New(t.Context(), cs)
	if err != nil {
		t.Fatalf("testdb: pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// errMigrations marks a setup failure of the project's own making: the
// server was there but the migrations did not apply. That always fails.
var errMigrations = errors.New("the schema migrations do not apply")

// unavailable skips t, or fails it under CI=true. A broken migration is not
// an unavailable server and fails everywhere.
func unavailable(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, errMigrations) {
		t.Fatalf("testdb: %v", err)
	}
	fix := "Fix: install the PostgreSQL server binaries (initdb, postgres; found through PG_BINDIR, pg_config --bindir, PATH " +
		"or /usr/lib/postgresql/*/bin) so a private cluster can start, or set DATABASE_URL to a server whose role may CREATE DATABASE."
	if os.Getenv("DATABASE_URL") != "" {
		fix = "Fix: point DATABASE_URL at a reachable PostgreSQL 13+ server whose role may CREATE DATABASE, " +
			"or unset it to let the tests start a private cluster from the PostgreSQL server binaries."
	}
	msg := fmt.Sprintf("testdb: PostgreSQL is unavailable: %v\n%s", err, fix)
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		t.Fatal(msg + "\nCI=true: failing rather than skipping.")
	}
	t.Skip(msg)
}

func (h *harness) setup() error {
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	began := time.Now()
	h.prefix = fmt.Sprintf("testdb_%d_%s", os.Getpid(), randomHex(4))
	h.template = h.prefix + "_tpl"

	var adminConn, where string
	if dsn := os.Getenv("DATABASE_URL"); dsn != "" {
		cfg, err := pgconn.ParseConfig(dsn)
		if err != nil {
			return fmt.Errorf("DATABASE_URL: %w", err)
		}
		where = fmt.Sprintf("DATABASE_URL %s@%s:%d/%s", cfg.User, cfg.Host, cfg.Port, cfg.Database)
		adminConn = dsn
		h.connString = func(db string) (string, error) { return withDatabase(dsn, db) }
	} else {
		c, err := pglocal.Start(ctx, pglocal.Options{})
		if err != nil {
			return fmt.Errorf("DATABASE_URL is unset and the private cluster did not start: %w", err)
		}
		h.cluster = c
		where = "a private cluster (unix socket only) in " + c.SocketDir()
		adminConn = c.ConnString("postgres")
		h.connString = func(db string) (string, error) { return c.ConnString(db), nil }
	}
	clusterReady := time.Since(began)

	cfg, err := pgxpool.ParseConfig(adminConn)
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	cfg.MaxConns = 8
	if h.admin, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	var (
		version   int
		serverVer string
		role      string
		canCreate bool
	)
	err = h.admin.QueryRow(ctx, `SELECT current_setting('server_version_num')::int, current_setting('server_version'), current_user,
		(SELECT rolcreatedb OR rolsuper FROM pg_roles WHERE rolname = current_user)`).Scan(&version, &serverVer, &role, &canCreate)
	if err != nil {
		return fmt.Errorf("cannot reach PostgreSQL at %s: %w", where, err)
	}
	if version < minServerVersion {
		return fmt.Errorf("PostgreSQL at %s is %s; testdb needs 13 or later (DROP DATABASE … WITH (FORCE))", where, serverVer)
	}
	if !canCreate {
		return fmt.Errorf("role %q at %s may not CREATE DATABASE; use a role with CREATEDB (ALTER ROLE %s CREATEDB) or a superuser", role, where, ident(role))
	}

	if err := h.buildTemplate(ctx, cfg.ConnConfig); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	fmt.Fprintf(os.Stderr, "testdb: using PostgreSQL %s from %s; server ready in %s, template %s migrated in %s\n",
		serverVer, where, clusterReady.Round(time.Millisecond), h.template, (time.Since(began) - clusterReady).Round(time.Millisecond))
	return nil
}

// buildTemplate creates the template database and migrates it. The
// connection is closed before tests clone it: CREATE DATABASE … TEMPLATE
// refuses a source database with sessions.
func (h *harness) buildTemplate(ctx context.Context, admin *pgx.ConnConfig) error {
	if _, err := h.admin.Exec(ctx, "CREATE DATABASE "+ident(h.template)); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42501" { // insufficient_privilege
			return fmt.Errorf("create template database: %w (the role needs CREATEDB)", err)
		}
		return fmt.Errorf("create template database: %w", err)
	}
	h.created = true
	cfg := admin.Copy()
	cfg.Database = h.template
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect to template: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := schema.Migrate(ctx, conn); err != nil {
		return fmt.Errorf("migrate template: %w: %w", errMigrations, err)
	}
	return conn.Close(ctx)
}

func (h *harness) teardown() error {
	var errs []error
	if h.admin != nil {
		ctx, cancel := context.WithTimeout(context.Background(), dropTimeout)
		errs = append(errs, h.dropUsers(ctx))
		cancel()
	}
	if h.created {
		ctx, cancel := context.WithTimeout(context.Background(), dropTimeout)
		if _, err := h.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+ident(h.template)+" WITH (FORCE)"); err != nil {
			errs = append(errs, fmt.Errorf("drop template %s: %w", h.template, err))
		}
		cancel()
	}
	if h.admin != nil {
		h.admin.Close()
	}
	if h.cluster != nil {
		errs = append(errs, h.cluster.Stop())
	}
	return errors.Join(errs...)
}

// withDatabase returns connString (a URL or keyword/value string) pointing
// at dbname instead of its own database.
func withDatabase(connString, dbname string) (string, error) {
	if strings.HasPrefix(connString, "postgres://") || strings.HasPrefix(connString, "postgresql://") {
		u, err := url.Parse(connString)
		if err != nil {
			return "", fmt.Errorf("DATABASE_URL: %w", err)
		}
		u.Path, u.RawPath = "/"+dbname, ""
		if q := u.Query(); q.Has("dbname") {
			q.Del("dbname")
			u.RawQuery = q.Encode()
		}
		return u.String(), nil
	}
	// In keyword/value strings the last occurrence of a keyword wins.
	return connString + " dbname=" + dbname, nil
}

func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}
