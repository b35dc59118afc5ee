package mcpserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/mcpserver"
	"github.com/opledger/opledger/pkg/adapter/mcpadapter"
)

// inspector finds the MCP Inspector's CLI installed on this machine:
// OPLEDGER_INSPECTOR (the path of its mcp-inspector binary), or
// mcp-inspector on PATH. The check never downloads it.
func inspector(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("OPLEDGER_INSPECTOR"); p != "" {
		return p
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed: the MCP Inspector check needs it (the Go tests are the proof)")
	}
	p, err := exec.LookPath("mcp-inspector")
	if err != nil {
		t.Skip("the MCP Inspector is not installed locally (npm install @modelcontextprotocol/inspector, then set OPLEDGER_INSPECTOR " +
			"to node_modules/.bin/mcp-inspector); this scripted check is not part of the CI proof")
	}
	return p
}

// inspectorCLI returns a function that runs the Inspector's CLI once (a
// new process, a new session) against the streamable HTTP endpoint url
// with args and decodes its JSON answer.
func inspectorCLI(t *testing.T, bin, url string) func(args ...string) map[string]any {
	return func(args ...string) map[string]any {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, bin, append([]string{"--cli", url, "--transport", "http"}, args...)...).Output()
		require.NoError(t, err, "%s", out)
		var v map[string]any
		require.NoError(t, json.Unmarshal(out, &v), "%s", out)
		return v
	}
}

// TestInspectorCLI is a scripted check with an outside client, the MCP
// Inspector in --cli mode, over streamable HTTP: it lists the tools and
// calls send_email twice under one tool-call id (the Inspector cannot set
// _meta, so the server takes the argument fallback). One email is sent.
func TestInspectorCLI(t *testing.T) {
	t.Parallel()
	bin := inspector(t)
	e := setup(t)
	srv := e.server(t, "wf_inspector", func(c *mcpserver.Config) { c.ArgumentFallback = true })
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	run := inspectorCLI(t, bin, hs.URL+"/mcp")
	list := run("--method", "tools/list")
	names := map[string]map[string]any{}
	for _, tl := range list["tools"].([]any) {
		m := tl.(map[string]any)
		names[m["name"].(string)] = m
	}
	require.Contains(t, names, "send_email")
	require.Contains(t, names, mcpserver.ToolGetOperation)
	require.NotNil(t, names["send_email"]["outputSchema"])

	callArgs := []string{"--method", "tools/call", "--tool-name", "send_email", "--tool-arg", "to=insp@example.com",
		"template=payment_receipt", "reference=order_insp_1", "_opledger_conversation_id=conv_insp", "_opledger_tool_call_id=call_1"}
	first := run(callArgs...)["structuredContent"].(map[string]any)
	require.Equal(t, "completed_success", first["status"], "%v", first)
	second := run(callArgs...)["structuredContent"].(map[string]any) // a new process, a new session, a new request id
	require.Equal(t, first["operation_id"], second["operation_id"])
	require.Equal(t, true, second["replayed"])
	require.Len(t, e.stack.Vendors.EffectsByKey("email"), 1, "one email")
}

// TestInspectorCLIProxy is the same outside client against the proxy in
// front of an MCP payment server that does not deduplicate: the upstream
// loses its answer to the first charge, the Inspector's call still ends
// with the charge found by the registry's verify tool, and a re-plan (a
// new process, a new tool-call id) is the same operation. One charge.
func TestInspectorCLIProxy(t *testing.T) {
	t.Parallel()
	bin := inspector(t)
	e := setup(t)
	ctx := context.Background()
	px, err := mcpserver.ConnectProxy(ctx, "payments_mcp", mcpadapter.Upstream{URL: e.up.url})
	require.NoError(t, err)
	t.Cleanup(px.Close)
	cfg := mcpserver.Config{Door: e.door(t, 20*time.Second), Workflow: "wf_inspector_px", Reader: e.viewer, Name: "opledger-proxy",
		Log: zerolog.Nop(), ArgumentFallback: true}
	px.Configure(&cfg, e.catalog, zerolog.Nop())
	srv, err := mcpserver.New(cfg)
	require.NoError(t, err)
	run := inspectorCLI(t, bin, serveHTTP(t, srv))
	var names []string
	for _, tl := range run("--method", "tools/list")["tools"].([]any) {
		names = append(names, tl.(map[string]any)["name"].(string))
	}
	require.ElementsMatch(t, []string{"charge_card", "list_charges", mcpserver.ToolGetOperation, mcpserver.ToolListOperations}, names)

	e.up.dropNext.Store(1)
	charge := func(callID string) map[string]any {
		return run("--method", "tools/call", "--tool-name", "charge_card", "--tool-arg", "order_id=ord_insp_px",
			"amount_cents=2500", "_opledger_conversation_id=conv_insp_px", "_opledger_tool_call_id="+callID)["structuredContent"].(map[string]any)
	}
	first := charge("call_1")
	require.Equal(t, "completed_success", first["status"], "%v", first)
	replan := charge("call_2")
	require.Equal(t, first["operation_id"], replan["operation_id"])
	require.Equal(t, "duplicate_operation", replan["decision"])
	require.Len(t, e.up.of("ord_insp_px"), 1, "one charge at the upstream")
	require.EqualValues(t, 1, e.up.calls.Load(), "create_charge was called once in all")
}
