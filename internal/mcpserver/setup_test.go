package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/agentcall"
	"github.com/opledger/opledger/internal/api"
	"github.com/opledger/opledger/internal/apiclient"
	"github.com/opledger/opledger/internal/app"
	"github.com/opledger/opledger/internal/maintain"
	"github.com/opledger/opledger/internal/mcpserver"
	"github.com/opledger/opledger/internal/ops"
	"github.com/opledger/opledger/internal/pipetest"
	"github.com/opledger/opledger/internal/reconcile"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/pkg/adapter/mcpadapter"
	"github.com/opledger/opledger/pkg/client"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/registry"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// mcpTools is the registry of the upstream payments MCP server: a charge
// behind the ledger, reconciled by its find_charge read, and a read passed
// straight through by the proxy.
const mcpTools = `version: 1
tools:
  charge_card:
    description: Charge a card for an order.
    side_effect_class: external_irreversible
    version: 1
    key_template: "mcpcharge:{order_id}:{amount_cents}"
    timeout: 700ms
    apply_bound: 1s
    args_schema:
      type: object
      additionalProperties: false
      required: [order_id, amount_cents]
      properties:
        order_id: {type: string, minLength: 1, maxLength: 64}
        amount_cents: {type: integer, minimum: 1}
    approval: {when: above, field: amount_cents, threshold: 100000}
    reconcile: {interval: 200ms}
    adapter:
      type: mcp
      server: payments_mcp
      tool: create_charge
      external_id_pointer: /charge_id
      verify:
        tool: find_charge
        args: {idempotency_key: "{idempotency_key}"}
        found_pointer: /found
        external_id_pointer: /charge_id
  list_charges:
    side_effect_class: pure_read
    version: 1
    args_schema: {type: object, additionalProperties: false, properties: {}}
    adapter: {type: mcp, server: payments_mcp}
`

// env is one test's opledger: the whole stack in process (real Postgres,
// real JetStream, the local vendors), the operators' API with tokens, an
// upstream payments MCP server written with the SDK, and a door.
type env struct {
	ctx     context.Context
	stack   *app.Stack
	nats    *client.Client
	catalog *registry.Registry
	paths   []string
	apiURL  string
	viewer  *apiclient.Client
	alice   *apiclient.Client // an approver
	confirm *apiclient.Client // the form approver of the MCP server
	up      *upstream
}

func setup(t *testing.T) *env {
	t.Helper()
	e := &env{ctx: context.Background(), up: startUpstream(t)}
	dir := t.TempDir()
	extra := filepath.Join(dir, "mcp.yaml")
	require.NoError(t, os.WriteFile(extra, []byte(mcpTools), 0o600))
	e.paths = []string{filepath.Join(pipetest.RepoRoot(t), "examples", "registry.yaml"), extra}

	tokens := map[string]string{}
	var entries []api.TokenEntry
	for actor, role := range map[string]ops.Role{"mcp-viewer": ops.RoleViewer, "alice": ops.RoleApprover, "end-user": ops.RoleApprover} {
		tok, entry, err := api.GenerateToken(actor, role)
		require.NoError(t, err)
		tokens[actor] = tok
		entries = append(entries, entry)
	}
	tk, err := api.NewTokens(entries)
	require.NoError(t, err)
	e.stack, err = app.StartStack(e.ctx, app.StackConfig{
		Infra:     app.InfraConfig{DatabaseURL: testdb.New(t), MemoryStreams: true},
		Registry:  app.RegistryConfig{Paths: e.paths},
		HTTPAddr:  "127.0.0.1:0",
		APITokens: tk,
		Services: app.ServicesConfig{
			Reconcile:    reconcile.Config{SettleDelay: 300 * time.Millisecond},
			Maintain:     maintain.Config{SweepInterval: 200 * time.Millisecond, ElectInterval: 100 * time.Millisecond},
			MCPUpstreams: map[string]mcpadapter.Upstream{"payments_mcp": {URL: e.up.url}},
		},
	})
	require.NoError(t, err)
	t.Cleanup(e.stack.Close)
	e.apiURL = e.stack.HTTP.URL()
	e.nats, err = client.Connect(e.stack.Infra.NATSURL, t.Name())
	require.NoError(t, err)
	t.Cleanup(e.nats.Close)
	e.catalog, err = registry.LoadPaths(e.paths, registry.Options{Catalog: true})
	require.NoError(t, err)
	for name, dst := range map[string]**apiclient.Client{"mcp-viewer": &e.viewer, "alice": &e.alice, "end-user": &e.confirm} {
		*dst, err = apiclient.New(e.apiURL, tokens[name], nil)
		require.NoError(t, err)
	}
	return e
}

