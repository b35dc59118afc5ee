package services_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/proctest"
	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/pkg/op"
)

// The network fault tests put a Toxiproxy on every link between the
// services and Postgres, NATS and the vendors, and break the links while a
// batch is in flight. No service is restarted: each must recover by itself.

// TestNetworkPostgresLatencyAndTimeouts slows every Postgres round trip,
// then, mid-batch, stalls every Postgres connection for three seconds and
// has them closed after 1.5 s.
func TestNetworkPostgresLatencyAndTimeouts(t *testing.T) {
	t.Parallel()
	sys := proctest.Start(t, proctest.Options{Dispatchers: 2, Proxies: true})
	sys.AddToxic(proctest.LinkPostgres, proctest.Toxic{Name: "slow", Type: "latency", Attributes: map[string]any{"latency": 20, "jitter": 10}})
	sys.PublishBatch(proctest.Batch{Prefix: "pt", Captures: proctest.Scaled(12), Emails: proctest.Scaled(8)})
	sys.WaitFor("the batch to be part-way through", time.Minute, func() bool { return sys.Count(`SELECT count(*) FROM attempts`) >= 3 })
	sys.AddToxic(proctest.LinkPostgres, proctest.Toxic{Name: "stall", Type: "timeout", Stream: "upstream", Attributes: map[string]any{"timeout": 1500}})
	time.Sleep(3 * time.Second) // the fault's duration is what is being tested
	sys.RemoveToxic(proctest.LinkPostgres, "stall")
	ops, took := sys.WaitSettled(settleTimeout)
	t.Logf("settled %s after the stall", took.Round(time.Millisecond))
	sys.CheckEffects(ops)
	sys.CheckOutbox(5)
	sys.CheckNoRestarts()
}

// TestNetworkPostgresOutage takes Postgres away for 10 s in the middle of a
// batch: every connection is closed and new ones are refused.
func TestNetworkPostgresOutage(t *testing.T) {
	t.Parallel()
	sys := proctest.Start(t, proctest.Options{Dispatchers: 2, Proxies: true})
	sys.AddToxic(proctest.LinkVendor, proctest.Toxic{Name: "slow", Type: "latency", Attributes: map[string]any{"latency": 200}})
	sys.PublishBatch(proctest.Batch{Prefix: "po", Captures: proctest.Scaled(12), Emails: proctest.Scaled(8)})
	sys.WaitFor("vendor calls in flight", time.Minute, func() bool {
		return sys.Count(`SELECT count(*) FROM attempts WHERE finished_at IS NULL`) > 0
	})
	sys.CutLink(proctest.LinkPostgres)
	time.Sleep(10 * time.Second) // the outage's duration is what is being tested
	sys.RestoreLink(proctest.LinkPostgres)
	ops, took := sys.WaitSettled(settleTimeout)
	t.Logf("settled %s after Postgres came back", took.Round(time.Millisecond))
	sys.CheckEffects(ops)
	sys.CheckOutbox(5)
	sys.CheckNoRestarts()
}

