package mcpserver_test

import (
	"context"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/mcpserver"
)

// For clients that cannot set _meta (-meta-args): the conversation and
// tool-call ids may come as arguments, are taken out before the arguments
// are the tool's, and _meta wins when both are given. Without the option the
// input schema does not offer them.
func TestArgumentFallback(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	cs := connect(t, e.server(t, "wf_fallback", func(c *mcpserver.Config) { c.ArgumentFallback = true }), nil)

	with := func(order string, conv, callID string) map[string]any {
		args := capture(order, 700)
		args[mcpserver.ArgConversationID], args[mcpserver.ArgToolCallID] = conv, callID
		return args
	}
	first := mustCall(t, cs, "capture_payment", with("order_fb_1", "conv_fb", "call_fb_1"), "", "")
	require.Equal(t, "completed_success", first.Status, first.Reason)
	require.Equal(t, "mcp:conv_fb:call_fb_1", first.EventID, "the ids came from the arguments")
	require.Equal(t, captureKey("order_fb_1", 700), first.IdempotencyKey, "the fallback arguments are not the tool's")
	again := mustCall(t, cs, "capture_payment", with("order_fb_1", "conv_fb", "call_fb_1"), "", "")
	require.Equal(t, "duplicate_event", again.Decision)
	require.Equal(t, first.OperationID, again.OperationID)
	require.Equal(t, 1, e.captures(first.IdempotencyKey))

	both := mustCall(t, cs, "capture_payment", with("order_fb_2", "conv_args", "call_args"), "conv_meta", "call_meta")
	require.Equal(t, "mcp:conv_meta:call_meta", both.EventID, "_meta wins over the arguments")

	wrong := capture("order_fb_4", 700)
	wrong[mcpserver.ArgToolCallID] = 7
	r, err := call(ctx, cs, "capture_payment", wrong, "", "", nil)
	require.NoError(t, err)
	require.True(t, r.IsError, "a tool-call id that is not a string is refused")

	plain := connect(t, e.server(t, "wf_fallback", nil), nil)
	for tool, err := range plain.Tools(ctx, nil) {
		require.NoError(t, err)
		if tool.Name == "capture_payment" {
			props := tool.InputSchema.(map[string]any)["properties"].(map[string]any)
			require.NotContains(t, props, mcpserver.ArgToolCallID, "without -meta-args the schema offers no id arguments")
		}
	}
	withTools := map[string]*mcp.Tool{}
	for tool, err := range cs.Tools(ctx, nil) {
		require.NoError(t, err)
		withTools[tool.Name] = tool
	}
	require.Contains(t, withTools["capture_payment"].InputSchema.(map[string]any)["properties"], mcpserver.ArgToolCallID)
}
