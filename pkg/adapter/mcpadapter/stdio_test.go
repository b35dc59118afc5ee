package mcpadapter_test

import (
	"context"
	"os"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/pkg/adapter/mcpadapter"
	"github.com/opledger/opledger/pkg/op"
)

// stdioUpstreamEnv, set, makes this test binary an upstream MCP server on
// stdio instead of running the tests: the program TestCallOverStdio starts.
const stdioUpstreamEnv = "OPLEDGER_TEST_MCP_STDIO_UPSTREAM"

func TestMain(m *testing.M) {
	if os.Getenv(stdioUpstreamEnv) == "1" {
		serveStdioUpstream()
		return
	}
	os.Exit(m.Run())
}

// serveStdioUpstream serves a charge tool whose object id says which key
// reached it, in its argument and in _meta.
func serveStdioUpstream() {
	s := mcp.NewServer(&mcp.Implementation{Name: "stdio-stand", Version: "v1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "charge"}, func(_ context.Context, req *mcp.CallToolRequest, in keyed) (*mcp.CallToolResult, map[string]any, error) {
		meta, _ := req.Params.Meta["dev.opledger/idempotency_key"].(string)
		return nil, map[string]any{"id": "ch_" + in.OrderID + "|" + in.IdempotencyKey + "|" + meta}, nil
	})
	_ = s.Run(context.Background(), &mcp.StdioTransport{})
}

// An upstream reached as a program speaking MCP on stdio (-upstream-cmd,
// OPLEDGER_MCP_<N>_COMMAND) is called like one over HTTP: the key goes into
// its idempotency_key argument and _meta, and its answer is the outcome.
func TestCallOverStdio(t *testing.T) {
	t.Setenv(stdioUpstreamEnv, "1") // inherited by the upstream process
	pool, err := mcpadapter.NewPool(map[string]mcpadapter.Upstream{"up": {Command: []string{os.Args[0]}}})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	a, err := mcpadapter.New(mcpadapter.Config{Server: "up", Tool: "charge", ExternalIDPointer: "/id"}, pool)
	require.NoError(t, err)

	res := a.Call(context.Background(), req("o9"))
	require.Equal(t, op.OutcomeSuccess, res.Outcome, res.Error)
	require.Equal(t, "ch_o9|key:o9:v1|key:o9:v1", res.ExternalObjectID, "the key reached the upstream in its argument and in _meta")
	res = a.Call(context.Background(), req("o10"))
	require.Equal(t, op.OutcomeSuccess, res.Outcome, "a second call reuses the session: %s", res.Error)
}