// TestNetworkVendorFaults slows the vendor link, then resets its
// connections after the vendor answered (the effect happened, the answer is
// lost) until two outcomes are unknown, and then has every vendor connection
// stall until the tool's timeout, each for a few seconds of a batch. (The
// reset takes every connection: a toxic acts per connection, and the
// dispatchers keep theirs alive, so a share of them could be none.)
func TestNetworkVendorFaults(t *testing.T) {
	t.Parallel()
	sys := proctest.Start(t, proctest.Options{Dispatchers: 2, Proxies: true})
	sys.AddToxic(proctest.LinkVendor, proctest.Toxic{Name: "slow", Type: "latency", Attributes: map[string]any{"latency": 100, "jitter": 50}})
	sys.AddToxic(proctest.LinkVendor, proctest.Toxic{Name: "reset", Type: "reset_peer", Stream: "downstream", Toxicity: 1, Attributes: map[string]any{"timeout": 0}})
	sent := proctest.Batch{Prefix: "vf", Captures: proctest.Scaled(12), Emails: proctest.Scaled(8)}.Intents()
	for _, in := range sent[:len(sent)/2] {
		sys.PublishSent(in)
	}
	sys.WaitFor("unknown outcomes from reset connections", time.Minute, func() bool {
		return sys.Count(`SELECT count(*) FROM operation_events WHERE to_state = 'unknown_outcome'`) >= 2
	})
	sys.RemoveToxic(proctest.LinkVendor, "reset")
	sys.AddToxic(proctest.LinkVendor, proctest.Toxic{Name: "stall", Type: "timeout", Attributes: map[string]any{"timeout": 0}})
	for _, in := range sent[len(sent)/2:] {
		sys.PublishSent(in)
	}
	time.Sleep(3 * time.Second) // longer than the tools' 2 s timeout: calls time out
	sys.RemoveToxic(proctest.LinkVendor, "stall")
	ops, took := sys.WaitSettled(settleTimeout)
	t.Logf("settled %s after the vendor link healed", took.Round(time.Millisecond))
	sys.CheckEffects(ops)
	sys.CheckOutbox(5)
	sys.CheckNoRestarts()
}

// TestNetworkNATSLatencyResetAndRestart slows every NATS link, resets the
// dispatchers' NATS connections once, and restarts the NATS server on its
// store in the middle of a batch.
func TestNetworkNATSLatencyResetAndRestart(t *testing.T) {
	t.Parallel()
	sys := proctest.Start(t, proctest.Options{Dispatchers: 2, Proxies: true})
	for _, svc := range proctest.Services {
		sys.AddToxic(proctest.LinkNATS(svc), proctest.Toxic{Name: "slow", Type: "latency", Attributes: map[string]any{"latency": 30, "jitter": 10}})
	}
	sent := proctest.Batch{Prefix: "nf", Captures: proctest.Scaled(12), Emails: proctest.Scaled(8)}.Intents()
	third := len(sent) / 3
	for _, in := range sent[:third] {
		sys.PublishSent(in)
	}
	sys.AddToxic(proctest.LinkNATS(proctest.Dispatcher), proctest.Toxic{Name: "reset", Type: "reset_peer", Attributes: map[string]any{"timeout": 500}})
	for _, in := range sent[third : 2*third] {
		sys.PublishSent(in)
	}
	time.Sleep(time.Second) // let the resets land
	sys.RemoveToxic(proctest.LinkNATS(proctest.Dispatcher), "reset")
	sys.RestartNATS(false, 2*time.Second)
	for _, in := range sent[2*third:] {
		sys.PublishSent(in)
	}
	ops, took := sys.WaitSettled(settleTimeout)
	t.Logf("settled %s after the NATS restart", took.Round(time.Millisecond))
	sys.CheckEffects(ops)
	sys.CheckOutbox(10)
	sys.CheckNoRestarts()
}

