package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/app"
	"github.com/opledger/opledger/internal/maintain"
	"github.com/opledger/opledger/internal/reconcile"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/vendors"
)

func TestMain(m *testing.M) {
	if os.Getenv(asMainEnv) == "1" {
		// Re-executed by a test as the opledger command itself (mcp_test.go).
		os.Exit(run(os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr))
	}
	testdb.Main(m)
}

// TestDemo runs the 2:13 a.m. incident as `opledger demo` does: it fails
// unless the vendors saw exactly one charge and one email.
func TestDemo(t *testing.T) {
	t.Parallel()
	d, err := app.StartStack(context.Background(), app.StackConfig{
		Infra: app.InfraConfig{DatabaseURL: testdb.New(t), MemoryStreams: true},
		Services: app.ServicesConfig{Dispatchers: 3, Relays: 2,
			Reconcile: reconcile.Config{SettleDelay: 500 * time.Millisecond},
			Maintain:  maintain.Config{SweepInterval: 200 * time.Millisecond, ElectInterval: 100 * time.Millisecond}},
	})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	var out strings.Builder
	require.NoError(t, Demo(context.Background(), d, &out), out.String())
	require.Contains(t, out.String(), "One charge, one email.")
	redelivery := out.String()[strings.Index(out.String(), "redelivers the first tool call"):]
	require.Regexp(t, `← conv_42:call_1 +capture_payment +status=\S+ +decision=duplicate_event`, redelivery,
		"the redelivered call is the same message: answered duplicate_event, not conflict")
	require.NotContains(t, out.String(), "decision=conflict")
	require.Equal(t, 1, d.Vendors.Stats().Captures)
	require.Equal(t, 1, d.Vendors.Stats().Requests[vendors.RouteCapture], "the retry never reached the vendor")
}

// -h prints the usage and exits 0, for the command and every subcommand; an
// unknown flag exits 2.
func TestHelpExitsZero(t *testing.T) {
	t.Parallel()
	env := func(string) (string, bool) { return "", false }
	for _, args := range [][]string{{"-h"}, {"dev", "-h"}, {"demo", "-h"}, {"bench", "-h"}, {"migrate", "-h"}, {"vendors", "-h"}, {"mcp", "-h"}, {"mcp", "serve", "-h"}, {"mcp", "proxy", "-h"}} {
		var out, errOut strings.Builder
		require.Equal(t, 0, run(args, env, &out, &errOut), "%v: %s", args, errOut.String())
		require.Contains(t, strings.ToLower(out.String()+errOut.String()), "usage", "%v", args)
	}
	var out, errOut strings.Builder
	require.Equal(t, 2, run([]string{"dev", "-no-such-flag"}, env, &out, &errOut))
	require.Equal(t, 2, run([]string{"nope"}, env, &out, &errOut))
}
