package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/api"
	"github.com/opledger/opledger/internal/app"
	"github.com/opledger/opledger/internal/natsembed"
	"github.com/opledger/opledger/internal/ops"
	"github.com/opledger/opledger/internal/testdb"
)

// TestMCPServeOverStdio runs `opledger mcp serve` as a process and talks
// to it with the SDK's client over the command transport: the tools are
// listed, a capture completes once, and get_operation reads it back.
func TestMCPServeOverStdio(t *testing.T) {
	t.Parallel()
	tok, entry, err := api.GenerateToken("mcp-viewer", ops.RoleViewer)
	require.NoError(t, err)
	tokens, err := api.NewTokens([]api.TokenEntry{entry})
	require.NoError(t, err)
	d, err := app.StartStack(context.Background(), app.StackConfig{
		Infra: app.InfraConfig{DatabaseURL: testdb.New(t), MemoryStreams: true}, HTTPAddr: "127.0.0.1:0", APITokens: tokens})
	require.NoError(t, err)
	t.Cleanup(d.Close)

	cmd := exec.Command(os.Args[0], "mcp", "serve", "-nats", d.Infra.NATSURL, "-workflow", "wf_cli", "-api", d.HTTP.URL(), "-log", "error")
	cmd.Env = append(os.Environ(), asMainEnv+"=1", "OPLEDGER_MCP_API_TOKEN="+tok)
	cmd.Stderr = os.Stderr
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "cli-test", Version: "v1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	require.NoError(t, err)
	defer cs.Close()

	names := map[string]bool{}
	for tool, err := range cs.Tools(ctx, nil) {
		require.NoError(t, err)
		names[tool.Name] = true
	}
	require.True(t, names["capture_payment"] && names["get_operation"] && names["list_operations"], "%v", names)

	args := map[string]any{"order_id": "order_cli_1", "customer_id": "c", "amount_cents": 4900, "currency": "USD"}
	meta := mcp.Meta{"dev.opledger/conversation_id": "conv_cli", "dev.opledger/tool_call_id": "call_1"}
	r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "capture_payment", Arguments: args, Meta: meta})
	require.NoError(t, err)
	raw, _ := json.Marshal(r.StructuredContent)
	var got map[string]any
	require.NoError(t, json.Unmarshal(raw, &got))
	require.Equal(t, "completed_success", got["status"], "%s", raw)
	r, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "capture_payment", Arguments: args, Meta: meta}) // a retry
	require.NoError(t, err)
	raw, _ = json.Marshal(r.StructuredContent)
	var again map[string]any
	require.NoError(t, json.Unmarshal(raw, &again))
	require.Equal(t, got["operation_id"], again["operation_id"])
	require.Equal(t, 1, d.Vendors.Stats().Captures)

	r, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "get_operation", Arguments: map[string]any{"operation_id": got["operation_id"]}})
	require.NoError(t, err)
	require.False(t, r.IsError)
}

// TestMCPHTTPNeedsTokens: -http off loopback refuses to start without a
// tokens file, and with one a request without a valid bearer token is
// refused before any MCP is spoken; the token's actor is the session's.
func TestMCPHTTPNeedsTokens(t *testing.T) {
	t.Parallel()
	srv := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "v1"}, nil)
	var out strings.Builder
	err := serveMCPHTTP(context.Background(), srv, "0.0.0.0:0", "", &out, zerolog.Nop())
	require.ErrorContains(t, err, "needs -http-tokens")

	tok, entry, err := api.GenerateToken("agent-1", ops.RoleViewer)
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "tokens.yaml")
	require.NoError(t, os.WriteFile(file, []byte(entry.Line()+"\n"), 0o600))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- serveMCPHTTP(ctx, srv, "127.0.0.1:0", file, pw, zerolog.Nop()) }()
	line, err := bufio.NewReader(pr).ReadString('\n')
	require.NoError(t, err)
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	url := strings.TrimSpace(line[strings.Index(line, "http://"):])

	resp, err := http.Post(url, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	hc := &http.Client{Transport: bearer{tok}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "v1"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, nil)
	require.NoError(t, err)
	require.NoError(t, cs.Ping(ctx, nil))
	require.NoError(t, cs.Close())
	cancel()
	require.NoError(t, <-done)
}

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// TestMCPProxyOverStdio runs `opledger mcp proxy` as a process in front of
// an upstream MCP server: only the tools the registry names are listed,
// under the registry's hints, and a read passes straight through.
func TestMCPProxyOverStdio(t *testing.T) {
	t.Parallel()
	up := mcp.NewServer(&mcp.Implementation{Name: "payments", Version: "v1"}, nil)
	mcp.AddTool(up, &mcp.Tool{Name: "count"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, map[string]int, error) {
		return nil, map[string]int{"count": 7}, nil
	})
	mcp.AddTool(up, &mcp.Tool{Name: "wipe", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, // lies: not in the registry anyway
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			panic("an unregistered upstream tool was called")
		})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return up }, nil))
	t.Cleanup(hs.Close)
	reg := filepath.Join(t.TempDir(), "tools.yaml")
	require.NoError(t, os.WriteFile(reg, []byte(`version: 1
tools:
  charge_count:
    side_effect_class: pure_read
    version: 1
    args_schema: {type: object, additionalProperties: false, properties: {}}
    adapter: {type: mcp, server: payments, tool: count}
`), 0o600))
	cmd := exec.Command(os.Args[0], "mcp", "proxy", "-nats", natsForProxy(t), "-workflow", "wf_px", "-registry", reg,
		"-upstream-name", "payments", "-upstream-url", hs.URL, "-log", "error")
	cmd.Env = append(os.Environ(), asMainEnv+"=1")
	cmd.Stderr = os.Stderr
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "cli-test", Version: "v1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	require.NoError(t, err)
	defer cs.Close()
	var names []string
	for tool, err := range cs.Tools(ctx, nil) {
		require.NoError(t, err)
		names = append(names, tool.Name)
		require.True(t, tool.Annotations.ReadOnlyHint)
	}
	require.Equal(t, []string{"charge_count"}, names, "wipe is not the registry's: not served; no API: no read tools")
	r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "charge_count", Arguments: map[string]any{}})
	require.NoError(t, err)
	require.False(t, r.IsError)
	require.EqualValues(t, 7, r.StructuredContent.(map[string]any)["count"])
}

// natsForProxy is an embedded NATS server: the proxy connects as an agent
// at start, though its reads never publish.
func natsForProxy(t *testing.T) string {
	t.Helper()
	ns, err := natsembed.Start(natsembed.Options{})
	require.NoError(t, err)
	t.Cleanup(ns.Shutdown)
	return ns.URL()
}
