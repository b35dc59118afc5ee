package mcpadapter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/opledger/opledger/pkg/adapter"
	"github.com/opledger/opledger/pkg/op"
)

var (
	_ adapter.Adapter = (*Adapter)(nil)
	_ adapter.Looker  = (*Adapter)(nil)
)

// Error categories this package reports.
const (
	CategoryNotConnected  = "not_connected"
	CategoryRefused       = "refused"
	CategoryToolError     = "tool_error"
	CategoryTimeout       = "timeout"
	CategoryTransport     = "transport"
	CategoryMalformed     = adapter.CategoryMalformedResponse
	CategoryUnrecognized  = "unrecognized_value"
	CategoryFailedStatus  = "failed_status"
	categoryUpstreamError = "upstream_error"
)

// MaxResult bounds the JSON of an upstream result the adapter reads.
const MaxResult = 1 << 20

// Upstream says how to reach an upstream MCP server: exactly one of URL (a
// streamable HTTP endpoint) or Command (a program speaking MCP on stdio,
// started by the pool).
type Upstream struct {
	URL     string
	Command []string
	// Env is the command's environment (nil: the process's).
	Env []string
	// HTTPClient carries requests to URL (nil: a default client).
	HTTPClient *http.Client
}

// Transport returns the SDK transport that reaches u.
func (u Upstream) Transport() (mcp.Transport, error) {
	switch {
	case u.URL != "" && len(u.Command) > 0:
		return nil, errors.New("an upstream is a URL or a command, not both")
	case u.URL != "":
		p, err := url.Parse(u.URL)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return nil, fmt.Errorf("upstream URL must be an http or https URL")
		}
		// No reconnects and no standalone stream: a dropped answer is an
		// unknown outcome at once, and the request is never sent twice.
		return &mcp.StreamableClientTransport{Endpoint: u.URL, HTTPClient: u.HTTPClient, MaxRetries: -1, DisableStandaloneSSE: true}, nil
	case len(u.Command) > 0:
		cmd := exec.Command(u.Command[0], u.Command[1:]...)
		cmd.Env = u.Env
		return &mcp.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}, nil
	}
	return nil, errors.New("an upstream needs a URL or a command")
}

// NewClient is the MCP client opledger uses towards upstreams: no automatic
// multi-round-trip retries, so a request is sent once.
func NewClient(name string) *mcp.Client {
	return mcp.NewClient(&mcp.Implementation{Name: name, Version: "v1"},
		&mcp.ClientOptions{MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true}, Capabilities: &mcp.ClientCapabilities{}})
}

// Pool keeps one session per upstream server, connecting on first use and
// again after a session failed. It is safe for concurrent use.
type Pool struct {
	client *mcp.Client
	ups    map[string]Upstream
	mu     sync.Mutex
	conns  map[string]*conn
	closed bool
}

type conn struct {
	mu    sync.Mutex // serializes connecting
	cs    *mcp.ClientSession
	tools map[string]*mcp.Tool
}

// NewPool returns a pool over the named upstreams. Errors: a name that
// cannot name a server, an upstream without (or with two) addresses.
func NewPool(ups map[string]Upstream) (*Pool, error) {
	for name, u := range ups {
		if !ValidServerName(name) {
			return nil, fmt.Errorf("mcp upstream %q: not a valid server name", name)
		}
		if _, err := u.Transport(); err != nil {
			return nil, fmt.Errorf("mcp upstream %s: %w", name, err)
		}
	}
	p := &Pool{client: NewClient("opledger-dispatcher"), ups: ups, conns: map[string]*conn{}}
	for name := range ups {
		p.conns[name] = &conn{}
	}
	return p, nil
}

// Has reports whether the pool knows the server.
func (p *Pool) Has(server string) bool { _, ok := p.ups[server]; return ok }

// Close closes every session (and stops every command started).
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	for _, c := range p.conns {
		c.mu.Lock()
		if c.cs != nil {
			_ = c.cs.Close()
			c.cs = nil
		}
		c.mu.Unlock()
	}
}

