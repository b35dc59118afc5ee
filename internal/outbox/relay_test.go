package outbox_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/bus"
	"github.com/opledger/opledger/internal/outbox"
	"github.com/opledger/opledger/internal/pipetest"
	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// testPrefix is inside the OPS stream; no consumer listens on it. Each row
// goes to a subject of its own (testSubject), as each command names its
// operation: the stream keeps one message per subject.
const testPrefix = wire.OpsSubjectPrefix + "relaytest.noop"

func testSubject(id string) string { return testPrefix + "." + id }

type bundle struct {
	*pipetest.Env
	// published counts, per Nats-Msg-Id, every publish that reached the NATS
	// server, seen by a plain (non-JetStream) subscriber: unlike the stream, it
	// sees re-publishes that JetStream's duplicate window drops.
	published *publishCounter
}

func setup(t *testing.T, opts pipetest.Options) bundle {
	t.Helper()
	e := pipetest.Start(t, opts)
	pc := &publishCounter{n: map[string]int{}}
	sub, err := e.Bus.Conn().Subscribe(testPrefix+".>", func(m *nats.Msg) { pc.add(m.Header.Get(wire.HeaderMsgID)) })
	require.NoError(t, err)
	require.NoError(t, e.Bus.Conn().Flush()) // the subscription is live before anything is published
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return bundle{Env: e, published: pc}
}

type publishCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (p *publishCounter) add(id string) {
	p.mu.Lock()
	p.n[id]++
	p.mu.Unlock()
}

func (p *publishCounter) snapshot() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]int, len(p.n))
	for k, v := range p.n {
		out[k] = v
	}
	return out
}

func (p *publishCounter) total() int {
	n := 0
	for _, v := range p.snapshot() {
		n += v
	}
	return n
}

// enqueue commits n outbox rows in transactions of up to 100 and returns
// their msg ids.
func (b bundle) enqueue(t *testing.T, prefix string, n int) []string {
	t.Helper()
	var ids []string
	for start := 0; start < n; start += 100 {
		require.NoError(t, b.Store.InTx(b.Ctx, func(tx *store.Tx) error {
			var msgs []store.Message
			for i := start; i < min(start+100, n); i++ {
				id := fmt.Sprintf("%s-%04d", prefix, i)
				msgs = append(msgs, store.Message{Subject: testSubject(id), MsgID: id, Payload: []byte(id)})
			}
			return tx.Enqueue(b.Ctx, msgs...)
		}))
	}
	for i := range n {
		ids = append(ids, fmt.Sprintf("%s-%04d", prefix, i))
	}
	return ids
}

// streamMsgIDs reads every message of the OPS stream and returns their
// Nats-Msg-Id headers, in stream order.
func (b bundle) streamMsgIDs(t *testing.T) []string {
	t.Helper()
	s, err := b.JS.Stream(b.Ctx, wire.StreamOps)
	require.NoError(t, err)
	info, err := s.Info(b.Ctx)
	require.NoError(t, err)
	var ids []string
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(b.Ctx, seq)
		require.NoError(t, err)
		ids = append(ids, m.Header.Get(wire.HeaderMsgID))
	}
	return ids
}

// drained reports whether every outbox row is sent. It is an Eventually
// condition, which runs on another goroutine: it must not call require.
func (b bundle) drained() bool {
	unsent, err := b.Store.OutboxUnsent(b.Ctx)
	return err == nil && unsent == 0
}

