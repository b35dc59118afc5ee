package store

import (
	"context"
	"sync"
	"sync/atomic"
)

// DefaultGroupCommit is Options.GroupCommit's default: at most this many new
// intents share one statement.
const DefaultGroupCommit = 64

// groupStatements is how many group statements run at once per store: one
// waiting on its commit while the next fills.
const groupStatements = 2

// group is group commit of simple new submissions (Submission.simple):
// concurrent Submit calls queue their prepared submissions, and whichever
// finds fewer than groupStatements statements running starts one, which
// takes everything queued (up to max) into one OperationSubmitNewBatch and
// goes on until the queue is empty. Nobody waits for a batch to fill: an
// intent arriving at an idle store is written at once, alone, and under load
// the queue fills while the statements before it run, so batches grow with
// the load. A batch that fails (a known event id or key among them, or any
// other error) writes nothing; each of its submissions is then written on
// its own, and the ones that conflict take the transaction that decides.
type group struct {
	s   *Store
	max int

	mu      sync.Mutex
	queue   []*groupItem
	running int

	// Counters for tests and the bench.
	batches, items, fallbacks, largest atomic.Int64
}

type groupItem struct {
	ctx  context.Context
	n    *newSubmission
	err  error
	done chan struct{}
}

// GroupStats counts what group commit did since the store opened.
type GroupStats struct {
	// Statements is how many OperationSubmitNewBatch or OperationSubmitNew
	// statements the group ran; Submissions how many submissions they
	// carried; Largest the most in one.
	Statements, Submissions, Largest int64
	// Fallbacks counts batches that failed and were written one by one.
	Fallbacks int64
}

// GroupStats returns the group commit counters.
func (s *Store) GroupStats() GroupStats {
	g := s.group
	if g == nil {
		return GroupStats{}
	}
	return GroupStats{Statements: g.batches.Load(), Submissions: g.items.Load(), Largest: g.largest.Load(), Fallbacks: g.fallbacks.Load()}
}

// submit writes a prepared simple submission through the group and waits
// for its statement. When ctx ends first it returns ctx's error; the
// submission may still be written (as after a crash past the commit: a
// redelivery finds its inbox row).
func (g *group) submit(ctx context.Context, n *newSubmission) (*SubmitResult, error) {
	it := &groupItem{ctx: ctx, n: n, done: make(chan struct{})}
	g.mu.Lock()
	g.queue = append(g.queue, it)
	if g.running < groupStatements {
		g.running++
		go g.drain()
	}
	g.mu.Unlock()
	select {
	case <-it.done:
		if it.err != nil {
			return nil, it.err
		}
		return n.res, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// drain runs statements until the queue is empty.
func (g *group) drain() {
	for {
		g.mu.Lock()
		k := min(len(g.queue), g.max)
		if k == 0 {
			g.running--
			g.mu.Unlock()
			return
		}
		batch := make([]*groupItem, k)
		copy(batch, g.queue)
		g.queue = append(g.queue[:0], g.queue[k:]...)
		g.mu.Unlock()
		g.run(batch)
	}
}

// run writes one batch and tells each submitter how it went.
func (g *group) run(batch []*groupItem) {
	live := batch[:0]
	for _, it := range batch {
		if err := it.ctx.Err(); err != nil {
			// The submitter gave up before its statement: nothing is
			// written for it.
			it.err = err
			close(it.done)
			continue
		}
		live = append(live, it)
	}
	if len(live) == 0 {
		return
	}
	g.batches.Add(1)
	g.items.Add(int64(len(live)))
	for {
		cur := g.largest.Load()
		if int64(len(live)) <= cur || g.largest.CompareAndSwap(cur, int64(len(live))) {
			break
		}
	}
	if len(live) == 1 {
		it := live[0]
		it.err = g.s.execNew(it.ctx, it.n)
		close(it.done)
		return
	}
	ns := make([]*newSubmission, len(live))
	for i, it := range live {
		ns[i] = it.n
	}
	// The statement is everybody's: it is not cut short by one
	// submitter's context (the statement timeout bounds it).
	err := g.s.execNewBatch(context.WithoutCancel(live[0].ctx), ns)
	if err == nil {
		for _, it := range live {
			close(it.done)
		}
		return
	}
	// Nothing was written: each goes on its own, at once. One that
	// conflicts gets op.ErrConflict from its own statement, and Submit
	// takes the transaction that decides; any other failure is its own.
	g.fallbacks.Add(1)
	for _, it := range live {
		go func() {
			it.err = g.s.execNew(it.ctx, it.n)
			close(it.done)
		}()
	}
}
