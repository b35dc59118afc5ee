package maintain_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/dispatch"
	"github.com/opledger/opledger/internal/maintain"
	"github.com/opledger/opledger/internal/outbox"
	"github.com/opledger/opledger/internal/pipetest"
	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// The sweeper catches every operation in dispatched past its attempt's
// deadline, whatever its attempts say: here one whose attempt row says it
// finished while the operation never moved (what a crash between two
// commits used to leave), and one with no attempt at its lease epoch at
// all. Neither is touched while its attempt's deadline (plus grace) has
// not passed on the database's clock; both are fenced off by the next
// sweep pass after it, not minutes later by the re-drive.
//
// Breaking it: a sweeper that looked only at unfinished attempts (as it
// did) leaves both in dispatched; one that ignored the deadline would
// fence the first at once.
func TestSweepCatchesDispatchedWhateverItsAttemptsSay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tool := b.Tool(t, "capture_payment")

	finished := b.SubmitCapture(t, "wf_1", "order_finished")
	claimed, att, err := b.Store.BeginAttempt(b.Ctx, finished.ID, finished.LeaseEpoch, "dispatcher-1", tool.Timeout)
	require.NoError(t, err)
	_, err = b.DB.Exec(b.Ctx, `UPDATE attempts SET finished_at = $2, outcome = 'retryable', error_category = 'rate_limited' WHERE id = $1`,
		att.ID, claimed.UpdatedAt)
	require.NoError(t, err)

	orphan := b.SubmitCapture(t, "wf_1", "order_orphan")
	orphaned, _, err := b.Store.BeginAttempt(b.Ctx, orphan.ID, orphan.LeaseEpoch, "dispatcher-1", tool.Timeout)
	require.NoError(t, err)
	_, err = b.DB.Exec(b.Ctx, `DELETE FROM attempts WHERE operation_id = $1`, orphan.ID)
	require.NoError(t, err)

	moved, err := b.maint.Sweep(b.Ctx)
	require.NoError(t, err)
	require.Zero(t, moved, "inside the attempt's deadline plus grace nothing is swept")

	b.advance(tool.Timeout + grace + time.Second)
	moved, err = b.maint.Sweep(b.Ctx)
	require.NoError(t, err)
	require.Equal(t, 2, moved)
	for _, o := range []*op.Operation{claimed, orphaned} {
		got := b.Operation(t, o.ID)
		require.Equal(t, op.StateUnknownOutcome, got.State)
		require.Equal(t, o.LeaseEpoch+1, got.LeaseEpoch, "fenced off")
		require.Equal(t, got.LeaseEpoch, b.LastCommand(t, o, wire.KindUnknown).Command(t).LeaseEpoch, "and sent to the reconciler")
	}
	require.Zero(t, b.Vendors.Stats().Requests[vendors.RouteCapture])
}

// A reconcile command the reconciler is holding back (a lookup failed; it
// looks again after the tool's interval) is alive, not lost: the re-drive
// leaves it alone however long the operation has been unknown, and writes
// it again only once its next lookup is overdue by the re-drive's delay
// (every reconciler dead, or the message lost with a NATS server's store).
//
// Breaking it: a re-drive that judged by the operation's age alone (as it
// did) writes the command again while it waits, resetting JetStream's
// delivery count and adding outbox rows with every pass.
func TestRedriveLeavesAHeldBackCommandAlone(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tool := b.Tool(t, "capture_payment")
	require.NoError(t, b.Vendors.InjectFault(vendors.Fault{Route: vendors.RouteCapture, Kind: vendors.FaultTimeoutAfterCommit}))
	require.NoError(t, b.Vendors.InjectFault(vendors.Fault{Route: vendors.RouteCaptureLookup, Kind: vendors.FaultError500BeforeCommit, Times: 100}))
	o := b.SubmitCapture(t, "wf_1", "order_held")
	require.NoError(t, b.dispatcher.Handle(b.Ctx, b.LastCommand(t, o, wire.KindDispatch).Delivery(1)))
	o = b.Operation(t, o.ID)
	require.Equal(t, op.StateUnknownOutcome, o.State)

	b.advance(2 * time.Minute) // unknown for a while, inside the tool's reconciliation deadline; the reconciler looks now
	require.Error(t, b.reconciler.Handle(b.Ctx, b.LastCommand(t, o, wire.KindUnknown).Delivery(1)), "the lookup failed: look again")
	b.Published(t, o.ID) // the relay published everything

	b.advance(time.Minute + tool.Reconcile.Interval/2)
	n, err := b.maint.Redrive(b.Ctx, time.Minute)
	require.NoError(t, err)
	require.Zero(t, n, "its next lookup is due in %s: the command is waiting, not lost", tool.Reconcile.Interval/2)
	require.Len(t, b.Commands(t, o, wire.KindUnknown), 1)

	b.advance(tool.Reconcile.Interval)
	n, err = b.maint.Redrive(b.Ctx, time.Minute)
	require.NoError(t, err)
	require.Equal(t, 1, n, "overdue by the re-drive's delay: lost")
	require.Len(t, b.Commands(t, o, wire.KindUnknown), 2)
}