func runRelay(t *testing.T, b bundle, cfg outbox.Config) *outbox.Relay {
	t.Helper()
	ctx, cancel := context.WithCancel(b.Ctx)
	done := make(chan struct{})
	r := outbox.New(cfg, b.Store, b.Bus, b.Log)
	go func() {
		defer close(done)
		_ = r.Run(ctx) // returns ctx.Err()
	}()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

// Three relays drain one outbox of 500 rows. Each row must be claimed and
// published exactly once and the stream must hold each msg id once.
//
// Breaking it: a claim without SKIP LOCKED or that ignores another relay's
// live lease makes two relays publish the same row (the plain subscriber sees
// a msg id twice, publish_count 2); a claim that skips rows (e.g. polling by
// "id greater than the last seen") leaves rows unsent and the stream short.
//
// The rule is checked in every round. A round proves it was exercised only
// when at least two relays published, which depends on the scheduler: on a
// loaded machine the relay started first has drained all 500 rows before
// the others polled (CI saw it with batches of 20, and a test run saw it 3
// times in 40 under load). So a round in which one relay took everything
// is run again, on a fresh outbox, up to three rounds in all.
func TestRelaysPublishEveryRowOnce(t *testing.T) {
	t.Parallel()
	const rounds = 3
	for round := 1; ; round++ {
		shared := relaysDrainOnce(t)
		if shared >= 2 {
			return
		}
		if round == rounds {
			t.Fatalf("in %d rounds one relay drained the whole outbox before the others claimed a row: the rows were never shared", rounds)
		}
		t.Logf("round %d: one relay drained the whole outbox; running another round", round)
	}
}

// relaysDrainOnce runs three relays over a fresh outbox of 500 rows, checks
// that every row was published exactly once, and returns how many relays
// published.
func relaysDrainOnce(t *testing.T) (shared int) {
	b := setup(t, pipetest.Options{})
	const n = 500
	want := b.enqueue(t, "multi", n)

	var relays []*outbox.Relay
	for i := range 3 {
		// Batches of 5: a hundred claims, so that the relay started first is
		// usually still draining when the others start.
		relays = append(relays, runRelay(t, b, outbox.Config{ID: fmt.Sprintf("relay-%d", i), BatchSize: 5, PollInterval: 50 * time.Millisecond}))
	}
	require.Eventually(t, b.drained, 15*time.Second, 20*time.Millisecond, "the relays did not drain the outbox")

	require.Equal(t, uint64(n), b.StreamMsgs(t, wire.StreamOps))
	require.ElementsMatch(t, want, b.streamMsgIDs(t), "the stream holds each msg id exactly once")

	// Every publish reaches the plain subscriber; wait for the last ones in flight.
	require.Eventually(t, func() bool { return b.published.total() >= n }, 5*time.Second, 10*time.Millisecond)
	got := b.published.snapshot()
	require.Len(t, got, n)
	for id, k := range got {
		require.Equal(t, 1, k, "msg id %s was published %d times", id, k)
	}

	require.Empty(t, b.Outbox(t), "published rows are deleted")
	for _, r := range relays {
		if claimed, _ := r.Published(); claimed > 0 {
			shared++
		}
	}
	return shared
}

// A relay crashes after JetStream acknowledged its batch but before it
// deleted the rows. Simulated here: the test claims a batch under relay
// "crashed", publishes it with bus.PublishBatch, and never marks it. Once the
// lease has passed (the store's injected clock moves 31s on), a live relay
// claims the rows again and re-publishes them with the same msg ids:
// JetStream drops the copies, so the stream still holds each once.
//
// Breaking it: a claim that ignored the lease would re-publish while the
// crashed relay still held the rows (the first RunOnce below would return
// 10); a claim that never reclaimed expired leases would leave the rows unsent
// forever; publishing without Nats-Msg-Id (or with a new id per publish)
// would store 20 messages instead of 10.
func TestRelayRepublishesAfterCrashBetweenPubAckAndMark(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	b := setup(t, pipetest.Options{Clock: clock})
	const n = 10
	want := b.enqueue(t, "crash", n)

	const lease = 30 * time.Second
	claimed, err := b.Store.OutboxClaim(b.Ctx, "crashed", 100, lease)
	require.NoError(t, err)
	require.Len(t, claimed, n)
	msgs := make([]bus.Message, len(claimed))
	for i, c := range claimed {
		msgs[i] = bus.Message{Subject: c.Message.Subject, MsgID: c.Message.MsgID, Header: c.Message.Header, Data: c.Message.Payload}
	}
	for i, err := range b.Bus.PublishBatch(b.Ctx, msgs) {
		require.NoError(t, err, "publish %s", msgs[i].MsgID)
	}
	// The relay dies here: PubAcks received, rows not deleted.
	require.Equal(t, uint64(n), b.StreamMsgs(t, wire.StreamOps))

	r := outbox.New(outbox.Config{ID: "survivor", Lease: lease}, b.Store, b.Bus, b.Log)
	sent, err := r.RunOnce(b.Ctx)
	require.NoError(t, err)
	require.Zero(t, sent, "the crashed relay's lease still holds the rows")

	now.Add(int64(lease + time.Second))
	sent, err = r.RunOnce(b.Ctx)
	require.NoError(t, err)
	require.Equal(t, n, sent, "after the lease the rows are claimed and published again")
	unsent, err := b.Store.OutboxUnsent(b.Ctx)
	require.NoError(t, err)
	require.Zero(t, unsent)

	require.Equal(t, uint64(n), b.StreamMsgs(t, wire.StreamOps), "JetStream dropped the re-published copies")
	require.ElementsMatch(t, want, b.streamMsgIDs(t))
	// The copies really were sent: the plain subscriber saw each msg id twice.
	require.Eventually(t, func() bool { return b.published.total() >= 2*n }, 5*time.Second, 10*time.Millisecond)
	for id, k := range b.published.snapshot() {
		require.Equal(t, 2, k, "msg id %s", id)
	}
	require.Empty(t, b.Outbox(t), "the survivor deleted what it published")
}

// openStore opens a second store on the test's database, as another process
// would, handing what commits to h.
func (b bundle) openStore(t *testing.T, h *outbox.Handoff, clock func() time.Time) *store.Store {
	t.Helper()
	st, err := store.Open(b.Ctx, b.DBURL, store.Options{MaxConns: 4, OnOutbox: h.Give, Clock: clock})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	return st
}

// enqueueVia commits one outbox row through st.
func (b bundle) enqueueVia(t *testing.T, st *store.Store, id string) {
	t.Helper()
	require.NoError(t, st.InTx(b.Ctx, func(tx *store.Tx) error {
		return tx.Enqueue(b.Ctx, store.Message{Subject: testSubject(id), MsgID: id, Payload: []byte(id)})
	}))
}

// startAfterFirstPass commits a row before the relay starts and waits until it is
// sent: the relay's first pass is then over, and it waits on its hand-offs or
// its poll.
func (b bundle) startAfterFirstPass(t *testing.T, cfg outbox.Config) *outbox.Relay {
	t.Helper()
	b.enqueue(t, "before", 1)
	r := runRelay(t, b, cfg)
	require.Eventually(t, b.drained, 5*time.Second, 10*time.Millisecond, "the relay's first pass publishes what is already there")
	return r
}

// A row committed in the relay's process while the relay waits on a
// one-minute poll is published at once, from memory: the store hands the
// committed message to the relay (Handoff), which publishes it and deletes
// its row without ever claiming it.
//
// Breaking it: a store that does not call OnOutbox after commits that
// queued messages, or a relay that ignores Config.Handoff, leaves the row
// for the claims, which may take it only after the hand-off grace and
// then at the next poll, a minute later; a relay that does not delete what
// it published leaves the row in the outbox.
func TestHandedOffMessagesArePublishedAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, pipetest.Options{})
	h := outbox.NewHandoff()
	st := b.openStore(t, h, nil)
	r := b.startAfterFirstPass(t, outbox.Config{ID: "local", PollInterval: time.Minute, Handoff: h.Take()})

	b.enqueueVia(t, st, "after-0000")
	require.Eventually(t, func() bool { return len(b.published.snapshot()) == 2 }, 5*time.Second, 5*time.Millisecond,
		"a row committed in this process is published long before the relay's one-minute poll")
	require.Eventually(t, func() bool { n, _ := b.Store.OutboxUnsent(b.Ctx); return n == 0 }, 5*time.Second, 5*time.Millisecond,
		"its row is deleted")
	claimed, handedOff := r.Published()
	require.Equal(t, int64(1), claimed, "only the row from before the relay started was claimed")
	require.Equal(t, int64(1), handedOff)
	require.Equal(t, uint64(2), b.StreamMsgs(t, wire.StreamOps))
	require.Zero(t, h.Missed())
}

