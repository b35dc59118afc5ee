package services_test

import (
	"sync"
	"testing"
	"time"

	"github.com/opledger/opledger/internal/proctest"
)

// TestStopWithDependenciesGone stops every service with SIGTERM after
// Postgres (every link cut: connections closed, new ones refused) and NATS
// (the server stopped) went away. Nothing in flight can be recorded any
// more, so each must exit cleanly (Proc.Stop checks) well within a
// container runtime's 10 s grace, instead of waiting for every statement
// and drain to time out (they took 13-18 s).
func TestStopWithDependenciesGone(t *testing.T) {
	t.Parallel()
	sys := proctest.Start(t, proctest.Options{Proxies: true})
	sys.PublishBatch(proctest.Batch{Prefix: "sd", Captures: 2, Emails: 2})
	sys.WaitSettled(time.Minute)
	sys.CutLink(proctest.LinkPostgres)
	sys.NATS.Stop()
	const grace = 9 * time.Second
	var wg sync.WaitGroup
	for _, p := range sys.Procs() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			began := time.Now()
			p.Stop()
			took := time.Since(began)
			t.Logf("%s exited %s after SIGTERM", p.Instance, took.Round(time.Millisecond))
			if took > grace {
				t.Errorf("%s took %s to exit on SIGTERM with its dependencies gone, over %s", p.Instance, took, grace)
			}
		}()
	}
	wg.Wait()
}
