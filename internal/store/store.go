// Package store is opledger's ledger in Postgres: operations, their append-only
// event history, attempts, the inbox and the transactional outbox, and what
// keeps them (entity leases and versions, approvals, votes and the audit
// trail of the human loop, the maintenance leader's lock and its passes).
//
// It is the only package that imports the sqlc-generated code in db/dbsqlc;
// its API speaks the domain types of package op, so neither driver nor
// generated types leak out. Every multi-step write runs in one transaction
// (Store.InTx); methods on *Tx compose inside it.
package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opledger/opledger/db/dbsqlc"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/schema"
)

// Store is the ledger. It is safe for concurrent use.
type Store struct {
	reads
	pool *pgxpool.Pool
	// onOutbox is called after a write that queued messages due at once
	// commits, with those messages (Options.OnOutbox).
	onOutbox func(due []Message)
	// timeout bounds statements without a deadline (Options.StatementTimeout).
	timeout time.Duration
	// submits, claims and outcomes write concurrent new intents, leased
	// claims and outcomes together (Options.GroupCommit); nil: one by one.
	submits  *group[*newSubmission]
	claims   *group[*claim]
	outcomes *group[*outcome]
	// repeatLookups counts the repeats OperationSubmitNew did not read for
	// (OperationRepeatLookup ran); tests assert on it.
	repeatLookups atomic.Int64
}

// reads holds what works the same on the pool and in a transaction.
type reads struct {
	q *dbsqlc.Queries
	// clock, when set, replaces the database's now() everywhere (tests).
	clock func() time.Time
	// handoff is Options.HandoffGrace when messages are handed off.
	handoff time.Duration
}

// now returns the injected time, or nil to let the database use now().
func (r reads) now() *time.Time {
	if r.clock == nil {
		return nil
	}
	n := r.clock().UTC()
	return &n
}

// Options configure Open.
type Options struct {
	// MaxConns caps the pool; 0 keeps pgxpool's default (4 per CPU, at least 4).
	MaxConns int32
	// Clock replaces the database's now() in writes; nil uses the database clock.
	Clock func() time.Time
	// OnOutbox, when set, is called after every commit of a write that
	// queued messages due at once, with those messages, so that a relay of
	// this process publishes them from memory instead of claiming them back
	// from the table (see internal/outbox.Waker). It must not block, and it
	// must not keep or change the slice's messages beyond publishing them.
	OnOutbox func(due []Message)
	// GroupCommit is the most new intents (Submit), leased claims
	// (BeginLeasedAttempt) or outcomes (Transition with Finish) written by
	// one statement when they come concurrently
	// (default DefaultGroupCommit; 1 writes each on its own): see group.
	GroupCommit int
	// GroupStatements is how many group statements of one kind (new
	// intents, leased claims, outcomes) this store runs at once (default
	// DefaultGroupStatements): while they run, the writes that come queue
	// for the next.
	GroupStatements int
	// OnGroupFallback, when set, is called when a group statement failed and
	// its writes went one by one: kind is "submit", "claim" or "outcome",
	// writes how many it carried, err why (a known event id or key is the
	// expected reason for submits; anything else is worth a look). It must
	// not block.
	OnGroupFallback func(kind string, writes int, err error)
	// HandoffGrace is how long the rows of messages handed to OnOutbox are
	// left to the relay they were handed to before any relay may claim them
	// (default DefaultHandoffGrace; ignored without OnOutbox): they are
	// written due that long after the commit. A relay that takes longer, or
	// a process that dies first, only costs a re-publish (same Nats-Msg-Id)
	// or that much delay.
	HandoffGrace time.Duration
	// StatementTimeout bounds each statement whose context has no deadline
	// (default DefaultStatementTimeout; negative: no bound), so that a
	// process cut off from Postgres fails fast instead of waiting for TCP.
	StatementTimeout time.Duration
	// Role, when set, is the Postgres role (schema.Roles) every connection
	// takes with SET ROLE right after connecting, so that this store may do
	// only what the role may (schema/grants.sql). The login user must be a
	// member of it. "" keeps the login user's own privileges: a service
	// whose DATABASE_URL already names a login user in the right roles.
	// SET ROLE guards against mistakes, not a hostile process, which may
	// RESET ROLE: separate login users per process are the boundary.
	Role string
}