// The rows of handed-off messages are deleted at most once every
// DeleteEvery: at a moderate load each message would otherwise cost a
// statement and a commit of its own. A message acknowledged soon after a
// delete is published at once and its row waits for the next one.
//
// Breaking it: deleting after every acknowledgement deletes the second
// row as soon as it is published.
func TestHandedOffDeletesAreSpaced(t *testing.T) {
	t.Parallel()
	b := setup(t, pipetest.Options{})
	h := outbox.NewHandoff()
	st := b.openStore(t, h, nil)
	const every = time.Second
	b.startAfterFirstPass(t, outbox.Config{ID: "local", PollInterval: time.Minute, Handoff: h.Take(), DeleteEvery: every})
	unsent := func() int64 { n, err := b.Store.OutboxUnsent(b.Ctx); require.NoError(t, err); return n }

	// Past the first pass's delete: the next one may come at once.
	time.Sleep(every)
	b.enqueueVia(t, st, "first-0000")
	require.Eventually(t, func() bool { return unsent() == 0 }, 5*time.Second, time.Millisecond, "the first row is deleted")
	deleted := time.Now()
	b.enqueueVia(t, st, "second-0000")
	require.Eventually(t, func() bool { return len(b.published.snapshot()) == 3 }, 5*time.Second, time.Millisecond,
		"the second message is published at once")
	if time.Since(deleted) < every/2 {
		require.EqualValues(t, 1, unsent(), "its row waits for the next delete")
	} else {
		t.Logf("publishing took %s; the spacing is not observable in this run", time.Since(deleted))
	}
	require.Eventually(t, func() bool { return unsent() == 0 }, 5*time.Second, time.Millisecond, "and is deleted then")
	require.GreaterOrEqual(t, time.Since(deleted), every-100*time.Millisecond, "not before DeleteEvery has passed")
	require.Zero(t, h.Missed())
}