// door is a door of the default tenant with the given wait.
func (e *env) door(t *testing.T, wait time.Duration) *agentcall.Door {
	t.Helper()
	d, err := agentcall.New(agentcall.Config{Client: e.nats, Registry: e.catalog, Actor: agentActor, Wait: wait})
	require.NoError(t, err)
	return d
}

// server is an MCP server over the door for workflow.
func (e *env) server(t *testing.T, workflow string, edit func(*mcpserver.Config)) *mcp.Server {
	t.Helper()
	cfg := mcpserver.Config{Door: e.door(t, 20*time.Second), Workflow: workflow, Reader: e.viewer, Log: zerolog.Nop()}
	if edit != nil {
		edit(&cfg)
	}
	s, err := mcpserver.New(cfg)
	require.NoError(t, err)
	return s
}

// connect is the SDK's own client on an in-memory transport to s.
func connect(t *testing.T, s *mcp.Server, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	return connectVersion(t, s, opts, "")
}

// connectVersion is connect speaking protocol version v ("" the newest).
func connectVersion(t *testing.T, s *mcp.Server, opts *mcp.ClientOptions, v string) *mcp.ClientSession {
	t.Helper()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := s.Connect(context.Background(), st, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "v1"}, opts).Connect(context.Background(), ct,
		&mcp.ClientSessionOptions{ProtocolVersion: v})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// serveHTTP serves s over streamable HTTP.
func serveHTTP(t *testing.T, s *mcp.Server) string {
	t.Helper()
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(hs.Close)
	return hs.URL
}

// connectHTTP is the SDK's client over streamable HTTP.
func connectHTTP(t *testing.T, url string, hc *http.Client, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "v1"}, opts).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc, MaxRetries: -1}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// call makes a tools/call with opledger's _meta ids ("" leaves one out).
func call(ctx context.Context, cs *mcp.ClientSession, tool string, args any, conv, callID string, progress any) (*mcp.CallToolResult, error) {
	p := &mcp.CallToolParams{Name: tool, Arguments: args, Meta: mcp.Meta{}}
	if conv != "" {
		p.Meta[mcpserver.MetaConversationID] = conv
	}
	if callID != "" {
		p.Meta[mcpserver.MetaToolCallID] = callID
	}
	if progress != nil {
		p.SetProgressToken(progress)
	}
	return cs.CallTool(ctx, p)
}

// structured decodes a result's structured content.
func structured[T any](t *testing.T, r *mcp.CallToolResult) T {
	t.Helper()
	raw, err := json.Marshal(r.StructuredContent)
	require.NoError(t, err)
	var v T
	require.NoError(t, json.Unmarshal(raw, &v), "%s", raw)
	return v
}

func mustCall(t *testing.T, cs *mcp.ClientSession, tool string, args any, conv, callID string) mcpserver.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := call(ctx, cs, tool, args, conv, callID, nil)
	require.NoError(t, err)
	return structured[mcpserver.Result](t, r)
}

func capture(order string, cents int) map[string]any {
	return map[string]any{"order_id": order, "customer_id": "cust_1", "amount_cents": cents, "currency": "USD"}
}

func captureKey(order string, cents int) string {
	return fmt.Sprintf("payment:%s:capture:%d:USD:v1", order, cents)
}

// captures counts the local payments vendor's charges under key.
func (e *env) captures(key string) int {
	return e.stack.Vendors.EffectsByKey("capture")[key]
}

var agentActor = agentActorValue()

// progressLog collects the progress notifications a client receives.
type progressLog struct {
	mu   sync.Mutex
	msgs []string
	ch   chan string
}

func newProgressLog() *progressLog { return &progressLog{ch: make(chan string, 64)} }

func (p *progressLog) handler(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
	p.mu.Lock()
	p.msgs = append(p.msgs, req.Params.Message)
	p.mu.Unlock()
	select {
	case p.ch <- req.Params.Message:
	default:
	}
}

func (p *progressLog) all() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.msgs...)
}

// waitState polls the operators' API until the operation is in state want
// (at most 15 s).
func (e *env) waitState(opID string, want op.State) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		d, err := e.viewer.Show(e.ctx, opID)
		if err != nil {
			return err
		}
		if d.Operation.State == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("operation %s is %s after 15 s, not %s", opID, d.Operation.State, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
