package mcpserver_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/mcpserver"
	"github.com/opledger/opledger/pkg/adapter/mcpadapter"
)

// TestProxy puts opledger in front of an outside MCP server with a payment
// tool that does not deduplicate: the SDK's client lists its tools through
// the proxy (over HTTP and in memory), and a charge whose answer the
// upstream loses is one charge, found by the registry's verify tool, never
// sent again.
func TestProxy(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	px, err := mcpserver.ConnectProxy(ctx, "payments_mcp", mcpadapter.Upstream{URL: e.up.url})
	require.NoError(t, err)
	t.Cleanup(px.Close)
	cfg := mcpserver.Config{Door: e.door(t, 20*time.Second), Workflow: "wf_proxy", Reader: e.viewer, Name: "opledger-proxy", Log: zerolog.Nop()}
	served := px.Configure(&cfg, e.catalog, zerolog.Nop())
	require.ElementsMatch(t, []string{"charge_card", "list_charges"}, served)
	require.ElementsMatch(t, []string{"delete_everything"}, px.Hidden, "find_charge is the dispatcher's; delete_everything nobody's")
	srv, err := mcpserver.New(cfg)
	require.NoError(t, err)
	progress := newProgressLog()
	cs := connectHTTP(t, serveHTTP(t, srv), nil, &mcp.ClientOptions{ProgressNotificationHandler: progress.handler})

	tools := map[string]*mcp.Tool{}
	for tool, err := range cs.Tools(ctx, nil) {
		require.NoError(t, err)
		tools[tool.Name] = tool
	}
	require.ElementsMatch(t, []string{"charge_card", "list_charges", mcpserver.ToolGetOperation, mcpserver.ToolListOperations}, keys(tools))
	charge := tools["charge_card"]
	require.True(t, *charge.Annotations.DestructiveHint, "the registry's class, not the upstream's say")
	require.NotContains(t, charge.InputSchema.(map[string]any)["properties"], "idempotency_key", "the agent never mints a key")
	require.Equal(t, "Charge a card for an order.", charge.Description[:len("Charge a card for an order.")])

	t.Run("the answer is lost upstream: one charge, reconciled by the verify tool", func(t *testing.T) {
		e.up.dropNext.Store(1)
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		args := map[string]any{"order_id": "ord_px_1", "amount_cents": 2500}
		r, err := call(cctx, cs, "charge_card", args, "conv_px", "call_1", "px-1")
		require.NoError(t, err)
		res := structured[mcpserver.Result](t, r)
		require.Equal(t, "completed_success", res.Status, res.Reason)
		require.False(t, r.IsError)
		charges := e.up.of("ord_px_1")
		require.Len(t, charges, 1, "one charge at the upstream")
		require.Equal(t, charges[0].ID, res.ExternalObjectID, "found by find_charge")
		require.Equal(t, res.IdempotencyKey, charges[0].Key, "the key went into the upstream's idempotency_key argument")
		require.Equal(t, res.IdempotencyKey, charges[0].MetaKey, "and into _meta")
		require.Equal(t, "mcpcharge:ord_px_1:2500:v1", res.IdempotencyKey)
		var unknown bool
		for _, m := range progress.all() {
			unknown = unknown || strings.Contains(m, "unknown_outcome")
		}
		require.True(t, unknown, "a progress notification reported the unknown outcome: %v", progress.all())

		// The agent retries with a new request id, then re-plans with a new
		// tool-call id: the same operation, no new charge.
		again, err := call(cctx, cs, "charge_card", args, "conv_px", "call_1", nil)
		require.NoError(t, err)
		require.Equal(t, res.OperationID, structured[mcpserver.Result](t, again).OperationID)
		replan, err := call(cctx, cs, "charge_card", args, "conv_px", "call_2", nil)
		require.NoError(t, err)
		rp := structured[mcpserver.Result](t, replan)
		require.Equal(t, res.OperationID, rp.OperationID)
		require.Equal(t, "duplicate_operation", rp.Decision)
		require.Len(t, e.up.of("ord_px_1"), 1)
		require.EqualValues(t, 1, e.up.calls.Load(), "create_charge was called once in all")
	})

	t.Run("reads pass straight through; nothing is recorded", func(t *testing.T) {
		mem := connect(t, srv, nil)
		r, err := mem.CallTool(ctx, &mcp.CallToolParams{Name: "list_charges", Arguments: map[string]any{}})
		require.NoError(t, err)
		require.False(t, r.IsError)
		require.EqualValues(t, len(e.up.charges), r.StructuredContent.(map[string]any)["count"])
		r, err = mem.CallTool(ctx, &mcp.CallToolParams{Name: "list_charges", Arguments: map[string]any{"all": true}})
		require.NoError(t, err)
		require.True(t, r.IsError, "the registry's schema still decides what a read may carry")
		_, err = mem.CallTool(ctx, &mcp.CallToolParams{Name: "delete_everything", Arguments: map[string]any{}})
		require.Error(t, err, "an upstream tool the registry does not name cannot be called")
	})
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
