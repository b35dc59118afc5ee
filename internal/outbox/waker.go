package outbox

import (
	"context"
	"sync"
	"time"

	"github.com/opledger/opledger/internal/store"
)

// Waker tells relays that outbox rows have committed. Kick it after commits
// (store.Options.OnOutbox): it wakes the relays of this process at once and
// sends one NOTIFY for the relays of other processes, at most once per MinGap.
// Kicks that arrive while a NOTIFY is pending coalesce into it.
type Waker struct {
	st     *store.Store
	minGap time.Duration
	kick   chan struct{}
	mu     sync.Mutex
	subs   []chan struct{}
}

// NewWaker returns a waker that notifies through st. minGap ≤ 0 means 5ms.
func NewWaker(st *store.Store, minGap time.Duration) *Waker {
	if minGap <= 0 {
		minGap = 5 * time.Millisecond
	}
	return &Waker{st: st, minGap: minGap, kick: make(chan struct{}, 1)}
}

// Kick records that rows committed. It never blocks.
func (w *Waker) Kick() {
	w.mu.Lock()
	for _, c := range w.subs {
		select {
		case c <- struct{}{}:
		default:
		}
	}
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Subscribe returns a channel that receives a signal after kicks.
func (w *Waker) Subscribe() <-chan struct{} {
	c := make(chan struct{}, 1)
	w.mu.Lock()
	w.subs = append(w.subs, c)
	w.mu.Unlock()
	return c
}

// Run sends the NOTIFYs until ctx ends. A failed NOTIFY is not retried: the
// other processes' relays poll.
func (w *Waker) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
		}
		_ = w.st.NotifyOutbox(ctx)
		select {
		case <-ctx.Done():
			return
		case <-time.After(w.minGap):
		}
	}
}
