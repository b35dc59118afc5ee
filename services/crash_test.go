package services_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/failpoint"
	"github.com/opledger/opledger/internal/proctest"
	"github.com/opledger/opledger/internal/vendors"
)

// settleTimeout bounds how long a crash test waits for the promise to hold
// after the crash. The slowest recovery path is a command pulled by a
// process that died: JetStream redelivers it after the consumer's AckWait
// (30 s for intents and failed commands, 10 s for dispatch and reconcile
// commands), and an operation its dispatcher held waits in dispatched for
// the sweeper (its attempt's deadline plus 5 s of grace).
const settleTimeout = 3 * time.Minute

// crashCase arms one failpoint in one instance.
type crashCase struct {
	instance string
	at       int             // the hit that kills
	faults   []vendors.Fault // vendor faults that make the failpoint reachable
}

// crashCases has an entry for every failpoint compiled into the services
// (failpoint.Names): a failpoint added without one fails the test.
var crashCases = map[string]crashCase{
	// The intent's transaction dies uncommitted: nothing happened; JetStream
	// redelivers it to the restarted process.
	failpoint.IngestMidTx: {instance: proctest.Ingest1, at: 5},
	// Committed but never acked: the redelivery finds the event in the inbox.
	failpoint.IngestBeforeAck: {instance: proctest.Ingest1, at: 5},
	// Claimed, never called: the sweeper fences the attempt off, the
	// reconciler finds nothing at the vendor and the retry sends it once.
	failpoint.DispatchAfterClaim: {instance: proctest.DispatcherN(1), at: 3},
	// Called, outcome lost: the vendor did it; the reconciler must find it
	// and never send it again.
	failpoint.DispatchAfterCall: {instance: proctest.DispatcherN(1), at: 3},
	// Outcome committed, command never acked: the redelivery is suppressed.
	failpoint.DispatchBeforeAck: {instance: proctest.DispatcherN(1), at: 3},
	// Published, not marked sent: the rows are published again after the
	// relay's lease, under the same Nats-Msg-Id.
	failpoint.RelayBeforeMark: {instance: proctest.Ingest1, at: 2},
	// Looked up, verdict lost: the reconcile command is redelivered and the
	// lookup done again. Vendor 500s after committing make the reconciler work.
	failpoint.ReconcileBeforeCommit: {instance: proctest.ReconcilerN(1), at: 2, faults: []vendors.Fault{
		{Route: vendors.RouteCapture, Kind: vendors.FaultError500AfterCommit, Times: 3},
		{Route: vendors.RouteEmail, Kind: vendors.FaultError500AfterCommit, Times: 2},
	}},
}

// TestCrashAtFailpoint starts the system with one failpoint armed in one
// service, publishes captures and emails (some resent by event id, some
// retried by business key), lets the process SIGKILL itself at the
// failpoint, restarts it without the failpoint, and checks the promise and
// the vendor's counts.
func TestCrashAtFailpoint(t *testing.T) {
	t.Parallel()
	for _, name := range failpoint.Names {
		c, ok := crashCases[name]
		if !ok {
			t.Errorf("failpoint %s has no crash test: add it to crashCases", name)
			continue
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sys := proctest.Start(t, proctest.Options{Env: map[string][]string{
				c.instance: {fmt.Sprintf("%s=%s@%d", failpoint.EnvVar, name, c.at)},
			}})
			for _, f := range c.faults {
				require.NoError(t, sys.Vendors.InjectFault(f))
			}
			prefix := strings.NewReplacer(".", "", "_", "").Replace(name)
			sys.PublishBatch(proctest.Batch{Prefix: prefix, Captures: proctest.Scaled(12), Emails: proctest.Scaled(8)})

			p := sys.Proc(c.instance)
			p.WaitExit(time.Minute)
			require.True(t, p.KilledBySIGKILL(), "%s should have died at %s: %s", c.instance, name, p.State())
			crashed := time.Now()
			p.Start()
			p.WaitReady(time.Minute)

			ops, took := sys.WaitSettled(settleTimeout)
			t.Logf("%s: settled %s after the crash (%s after the restart)", name, time.Since(crashed).Round(time.Millisecond), took.Round(time.Millisecond))
			sys.CheckEffects(ops)
			sys.CheckOutbox(3)
		})
	}
}
