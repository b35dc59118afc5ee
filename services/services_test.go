// Package services_test runs the service binaries as separate processes,
// the way they are deployed, through internal/proctest: crash tests at
// every failpoint, SIGKILLs from outside, NATS losing its store, hostile
// vendors and network faults. Every test asserts the promise: every accepted
// intent answered, every operation settled, and no side effect performed
// twice at the vendor.
package services_test

import (
	"flag"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/proctest"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/pkg/op"
)

// parallel is how many of these tests run at once unless -parallel says
// otherwise. They spend most of their time waiting (for JetStream to
// redeliver what a killed process had pulled, after its AckWait of 30 or
// 60 s, or for a sweep or a re-drive), not computing, so more than the
// default GOMAXPROCS (2 on CI) run at once; and no more than 4, because each
// system holds about 45 connections of the private Postgres's 200.
const parallel = 4

func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set && runtime.GOMAXPROCS(0) < parallel {
		if err := flag.Set("test.parallel", strconv.Itoa(parallel)); err != nil {
			panic(err)
		}
	}
	testdb.Main(m)
}

// TestSeparateProcesses runs one planner-ingest, three dispatchers, a
// reconciler and a compensator against one Postgres and one NATS.
func TestSeparateProcesses(t *testing.T) {
	t.Parallel()
	sys := proctest.Start(t, proctest.Options{Dispatchers: 3})
	sys.PublishBatch(proctest.Batch{Prefix: "p", Captures: 30})
	ops, took := sys.WaitSettled(time.Minute)
	t.Logf("settled in %s", took)
	require.Len(t, ops, 30)
	for _, o := range ops {
		want := op.StateCompletedSuccess
		if strings.Contains(o.IdempotencyKey, ":capture:2000000:") { // above the approval threshold
			want = op.StateAwaitingApproval
		}
		require.Equal(t, want, o.State, o.ID)
	}
	effects := sys.CheckEffects(ops)
	require.Len(t, effects.Captures, 29)

	// The dispatchers shared the work through their one durable consumer.
	workers := sys.Count(`SELECT count(DISTINCT worker) FROM attempts`)
	require.GreaterOrEqual(t, workers, 2, "attempts by %d dispatchers", workers)

	// SIGTERM: every service stops cleanly.
	for _, name := range []string{proctest.Ingest1, proctest.DispatcherN(1), proctest.DispatcherN(2), proctest.DispatcherN(3),
		proctest.ReconcilerN(1), proctest.Compensator1} {
		sys.Proc(name).Stop()
	}
}