// TestPartitionedProcessHoldsNoOutbox cuts the dispatchers and the
// compensator off from NATS while their Postgres link stays up: their
// outbox relays still see every row (NOTIFY, polling) but cannot publish
// it. Rows any process writes must not wait for a partitioned relay's
// lease: the answers to a batch must reach the agent about as fast as
// planner-ingest's own relay can publish them. The cut is either a closed
// link (the NATS client knows at once) or a silent one (no data gets
// through, nothing is closed: the client still thinks it is connected).
func TestPartitionedProcessHoldsNoOutbox(t *testing.T) {
	t.Parallel()
	for _, silent := range []bool{false, true} {
		name := map[bool]string{false: "closed", true: "silent"}[silent]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sys := proctest.Start(t, proctest.Options{Dispatchers: 2, Proxies: true})
			cut := []string{proctest.LinkNATS(proctest.Dispatcher), proctest.LinkNATS(proctest.Compensator)}
			for _, link := range cut {
				if silent {
					sys.AddToxic(link, proctest.Toxic{Name: "blackhole", Type: "timeout", Stream: "downstream", Attributes: map[string]any{"timeout": 0}})
				} else {
					sys.CutLink(link)
				}
			}
			sys.PublishBatch(proctest.Batch{Prefix: "pp", Captures: proctest.Scaled(10), Emails: proctest.Scaled(6)})
			began := time.Now()
			for p := sys.Check(); len(p.Unanswered) > 0; p = sys.Check() {
				if time.Since(began) > 10*time.Second {
					t.Fatalf("%d intents unanswered after %s with the dispatchers cut off from NATS: %v\nunsent outbox rows:\n%s",
						len(p.Unanswered), time.Since(began).Round(time.Millisecond), p.Unanswered, sys.OutboxRows("sent_at IS NULL"))
				}
				time.Sleep(100 * time.Millisecond)
			}
			t.Logf("answered in %s", time.Since(began).Round(time.Millisecond))
			for _, link := range cut {
				if silent {
					sys.RemoveToxic(link, "blackhole")
				} else {
					sys.RestoreLink(link)
				}
			}
			ops, took := sys.WaitSettled(settleTimeout)
			t.Logf("settled %s after the partition healed", took.Round(time.Millisecond))
			sys.CheckEffects(ops)
			sys.CheckOutbox(5)
			sys.CheckNoRestarts()
		})
	}
}

// TestNetworkVendorOutage makes the vendors unreachable (connection refused)
// for five seconds of a batch: nothing was sent, so it is retried with
// backoff, or given up as failed_permanent once the retry budget is spent.
func TestNetworkVendorOutage(t *testing.T) {
	t.Parallel()
	sys := proctest.Start(t, proctest.Options{Dispatchers: 2, Proxies: true})
	sys.AddToxic(proctest.LinkVendor, proctest.Toxic{Name: "slow", Type: "latency", Attributes: map[string]any{"latency": 100}})
	sent := proctest.Batch{Prefix: "vo", Captures: proctest.Scaled(12), Emails: proctest.Scaled(8)}.Intents()
	for _, in := range sent[:len(sent)/2] {
		sys.PublishSent(in)
	}
	sys.WaitFor("vendor calls in flight", time.Minute, func() bool {
		return sys.Count(`SELECT count(*) FROM attempts WHERE finished_at IS NULL`) > 0
	})
	sys.CutLink(proctest.LinkVendor)
	for _, in := range sent[len(sent)/2:] {
		sys.PublishSent(in)
	}
	time.Sleep(5 * time.Second) // the outage's duration is what is being tested
	sys.RestoreLink(proctest.LinkVendor)
	ops, took := sys.WaitSettled(settleTimeout)
	t.Logf("settled %s after the vendors came back: %s", took.Round(time.Millisecond), proctest.StateCounts(ops))
	sys.CheckEffects(ops)
	sys.CheckOutbox(5)
	sys.CheckNoRestarts()
}

