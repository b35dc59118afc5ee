// Package services_test runs the service binaries as separate processes, the
// way they are deployed: one planner-ingest, three dispatchers, a reconciler
// and a compensator against one Postgres and one NATS.
package services_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/natsembed"
	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/pkg/client"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// build compiles the service binaries into a temporary directory.
func build(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "./planner-ingest", "./dispatcher", "./reconciler", "./compensator")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return dir
}

func TestSeparateProcesses(t *testing.T) {
	t.Parallel()
	bin := build(t)
	dbURL := testdb.New(t)
	ns, err := natsembed.Start(natsembed.Options{})
	require.NoError(t, err)
	t.Cleanup(ns.Shutdown)
	v, err := vendors.Start(vendors.Options{})
	require.NoError(t, err)
	t.Cleanup(v.Close)
	registry, err := filepath.Abs("../examples/registry.yaml")
	require.NoError(t, err)

	env := append(os.Environ(), "DATABASE_URL="+dbURL, "NATS_URL="+ns.URL(), "OPLEDGER_REGISTRY="+registry, "OPLEDGER_LOG=warn")
	for _, name := range []string{"PAYMENTS", "EMAIL", "TICKETS", "CRM", "ACCOUNTS"} {
		env = append(env, "OPLEDGER_VENDOR_"+name+"_URL="+v.URL())
	}
	var procs []*exec.Cmd
	start := func(name, instance string) {
		cmd := exec.Command(filepath.Join(bin, name), "-instance", instance)
		cmd.Env = env
		var logs strings.Builder
		cmd.Stdout, cmd.Stderr = &logs, &logs
		require.NoError(t, cmd.Start(), name)
		procs = append(procs, cmd)
		t.Cleanup(func() {
			if cmd.ProcessState == nil {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}
			if t.Failed() {
				t.Logf("%s output:\n%s", instance, logs.String())
			}
		})
	}
	start("planner-ingest", "ingest-1")
	for i := 1; i <= 3; i++ {
		start("dispatcher", fmt.Sprintf("dispatcher-%d", i))
	}
	start("reconciler", "reconciler-1")
	start("compensator", "compensator-1")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := client.Connect(ns.URL(), "test-agent")
	require.NoError(t, err)
	defer cl.Close()
	// The services create the streams; wait for them before subscribing.
	var results <-chan wire.Result
	require.Eventually(t, func() bool {
		results, err = cl.Results(ctx, "opledger.results.wf_proc")
		return err == nil
	}, 30*time.Second, 100*time.Millisecond, "streams never appeared: %v", err)

	const distinct = 30
	for i := range distinct {
		args := json.RawMessage(fmt.Sprintf(`{"order_id":"order_%d","customer_id":"cust_1","amount_cents":%d,"currency":"USD"}`, i, 100+i))
		for _, eventID := range []string{fmt.Sprintf("conv_p:call_%d", i), fmt.Sprintf("conv_p:retry_%d", i)} {
			err := cl.Publish(ctx, wire.Intent{EventID: eventID, WorkflowID: "wf_proc", Tool: "capture_payment", Args: args}, "")
			require.NoError(t, err)
		}
	}
	done := map[string]bool{}
	for len(done) < distinct {
		select {
		case r := <-results:
			if r.Status == string(op.StateCompletedSuccess) {
				done[r.OperationID] = true
			}
		case <-ctx.Done():
			t.Fatalf("%d of %d operations completed", len(done), distinct)
		}
	}
	require.Equal(t, distinct, v.Stats().Captures)
	for key, n := range v.EffectsByKey(vendors.KindCapture) {
		require.Equal(t, 1, n, key)
	}

	// The dispatchers shared the work through their one durable consumer.
	st, err := store.Open(ctx, dbURL, store.Options{})
	require.NoError(t, err)
	defer st.Close()
	workers := map[string]bool{}
	for id := range done {
		atts, err := st.Attempts(ctx, id)
		require.NoError(t, err)
		for _, a := range atts {
			workers[a.Worker] = true
		}
	}
	require.GreaterOrEqual(t, len(workers), 2, "attempts by %v", workers)

	// SIGTERM: every service stops cleanly.
	for _, p := range procs {
		require.NoError(t, p.Process.Signal(syscall.SIGTERM))
	}
	for _, p := range procs {
		require.NoError(t, p.Wait(), p.Path)
	}
}
