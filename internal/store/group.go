package store

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"

	"github.com/opledger/opledger/db/dbsqlc"
	"github.com/opledger/opledger/pkg/op"
)

// DefaultGroupCommit is Options.GroupCommit's default: at most this many
// writes of one kind share a statement.
const DefaultGroupCommit = 64

// DefaultGroupStatements is Options.GroupStatements's default: one
// statement of a kind at a time, the next batch filling while it runs.
// Measured on two cores (docs/architecture.md), two at a time gave smaller
// batches that contended with each other: 25% more Postgres CPU per
// operation and a fifth less throughput.
const DefaultGroupStatements = 1

// group is group commit of one kind of write (new intents, leased claims,
// outcomes):
// concurrent callers queue their prepared writes, and whichever finds fewer
// statements of the kind running than it may run starts one, which takes
// everything queued (up to max) into one statement and goes on until the
// queue is empty. Nobody waits for a batch to fill: a write arriving at an
// idle store runs at once, alone, and under load the queue fills while the
// statements before it run, so batches grow with the load. run writes a
// batch and closes each item's done; what it does when the batch statement
// fails is the kind's (Store.runSubmits, runClaims and runOutcomes).
type group[T any] struct {
	max int
	// statements is how many statements of this kind run at once.
	statements int
	run        func(batch []*groupItem[T])
	// kind and onFallback report a batch that fell back (Options.OnGroupFallback).
	kind       string
	onFallback func(kind string, writes int, err error)

	mu      sync.Mutex
	queue   []*groupItem[T]
	running int

	batches, items, fallbacks, largest atomic.Int64
}

type groupItem[T any] struct {
	ctx  context.Context
	v    T
	err  error
	done chan struct{}
}

func (it *groupItem[T]) finish(err error) {
	it.err = err
	close(it.done)
}

// GroupCounts counts what one kind of group commit did since the store
// opened.
type GroupCounts struct {
	// Statements is how many statements the group ran; Writes how many
	// writes they carried; Largest the most in one.
	Statements, Writes, Largest int64
	// Fallbacks counts batches whose statement failed, so that their
	// writes went one by one.
	Fallbacks int64
}

// GroupStats is what group commit did, per kind.
type GroupStats struct {
	Submits, Claims, Outcomes GroupCounts
}

// GroupStats returns the group commit counters.
func (s *Store) GroupStats() GroupStats {
	var st GroupStats
	if s.submits != nil {
		st.Submits = s.submits.counts()
	}
	if s.outcomes != nil {
		st.Outcomes = s.outcomes.counts()
	}
	if s.claims != nil {
		st.Claims = s.claims.counts()
	}
	return st
}

func (g *group[T]) counts() GroupCounts {
	return GroupCounts{Statements: g.batches.Load(), Writes: g.items.Load(), Largest: g.largest.Load(), Fallbacks: g.fallbacks.Load()}
}