// session returns a live session to server, connecting if there is none.
func (p *Pool) session(ctx context.Context, server string) (*mcp.ClientSession, map[string]*mcp.Tool, error) {
	c, ok := p.conns[server]
	if !ok {
		return nil, nil, fmt.Errorf("upstream %q is not configured", server)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return nil, nil, errors.New("pool closed")
	}
	if c.cs != nil {
		return c.cs, c.tools, nil
	}
	t, err := p.ups[server].Transport()
	if err != nil {
		return nil, nil, err
	}
	cs, err := p.client.Connect(ctx, t, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to upstream %s: %w", server, err)
	}
	tools := map[string]*mcp.Tool{}
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			_ = cs.Close()
			return nil, nil, fmt.Errorf("list tools of upstream %s: %w", server, err)
		}
		if len(tools) < 10000 {
			tools[tool.Name] = tool
		}
	}
	c.cs, c.tools = cs, tools
	return cs, tools, nil
}

// reset drops a session that failed, so the next call connects again.
func (p *Pool) reset(server string, cs *mcp.ClientSession) {
	c := p.conns[server]
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cs == cs {
		// Closing waits for the upstream (a DELETE, a process exit): not
		// on the caller's time.
		go func() { _ = cs.Close() }()
		c.cs, c.tools = nil, nil
	}
}

// Adapter calls one registry tool's upstream MCP tool.
type Adapter struct {
	cfg        Config
	pool       *Pool
	idPtr      []string
	verifyPtrs struct{ found, id, status []string }
}

// New returns the adapter for cfg over pool. Errors: cfg's problems
// (*ConfigError), or a server the pool does not know.
func New(cfg Config, pool *Pool) (*Adapter, error) {
	if _, probs := Check(cfg); len(probs) > 0 {
		return nil, probs[0]
	}
	if pool == nil || !pool.Has(cfg.Server) {
		return nil, fmt.Errorf("upstream MCP server %q is not configured (opledger's binaries read OPLEDGER_MCP_%s_URL or OPLEDGER_MCP_%s_COMMAND)",
			cfg.Server, strings.ToUpper(cfg.Server), strings.ToUpper(cfg.Server))
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.ErrorOutcome == "" {
		cfg.ErrorOutcome = op.OutcomeUnknown
	}
	a := &Adapter{cfg: cfg, pool: pool}
	a.idPtr, _ = optPointer(cfg.ExternalIDPointer)
	if v := cfg.Verify; v != nil {
		a.verifyPtrs.found, _ = optPointer(v.FoundPointer)
		a.verifyPtrs.id, _ = optPointer(v.ExternalIDPointer)
		a.verifyPtrs.status, _ = optPointer(v.StatusPointer)
	}
	return a, nil
}

func optPointer(p string) ([]string, error) {
	if p == "" {
		return nil, nil
	}
	return parsePointer(p)
}

// Call sends tools/call to the upstream once and classifies the answer.
func (a *Adapter) Call(ctx context.Context, req adapter.Request) adapter.Result {
	start := time.Now()
	res := a.call(ctx, req)
	res.Latency = time.Since(start)
	return adapter.Sanitize(res)
}

func (a *Adapter) call(ctx context.Context, req adapter.Request) adapter.Result {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
	defer cancel()
	cs, tools, err := a.pool.session(ctx, a.cfg.Server)
	if err != nil {
		// tools/call was never sent: confirmed not applied.
		return adapter.Result{Outcome: op.OutcomeRetryable, ErrorCategory: CategoryNotConnected, Error: "not sent: " + err.Error()}
	}
	args, err := a.arguments(req, tools[a.cfg.Tool])
	if err != nil {
		return adapter.Result{Outcome: op.OutcomePermanent, ErrorCategory: "client_error", Error: "not sent: " + err.Error()}
	}
	r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: a.cfg.Tool, Arguments: args, Meta: mcp.Meta{
		MetaIdempotencyKey: req.IdempotencyKey, MetaOperationID: req.OperationID, MetaAttemptID: req.AttemptID}})
	if err != nil {
		return a.failure(ctx, cs, err)
	}
	if r.IsError {
		return adapter.Result{Outcome: a.cfg.ErrorOutcome, ErrorCategory: CategoryToolError,
			Error: "the upstream tool reported an error: " + firstText(r)}
	}
	res := adapter.Result{Outcome: op.OutcomeSuccess}
	if a.idPtr != nil {
		doc, err := structured(r)
		if err != nil {
			return adapter.Result{Outcome: op.OutcomeUnknown, ErrorCategory: CategoryMalformed, Error: "the upstream answered without readable structured content: " + err.Error()}
		}
		id, ok := scalar(walk(doc, a.idPtr))
		if !ok || id == "" {
			return adapter.Result{Outcome: op.OutcomeUnknown, ErrorCategory: CategoryMalformed, Error: "the upstream's answer has no object id at " + a.cfg.ExternalIDPointer}
		}
		res.ExternalObjectID = id
	}
	return res
}