// Open connects to Postgres at connString. It does not apply migrations.
func Open(ctx context.Context, connString string, opts Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("store: parse connection string: %w", op.ErrInvalid)
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	// JIT compilation off, unless the connection string asks for it: the
	// ledger's statements each read a handful of rows, and JIT only pays for
	// itself on long scans. The maintenance scans of unsettled operations
	// (operations_unsettled_idx) are estimated far above their cost, since
	// the planner cannot know how few rows the index's predicate keeps, and
	// JIT compiled each for 200-240 ms to read no row on a ledger of ten
	// million operations.
	if _, set := cfg.ConnConfig.RuntimeParams["jit"]; !set {
		cfg.ConnConfig.RuntimeParams["jit"] = "off"
	}
	// A random page costs about what a sequential one does, unless the
	// connection string says otherwise: the ledger's hot rows are in memory
	// or on SSD. With Postgres's default (4, a spinning disk), the group
	// statements' cached plans hashed a sequential scan of attempts (and of
	// operations) against a batch of a few dozen ids for as long as the
	// table had a few thousand rows, each outcome statement reading the
	// whole table (docs/architecture.md, "Where the time goes").
	if _, set := cfg.ConnConfig.RuntimeParams["random_page_cost"]; !set {
		cfg.ConnConfig.RuntimeParams["random_page_cost"] = "1.1"
	}
	// Sequential scans only where no index serves, unless the connection
	// string says otherwise. A connection keeps the generic plan it makes
	// at a statement's sixth execution until autovacuum next analyzes a
	// table it reads, and on a young ledger that plan is made while the
	// tables hold a few hundred rows, where scanning all of attempts and
	// hashing it against a batch is cheapest. The ledger then grows by
	// thousands of rows a second and every outcome statement scans all of
	// it: in the first minute of a steady run at 2,359 ops/s they took
	// 20-91 ms each (309 logged with that plan), the pipeline fell behind
	// and took minutes to catch up (docs/architecture.md, "Where the time
	// goes"). Every statement of the services finds its rows by key or
	// through an index made for it.
	if _, set := cfg.ConnConfig.RuntimeParams["enable_seqscan"]; !set {
		cfg.ConnConfig.RuntimeParams["enable_seqscan"] = "off"
	}
	if opts.Role != "" {
		setRole := "SET ROLE " + pgx.Identifier{opts.Role}.Sanitize()
		cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
			if _, err := c.Exec(ctx, setRole); err != nil {
				return fmt.Errorf("store: set role %s (the login user must be a member of it): %w", opts.Role, err)
			}
			return nil
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("store: connect: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("store: ping: %w", err)
	}
	var handoff time.Duration
	if opts.OnOutbox != nil {
		handoff = cmp.Or(max(opts.HandoffGrace, 0), DefaultHandoffGrace)
	}
	s := &Store{reads: reads{q: dbsqlc.New(wrapDeadline(pool, opts.StatementTimeout)), clock: opts.Clock, handoff: handoff}, pool: pool,
		onOutbox: opts.OnOutbox, timeout: opts.StatementTimeout}
	if n := cmp.Or(opts.GroupCommit, DefaultGroupCommit); n > 1 {
		fb, k := opts.OnGroupFallback, cmp.Or(max(opts.GroupStatements, 0), DefaultGroupStatements)
		s.submits = &group[*newSubmission]{max: n, statements: k, run: s.runSubmits, kind: "submit", onFallback: fb}
		s.claims = &group[*claim]{max: n, statements: k, run: s.runClaims, kind: "claim", onFallback: fb}
		s.outcomes = &group[*outcome]{max: n, statements: k, run: s.runOutcomes, kind: "outcome", onFallback: fb}
	}
	return s, nil
}

// Close releases every connection.
func (s *Store) Close() { s.pool.Close() }

// Ping checks that the database answers. Without a deadline on ctx it waits
// at most the statement timeout.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := deadlined{timeout: s.statementTimeout()}.bound(ctx)
	defer cancel()
	return s.pool.Ping(ctx)
}

// statementTimeout is the bound deadlined applies; a huge one stands for none.
func (s *Store) statementTimeout() time.Duration {
	switch {
	case s.timeout < 0:
		return 100 * 365 * 24 * time.Hour
	case s.timeout == 0:
		return DefaultStatementTimeout
	}
	return s.timeout
}

// CheckSchema returns nil when the database has every migration this binary
// embeds, and an error wrapping schema.ErrNotMigrated naming what is missing
// otherwise.
func (s *Store) CheckSchema(ctx context.Context) error {
	_, err := schema.Pending(ctx, s.pool)
	return err
}

