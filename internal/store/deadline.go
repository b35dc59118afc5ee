package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/opledger/opledger/db/dbsqlc"
)

// DefaultStatementTimeout bounds every statement whose context carries no
// deadline of its own (see Options.StatementTimeout).
const DefaultStatementTimeout = 10 * time.Second

// deadlined gives every statement that would otherwise wait without bound a
// deadline. A process cut off from Postgres (a network partition: nothing
// gets through, nothing is closed) would otherwise wait for the operating
// system's TCP timeout, hours, holding whatever message it was handling.
// With the deadline the statement fails, pgx closes its connection, and
// the caller can give its work back (bus handlers Nak it).
//
// A context that already has a deadline keeps it, however long: the caller
// chose it.
type deadlined struct {
	db      dbsqlc.DBTX
	timeout time.Duration
}

// wrapDeadline returns db with timeout applied, or db itself when timeout
// is negative (no bound).
func wrapDeadline(db dbsqlc.DBTX, timeout time.Duration) dbsqlc.DBTX {
	if timeout < 0 {
		return db
	}
	if timeout == 0 {
		timeout = DefaultStatementTimeout
	}
	return deadlined{db: db, timeout: timeout}
}

func (d deadlined) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d.timeout)
}

func (d deadlined) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	return d.db.Exec(ctx, sql, args...)
}

// Query's deadline covers reading the rows: it is released when they are
// closed.
func (d deadlined) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	ctx, cancel := d.bound(ctx)
	rows, err := d.db.Query(ctx, sql, args...)
	if err != nil {
		cancel()
		return rows, err
	}
	return &deadlinedRows{Rows: rows, cancel: cancel}, nil
}

// QueryRow's deadline covers the Scan.
func (d deadlined) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	ctx, cancel := d.bound(ctx)
	return deadlinedRow{row: d.db.QueryRow(ctx, sql, args...), cancel: cancel}
}

type deadlinedRows struct {
	pgx.Rows
	cancel context.CancelFunc
}

func (r *deadlinedRows) Close() {
	r.Rows.Close()
	r.cancel()
}

// Next closes the rows (and so releases the deadline) after the last row,
// as pgx does: sqlc's generated code always closes them too.
func (r *deadlinedRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.cancel()
	return false
}

type deadlinedRow struct {
	row    pgx.Row
	cancel context.CancelFunc
}

func (r deadlinedRow) Scan(dest ...any) error {
	defer r.cancel()
	return r.row.Scan(dest...)
}