// The default spacing of the deletes leaves the rows of published messages
// long gone before their hand-off grace lets another relay claim them (and
// publish them again).
//
// Breaking it: a DefaultDeleteEvery of a second or more.
func TestDefaultDeleteSpacingIsWellInsideTheGrace(t *testing.T) {
	require.Positive(t, outbox.DefaultDeleteEvery)
	require.LessOrEqual(t, 4*outbox.DefaultDeleteEvery, store.DefaultHandoffGrace)
}

// A message handed to no relay (the process's relays are busy, or it dies
// with the hand-off in memory) is still published, by a claim, but only
// once its hand-off grace has passed on the database's clock: before that
// its row belongs to the relay it was handed to. The clock is injected.
//
// Breaking it: writing handed-off rows due at once lets every polling relay
// of every process claim them while the relay they were handed to
// publishes them too (two publishes of one message at every commit); never
// claiming them loses the message when the process dies.
func TestUnpublishedHandOffIsClaimedAfterItsGrace(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	b := setup(t, pipetest.Options{Clock: clock})
	h := outbox.NewHandoff() // no relay takes from it
	st := b.openStore(t, h, clock)
	b.enqueueVia(t, st, "orphan-0000")
	require.Equal(t, int64(1), h.Missed())

	r := outbox.New(outbox.Config{ID: "poller"}, b.Store, b.Bus, b.Log)
	n, err := r.RunOnce(b.Ctx)
	require.NoError(t, err)
	require.Zero(t, n, "within its grace the row is not claimable")

	now.Add(int64(store.DefaultHandoffGrace + time.Millisecond))
	n, err = r.RunOnce(b.Ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "after its grace any relay claims it")
	require.Empty(t, b.Outbox(t))
}

// A relay whose NATS is unreachable (here: the server is gone) claims
// nothing, so that relays of other processes publish the rows at once
// instead of after its lease.
//
// Breaking it: claiming without first checking NATS leaves the rows claimed
// by this relay (publish_count 1, claimed_by set) for the lease, which is
// how one process cut off from NATS delayed every service's results by 30 s.
func TestRelayThatCannotReachNATSClaimsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, pipetest.Options{})
	b.enqueue(t, "cut", 3)
	b.NATS.Shutdown()
	r := outbox.New(outbox.Config{ID: "cut-off", ProbeTimeout: 200 * time.Millisecond}, b.Store, b.Bus, b.Log)
	n, err := r.RunOnce(b.Ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	for _, row := range b.Outbox(t) {
		require.Zero(t, row.PublishCount, "row %s was claimed", row.MsgID)
		require.Empty(t, row.ClaimedBy, "row %s", row.MsgID)
	}
}

