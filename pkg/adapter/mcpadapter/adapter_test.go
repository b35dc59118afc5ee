package mcpadapter_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/pkg/adapter"
	"github.com/opledger/opledger/pkg/adapter/mcpadapter"
	"github.com/opledger/opledger/pkg/op"
)

// stand is an upstream MCP server for the adapter: it records what each
// call carried.
type stand struct {
	mu    sync.Mutex
	calls []map[string]any
	metas []map[string]any
	found map[string]string // idempotency key -> object id
}

type keyed struct {
	OrderID        string `json:"order_id"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

type plain struct {
	OrderID string `json:"order_id"`
}

func startStand(t *testing.T) (*stand, string) {
	t.Helper()
	st := &stand{found: map[string]string{}}
	done := make(chan struct{})
	s := mcp.NewServer(&mcp.Implementation{Name: "stand", Version: "v1"}, nil)
	record := func(req *mcp.CallToolRequest) {
		var args map[string]any
		_ = json.Unmarshal(req.Params.Arguments, &args)
		st.mu.Lock()
		st.calls = append(st.calls, args)
		st.metas = append(st.metas, req.Params.Meta)
		st.mu.Unlock()
	}
	mcp.AddTool(s, &mcp.Tool{Name: "charge"}, func(_ context.Context, req *mcp.CallToolRequest, in keyed) (*mcp.CallToolResult, map[string]any, error) {
		record(req)
		st.mu.Lock()
		st.found[in.IdempotencyKey] = "ch_" + in.OrderID
		st.mu.Unlock()
		if in.OrderID == "huge" {
			return nil, map[string]any{"id": strings.Repeat("x", 300)}, nil
		}
		return nil, map[string]any{"id": "ch_" + in.OrderID}, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "note"}, func(_ context.Context, req *mcp.CallToolRequest, in plain) (*mcp.CallToolResult, map[string]any, error) {
		record(req)
		return nil, map[string]any{"id": "n_1"}, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "declined"}, func(_ context.Context, req *mcp.CallToolRequest, in plain) (*mcp.CallToolResult, any, error) {
		record(req)
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "card declined"}}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "slow"}, func(ctx context.Context, req *mcp.CallToolRequest, in plain) (*mcp.CallToolResult, any, error) {
		record(req)
		select { // the SDK does not cancel a handler whose client gave up
		case <-ctx.Done():
		case <-done:
		}
		return nil, nil, ctx.Err()
	})
	mcp.AddTool(s, &mcp.Tool{Name: "find"}, func(_ context.Context, _ *mcp.CallToolRequest, in keyed) (*mcp.CallToolResult, map[string]any, error) {
		if in.IdempotencyKey == "broken" {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "index down"}}}, nil, nil
		}
		st.mu.Lock()
		defer st.mu.Unlock()
		id, ok := st.found[in.IdempotencyKey]
		return nil, map[string]any{"found": ok, "id": id, "status": map[bool]string{true: "succeeded", false: ""}[ok]}, nil
	})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(hs.Close)
	t.Cleanup(func() { close(done) }) // runs first
	return st, hs.URL
}

func newAdapter(t *testing.T, url string, cfg mcpadapter.Config) *mcpadapter.Adapter {
	t.Helper()
	pool, err := mcpadapter.NewPool(map[string]mcpadapter.Upstream{"up": {URL: url}})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	cfg.Server = "up"
	a, err := mcpadapter.New(cfg, pool)
	require.NoError(t, err)
	return a
}

func req(order string) adapter.Request {
	return adapter.Request{OperationID: "op_1", AttemptID: "att_1", Tool: "t", IdempotencyKey: "key:" + order + ":v1",
		Args: json.RawMessage(`{"order_id":"` + order + `"}`)}
}

func TestCallClassifies(t *testing.T) {
	t.Parallel()
	st, url := startStand(t)
	ctx := context.Background()

	a := newAdapter(t, url, mcpadapter.Config{Tool: "charge", ExternalIDPointer: "/id"})
	res := a.Call(ctx, req("o1"))
	require.Equal(t, op.OutcomeSuccess, res.Outcome, res.Error)
	require.Equal(t, "ch_o1", res.ExternalObjectID)
	st.mu.Lock()
	require.Equal(t, "key:o1:v1", st.calls[0]["idempotency_key"], "the upstream's schema has idempotency_key: the key goes there")
	require.Equal(t, "key:o1:v1", st.metas[0][mcpadapter.MetaIdempotencyKey])
	require.Equal(t, "op_1", st.metas[0][mcpadapter.MetaOperationID])
	st.mu.Unlock()

	res = a.Call(ctx, req("huge"))
	require.Equal(t, op.OutcomeUnknown, res.Outcome, "an id over 255 bytes is never stored: the answer is malformed")
	require.Equal(t, adapter.CategoryMalformedResponse, res.ErrorCategory)

	note := newAdapter(t, url, mcpadapter.Config{Tool: "note"})
	require.Equal(t, op.OutcomeSuccess, note.Call(ctx, req("o2")).Outcome)
	st.mu.Lock()
	require.NotContains(t, st.calls[len(st.calls)-1], "idempotency_key", "no such argument upstream: only _meta")
	st.mu.Unlock()

	declined := newAdapter(t, url, mcpadapter.Config{Tool: "declined"})
	res = declined.Call(ctx, req("o3"))
	require.Equal(t, op.OutcomeUnknown, res.Outcome, "an MCP tool error does not say whether the effect happened")
	require.Contains(t, res.Error, "card declined")
	permanent := newAdapter(t, url, mcpadapter.Config{Tool: "declined", ErrorOutcome: op.OutcomePermanent})
	require.Equal(t, op.OutcomePermanent, permanent.Call(ctx, req("o3")).Outcome)

	missing := newAdapter(t, url, mcpadapter.Config{Tool: "no_such_tool"})
	res = missing.Call(ctx, req("o4"))
	require.Equal(t, op.OutcomePermanent, res.Outcome, "the upstream refused the request: nothing ran")
	require.Equal(t, mcpadapter.CategoryRefused, res.ErrorCategory)

	slow := newAdapter(t, url, mcpadapter.Config{Tool: "slow", Timeout: 200 * time.Millisecond})
	began := time.Now()
	res = slow.Call(ctx, req("o5"))
	require.Less(t, time.Since(began), 2*time.Second, "the call ends at its timeout; the failed session closes off the caller's time")
	require.Equal(t, op.OutcomeUnknown, res.Outcome, "sent, then no answer")
	require.Equal(t, mcpadapter.CategoryTimeout, res.ErrorCategory)
}

func TestUnreachableIsNotSent(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	url := "http://" + ln.Addr().String() + "/mcp"
	require.NoError(t, ln.Close())
	a := newAdapter(t, url, mcpadapter.Config{Tool: "charge"})
	res := a.Call(context.Background(), req("o1"))
	require.Equal(t, op.OutcomeRetryable, res.Outcome, "no session: tools/call was never sent")
	require.Equal(t, mcpadapter.CategoryNotConnected, res.ErrorCategory)
}

func TestLookup(t *testing.T) {
	t.Parallel()
	_, url := startStand(t)
	ctx := context.Background()
	a := newAdapter(t, url, mcpadapter.Config{Tool: "charge", ExternalIDPointer: "/id", Verify: &mcpadapter.VerifyConfig{Tool: "find",
		Args: map[string]any{"idempotency_key": "{idempotency_key}", "order_id": "{order_id}"}, FoundPointer: "/found",
		ExternalIDPointer: "/id", StatusPointer: "/status", SucceededValues: []string{"succeeded"}, PendingValues: []string{"pending"}}})
	lr, err := a.Lookup(ctx, req("o1"))
	require.NoError(t, err)
	require.False(t, lr.Found, "never charged")
	require.Equal(t, op.OutcomeSuccess, a.Call(ctx, req("o1")).Outcome)
	lr, err = a.Lookup(ctx, req("o1"))
	require.NoError(t, err)
	require.True(t, lr.Found)
	require.Equal(t, op.OutcomeSuccess, lr.Outcome)
	require.Equal(t, "ch_o1", lr.ExternalObjectID)

	broken := req("o1")
	broken.IdempotencyKey = "broken"
	_, err = a.Lookup(ctx, broken)
	require.Error(t, err, "a verify call that reports an error is a failed lookup, never \"not applied\"")
}

func TestCheck(t *testing.T) {
	t.Parallel()
	_, probs := mcpadapter.Check(mcpadapter.Config{Server: "Bad-Name", Tool: "", ErrorOutcome: "success",
		ExternalIDPointer: "id", Verify: &mcpadapter.VerifyConfig{Tool: "find", Args: map[string]any{"k": "x{y}"},
			PendingValues: []string{"p"}}})
	var fields []string
	for _, p := range probs {
		var ce *mcpadapter.ConfigError
		require.ErrorAs(t, p, &ce)
		fields = append(fields, ce.Field)
	}
	require.ElementsMatch(t, []string{"server", "tool", "error_outcome", "external_id_pointer", "verify.args.k", "verify", "verify.pending_values"}, fields)
}