// TestMaintenanceLeaderPartitionedFromPostgres cuts the reconciler that leads
// maintenance off from Postgres the way a network split or its host losing
// power does: nothing gets through, nothing is closed, and Postgres keeps
// its session. Then a dispatcher dies with calls in flight, stranding
// operations in dispatched that only a live leader's sweeper can move. The
// other reconciler must take the leadership over within a bound, without
// the partition healing (it took the operating system's TCP timeout, two
// hours, before the lock's session got a TTL). The partition then heals
// and everything must settle (the partitioned reconciler gives back the
// reconcile commands it takes; see TestPartitionedFromPostgresHoldsNoCommands).
func TestMaintenanceLeaderPartitionedFromPostgres(t *testing.T) {
	t.Parallel()
	sys := proctest.Start(t, proctest.Options{Dispatchers: 2, Reconcilers: 2, Proxies: true})
	var leader string
	sys.WaitFor("a maintenance leader", time.Minute, func() bool { leader = sys.Leader(); return leader != "" })
	victim, heir := proctest.ReconcilerN(1), proctest.ReconcilerN(2)
	if leader == heir+"/reconciler" {
		victim, heir = heir, victim
	}
	sys.AddToxic(proctest.LinkVendor, proctest.Toxic{Name: "slow", Type: "latency", Attributes: map[string]any{"latency": 300}})
	sys.PublishBatch(proctest.Batch{Prefix: "lp", Captures: proctest.Scaled(12), Emails: proctest.Scaled(8)})
	sys.WaitFor("dispatcher-1 to have calls in flight", time.Minute, func() bool {
		return sys.Count(`SELECT count(*) FROM attempts WHERE worker = $1 AND finished_at IS NULL`, proctest.DispatcherN(1)) > 0
	})
	sys.PartitionPostgres(victim)
	sys.Proc(proctest.DispatcherN(1)).Kill()
	partitioned := time.Now()
	t.Logf("partitioned the leader %s from Postgres and killed dispatcher-1 with %d calls in flight", victim,
		sys.Count(`SELECT count(*) FROM attempts WHERE worker = $1 AND finished_at IS NULL`, proctest.DispatcherN(1)))

	sys.WaitFor(heir+" to take the leadership over", 45*time.Second, func() bool { return sys.Leader() == heir+"/reconciler" })
	t.Logf("%s leads %s after the partition", heir, time.Since(partitioned).Round(time.Millisecond))
	sys.WaitFor("the stranded operations to be swept", time.Minute, func() bool {
		return sys.CountStates(op.StateDispatched) == 0
	})
	sys.HealPostgres(victim)
	ops, took := sys.WaitSettled(settleTimeout)
	t.Logf("settled %s after the partition healed", took.Round(time.Millisecond))
	sys.CheckEffects(ops)
	sys.CheckOutbox(5)
}

// TestPartitionedFromPostgresHoldsNoCommands cuts one of two reconcilers
// (not the maintenance leader) off from Postgres, not from NATS, while
// vendor 500s give the reconcilers lookups to do. The partitioned
// reconciler's statements fail at their deadline (store.StatementTimeout),
// its handlers Nak their commands, and its consumer pauses while the
// ledger does not answer, so everything settles on the healthy reconciler
// within 50 s. It fails when a handler waits on Postgres without a deadline
// (each command it took then waits for AckWait, and may come back to it) or
// when the consumer keeps pulling commands while paused.
func TestPartitionedFromPostgresHoldsNoCommands(t *testing.T) {
	t.Parallel()
	sys := proctest.Start(t, proctest.Options{Reconcilers: 2, Proxies: true})
	var leader string
	sys.WaitFor("a maintenance leader", time.Minute, func() bool { leader = sys.Leader(); return leader != "" })
	victim := proctest.ReconcilerN(2)
	if leader == victim+"/reconciler" {
		victim = proctest.ReconcilerN(1)
	}
	sys.PartitionPostgres(victim)
	require.NoError(t, sys.Vendors.InjectFault(vendors.Fault{Route: vendors.RouteCapture, Kind: vendors.FaultError500AfterCommit, Times: 8}))
	require.NoError(t, sys.Vendors.InjectFault(vendors.Fault{Route: vendors.RouteEmail, Kind: vendors.FaultError500AfterCommit, Times: 6}))
	sys.PublishBatch(proctest.Batch{Prefix: "pr", Captures: proctest.Scaled(8), Emails: proctest.Scaled(6), NoDuplicates: true})
	ops, took := sys.WaitSettled(50 * time.Second)
	t.Logf("settled in %s with %s cut off from Postgres", took.Round(time.Millisecond), victim)
	sys.HealPostgres(victim)
	sys.CheckEffects(ops)
}