// submitVia commits a new intent through st in one statement
// (OperationSubmitNew), whose messages due at once are one row of
// outbox_batches: one message per id given, on its own test subject.
func (b bundle) submitVia(t *testing.T, st *store.Store, ids ...string) {
	t.Helper()
	o := &op.Operation{ID: op.NewID("op"), WorkflowID: "wf_1", Tool: "capture_payment", ToolVersion: 1,
		Args: []byte(`{}`), ArgsHash: strings.Repeat("0", 64), Class: op.ClassExternalIdempotent, IdempotencyKey: "k:" + ids[0]}
	_, err := st.Submit(b.Ctx, store.Submission{Source: "nats:intents", EventID: "evt:" + ids[0], Payload: []byte(ids[0]),
		WorkflowID: o.WorkflowID, Operation: o, Initial: op.EventEnqueue,
		Outbox: func(*op.Operation) []store.Message {
			var msgs []store.Message
			for _, id := range ids {
				msgs = append(msgs, store.Message{Subject: testSubject(id), MsgID: id, Payload: []byte(id), OperationID: o.ID})
			}
			return msgs
		}})
	require.NoError(t, err)
}

func (b bundle) batches(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, b.DB.QueryRow(b.Ctx, `SELECT count(*) FROM outbox_batches`).Scan(&n))
	return n
}

// The messages a statement of the hot path commits are one row of
// outbox_batches, handed to the writer's relay whole: it publishes each
// and deletes the row once JetStream has all of them, without claiming it.
//
// Breaking it: a store that writes those messages as rows of outbox (three
// index entries, an insert and a delete each), or hands them off without
// their batch's name, leaves the batch for the claims after its grace; a
// relay that deletes the batch when only some of its messages are in
// JetStream loses the others.
func TestHandedOffBatchIsDeletedOnceItsMessagesAreIn(t *testing.T) {
	t.Parallel()
	b := setup(t, pipetest.Options{})
	h := outbox.NewHandoff()
	st := b.openStore(t, h, nil)
	r := b.startAfterFirstPass(t, outbox.Config{ID: "local", PollInterval: time.Minute, Handoff: h.Take()})

	b.submitVia(t, st, "batch-a-0", "batch-a-1")
	require.Eventually(t, func() bool { return b.batches(t) == 0 }, 5*time.Second, 5*time.Millisecond, "its batch is deleted")
	// The plain subscriber sees a message a moment after JetStream acks it.
	require.Eventually(t, func() bool { return b.published.total() >= 2 }, 5*time.Second, 5*time.Millisecond)
	pub := b.published.snapshot()
	require.Equal(t, 1, pub["batch-a-0"])
	require.Equal(t, 1, pub["batch-a-1"])
	claimed, handedOff := r.Published()
	require.Equal(t, int64(1), claimed, "only the row from before the relay started was claimed")
	require.Equal(t, int64(2), handedOff, "both messages of the batch, from memory")
	require.Zero(t, h.Missed())
}

// A batch nobody was handed (its process died, or has no relay) is claimed
// whole by any relay once due, published and deleted.
func TestBatchIsClaimedWhole(t *testing.T) {
	t.Parallel()
	b := setup(t, pipetest.Options{})
	b.submitVia(t, b.Store, "claim-0", "claim-1") // the pipetest store hands nothing off: due at once
	b.submitVia(t, b.Store, "claim-2")
	require.Equal(t, 2, b.batches(t))

	r := outbox.New(outbox.Config{ID: "poller"}, b.Store, b.Bus, b.Log)
	n, err := r.RunOnce(b.Ctx)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.Zero(t, b.batches(t))
	unsent, err := b.Store.OutboxUnsent(b.Ctx)
	require.NoError(t, err)
	require.Zero(t, unsent)
	// The plain subscriber sees a message a moment after JetStream acks it.
	require.Eventually(t, func() bool { return b.published.total() >= 3 }, 5*time.Second, 5*time.Millisecond)
	require.Equal(t, map[string]int{"claim-0": 1, "claim-1": 1, "claim-2": 1}, b.published.snapshot())
}