// do queues v and waits for its statement. When ctx ends first it returns
// ctx's error; the write may still happen (as after a crash past the
// commit: the caller's retry finds it done).
func (g *group[T]) do(ctx context.Context, v T) error {
	it := &groupItem[T]{ctx: ctx, v: v, done: make(chan struct{})}
	g.mu.Lock()
	g.queue = append(g.queue, it)
	if g.running < g.statements {
		g.running++
		go g.drain()
	}
	g.mu.Unlock()
	select {
	case <-it.done:
		return it.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// drain runs statements until the queue is empty.
func (g *group[T]) drain() {
	for {
		g.mu.Lock()
		k := min(len(g.queue), g.max)
		if k == 0 {
			g.running--
			g.mu.Unlock()
			return
		}
		batch := make([]*groupItem[T], k)
		copy(batch, g.queue)
		// Shift the rest down, and let go of the tail, so that the queue's
		// array does not keep finished writes alive.
		rest := copy(g.queue, g.queue[k:])
		clear(g.queue[rest:])
		g.queue = g.queue[:rest]
		g.mu.Unlock()

		live := batch[:0]
		for _, it := range batch {
			if err := it.ctx.Err(); err != nil {
				// The caller gave up before its statement: nothing is
				// written for it.
				it.finish(err)
				continue
			}
			live = append(live, it)
		}
		if len(live) == 0 {
			continue
		}
		g.batches.Add(1)
		g.items.Add(int64(len(live)))
		for cur := g.largest.Load(); int64(len(live)) > cur && !g.largest.CompareAndSwap(cur, int64(len(live))); cur = g.largest.Load() {
		}
		g.run(live)
	}
}

// fallBack runs one for each item of a batch whose statement failed, each
// on its own and at once, and finishes it with one's error.
func (g *group[T]) fallBack(batch []*groupItem[T], cause error, one func(ctx context.Context, v T) error) {
	g.fallbacks.Add(1)
	if g.onFallback != nil {
		g.onFallback(g.kind, len(batch), cause)
	}
	for _, it := range batch {
		go func() { it.finish(one(it.ctx, it.v)) }()
	}
}

// batchContext is the context of a statement that is everybody's in its
// batch: one caller's cancellation does not cut it short (the statement
// timeout bounds it).
func batchContext[T any](batch []*groupItem[T]) context.Context {
	return context.WithoutCancel(batch[0].ctx)
}

// runSubmits writes a batch of new intents: alone with OperationSubmitNew,
// else all with one OperationSubmitNewBatch. A repeat (a known event id or
// key) is not written and gets op.ErrConflict, and Store.Submit takes the
// path that decides. A batch that fails (a new key under a known event id,
// or any other error) writes nothing; each of its submissions is then
// written on its own.
func (s *Store) runSubmits(batch []*groupItem[*newSubmission]) {
	if len(batch) == 1 {
		batch[0].finish(s.execNew(batch[0].ctx, batch[0].v))
		return
	}
	ns := make([]*newSubmission, len(batch))
	for i, it := range batch {
		ns[i] = it.v
	}
	written, err := s.execNewBatch(batchContext(batch), ns)
	if err != nil {
		s.submits.fallBack(batch, err, s.execNew)
		return
	}
	for i, it := range batch {
		if written[i] {
			it.finish(nil)
		} else {
			it.finish(it.v.repeat())
		}
	}
}

// outcome is a prepared change that finishes an attempt (Change.Finish),
// for OperationTransitionFinishing or, with others,
// OperationTransitionFinishingBatch.
type outcome struct {
	c     Change
	p     dbsqlc.OperationTransitionParams
	rows  outboxRows
	after *op.Operation // the operation after the change, once written
}

// one writes oc alone, as Store.Transition without the group does.
func (s *Store) oneOutcome(ctx context.Context, oc *outcome) error {
	b := newBatch(s.handoff)
	b.add(&oc.rows, 0)
	row, err := s.q.OperationTransitionFinishing(ctx, finishingParams(oc.p, oc.c, b))
	if err != nil {
		return s.unchanged(ctx, oc.c, err)
	}
	oc.after = toOperation(dbsqlc.Operation(row))
	s.handOff(b.due)
	return nil
}

// runOutcomes writes a batch of outcomes: alone with
// OperationTransitionFinishing, else with one
// OperationTransitionFinishingBatch, which writes each exactly as its own
// statement would; an outcome whose operation did not change is explained
// by reading it (stale, or the lease lost), as alone. Two outcomes for one
// operation or one attempt are not put in one statement (an UPDATE … FROM
// would apply only one of them): the later ones go on their own after it.
// A batch whose statement fails writes nothing, and each of its outcomes
// is written on its own.
func (s *Store) runOutcomes(batch []*groupItem[*outcome]) {
	var together, after []*groupItem[*outcome]
	seen := make(map[string]bool, 2*len(batch))
	for _, it := range batch {
		oid, aid := "op:"+it.v.c.OperationID, "attempt:"+it.v.c.Finish.ID
		if seen[oid] || seen[aid] {
			after = append(after, it)
			continue
		}
		seen[oid], seen[aid] = true, true
		together = append(together, it)
	}
	defer func() {
		for _, it := range after {
			it.finish(s.oneOutcome(it.ctx, it.v))
		}
	}()
	if len(together) == 1 {
		together[0].finish(s.oneOutcome(together[0].ctx, together[0].v))
		return
	}
	ctx := batchContext(together)
	b := newBatch(s.handoff)
	for i, it := range together {
		b.add(&it.v.rows, int32(i+1))
	}
	rows, err := s.q.OperationTransitionFinishingBatch(ctx, outcomeBatchParams(together, b))
	if err != nil {
		s.outcomes.fallBack(together, translate(err), s.oneOutcome)
		return
	}
	changed := make(map[string]dbsqlc.Operation, len(rows))
	for _, r := range rows {
		changed[r.ID] = dbsqlc.Operation(r)
	}
	for _, it := range together {
		if row, ok := changed[it.v.c.OperationID]; ok {
			it.v.after = toOperation(row)
		}
	}
	// The batch holds the messages of the changes that were written, as
	// the statement does.
	s.handOff(b.dueOf(func(change int32) bool { return together[change-1].v.after != nil }))
	for _, it := range together {
		if it.v.after != nil {
			it.finish(nil)
			continue
		}
		go func() { it.finish(s.unchanged(it.ctx, it.v.c, pgx.ErrNoRows)) }()
	}
}

// outcomeBatchParams lays a batch out as OperationTransitionFinishingBatch's
// arrays: change i at position i, its events and messages naming i + 1;
// the messages due at once are ob's.
func outcomeBatchParams(batch []*groupItem[*outcome], ob *batch) dbsqlc.OperationTransitionFinishingBatchParams {
	var b dbsqlc.OperationTransitionFinishingBatchParams
	b.Now = batch[0].v.p.Now
	b.BatchID, b.BatchChanges = ob.id, nonNil(ob.changes)
	b.BatchSubjects, b.BatchMsgIds, b.BatchHeaders, b.BatchPayloads, b.BatchOperationIds, b.BatchDelaySeconds = ob.columns()
	for i, it := range batch {
		p, c, a := it.v.p, it.v.c, it.v.c.Finish
		n := int32(i + 1)
		b.Ids = append(b.Ids, p.ID)
		b.FromStates = append(b.FromStates, p.FromState)
		b.LeaseEpochs = append(b.LeaseEpochs, p.LeaseEpoch)
		b.ToStates = append(b.ToStates, p.ToState)
		b.EventCounts = append(b.EventCounts, int32(len(p.Events)))
		b.BumpEpochs = append(b.BumpEpochs, p.BumpEpoch)
		b.Reopens = append(b.Reopens, p.Reopen)
		b.ExternalRequestIds = append(b.ExternalRequestIds, p.ExternalRequestID)
		b.ExternalObjectIds = append(b.ExternalObjectIds, p.ExternalObjectID)
		b.CompensationOperationIds = append(b.CompensationOperationIds, derefOr(p.CompensationOperationID))
		b.SetErrors = append(b.SetErrors, p.SetError)
		b.ErrorCategories = append(b.ErrorCategories, p.ErrorCategory)
		b.Errors = append(b.Errors, p.Error)
		b.ReleaseLeases = append(b.ReleaseLeases, p.ReleaseLease)
		b.RequireLeases = append(b.RequireLeases, c.RequireLease)
		b.AttemptIds = append(b.AttemptIds, p.AttemptID)
		b.Actors = append(b.Actors, p.Actor)
		b.FinishAttemptIds = append(b.FinishAttemptIds, a.ID)
		b.Outcomes = append(b.Outcomes, string(a.Outcome))
		b.AttemptErrorCategories = append(b.AttemptErrorCategories, a.ErrorCategory)
		b.AttemptErrors = append(b.AttemptErrors, a.Error)
		b.HttpStatuses = append(b.HttpStatuses, int32(a.HTTPStatus))
		b.AttemptExternalRequestIds = append(b.AttemptExternalRequestIds, a.ExternalRequestID)
		b.AttemptExternalObjectIds = append(b.AttemptExternalObjectIds, a.ExternalObjectID)
		for j := range p.Events {
			b.EventChanges = append(b.EventChanges, n)
			b.EventOrds = append(b.EventOrds, int32(j+1))
		}
		b.Events = append(b.Events, p.Events...)
		b.EventFromStates = append(b.EventFromStates, p.FromStates...)
		b.EventToStates = append(b.EventToStates, p.ToStates...)
		b.Details = append(b.Details, p.Details...)
		for range p.Subjects {
			b.MessageChanges = append(b.MessageChanges, n)
		}
		b.Subjects = append(b.Subjects, p.Subjects...)
		b.MsgIds = append(b.MsgIds, p.MsgIds...)
		b.Headers = append(b.Headers, p.Headers...)
		b.Payloads = append(b.Payloads, p.Payloads...)
		b.OperationIds = append(b.OperationIds, p.OperationIds...)
		b.Delays = append(b.Delays, p.Delays...)
	}
	return b
}

// runClaims takes a batch of leased claims: alone with
// OperationDispatchLeased, else with one OperationDispatchLeasedBatch for
// the claims that queue for leases with the same tools (the others, and a
// second claim of one operation, go on their own after it). A claim the
// statement did not take is explained by reading its operation, as alone;
// a batch whose statement fails (two claims taking one entity's lease, a
// deadlock) takes nothing, and each of its claims is then taken on its own.
// Each item's error is nil: a claim's outcome, failure included, is in it.
func (s *Store) runClaims(batch []*groupItem[*claim]) {
	var together, after []*groupItem[*claim]
	key := strings.Join(batch[0].v.lease.Tools, "\x00")
	seen := make(map[string]bool, len(batch))
	for _, it := range batch {
		if seen[it.v.id] || strings.Join(it.v.lease.Tools, "\x00") != key {
			after = append(after, it)
			continue
		}
		seen[it.v.id] = true
		together = append(together, it)
	}
	one := func(ctx context.Context, c *claim) error {
		s.oneClaim(ctx, c)
		return nil
	}
	defer func() {
		for _, it := range after {
			it.finish(one(it.ctx, it.v))
		}
	}()
	if len(together) == 1 {
		together[0].finish(one(together[0].ctx, together[0].v))
		return
	}
	p := dbsqlc.OperationDispatchLeasedBatchParams{Tools: nonNil(together[0].v.lease.Tools), Now: s.now()}
	for _, it := range together {
		c := it.v
		p.Ids = append(p.Ids, c.id)
		p.LeaseEpochs = append(p.LeaseEpochs, c.epoch)
		p.AttemptIds = append(p.AttemptIds, c.attemptID)
		p.Workers = append(p.Workers, c.worker)
		p.TimeoutSeconds = append(p.TimeoutSeconds, c.timeout.Seconds())
		p.TtlSeconds = append(p.TtlSeconds, max(c.lease.TTL, c.timeout).Seconds())
	}
	rows, err := s.q.OperationDispatchLeasedBatch(batchContext(together), p)
	if err != nil {
		s.claims.fallBack(together, translate(err), one)
		return
	}
	taken := make(map[string]dbsqlc.Operation, len(rows))
	for _, r := range rows {
		taken[r.ID] = dbsqlc.Operation(r)
	}
	for _, it := range together {
		c := it.v
		if row, ok := taken[c.id]; ok {
			c.o, c.att, c.err = claimedAttempt(row, c.attemptID, c.worker, c.timeout)
			it.finish(nil)
			continue
		}
		go func() {
			s.notClaimed(it.ctx, c)
			it.finish(nil)
		}()
	}
}
