package services_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/proctest"
	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/pkg/op"
)

// TestKillDispatcherMidBatch SIGKILLs one of two dispatchers while it has
// vendor calls in flight, at a random point of the batch, and does not
// restart it: the other dispatcher, the sweeper and the reconciler must
// settle everything without a duplicate.
func TestKillDispatcherMidBatch(t *testing.T) {
	t.Parallel()
	rnd := proctest.Rand(t)
	// Every vendor request takes 300 ms, so calls are in flight when the kill lands.
	sys := proctest.Start(t, proctest.Options{Dispatchers: 2, Vendors: vendors.Options{Latency: 300 * time.Millisecond}})
	victim := proctest.DispatcherN(1)
	moment := time.Duration(rnd.IntN(600)) * time.Millisecond
	sys.PublishBatch(proctest.Batch{Prefix: "kd", Captures: proctest.Scaled(16), Emails: proctest.Scaled(10)})
	sys.WaitFor("dispatcher-1's first vendor call", time.Minute, func() bool {
		return sys.Count(`SELECT count(*) FROM attempts WHERE worker = $1`, victim) > 0
	})
	time.Sleep(moment) // the random moment
	sys.Proc(victim).Kill()
	t.Logf("killed %s %s after its first call, with %d attempts started, %d of them unfinished", victim, moment,
		sys.Count(`SELECT count(*) FROM attempts WHERE worker = $1`, victim),
		sys.Count(`SELECT count(*) FROM attempts WHERE worker = $1 AND finished_at IS NULL`, victim))

	ops, took := sys.WaitSettled(settleTimeout)
	t.Logf("settled %s after the kill", took.Round(time.Millisecond))
	sys.CheckEffects(ops)
	sys.CheckOutbox(3)
	require.Positive(t, sys.Count(`SELECT count(*) FROM attempts WHERE worker = $1`, proctest.DispatcherN(2)), "the surviving dispatcher did nothing")
}

// TestKillPlannerIngestMidBatch SIGKILLs planner-ingest while it is
// recording a batch (every Postgres round trip delayed 20 ms to stretch
// the batch out) and restarts it.
func TestKillPlannerIngestMidBatch(t *testing.T) {
	t.Parallel()
	rnd := proctest.Rand(t)
	sys := proctest.Start(t, proctest.Options{Proxies: true})
	sys.AddToxic(proctest.LinkPostgres, proctest.Toxic{Name: "slow", Type: "latency", Attributes: map[string]any{"latency": 20}})
	batch := proctest.Batch{Prefix: "ki", Captures: proctest.Scaled(16), Emails: proctest.Scaled(10)}
	k := 1 + rnd.IntN(len(batch.Intents())/2)
	sys.PublishBatch(batch)
	sys.WaitFor("planner-ingest to be part-way through the batch", time.Minute, func() bool {
		return sys.Count(`SELECT count(*) FROM inbox`) >= k
	})
	done := sys.Count(`SELECT count(*) FROM inbox`)
	sys.Proc(proctest.Ingest1).Kill()
	t.Logf("killed planner-ingest after %d of %d intents recorded", done, len(batch.Intents()))
	sys.RemoveToxic(proctest.LinkPostgres, "slow")
	sys.Proc(proctest.Ingest1).Restart()

	ops, took := sys.WaitSettled(settleTimeout)
	t.Logf("settled %s after the restart", took.Round(time.Millisecond))
	sys.CheckEffects(ops)
	sys.CheckOutbox(3)
}