// A batch one of whose messages NATS refuses (here: larger than the
// server's max_payload) is split: the messages JetStream has are done, the
// refused one becomes a row of outbox with its failure counted, retried and
// parked like any row, and the batch is gone.
//
// Breaking it: releasing the whole batch publishes its good messages again
// at every retry and parks them with the bad one; deleting it loses the
// bad one.
func TestBatchNATSRefusesIsSplit(t *testing.T) {
	t.Parallel()
	b := setup(t, pipetest.Options{})
	big := strings.Repeat("x", int(b.Bus.Conn().MaxPayload())+1)
	o := &op.Operation{ID: op.NewID("op"), WorkflowID: "wf_1", Tool: "capture_payment", ToolVersion: 1,
		Args: []byte(`{}`), ArgsHash: strings.Repeat("0", 64), Class: op.ClassExternalIdempotent, IdempotencyKey: "k:split"}
	_, err := b.Store.Submit(b.Ctx, store.Submission{Source: "nats:intents", EventID: "evt:split", Payload: []byte("x"),
		WorkflowID: o.WorkflowID, Operation: o, Initial: op.EventEnqueue,
		Outbox: func(*op.Operation) []store.Message {
			return []store.Message{
				{Subject: testSubject("split-good"), MsgID: "split-good", Payload: []byte("fine"), OperationID: o.ID},
				{Subject: testSubject("split-huge"), MsgID: "split-huge", Payload: []byte(big), OperationID: o.ID},
			}
		}})
	require.NoError(t, err)

	r := outbox.New(outbox.Config{ID: "poller", RetryDelay: time.Millisecond, MaxFailures: 2}, b.Store, b.Bus, b.Log)
	_, err = r.RunOnce(b.Ctx)
	require.Error(t, err, "a refusal is reported")
	require.Zero(t, b.batches(t), "the batch is split")
	require.Eventually(t, func() bool { return b.published.snapshot()["split-good"] == 1 }, 5*time.Second, 5*time.Millisecond)
	rows := b.Outbox(t)
	require.Len(t, rows, 1)
	require.Equal(t, "split-huge", rows[0].MsgID)
	require.Equal(t, o.ID, rows[0].OperationID)

	time.Sleep(5 * time.Millisecond)
	_, err = r.RunOnce(b.Ctx)
	require.Error(t, err)
	parked, n, err := b.Store.OutboxParked(b.Ctx, 10)
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "its second refusal parks it (MaxFailures 2: the split counted the first)")
	require.Equal(t, "split-huge", parked[0].MsgID)
	require.Equal(t, 1, b.published.snapshot()["split-good"], "the good message is not published again")
}

// A copy handed off ahead of its row's commit (store.Message.Ahead, a
// repeat's answer) is published, and nothing is deleted for it: the row
// written with the decision goes its own way (its hand-off after the
// commit, or a claim), whatever the copy ahead did. Here the row is
// already there, unsent and not handed off, with the copy's msg id.
//
// Breaking it: treating the copy like any handed-off message deletes the
// row by its msg id once JetStream has the copy.
func TestAheadCopiesDeleteNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, pipetest.Options{})
	h := outbox.NewHandoff()
	b.startAfterFirstPass(t, outbox.Config{ID: "local", PollInterval: time.Minute, DeleteEvery: time.Millisecond, Handoff: h.Take()})

	ids := b.enqueue(t, "row", 1)
	h.Give([]store.Message{{Subject: testSubject(ids[0]), MsgID: ids[0], Payload: []byte(ids[0]), Ahead: true}})
	// An ordinary hand-off after it, whose delete runs after the copy's
	// would have: once its row is gone, the relay has done its deletes.
	st := b.openStore(t, h, nil)
	b.enqueueVia(t, st, "after-0000")
	require.Eventually(t, func() bool {
		p := b.published.snapshot()
		return p[ids[0]] == 1 && p["after-0000"] == 1
	}, 5*time.Second, 5*time.Millisecond, "both are published")
	require.Eventually(t, func() bool {
		var n int
		err := b.DB.QueryRow(b.Ctx, `SELECT count(*) FROM outbox WHERE msg_id = 'after-0000'`).Scan(&n)
		return err == nil && n == 0
	}, 5*time.Second, 5*time.Millisecond, "the ordinary hand-off's row is deleted")
	unsent, err := b.Store.OutboxUnsent(b.Ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, unsent, "the row of the copy sent ahead is still there, for its own way")
}
