package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opledger/opledger/db/dbsqlc"
)

// LeaderLockKey is the advisory lock the maintenance leader holds.
const LeaderLockKey = 0x6f706c6d61696e74 // "oplmaint"

// Leadership is a held maintenance lock: a session-level advisory lock on
// one connection of the pool, held until Release or until that session
// ends. A crashed leader's lock dies with its session, so another instance
// takes over at its next try. A leader cut off without its connection
// being closed (its host lost power, the network split) is not seen to
// crash: the server ends its session once it has been silent for the
// lock's TTL (see TryLead).
type Leadership struct {
	conn   *pgxpool.Conn
	holder string
}

// codeUndefinedObject is what a server answers for a setting it does not
// know (idle_session_timeout before PostgreSQL 14).
const codeUndefinedObject = "42704"

// TryLead takes the maintenance lock for holder if no one holds it. It
// returns nil, nil when another session holds it.
//
// ttl bounds how long the lock outlives a holder that went silent: the
// lock's session asks the server to end it after ttl without a statement
// (idle_session_timeout, PostgreSQL 14 and later) and to probe a silent
// client over TCP every second after ttl/2, giving up after three
// unanswered probes (TCP keepalives; the operating system's default would
// wait two hours). The holder must heartbeat more often than ttl.
func (s *Store) TryLead(ctx context.Context, holder string, ttl time.Duration) (*Leadership, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("leader: acquire connection: %w", translate(err))
	}
	q := dbsqlc.New(conn)
	locked, err := q.LeaderTryLock(ctx, LeaderLockKey)
	if err != nil || !locked {
		conn.Release()
		if err != nil {
			return nil, fmt.Errorf("leader: try lock: %w", translate(err))
		}
		return nil, nil
	}
	l := &Leadership{conn: conn, holder: holder}
	if err := l.limit(ctx, ttl); err != nil {
		l.Release()
		return nil, err
	}
	if err := l.Heartbeat(ctx); err != nil {
		l.Release()
		return nil, err
	}
	return l, nil
}

// limit sets the lock session's idle timeout and TCP keepalives from ttl.
func (l *Leadership) limit(ctx context.Context, ttl time.Duration) error {
	q := dbsqlc.New(l.conn)
	idle := max(int(ttl/2/time.Second), 1)
	err := q.LeaderKeepalive(ctx, dbsqlc.LeaderKeepaliveParams{IdleSeconds: strconv.Itoa(idle), IntervalSeconds: "1", Count: "3"})
	if err != nil {
		return fmt.Errorf("leader: keepalives: %w", translate(err))
	}
	err = q.LeaderIdleTimeout(ctx, strconv.FormatInt(max(ttl.Milliseconds(), 1), 10))
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == codeUndefinedObject {
		return nil // PostgreSQL 13: the keepalives have to do
	} else if err != nil {
		return fmt.Errorf("leader: idle timeout: %w", translate(err))
	}
	return nil
}

// Heartbeat checks that the lock's connection is alive and records the
// holder for people (maintenance_leader). An error means leadership may be
// lost: stop maintaining and Release.
func (l *Leadership) Heartbeat(ctx context.Context) error {
	if err := dbsqlc.New(l.conn).LeaderRecord(ctx, l.holder); err != nil {
		return fmt.Errorf("leader: heartbeat: %w", translate(err))
	}
	return nil
}

// Release gives the lock up and closes its connection: the session's
// timeouts must not follow the connection back into the pool, and a
// broken connection must not go back at all.
func (l *Leadership) Release() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = dbsqlc.New(l.conn).LeaderUnlock(ctx, LeaderLockKey) // closing the session releases it anyway
	_ = l.conn.Conn().Close(ctx)                            // the pool drops a closed connection
	l.conn.Release()
}

// Leader returns who leads maintenance and when it last showed it was alive,
// on the database's clock; "" when no one ever led.
func (r reads) Leader(ctx context.Context) (holder string, heartbeat time.Time, err error) {
	row, err := r.q.LeaderGet(ctx)
	if err != nil {
		if isNotFound(translate(err)) {
			return "", time.Time{}, nil
		}
		return "", time.Time{}, fmt.Errorf("leader: %w", translate(err))
	}
	return row.Holder, row.HeartbeatAt, nil
}

// DeleteRejectedInbox deletes up to limit rejected inbox rows received more
// than olderThan ago. It returns how many it deleted.
func (s *Store) DeleteRejectedInbox(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	n, err := s.q.InboxDeleteRejected(ctx, dbsqlc.InboxDeleteRejectedParams{OlderThanSeconds: olderThan.Seconds(), MaxRows: int32(limit), Now: s.now()})
	if err != nil {
		return 0, fmt.Errorf("retention: inbox: %w", translate(err))
	}
	return n, nil
}

// OpsStreamCreated returns the OPS stream's creation time as a maintenance
// leader last recorded it (zero: never).
func (s *Store) OpsStreamCreated(ctx context.Context) (time.Time, error) {
	t, err := s.q.LeaderOpsStreamCreated(ctx)
	if err != nil {
		err = translate(err)
		if isNotFound(err) {
			return time.Time{}, nil
		}
		return time.Time{}, fmt.Errorf("leader: OPS stream creation time: %w", err)
	}
	if t == nil {
		return time.Time{}, nil
	}
	return *t, nil
}

// SetOpsStreamCreated records the OPS stream's creation time for the next
// leader to compare with (the leader's row must exist: TryLead writes it).
func (s *Store) SetOpsStreamCreated(ctx context.Context, created time.Time) error {
	c := created.UTC()
	if _, err := s.q.LeaderSetOpsStreamCreated(ctx, &c); err != nil {
		return fmt.Errorf("leader: record OPS stream creation time: %w", translate(err))
	}
	return nil
}