// TestKillMaintenanceLeader SIGKILLs the reconciler that leads maintenance,
// then a dispatcher with calls in flight, so that operations are stranded
// in dispatched and only a live leader's sweeper can move them: the other
// reconciler must take the leadership over and settle everything, with
// neither killed process restarted.
func TestKillMaintenanceLeader(t *testing.T) {
	t.Parallel()
	rnd := proctest.Rand(t)
	sys := proctest.Start(t, proctest.Options{Dispatchers: 2, Reconcilers: 2, Vendors: vendors.Options{Latency: 300 * time.Millisecond}})
	var leader string
	sys.WaitFor("a maintenance leader", time.Minute, func() bool { leader = sys.Leader(); return leader != "" })
	victim, heir := proctest.ReconcilerN(1), proctest.ReconcilerN(2)
	if leader == heir+"/reconciler" {
		victim, heir = heir, victim
	}
	// Vendor 500s after the effect: the reconcilers have lookups to do.
	require.NoError(t, sys.Vendors.InjectFault(vendors.Fault{Route: vendors.RouteCapture, Kind: vendors.FaultError500AfterCommit, Times: 4}))
	require.NoError(t, sys.Vendors.InjectFault(vendors.Fault{Route: vendors.RouteEmail, Kind: vendors.FaultError500AfterCommit, Times: 2}))
	sys.PublishBatch(proctest.Batch{Prefix: "kl", Captures: proctest.Scaled(16), Emails: proctest.Scaled(10)})

	k := 1 + rnd.IntN(3)
	sys.WaitFor("outcomes to reconcile", time.Minute, func() bool {
		return sys.Count(`SELECT count(*) FROM operation_events WHERE to_state = 'unknown_outcome'`) >= k
	})
	sys.Proc(victim).Kill()
	sys.WaitFor("dispatcher-1 to have calls in flight", time.Minute, func() bool {
		return sys.Count(`SELECT count(*) FROM attempts WHERE worker = $1 AND finished_at IS NULL`, proctest.DispatcherN(1)) > 0 ||
			sys.CountStates(op.StatePendingDispatch, op.StateDispatched) == 0
	})
	stranded := sys.Count(`SELECT count(*) FROM attempts WHERE worker = $1 AND finished_at IS NULL`, proctest.DispatcherN(1))
	sys.Proc(proctest.DispatcherN(1)).Kill()
	t.Logf("killed the leader %s after %d unknown outcomes, then dispatcher-1 with %d calls in flight", victim, k, stranded)

	sys.WaitFor(heir+" to take the leadership over", time.Minute, func() bool { return sys.Leader() == heir+"/reconciler" })
	ops, took := sys.WaitSettled(settleTimeout)
	t.Logf("settled %s after the kills", took.Round(time.Millisecond))
	sys.CheckEffects(ops)
	sys.CheckOutbox(3)
}

// TestPowerCut SIGKILLs every service at once at a random moment of a batch,
// with vendor calls in flight, and stops NATS with them; then NATS comes
// back on its store and every service is started again. Under
// OPLEDGER_SOAK the cut is repeated, once per batch.
func TestPowerCut(t *testing.T) {
	t.Parallel()
	rnd := proctest.Rand(t)
	sys := proctest.Start(t, proctest.Options{Dispatchers: 2, Vendors: vendors.Options{Latency: time.Second}})
	for round := range proctest.Rounds() {
		// Each vendor call takes 1 s; the cut lands up to 1.1 s after the
		// first call of the batch began: calls in flight, outcomes being
		// recorded, retries.
		moment := time.Duration(rnd.IntN(1100)) * time.Millisecond
		before := sys.Count(`SELECT count(*) FROM attempts`)
		sys.PublishBatch(proctest.Batch{Prefix: fmt.Sprintf("pc%d", round), Captures: proctest.Scaled(16), Emails: proctest.Scaled(10)})
		sys.WaitFor("the batch's first vendor call", time.Minute, func() bool { return sys.Count(`SELECT count(*) FROM attempts`) > before })
		time.Sleep(moment) // the random moment
		for _, p := range sys.Procs() {
			p.Kill()
		}
		sys.NATS.Stop()
		t.Logf("round %d: power cut %s after the first call, with %d attempts started, %d of them unfinished", round, moment,
			sys.Count(`SELECT count(*) FROM attempts`)-before, sys.Count(`SELECT count(*) FROM attempts WHERE finished_at IS NULL`))
		sys.NATS.Start(false)
		for _, p := range sys.Procs() {
			p.Start()
		}
		for _, p := range sys.Procs() {
			p.WaitReady(time.Minute)
		}
		ops, took := sys.WaitSettled(settleTimeout)
		t.Logf("round %d: settled %s after the restart", round, took.Round(time.Millisecond))
		sys.CheckEffects(ops)
		sys.CheckOutbox(3)
	}
}