// A leader elected after the NATS server lost its store still sees that
// the OPS stream was created again, because the creation time a leader saw
// is kept in the ledger, and re-drives every waiting operation at once
// rather than after RedriveAfter.
//
// Breaking it: keeping the creation time in the leader's memory only (as
// it was) makes the new leader's first look a first look: nothing
// compared, nothing re-driven for minutes.
func TestNewLeaderSeesTheOpsStreamRecreated(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var mu sync.Mutex
	created := time.Date(2026, 1, 2, 3, 4, 5, 6789, time.UTC)
	watch := func(context.Context) (time.Time, error) {
		mu.Lock()
		defer mu.Unlock()
		return created, nil
	}
	lead := func(name string) {
		t.Helper()
		passes := make(chan string, 16)
		m := maintain.New(maintain.Config{Name: name, ElectInterval: 50 * time.Millisecond, RedriveAfter: time.Hour},
			b.Store, b.Registry, watch, nil, b.Log)
		m.Passes = passes
		stop, err := m.Start(b.Ctx)
		require.NoError(t, err)
		defer stop()
		for p := range passes {
			if p == "redrive" {
				return
			}
		}
	}
	lead("maintainer-a") // sees the stream as it is

	o := b.SubmitCapture(t, "wf_1", "order_waiting")
	b.Published(t, o.ID) // published, then lost with the store
	b.advance(time.Second)
	mu.Lock()
	created = created.Add(time.Minute) // the NATS server came back empty and the streams were created again
	mu.Unlock()

	lead("maintainer-b") // another process, elected afterwards
	require.Len(t, b.Commands(t, o, wire.KindDispatch), 2, "re-driven at once by a leader that never saw the old stream")
}

// Three re-drive passes (three leaders, one after another, each writing
// every waiting command again) while no dispatcher runs leave one live
// command per operation in the OPS stream, not four; once a dispatcher
// runs, each operation is sent to the vendor once.
//
// Breaking it: an OPS stream keeping more than one message per subject, or
// commands whose subject did not name their operation, would hold four
// commands each, and a dispatcher that trusted them would call the vendor
// more than once.
func TestThreeRedrivesLeaveOneCommand(t *testing.T) {
	t.Parallel()
	e := pipetest.Start(t, pipetest.Options{})
	ctx, cancel := context.WithCancel(e.Ctx)
	defer cancel()
	relay := outbox.New(outbox.Config{ID: "relay-1"}, e.Store, e.Bus, e.Log)
	relayDone := make(chan struct{})
	go func() { defer close(relayDone); _ = relay.Run(ctx) }()
	defer func() { cancel(); <-relayDone }()
	published := func() {
		t.Helper()
		require.Eventually(t, func() bool {
			n, err := e.Store.OutboxUnsent(e.Ctx)
			return err == nil && n == 0
		}, 10*time.Second, 10*time.Millisecond, "the relay publishes the outbox")
	}

	// Published rows are deleted: a plain subscriber counts each
	// operation's dispatch commands as they are published.
	var mu sync.Mutex
	commands := map[string]int{}
	sub, err := e.Bus.Conn().Subscribe(wire.OpsSubjectPrefix+wire.KindDispatch+".>", func(m *nats.Msg) {
		mu.Lock()
		commands[m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]]++
		mu.Unlock()
	})
	require.NoError(t, err)
	require.NoError(t, e.Bus.Conn().Flush())
	defer sub.Unsubscribe() //nolint:errcheck

	const ops = 5
	var all []*op.Operation
	for i := range ops {
		all = append(all, e.SubmitCapture(t, "wf_1", fmt.Sprintf("order_redrive_%d", i)))
	}
	published()
	require.Equal(t, uint64(ops), e.StreamMsgs(t, wire.StreamOps))
	for i := range 3 {
		m := maintain.New(maintain.Config{Name: fmt.Sprintf("maintainer-%d", i+1)}, e.Store, e.Registry, nil, nil, e.Log)
		n, err := m.Redrive(e.Ctx, 0)
		require.NoError(t, err)
		require.Equal(t, ops, n, "pass %d writes every waiting command again", i+1)
		published()
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, o := range all {
			if commands[o.ID] != 4 {
				return false
			}
		}
		return true
	}, 5*time.Second, 10*time.Millisecond, "each operation's command published four times")
	require.Equal(t, uint64(ops), e.StreamMsgs(t, wire.StreamOps), "one live command per operation")

	d := dispatch.New(dispatch.Config{Name: "dispatcher-1"}, e.Store, e.Bus, e.Registry, e.Adapters, nil, e.Log)
	stop, err := d.Start(ctx)
	require.NoError(t, err)
	defer stop()
	require.Eventually(t, func() bool {
		for _, o := range all {
			if got, err := e.Store.Operation(e.Ctx, o.ID); err != nil || got.State != op.StateCompletedSuccess {
				return false
			}
		}
		return true
	}, 20*time.Second, 20*time.Millisecond)
	st := e.Vendors.Stats()
	require.Equal(t, ops, st.Captures)
	require.Equal(t, ops, st.Requests[vendors.RouteCapture], "each operation sent once")
}