// Tx is one ledger transaction. Its methods compose: everything done through
// one Tx commits or rolls back together.
type Tx struct {
	reads
	tx pgx.Tx
	// due are the messages due at once the transaction queued, handed to
	// OnOutbox after it commits.
	due []Message
}

// maxTxTries bounds retries of a transaction that failed with a deadlock or
// serialization failure; the whole function runs again from the start.
const maxTxTries = 4

// InTx runs fn in a transaction and commits it when fn returns nil. A deadlock
// or serialization failure rolls back and runs fn again (up to 4 times), so fn
// must not have effects outside the transaction. Errors from fn are returned
// as they are; database errors are translated (see translate).
func (s *Store) InTx(ctx context.Context, fn func(*Tx) error) error {
	var err error
	for try := 1; try <= maxTxTries; try++ {
		err = s.inTxOnce(ctx, fn)
		if !errors.Is(err, op.ErrRetryable) || ctx.Err() != nil {
			return err
		}
		time.Sleep(time.Duration(try*try) * 5 * time.Millisecond)
	}
	return err
}

func (s *Store) inTxOnce(ctx context.Context, fn func(*Tx) error) error {
	bctx, cancel := deadlined{timeout: s.statementTimeout()}.bound(ctx)
	ptx, err := s.pool.Begin(bctx)
	cancel()
	if err != nil {
		return translate(fmt.Errorf("begin: %w", err))
	}
	defer ptx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	tx := &Tx{reads: reads{q: dbsqlc.New(wrapDeadline(ptx, s.timeout)), clock: s.clock, handoff: s.handoff}, tx: ptx}
	if err := fn(tx); err != nil {
		return translate(err)
	}
	cctx, cancel := deadlined{timeout: s.statementTimeout()}.bound(ctx)
	defer cancel()
	if err := ptx.Commit(cctx); err != nil {
		return translate(fmt.Errorf("commit: %w", err))
	}
	s.handOff(tx.due)
	return nil
}

// DefaultHandoffGrace is Options.HandoffGrace's default.
const DefaultHandoffGrace = time.Second

// handOff gives committed messages due at once to OnOutbox.
func (s *Store) handOff(due []Message) {
	if len(due) > 0 && s.onOutbox != nil {
		s.onOutbox(due)
	}
}

// SQLSTATE codes translated once, here, by code and never by message text.
const (
	codeUniqueViolation      = "23505"
	codeSerializationFailure = "40001"
	codeDeadlockDetected     = "40P01"
	// classDataException covers values the database refuses (invalid UTF-8,
	// NUL in text, out-of-range numbers): retrying cannot help.
	classDataException = "22"
)

// translate maps driver errors to op's sentinels, keeping the original in the
// chain for logs: no rows → ErrNotFound, unique violation → ErrConflict,
// serialization failure or deadlock → ErrRetryable, data exception → ErrInvalid.
func translate(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %w", op.ErrNotFound, err)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case codeUniqueViolation:
			return fmt.Errorf("%w: %w", op.ErrConflict, err)
		case codeSerializationFailure, codeDeadlockDetected:
			return fmt.Errorf("%w: %w", op.ErrRetryable, err)
		}
		if strings.HasPrefix(pgErr.Code, classDataException) {
			return fmt.Errorf("%w: %w", op.ErrInvalid, err)
		}
	}
	return err
}

func isNotFound(err error) bool { return errors.Is(err, op.ErrNotFound) }

// Submit runs Tx.Submit in its own transaction.
func (s *Store) Submit(ctx context.Context, sub Submission) (*SubmitResult, error) {
	if sub.simple() {
		n, err := s.prepareNew(sub)
		if err != nil {
			return nil, err
		}
		if s.submits != nil {
			err = s.submits.do(ctx, n)
		} else {
			err = s.execNew(ctx, n)
		}
		if !errors.Is(err, op.ErrConflict) {
			if err != nil {
				return nil, err
			}
			return n.res, nil
		}
		// The event id or the key is known: a repeat, most often answered
		// with one more statement (OperationSubmitNew read what it meets)
		// or two; otherwise the transaction decides.
		if res, err := s.submitRepeat(ctx, sub, n.found); res != nil || err != nil {
			return res, err
		}
	}
	var res *SubmitResult
	err := s.InTx(ctx, func(tx *Tx) error {
		var err error
		res, err = tx.Submit(ctx, sub)
		return err
	})
	return res, err
}
