package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/examples"
	"github.com/opledger/opledger/internal/agentcall"
	"github.com/opledger/opledger/internal/api"
	"github.com/opledger/opledger/internal/apiclient"
	"github.com/opledger/opledger/internal/app"
	"github.com/opledger/opledger/internal/mcpserver"
	"github.com/opledger/opledger/internal/ops"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/pkg/client"
	"github.com/opledger/opledger/pkg/registry"
	"github.com/opledger/opledger/pkg/wire"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// TestLostResponseOneCharge runs the example's agent loop against opledger's
// MCP server on a whole stack: the first capture runs, its response is
// lost, the model re-plans with a new tool-call id, and the vendor sees one
// charge.
func TestLostResponseOneCharge(t *testing.T) {
	t.Parallel()
	tok, entry, err := api.GenerateToken("viewer", ops.RoleViewer)
	require.NoError(t, err)
	tokens, err := api.NewTokens([]api.TokenEntry{entry})
	require.NoError(t, err)
	ctx := context.Background()
	d, err := app.StartStack(ctx, app.StackConfig{Infra: app.InfraConfig{DatabaseURL: testdb.New(t), MemoryStreams: true},
		HTTPAddr: "127.0.0.1:0", APITokens: tokens})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	require.NoError(t, d.Vendors.InjectFault(vendors.Fault{Route: vendors.RouteCapture, Kind: vendors.FaultLatency, Delay: time.Second}))

	cl, err := client.Connect(d.Infra.NATSURL, "example")
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	reg, err := registry.LoadSources([]registry.Source{{Name: "examples/registry.yaml", Data: examples.Registry}}, registry.Options{Catalog: true})
	require.NoError(t, err)
	door, err := agentcall.New(agentcall.Config{Client: cl, Registry: reg, Actor: wire.Actor{Type: "agent", ID: "example"}})
	require.NoError(t, err)
	viewer, err := apiclient.New(d.HTTP.URL(), tok, nil)
	require.NoError(t, err)
	srv, err := mcpserver.New(mcpserver.Config{Door: door, Workflow: "wf_agent", Reader: viewer, Log: zerolog.Nop()})
	require.NoError(t, err)
	ct, st := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ss.Close() })

	var out strings.Builder
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	require.NoError(t, Run(rctx, ct, Script{Order: "order_lost_1", Conversation: "conv_example", LoseFirst: true}, &out), out.String())
	t.Log("\n" + out.String())
	require.Contains(t, out.String(), "the response was lost")
	require.Contains(t, out.String(), "decision duplicate_operation")
	require.Contains(t, out.String(), "2 operation(s) of workflow wf_agent", "the capture and the email: the re-plan made no third")
	require.Equal(t, 1, d.Vendors.EffectsByKey(vendors.KindCapture)["payment:order_lost_1:capture:4900:USD:v1"], "one charge")
	require.Equal(t, 1, d.Vendors.Stats().Emails)
}
