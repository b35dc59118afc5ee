package outbox

import (
	"sync"
	"sync/atomic"

	"github.com/opledger/opledger/internal/store"
)

// Handoff carries the messages that commit in this process to its relays,
// which publish them from memory: the writer does not wait for a relay to
// claim its rows back from the table, and the rows are never claimed or
// marked, only deleted once JetStream has them.
//
// Give it to every store of the process as store.Options.OnOutbox, and one
// Take channel to each relay (Config.Handoff). A hand-off is a hint: the
// rows are in the outbox whatever happens to it, and any relay claims them
// once their hand-off grace has passed (store.Options.HandoffGrace), so a
// hand-off that finds every relay busy, or a process that dies holding one,
// costs only that delay.
type Handoff struct {
	mu     sync.Mutex
	queues []chan []store.Message
	next   int
	missed atomic.Int64
}

// handoffQueue is how many committed writes a relay may have waiting.
const handoffQueue = 4096

// NewHandoff returns a hand-off with no relays yet.
func NewHandoff() *Handoff { return &Handoff{} }

// Give hands messages that have committed to one of the relays (round
// robin, skipping full queues). It never blocks; when every queue is full
// the messages are left to the relays' claims.
func (h *Handoff) Give(due []store.Message) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for range h.queues {
		q := h.queues[h.next%len(h.queues)]
		h.next++
		select {
		case q <- due:
			return
		default:
		}
	}
	h.missed.Add(1)
}

// Take returns a new relay's queue.
func (h *Handoff) Take() <-chan []store.Message {
	q := make(chan []store.Message, handoffQueue)
	h.mu.Lock()
	h.queues = append(h.queues, q)
	h.mu.Unlock()
	return q
}

// Missed counts hand-offs that found no relay with room (or no relay).
func (h *Handoff) Missed() int64 { return h.missed.Load() }
