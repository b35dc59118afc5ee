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
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/mcpserver"
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
	run := func(args ...string) map[string]any {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, bin, append([]string{"--cli", hs.URL + "/mcp", "--transport", "http"}, args...)...).Output()
		require.NoError(t, err, "%s", out)
		var v map[string]any
		require.NoError(t, json.Unmarshal(out, &v), "%s", out)
		return v
	}
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
