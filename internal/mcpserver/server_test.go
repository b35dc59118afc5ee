package mcpserver_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/agentcall"
	"github.com/opledger/opledger/internal/mcpserver"
	"github.com/opledger/opledger/pkg/client"
)

// TestServer runs the SDK's own client against the MCP server in front of
// a whole opledger: every registry tool listed with truthful hints, a call
// that completes, a retry and a re-plan that make no second effect, and
// reads scoped to the session's workflow.
func TestServer(t *testing.T) {
	t.Parallel()
	e := setup(t)
	cs := connect(t, e.server(t, "wf_mcp", nil), nil)
	ctx := context.Background()

	t.Run("tools are the registry's, with truthful hints", func(t *testing.T) {
		tools := map[string]*mcp.Tool{}
		for tool, err := range cs.Tools(ctx, nil) {
			require.NoError(t, err)
			tools[tool.Name] = tool
		}
		for _, name := range e.catalog.Names() {
			require.Contains(t, tools, name)
		}
		require.Contains(t, tools, mcpserver.ToolGetOperation)
		require.Contains(t, tools, mcpserver.ToolListOperations)
		require.NotContains(t, tools, "approve", "no tool approves anything")

		capture := tools["capture_payment"]
		require.NotNil(t, capture.OutputSchema)
		require.True(t, *capture.Annotations.DestructiveHint, "external_irreversible")
		require.False(t, capture.Annotations.ReadOnlyHint)
		require.True(t, capture.Annotations.IdempotentHint, "the same arguments are one operation")
		var want map[string]any
		tool, err := e.catalog.Tool("capture_payment")
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(tool.ArgsSchema, &want))
		require.Equal(t, want, capture.InputSchema, "inputSchema is args_schema")

		read := tools["get_account_status"]
		require.True(t, read.Annotations.ReadOnlyHint)
		require.False(t, *read.Annotations.DestructiveHint)
		crm := tools["update_crm_record"]
		require.False(t, crm.Annotations.IdempotentHint, "{entity_version}: the same arguments after a set-back are a new action")
		require.False(t, *crm.Annotations.DestructiveHint)
	})

	t.Run("a call completes; a retry and a re-plan are the same operation", func(t *testing.T) {
		args := capture("order_srv_1", 4900)
		first := mustCall(t, cs, "capture_payment", args, "conv_1", "call_1")
		require.Equal(t, "completed_success", first.Status, first.Reason)
		require.Equal(t, "new", first.Decision)
		require.False(t, first.Replayed)
		require.True(t, first.Final)
		require.NotEmpty(t, first.ExternalObjectID)
		require.Equal(t, 1, first.Attempts)
		require.Equal(t, "none", first.RetryRecommendation)
		require.Equal(t, captureKey("order_srv_1", 4900), first.IdempotencyKey)
		require.NotNil(t, first.Receipt)
		require.Contains(t, first.Receipt.Digest, "sha256:")

		again := mustCall(t, cs, "capture_payment", args, "conv_1", "call_1") // a new JSON-RPC id, the same call
		require.Equal(t, first.OperationID, again.OperationID)
		require.Equal(t, "duplicate_event", again.Decision)
		require.True(t, again.Replayed)

		replan := mustCall(t, cs, "capture_payment", map[string]any{"currency": "usd", "amount_cents": 4900,
			"order_id": " order_srv_1 ", "customer_id": "cust_1"}, "conv_1", "call_2") // re-planned: new tool-call id, look-alike args
		require.Equal(t, first.OperationID, replan.OperationID)
		require.Equal(t, "duplicate_operation", replan.Decision)
		require.Equal(t, "completed_success", replan.Status)
		require.Equal(t, first.Receipt.Digest, replan.Receipt.Digest, "one operation, one version, one receipt")

		noID1 := mustCall(t, cs, "capture_payment", capture("order_srv_2", 4900), "conv_1", "")
		noID2 := mustCall(t, cs, "capture_payment", map[string]any{"customer_id": "cust_1", "currency": "USD", "order_id": "order_srv_2", "amount_cents": 4900}, "conv_1", "")
		require.Equal(t, noID1.OperationID, noID2.OperationID)
		require.Equal(t, "duplicate_event", noID2.Decision, "without a tool-call id the event id comes from the business identity")
		require.Equal(t, noID1.EventID, noID2.EventID)

		// The same tool-call id with other arguments is another intent under
		// a used event id: the ledger's answer to this call (conflict), not
		// the first call's outcome.
		reused, err := call(ctx, cs, "capture_payment", capture("order_srv_9", 100), "conv_1", "call_1", nil)
		require.NoError(t, err)
		conflict := structured[mcpserver.Result](t, reused)
		require.Equal(t, "conflict", conflict.Decision, conflict.Reason)
		require.NotEqual(t, first.Status, conflict.Status)
		require.True(t, reused.IsError)

		require.Equal(t, 1, e.captures(captureKey("order_srv_1", 4900)), "one charge at the vendor")
		require.Equal(t, 1, e.captures(captureKey("order_srv_2", 4900)))
		require.Zero(t, e.captures(captureKey("order_srv_9", 100)))
	})

	t.Run("invalid arguments are refused before anything is sent", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		r, err := call(ctx, cs, "capture_payment", map[string]any{"order_id": "o", "amount_cents": "lots"}, "conv_1", "call_bad", nil)
		require.NoError(t, err)
		require.True(t, r.IsError)
		res := structured[mcpserver.Result](t, r)
		require.Equal(t, "rejected", res.Status)
		require.Equal(t, "change_arguments", res.RetryRecommendation)
		r, err = call(ctx, cs, "capture_payment", capture("order_srv_3", 4900), "conv_1", string(make([]byte, 300)), nil)
		require.NoError(t, err)
		require.True(t, r.IsError, "a tool-call id with control characters, over 128 bytes")
	})

	t.Run("get_operation and list_operations stay in the workflow", func(t *testing.T) {
		done := mustCall(t, cs, "capture_payment", capture("order_srv_4", 4900), "conv_read", "call_1")
		r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: mcpserver.ToolGetOperation, Arguments: map[string]any{"operation_id": done.OperationID}})
		require.NoError(t, err)
		require.False(t, r.IsError)
		got := structured[mcpserver.Result](t, r)
		require.Equal(t, done.OperationID, got.OperationID)
		require.Equal(t, "completed_success", got.Status)
		require.Equal(t, done.Receipt.Digest, got.Receipt.Digest, "the receipt of a call and of a read of the same version agree")
		require.Equal(t, done.Receipt.Text, got.Receipt.Text)

		other := connect(t, e.server(t, "wf_other", nil), nil)
		r, err = other.CallTool(ctx, &mcp.CallToolParams{Name: mcpserver.ToolGetOperation, Arguments: map[string]any{"operation_id": done.OperationID}})
		require.NoError(t, err)
		require.True(t, r.IsError, "another workflow's session does not see it")

		l, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: mcpserver.ToolListOperations, Arguments: map[string]any{},
			Meta: mcp.Meta{mcpserver.MetaConversationID: "conv_read"}})
		require.NoError(t, err)
		list := structured[mcpserver.ListResult](t, l)
		require.Len(t, list.Operations, 1, "only this conversation's")
		require.Equal(t, done.OperationID, list.Operations[0].OperationID)
		l, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: mcpserver.ToolListOperations, Arguments: map[string]any{"limit": 50}})
		require.NoError(t, err)
		require.GreaterOrEqual(t, len(structured[mcpserver.ListResult](t, l).Operations), 3, "the workflow's")
		l, err = other.CallTool(ctx, &mcp.CallToolParams{Name: mcpserver.ToolListOperations, Arguments: map[string]any{}})
		require.NoError(t, err)
		require.Empty(t, structured[mcpserver.ListResult](t, l).Operations)
		l, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: mcpserver.ToolListOperations, Arguments: map[string]any{"Limit": 5}})
		require.NoError(t, err)
		require.True(t, l.IsError, "argument names are exact")
	})

	t.Run("tenants are walls: the tenant comes from the configuration only", func(t *testing.T) {
		acme, err := client.Connect(e.stack.Infra.NATSURL, "acme-door", client.Tenant("acme"))
		require.NoError(t, err)
		t.Cleanup(acme.Close)
		door, err := agentcall.New(agentcall.Config{Client: acme, Tenant: "acme", Registry: e.catalog, Actor: agentActor})
		require.NoError(t, err)
		srv, err := mcpserver.New(mcpserver.Config{Door: door, Workflow: "wf_mcp", Reader: e.viewer, Log: zerolog.Nop()})
		require.NoError(t, err)
		ac := connect(t, srv, nil)
		r, err := ac.CallTool(ctx, &mcp.CallToolParams{Name: "capture_payment", Arguments: capture("order_srv_1", 4900),
			Meta: mcp.Meta{mcpserver.MetaConversationID: "conv_1", mcpserver.MetaToolCallID: "call_1", "dev.opledger/tenant": "default"}})
		require.NoError(t, err)
		res := structured[mcpserver.Result](t, r)
		require.Equal(t, "completed_success", res.Status, res.Reason)
		require.Equal(t, "new", res.Decision, "the same ids and key in another tenant are another operation")
		require.Equal(t, "acme/"+captureKey("order_srv_1", 4900), res.IdempotencyKey)
		o, err := e.stack.Services.Store.Operation(ctx, res.OperationID)
		require.NoError(t, err)
		require.Equal(t, "acme", o.Tenant)

		g, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: mcpserver.ToolGetOperation, Arguments: map[string]any{"operation_id": res.OperationID}})
		require.NoError(t, err)
		require.True(t, g.IsError, "the default tenant's session does not see acme's operation in the same workflow")
		l, err := ac.CallTool(ctx, &mcp.CallToolParams{Name: mcpserver.ToolListOperations, Arguments: map[string]any{"limit": 50}})
		require.NoError(t, err)
		for _, op := range structured[mcpserver.ListResult](t, l).Operations {
			require.Contains(t, op.IdempotencyKey, "acme/", "acme's session lists acme's operations only")
		}
	})
}