// failure classifies an error from tools/call: the upstream's refusal of
// the request is permanent; anything else after the request went out is
// unknown, and the session is dropped so the next call starts a new one.
func (a *Adapter) failure(ctx context.Context, cs *mcp.ClientSession, err error) adapter.Result {
	var we *jsonrpc.Error
	if errors.As(err, &we) {
		switch we.Code {
		case jsonrpc.CodeInvalidParams, jsonrpc.CodeMethodNotFound, jsonrpc.CodeInvalidRequest:
			return adapter.Result{Outcome: op.OutcomePermanent, ErrorCategory: CategoryRefused,
				Error: fmt.Sprintf("the upstream refused the call (JSON-RPC %d): %s", we.Code, clip(we.Message))}
		}
	}
	a.pool.reset(a.cfg.Server, cs)
	cat := CategoryTransport
	if ctx.Err() != nil {
		cat = CategoryTimeout
	} else if we != nil {
		cat = categoryUpstreamError
	}
	return adapter.Result{Outcome: op.OutcomeUnknown, ErrorCategory: cat, Error: "the call may have been applied: " + clip(err.Error())}
}

// arguments are the canonical arguments, with the idempotency key in the
// idempotency argument (the registry's, or idempotency_key when the
// upstream's input schema has one).
func (a *Adapter) arguments(req adapter.Request, tool *mcp.Tool) (map[string]any, error) {
	args := map[string]any{}
	if len(req.Args) > 0 {
		dec := json.NewDecoder(bytes.NewReader(req.Args))
		dec.UseNumber()
		if err := dec.Decode(&args); err != nil {
			return nil, fmt.Errorf("canonical arguments: %w", err)
		}
	}
	name := a.cfg.IdempotencyArgument
	if name == "" && tool != nil && schemaHas(tool.InputSchema, DefaultIdempotencyArgument) {
		name = DefaultIdempotencyArgument
	}
	if name != "" {
		args[name] = req.IdempotencyKey
	}
	return args, nil
}

// schemaHas reports whether an input schema (as the client decoded it)
// has a top-level property name.
func schemaHas(schema any, name string) bool {
	m, _ := schema.(map[string]any)
	props, _ := m["properties"].(map[string]any)
	_, ok := props[name]
	return ok
}

// Lookup calls the verify tool and reads whether the upstream has a record.
// An error means the lookup failed (look again later).
func (a *Adapter) Lookup(ctx context.Context, req adapter.Request) (adapter.LookupResult, error) {
	v := a.cfg.Verify
	if v == nil {
		return adapter.LookupResult{}, errors.New("the tool has no verify call")
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
	defer cancel()
	cs, _, err := a.pool.session(ctx, a.cfg.Server)
	if err != nil {
		return adapter.LookupResult{}, err
	}
	args, err := verifyArgs(v.Args, req)
	if err != nil {
		return adapter.LookupResult{}, err
	}
	r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: v.Tool, Arguments: args, Meta: mcp.Meta{
		MetaIdempotencyKey: req.IdempotencyKey, MetaOperationID: req.OperationID}})
	if err != nil {
		var we *jsonrpc.Error
		if !errors.As(err, &we) {
			a.pool.reset(a.cfg.Server, cs)
		}
		return adapter.LookupResult{}, fmt.Errorf("verify call %s: %s", v.Tool, clip(err.Error()))
	}
	if r.IsError {
		return adapter.LookupResult{}, fmt.Errorf("verify call %s reported an error: %s", v.Tool, firstText(r))
	}
	doc, err := structured(r)
	if err != nil {
		return adapter.LookupResult{}, fmt.Errorf("verify call %s: %w", v.Tool, err)
	}
	id, _ := scalar(walk(doc, a.verifyPtrs.id))
	if !adapter.ValidVendorID(id) {
		return adapter.LookupResult{}, fmt.Errorf("verify call %s: the object id is too long or not plain text", v.Tool)
	}
	found := id != ""
	if a.verifyPtrs.found != nil {
		b, ok := walk(doc, a.verifyPtrs.found).(bool)
		if !ok {
			return adapter.LookupResult{}, fmt.Errorf("verify call %s: no boolean at %s", v.Tool, v.FoundPointer)
		}
		found = b
	}
	if !found {
		return adapter.LookupResult{Found: false}, nil
	}
	lr := adapter.LookupResult{Found: true, Outcome: op.OutcomeSuccess, ExternalObjectID: id}
	if a.verifyPtrs.status != nil {
		s, ok := scalar(walk(doc, a.verifyPtrs.status))
		switch {
		case !ok:
			return adapter.LookupResult{}, fmt.Errorf("verify call %s: no status at %s", v.Tool, v.StatusPointer)
		case slices.Contains(v.PendingValues, s):
			lr.Outcome = op.OutcomeAcknowledged
		case slices.Contains(v.FailedValues, s):
			lr.Outcome = op.OutcomePermanent
		case slices.Contains(v.SucceededValues, s), len(v.SucceededValues) == 0:
		default:
			return adapter.LookupResult{}, fmt.Errorf("verify call %s: status %q is in no list", v.Tool, clip(s))
		}
	}
	return lr, nil
}

