package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opledger/opledger/db/dbsqlc"
)

// LeaderLockKey is the advisory lock the maintenance leader holds.
const LeaderLockKey = 0x6f706c6d61696e74 // "oplmaint"

// Leadership is a held maintenance lock: a session-level advisory lock on
// one connection of the pool, held until Release or until that connection
// ends (a crashed leader's lock dies with its session, so another instance
// takes over at its next try).
type Leadership struct {
	conn   *pgxpool.Conn
	holder string
}

// TryLead takes the maintenance lock for holder if no one holds it. It
// returns nil, nil when another session holds it.
func (s *Store) TryLead(ctx context.Context, holder string) (*Leadership, error) {
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
	if err := l.Heartbeat(ctx); err != nil {
		l.Release()
		return nil, err
	}
	return l, nil
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

// Release gives the lock up. If the connection is broken the lock is gone
// with its session already; the connection is then destroyed, not reused.
func (l *Leadership) Release() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := dbsqlc.New(l.conn).LeaderUnlock(ctx, LeaderLockKey); err != nil {
		_ = l.conn.Conn().Close(ctx) // the pool drops a closed connection
	}
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

// DeleteSentOutbox deletes up to limit outbox rows published more than
// olderThan ago. It returns how many it deleted.
func (s *Store) DeleteSentOutbox(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	n, err := s.q.OutboxDeleteSent(ctx, dbsqlc.OutboxDeleteSentParams{OlderThanSeconds: olderThan.Seconds(), MaxRows: int32(limit), Now: s.now()})
	if err != nil {
		return 0, fmt.Errorf("retention: outbox: %w", translate(err))
	}
	return n, nil
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