// The ledger's size stays flat under a steady load of garbage: each round
// 60 different unreadable messages of 1 MB arrive (each answered once:
// one inbox row keeping a 1 KiB prefix and its hash, one result), the relay
// publishes the answers, and once the retention periods have passed on the
// database's clock retention deletes them all. With the space of deleted
// rows reused (VACUUM, as autovacuum does), the tables do not grow from
// round to round.
//
// Breaking it: keeping the raw bytes grows the inbox by 60 MB a round;
// a retention that missed rejected rows or sent results grows it by a
// round's rows each time.
func TestLedgerStaysFlatUnderGarbage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	mt := maintain.New(maintain.Config{Name: "maintainer-flat", RejectedRetention: time.Minute},
		b.Store, b.Registry, nil, nil, b.Log)
	ing := b.Ingester()
	garbage := make([]byte, 1_000_000)
	size := func() (inbox, outbox int64) {
		t.Helper()
		_, err := b.DB.Exec(b.Ctx, `VACUUM inbox, outbox`)
		require.NoError(t, err)
		require.NoError(t, b.DB.QueryRow(b.Ctx, `SELECT pg_total_relation_size('inbox'), pg_total_relation_size('outbox')`).Scan(&inbox, &outbox))
		return inbox, outbox
	}
	var first [2]int64
	for round := range 4 {
		for i := range 60 {
			copy(garbage, fmt.Sprintf("round %03d message %03d", round, i))
			_, err := ing.Ingest(b.Ctx, "opledger.intents.wf_garbage", nil, garbage)
			require.NoError(t, err)
		}
		var rows, stored int64
		require.NoError(t, b.DB.QueryRow(b.Ctx, `SELECT count(*), coalesce(sum(octet_length(payload)), 0) FROM inbox`).Scan(&rows, &stored))
		require.Equal(t, int64(60), rows)
		require.LessOrEqual(t, stored, int64(60*1024), "a bounded prefix of each, not the megabyte")
		b.mu.Lock()
		now := *b.now
		b.mu.Unlock()
		_ = now
		_, err := b.DB.Exec(b.Ctx, `DELETE FROM outbox; DELETE FROM outbox_batches`) // the relay published the answers, and deleted their rows
		require.NoError(t, err)

		b.advance(2 * time.Minute)
		deleted, err := mt.Retain(b.Ctx)
		require.NoError(t, err)
		require.Equal(t, 60, deleted, "round %d: every rejected row", round)
		in, out := size()
		if round == 0 {
			first = [2]int64{in, out}
			continue
		}
		require.LessOrEqual(t, in, first[0]+16<<10, "round %d: the inbox does not grow", round)
		require.LessOrEqual(t, out, first[1]+16<<10, "round %d: the outbox does not grow", round)
	}
}
