package proctest

import (
	"context"
	"sync"
	"time"

	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// collector reads every result published, as an agent watching all its
// workflows would, and keeps what the assertions need.
type collector struct {
	s *System

	mu      sync.Mutex
	cancel  context.CancelFunc
	seen    map[resultKey]bool
	byEvent map[string][]wire.Result // the answers: results carrying an event id
	byOp    map[string]wire.Result   // the newest result of each operation
	n       int
}

// resultKey identifies a result's content: a result delivered twice (a relay
// re-publishing, a re-read after a NATS restart) is counted once.
type resultKey struct {
	op, event, status string
	decision          op.Decision
	version           int64
	final             bool
}

func newCollector(s *System) *collector {
	c := &collector{s: s, seen: map[resultKey]bool{}, byEvent: map[string][]wire.Result{}, byOp: map[string]wire.Result{}}
	c.subscribe()
	s.t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.cancel != nil {
			c.cancel()
		}
	})
	return c
}

// subscribe reads RESULTS from its start, waiting for the services to have
// created the stream.
func (c *collector) subscribe() {
	t := c.s.t
	t.Helper()
	c.mu.Lock()
	if c.cancel != nil {
		c.cancel()
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	c.mu.Unlock()
	deadline := time.Now().Add(c.s.opts.ReadyTimeout)
	for {
		ch, err := c.s.Client.Results(ctx, wire.ResultSubjectPrefix+">")
		if err == nil {
			go c.read(ctx, ch)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("proctest: read results: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *collector) resubscribe() { c.subscribe() }

func (c *collector) read(ctx context.Context, ch <-chan wire.Result) {
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-ch:
			c.add(r)
		}
	}
}

func (c *collector) add(r wire.Result) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := resultKey{op: r.OperationID, event: r.EventID, status: r.Status, decision: r.DedupeDecision, version: r.Version, final: r.Final}
	if c.seen[k] {
		return
	}
	c.seen[k] = true
	c.n++
	if r.EventID != "" {
		c.byEvent[r.EventID] = append(c.byEvent[r.EventID], r)
	}
	if r.OperationID == "" {
		return
	}
	cur, ok := c.byOp[r.OperationID]
	if !ok || r.Version > cur.Version || (r.Version == cur.Version && r.Final && !cur.Final) {
		c.byOp[r.OperationID] = r
	}
}

// answers returns the results carrying eventID.
func (c *collector) answers(eventID string) []wire.Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]wire.Result(nil), c.byEvent[eventID]...)
}

// latest returns an operation's newest result.
func (c *collector) latest(operationID string) (wire.Result, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.byOp[operationID]
	return r, ok
}

// Answers returns the distinct results carrying eventID: the answer to that
// intent (and, for the intent that created an operation, its later results).
func (s *System) Answers(eventID string) []wire.Result { return s.results.answers(eventID) }

// LatestResult returns the newest result the agent received for an operation.
func (s *System) LatestResult(operationID string) (wire.Result, bool) {
	return s.results.latest(operationID)
}
