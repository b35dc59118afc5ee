package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"

	"sort"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/opledger/opledger/pkg/adapter/mcpadapter"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/registry"
)

// Proxy is `opledger mcp proxy`'s view of its upstream MCP server: the
// session it lists tools and passes reads through on. Side-effecting calls
// never use it: they go through the ledger, and the dispatcher calls the
// upstream with its own session (pkg/adapter/mcpadapter).
type Proxy struct {
	server string
	cs     *mcp.ClientSession
	tools  map[string]*mcp.Tool
	// Hidden are the upstream's tools the registry does not name: they are
	// not listed, since nothing says what they do to the world.
	Hidden []string
}

// maxUpstreamTools bounds what an upstream may list.
const maxUpstreamTools = 1000

// ConnectProxy connects to the upstream server the registry calls server
// and lists its tools.
func ConnectProxy(ctx context.Context, server string, up mcpadapter.Upstream) (*Proxy, error) {
	t, err := up.Transport()
	if err != nil {
		return nil, fmt.Errorf("mcp proxy: upstream %s: %w", server, err)
	}
	cs, err := mcpadapter.NewClient("opledger-proxy").Connect(ctx, t, nil)
	if err != nil {
		return nil, fmt.Errorf("mcp proxy: connect to upstream %s: %w", server, err)
	}
	p := &Proxy{server: server, cs: cs, tools: map[string]*mcp.Tool{}}
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			_ = cs.Close()
			return nil, fmt.Errorf("mcp proxy: list the tools of upstream %s: %w", server, err)
		}
		if len(p.tools) >= maxUpstreamTools {
			_ = cs.Close()
			return nil, fmt.Errorf("mcp proxy: upstream %s lists more than %d tools", server, maxUpstreamTools)
		}
		p.tools[tool.Name] = tool
	}
	return p, nil
}

// Close ends the session.
func (p *Proxy) Close() { _ = p.cs.Close() }

// Configure points cfg at the upstream: it serves the registry's mcp tools
// of this server that the upstream has (its pure_read ones passed straight
// through), described by the registry or else by the upstream, with the
// registry's schema and hints, never the upstream's. It returns the tools
// served.
func (p *Proxy) Configure(cfg *Config, reg *registry.Registry, log zerolog.Logger) []string {
	named := map[string]bool{}
	var served []string
	for _, name := range reg.Names() {
		t, _ := reg.Tool(name)
		m := t.Adapter.MCP
		if m == nil || m.Server != p.server {
			continue
		}
		named[m.Tool] = true
		if m.Verify != nil {
			named[m.Verify.Tool] = true // the dispatcher's own read; listed only if registered itself
		}
		if _, ok := p.tools[m.Tool]; !ok {
			log.Warn().Str("tool", name).Str("upstream_tool", m.Tool).Msg("mcp proxy: the upstream has no such tool; not served")
			continue
		}
		served = append(served, name)
	}
	for name := range p.tools {
		if !named[name] {
			p.Hidden = append(p.Hidden, name)
		}
	}
	sort.Strings(p.Hidden)
	if len(p.Hidden) > 0 {
		log.Warn().Strs("upstream_tools", p.Hidden).Msg("mcp proxy: upstream tools the registry does not name are not served")
	}
	cfg.Tools = served
	cfg.Passthrough = p.pass
	cfg.Describe = func(t *registry.Tool) string {
		if t.Description != "" {
			return t.Description
		}
		if up := p.tools[t.Adapter.MCP.Tool]; up != nil {
			return clipText(up.Description, 1024)
		}
		return ""
	}
	return served
}

// pass calls a pure_read tool on the upstream and returns its answer,
// bounded; nothing is recorded.
func (p *Proxy) pass(ctx context.Context, t *registry.Tool, args json.RawMessage) (*mcp.CallToolResult, error) {
	if t.Class != op.ClassPureRead || t.Adapter.MCP == nil {
		return nil, fmt.Errorf("mcp proxy: %s is not a read", t.Name)
	}
	var m map[string]any
	if err := json.Unmarshal(args, &m); err != nil {
		return nil, err
	}
	r, err := p.cs.CallTool(ctx, &mcp.CallToolParams{Name: t.Adapter.MCP.Tool, Arguments: m})
	if err != nil {
		return nil, fmt.Errorf("upstream %s: %s", p.server, clipText(err.Error(), 200))
	}
	raw, err := json.Marshal(r)
	if err != nil || len(raw) > mcpadapter.MaxResult {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "the upstream's answer is too large"}}}, nil
	}
	r.Meta = nil
	return r, nil
}

func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	r := []rune(s)
	for len(string(r)) > n {
		r = r[:len(r)-1]
	}
	return string(r) + "…"
}
