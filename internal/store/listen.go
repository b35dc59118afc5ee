package store

import (
	"context"
	"fmt"
	"time"
)

// OutboxChannel is the NOTIFY channel that tells relays new outbox rows committed.
const OutboxChannel = "opledger_outbox"

// NotifyOutbox sends a notification on OutboxChannel in its own tiny
// transaction. Writers call it after their commits (debounced, see
// internal/outbox.Waker) rather than inside them: a NOTIFY inside a transaction
// holds PostgreSQL's notification queue lock through that transaction's commit
// and serialises every writer.
func (s *Store) NotifyOutbox(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, "SELECT pg_notify($1, '')", OutboxChannel); err != nil {
		return fmt.Errorf("notify outbox: %w", translate(err))
	}
	return nil
}

// ListenOutbox holds one connection LISTENing on OutboxChannel and sends a
// non-blocking signal on wake for every notification, until ctx ends. It
// reconnects after errors. Notifications are hints only: a relay must still
// poll, because a notification can be lost while reconnecting.
func (s *Store) ListenOutbox(ctx context.Context, wake chan<- struct{}) error {
	for ctx.Err() == nil {
		err := s.listenOnce(ctx, wake)
		if ctx.Err() != nil {
			break
		}
		_ = err // the relay's polling covers the gap; try again shortly
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	return ctx.Err()
}

func (s *Store) listenOnce(ctx context.Context, wake chan<- struct{}) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("listen: acquire: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN "+OutboxChannel); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), "UNLISTEN "+OutboxChannel) //nolint:errcheck // released connection is reset anyway
	for {
		if _, err := conn.Conn().WaitForNotification(ctx); err != nil {
			return fmt.Errorf("listen: wait: %w", err)
		}
		select {
		case wake <- struct{}{}:
		default:
		}
	}
}
