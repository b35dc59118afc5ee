package store

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// blocking is a DBTX that, like Postgres behind a partition, never answers:
// each call waits until its context ends and reports the deadline it had.
type blocking struct{ deadlines chan time.Duration }

func (b blocking) wait(ctx context.Context) error {
	d, ok := ctx.Deadline()
	if !ok {
		b.deadlines <- -1
		return nil // without a deadline it would hang; the test fails on -1
	}
	b.deadlines <- time.Until(d)
	<-ctx.Done()
	return ctx.Err()
}

func (b blocking) Exec(ctx context.Context, _ string, _ ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, b.wait(ctx)
}
func (b blocking) Query(ctx context.Context, _ string, _ ...any) (pgx.Rows, error) {
	return nil, b.wait(ctx)
}
func (b blocking) QueryRow(ctx context.Context, _ string, _ ...any) pgx.Row {
	return errRow{b.wait(ctx)}
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// A statement whose caller set no deadline gets the statement timeout, so
// a partition fails it instead of holding the caller for TCP's hours; a
// caller's own deadline is kept. Breaking it (no wrapper, or one that
// ignores QueryRow) hangs this test or reports no deadline.
func TestStatementsWithoutDeadlineGetOne(t *testing.T) {
	t.Parallel()
	b := blocking{deadlines: make(chan time.Duration, 3)}
	db := wrapDeadline(b, 50*time.Millisecond)
	ctx := context.Background()

	_, err := db.Exec(ctx, "x")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	_, err = db.Query(ctx, "x")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, db.QueryRow(ctx, "x").Scan(), context.DeadlineExceeded)
	for range 3 {
		d := <-b.deadlines
		require.Positive(t, d)
		require.LessOrEqual(t, d, 50*time.Millisecond)
	}

	own, cancel := context.WithTimeout(ctx, 80*time.Millisecond)
	defer cancel()
	_, err = db.Exec(own, "x")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Greater(t, <-b.deadlines, 50*time.Millisecond, "the caller's own deadline is kept")

	_, wrapped := wrapDeadline(b, -1).(deadlined)
	require.False(t, wrapped, "a negative timeout means no bound")
}
