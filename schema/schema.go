// Package schema holds opledger's SQL migrations (which sqlc also reads) and the
// JSON Schemas of the wire messages, embedded so that every binary can apply
// and validate them without files on disk.
package schema

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Wire holds the JSON Schemas of the NATS messages (wire/intent.v1.json,
// wire/command.v1.json, wire/result.v1.json, wire/alert.v1.json).
//
//go:embed wire/*.json
var Wire embed.FS

// migrateLock is the advisory lock key that serialises concurrent migrators
// (several services starting at once against one database).
const migrateLock = 0x6f706c6564676572 // "opledger"

// Migrate applies every embedded migration not yet recorded in
// schema_migrations, each in its own transaction, in file-name order. It is
// safe to run concurrently and repeatedly. It then applies schema/grants.sql
// (ApplyGrants) and fails, wrapping ErrUndecidedGrants, when an object of the
// schema has no decided grants. It returns the names it applied.
func Migrate(ctx context.Context, conn *pgx.Conn) ([]string, error) {
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(migrateLock)); err != nil {
		return nil, fmt.Errorf("migrate: take lock: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, int64(migrateLock)) //nolint:errcheck // released with the session anyway

	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return nil, fmt.Errorf("migrate: create schema_migrations: %w", err)
	}
	names, err := Migrations()
	if err != nil {
		return nil, err
	}
	var applied []string
	for _, name := range names {
		var done bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE name = $1)`, name).Scan(&done); err != nil {
			return applied, fmt.Errorf("migrate: check %s: %w", name, err)
		}
		if done {
			continue
		}
		sql, err := migrations.ReadFile("migrations/" + name)
		if err != nil {
			return applied, fmt.Errorf("migrate: read %s: %w", name, err)
		}
		err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, string(sql)); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO schema_migrations (name) VALUES ($1)`, name)
			return err
		})
		if err != nil {
			return applied, fmt.Errorf("migrate: apply %s: %w", name, err)
		}
		applied = append(applied, name)
	}
	// Every migrate ends with the grant matrix, and refuses to finish while
	// an object of the schema has no decided grants.
	if err := ApplyGrants(ctx, conn); err != nil {
		return applied, fmt.Errorf("migrate: %w", err)
	}
	return applied, nil
}

// Queryer runs a query: a *pgx.Conn, a pgx.Tx or a *pgxpool.Pool.
type Queryer interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// ErrNotMigrated says the database lacks migrations this binary needs.
var ErrNotMigrated = errors.New("the database schema is not up to date: run `opledger migrate` (or start the service with -migrate)")

// Pending returns the embedded migrations the database at q has not applied
// yet, in order. A database without opledger's schema_migrations table has
// all of them pending. It returns an error wrapping ErrNotMigrated when any
// are pending, and also when the database has applied migrations this
// binary does not know (it is older than the schema).
func Pending(ctx context.Context, q Queryer) ([]string, error) {
	names, err := Migrations()
	if err != nil {
		return nil, err
	}
	rows, err := q.Query(ctx, `SELECT name FROM schema_migrations`)
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
			return names, fmt.Errorf("no opledger schema (%d migrations pending): %w", len(names), ErrNotMigrated)
		}
		return nil, fmt.Errorf("schema: read schema_migrations: %w", err)
	}
	applied, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("schema: read schema_migrations: %w", err)
	}
	have := map[string]bool{}
	for _, n := range applied {
		have[n] = true
	}
	var pending []string
	for _, n := range names {
		if !have[n] {
			pending = append(pending, n)
		}
		delete(have, n)
	}
	if len(pending) > 0 {
		return pending, fmt.Errorf("%d migration(s) pending, first %s: %w", len(pending), pending[0], ErrNotMigrated)
	}
	if len(have) > 0 {
		return nil, fmt.Errorf("schema: the database has %d migration(s) this binary does not know; run a newer opledger", len(have))
	}
	return nil, nil
}

// Migrations returns the embedded migration file names in the order they apply.
func Migrations() ([]string, error) {
	entries, err := fs.ReadDir(migrations, "migrations")
	if err != nil {
		return nil, fmt.Errorf("migrate: list: %w", err)
	}
	var names []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".sql") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names, nil
}
