package services_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/proctest"
	"github.com/opledger/opledger/pkg/op"
)

// TestNATSRestart stops the NATS server in the middle of a batch and starts
// it again on its store a second later: every service reconnects and goes
// on by itself.
func TestNATSRestart(t *testing.T) {
	t.Parallel()
	sys := proctest.Start(t, proctest.Options{Dispatchers: 2})
	batch := proctest.Batch{Prefix: "nr", Captures: proctest.Scaled(16), Emails: proctest.Scaled(10)}
	sent := batch.Intents()
	half := len(sent) / 2
	for _, in := range sent[:half] {
		sys.PublishSent(in)
	}
	sys.RestartNATS(false, time.Second)
	for _, in := range sent[half:] {
		sys.PublishSent(in)
	}
	ops, took := sys.WaitSettled(settleTimeout)
	t.Logf("settled %s after the restart", took.Round(time.Millisecond))
	sys.CheckEffects(ops)
	sys.CheckOutbox(10)
	sys.CheckNoRestarts()
}

// TestNATSLostStore has the NATS server lose its store (restarted on an
// empty directory) while operations wait on commands it held: the
// dispatchers are cut off from NATS, a batch is answered and its dispatch
// commands wait in the OPS stream, and the server comes back with no
// streams, consumers or messages. Without restarting any service, the
// services must recreate the streams and their consumers, the maintenance
// leader's re-drive must write every lost command again, and intents sent
// afterwards must go through.
func TestNATSLostStore(t *testing.T) {
	t.Parallel()
	sys := proctest.Start(t, proctest.Options{Dispatchers: 2, Proxies: true})
	sys.PublishBatch(proctest.Batch{Prefix: "la", Captures: 6, Emails: 4})
	sys.WaitSettled(time.Minute)

	sys.CutLink(proctest.LinkNATS(proctest.Dispatcher))
	sys.PublishBatch(proctest.Batch{Prefix: "lb", Captures: 10, Emails: 6})
	sys.WaitFor("batch lb answered, its commands in NATS", time.Minute, func() bool {
		p := sys.Check()
		return len(p.Unanswered) == 0 && p.Unsent == 0 && sys.CountStates(op.StatePendingDispatch) == 15 // one waits for approval
	})

	began := time.Now()
	sys.RestartNATS(true, 0)
	sys.RestoreLink(proctest.LinkNATS(proctest.Dispatcher))
	sys.PublishBatch(proctest.Batch{Prefix: "lc", Captures: 4, Emails: 4})
	ops, _ := sys.WaitSettled(settleTimeout)
	t.Logf("settled %s after NATS lost its store", time.Since(began).Round(time.Millisecond))
	sys.CheckEffects(ops)
	sys.CheckOutbox(10)
	sys.CheckNoRestarts()
	// Batch lb's commands went with the store: the leader wrote each
	// again, once. (Published outbox rows are deleted, so the leader's log
	// says what it re-drove.)
	lb := map[string]bool{}
	for _, o := range ops {
		if strings.HasPrefix(o.OriginEventID, "lb:") && o.State != op.StateAwaitingApproval {
			lb[o.ID] = true
		}
	}
	require.Len(t, lb, 15)
	redriven := map[string]int{}
	for _, p := range sys.Procs() {
		for _, line := range strings.Split(p.Logs(), "\n") {
			var l struct {
				Message     string `json:"message"`
				OperationID string `json:"operation_id"`
			}
			if json.Unmarshal([]byte(line), &l) == nil && l.Message == "command lost after publish; written again" && lb[l.OperationID] {
				redriven[l.OperationID]++
			}
		}
	}
	require.Len(t, redriven, 15, "batch lb's commands were not all re-driven")
	for id, n := range redriven {
		require.Equal(t, 1, n, "operation %s re-driven %d times", id, n)
	}
}