// verifyArgs renders the verify call's arguments from the operation.
func verifyArgs(tmpl map[string]any, req adapter.Request) (map[string]any, error) {
	var canon map[string]any
	if len(req.Args) > 0 {
		dec := json.NewDecoder(bytes.NewReader(req.Args))
		dec.UseNumber()
		if err := dec.Decode(&canon); err != nil {
			return nil, fmt.Errorf("canonical arguments: %w", err)
		}
	}
	out := map[string]any{}
	for name, v := range tmpl {
		s, ok := v.(string)
		m := placeholderRE.FindStringSubmatch(s)
		if !ok || m == nil {
			out[name] = v
			continue
		}
		switch m[1] {
		case PlaceholderKey:
			out[name] = req.IdempotencyKey
		case PlaceholderOperation:
			out[name] = req.OperationID
		default:
			val, ok := canon[m[1]]
			if !ok {
				return nil, fmt.Errorf("verify argument %s: the operation has no argument %s", name, m[1])
			}
			out[name] = val
		}
	}
	return out, nil
}

// structured is a result's structured content, or the JSON of its first
// text content for servers that only answer in text; bounded in size.
func structured(r *mcp.CallToolResult) (any, error) {
	var raw []byte
	if r.StructuredContent != nil {
		b, err := json.Marshal(r.StructuredContent)
		if err != nil {
			return nil, err
		}
		raw = b
	} else {
		for _, c := range r.Content {
			if t, ok := c.(*mcp.TextContent); ok {
				raw = []byte(t.Text)
				break
			}
		}
	}
	if len(raw) == 0 {
		return nil, errors.New("no structured content")
	}
	if len(raw) > MaxResult {
		return nil, fmt.Errorf("structured content over %d bytes", MaxResult)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, errors.New("structured content is not JSON")
	}
	return doc, nil
}

func walk(doc any, ptr []string) any {
	if ptr == nil {
		return nil
	}
	cur := doc
	for _, tok := range ptr {
		switch v := cur.(type) {
		case map[string]any:
			cur = v[tok]
		case []any:
			i := -1
			_, _ = fmt.Sscanf(tok, "%d", &i)
			if i < 0 || i >= len(v) {
				return nil
			}
			cur = v[i]
		default:
			return nil
		}
	}
	return cur
}

func scalar(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case json.Number:
		return x.String(), true
	case bool:
		return fmt.Sprint(x), true
	}
	return "", false
}

func firstText(r *mcp.CallToolResult) string {
	for _, c := range r.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			return clip(t.Text)
		}
	}
	return "(no text)"
}

// clip bounds upstream text in errors: 160 bytes, cut on a rune boundary
// (adapter.Sanitize removes control characters and invalid UTF-8).
func clip(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= 160 {
		return s
	}
	for n := 160; n > 0; n-- {
		if (s[n] & 0xC0) != 0x80 {
			return s[:n] + "…"
		}
	}
	return ""
}
