package app_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/app"
	"github.com/opledger/opledger/internal/natsembed"
	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/testdb"
)

// The start-up deadline and the retention periods come from the
// environment like every other knob, flags winning; a process given no
// instance name is named after its host and its process id, so that two on
// one host never share one. Breaking it: -connect-timeout without its
// variable, retention the service binaries could not set, or the host name
// alone as the default.
func TestServiceSettleKnobs(t *testing.T) {
	t.Parallel()
	base := map[string]string{"DATABASE_URL": "postgres://x", "NATS_URL": "nats://x",
		"OPLEDGER_CONNECT_TIMEOUT": "7s", "OPLEDGER_REJECTED_RETENTION": "72h"}
	cfg, err := app.ParseServiceFlags(app.Reconciler, []string{"-rejected-retention", "48h"}, env(base), io.Discard)
	require.NoError(t, err)
	require.Equal(t, 7*time.Second, cfg.ConnectTimeout)
	require.Equal(t, 48*time.Hour, cfg.RejectedRetention, "the flag wins")
	require.True(t, strings.HasSuffix(cfg.Instance, fmt.Sprintf("-%d", os.Getpid())), "default instance %q", cfg.Instance)

	bad := map[string]string{"DATABASE_URL": "postgres://x", "NATS_URL": "nats://x", "OPLEDGER_CONNECT_TIMEOUT": "soon"}
	_, err = app.ParseServiceFlags(app.Reconciler, nil, env(bad), io.Discard)
	require.ErrorContains(t, err, "OPLEDGER_CONNECT_TIMEOUT")
}

// A service started before NATS is up waits for it, trying again with
// backoff and logging each try, and starts once it answers, without a
// restart. Breaking it: a service that gave up at the first refused
// connection, or waited without saying so.
func TestServiceWaitsForItsDependencies(t *testing.T) {
	t.Parallel()
	url := testdb.New(t)
	natsPort := freePort(t)
	pr, pw := io.Pipe()
	cfg, err := app.ParseServiceFlags(app.Compensator, []string{"-log", "info", "-log-format", "json", "-connect-timeout", "1m"},
		env(map[string]string{"DATABASE_URL": url, "NATS_URL": fmt.Sprintf("nats://127.0.0.1:%d", natsPort)}), pw)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.RunService(ctx, cfg); pw.Close() }()
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(pr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var ns *natsembed.Server
	t.Cleanup(func() {
		cancel()
		<-done
		if ns != nil {
			ns.Shutdown()
		}
	})
	waits := 0
	for line := range lines {
		switch {
		case strings.Contains(line, "waiting for dependency") && strings.Contains(line, `"dependency":"nats"`):
			if waits++; waits == 2 {
				ns, err = natsembed.Start(natsembed.Options{Port: natsPort}) // NATS comes up after two tries
				require.NoError(t, err)
			}
		case strings.Contains(line, `"message":"started"`):
			go func() {
				for range lines { // keep the service's log flowing until it stops
				}
			}()
			require.GreaterOrEqual(t, waits, 2)
			return
		}
	}
	t.Fatalf("the service stopped before it started: %v", <-done)
}

// Two processes given one instance name still fence their outbox claims
// apart: each relay's id carries a token of its own process, so a relay
// whose lease ran out cannot mark rows another process's relay claimed.
// Breaking it: relay ids made of the instance name alone (as they were).
func TestRelayIDsAreUniquePerProcess(t *testing.T) {
	t.Parallel()
	url := testdb.New(t)
	ns, err := natsembed.Start(natsembed.Options{})
	require.NoError(t, err)
	t.Cleanup(ns.Shutdown)
	reg, err := app.LoadRegistry(app.RegistryConfig{Vendors: map[string]string{}, LookupEnv: env(nil)})
	require.NoError(t, err)
	st, err := store.Open(context.Background(), url, store.Options{MaxConns: 2})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	run := func(batch string) []string {
		t.Helper()
		s, err := app.StartServices(context.Background(), app.ServicesConfig{DatabaseURL: url, NATSURL: ns.URL(), Registry: reg,
			Run: []string{app.Compensator}, Instance: "twin"})
		require.NoError(t, err)
		defer s.Stop()
		require.NoError(t, st.InTx(context.Background(), func(tx *store.Tx) error {
			return tx.Enqueue(context.Background(), store.Message{Subject: "opledger.results.wf_twin", MsgID: "msg_" + batch, Payload: []byte("{}")})
		}))
		require.Eventually(t, func() bool {
			n, err := st.OutboxUnsent(context.Background())
			return err == nil && n == 0
		}, 20*time.Second, 10*time.Millisecond, "the process's relay publishes the row")
		return s.RelayIDs()
	}
	a, b := run("a"), run("b")
	require.Len(t, a, 1)
	require.Len(t, b, 1)
	require.NotEqual(t, a[0], b[0], "two processes, two relay ids")
	for _, id := range append(a, b...) {
		require.True(t, strings.HasPrefix(id, "twin/relay-1-"), id)
	}
}
