package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/opledger/opledger/examples"
	"github.com/opledger/opledger/internal/agentcall"
	"github.com/opledger/opledger/internal/api"
	"github.com/opledger/opledger/internal/apiclient"
	"github.com/opledger/opledger/internal/app"
	"github.com/opledger/opledger/internal/bus"
	"github.com/opledger/opledger/internal/mcpserver"
	"github.com/opledger/opledger/pkg/adapter/mcpadapter"
	"github.com/opledger/opledger/pkg/client"
	"github.com/opledger/opledger/pkg/registry"
	"github.com/opledger/opledger/pkg/wire"
)

const mcpUsage = `usage: opledger mcp <serve|proxy> [flags]

  serve   an MCP server whose tools are the registry's: every tools/call is an intent
          through NATS, recorded before it runs (stdio; -http ADDR for streamable HTTP)
  proxy   the same in front of an upstream MCP server (-upstream-url or -upstream-cmd):
          its tools the registry names are listed through, side effects go through the
          ledger, reads pass straight through

docs/mcp.md describes both. Run "opledger mcp serve -h" for the flags.
`

// runMCP is "opledger mcp".
func runMCP(ctx context.Context, args []string, env func(string) (string, bool), stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, mcpUsage)
		return errUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, mcpUsage)
		return flag.ErrHelp
	case "serve", "proxy":
	default:
		fmt.Fprintf(stderr, "opledger mcp: unknown command %q\n\n%s", args[0], mcpUsage)
		return errUsage
	}
	proxy := args[0] == "proxy"
	fs := flag.NewFlagSet("opledger mcp "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	def := func(key, d string) string {
		if v := getenv(env, key); v != "" {
			return v
		}
		return d
	}
	natsURL := fs.String("nats", def("NATS_URL", "nats://127.0.0.1:4222"), "NATS server [NATS_URL]")
	natsAuth := app.NATSAuthFlags(fs, def)
	tenant := fs.String("tenant", def("OPLEDGER_MCP_TENANT", ""), "tenant the calls belong to (default: the default tenant) [OPLEDGER_MCP_TENANT]")
	workflow := fs.String("workflow", def("OPLEDGER_MCP_WORKFLOW", ""), "workflow of every call (required) [OPLEDGER_MCP_WORKFLOW]")
	workflowMeta := fs.Bool("workflow-from-meta", false, "let a call name its workflow in _meta dev.opledger/workflow_id")
	actor := fs.String("actor", def("OPLEDGER_MCP_ACTOR", "mcp-agent"), "the agent the calls are proposed by: it can never approve them [OPLEDGER_MCP_ACTOR]")
	wait := fs.Duration("wait", agentcall.DefaultWait, "how long a call waits for its operation to come to rest (at most 10m)")
	metaArgs := fs.Bool("meta-args", false, "also read _opledger_conversation_id and _opledger_tool_call_id arguments, for clients that cannot set _meta")
	var registries []string
	fs.Func("registry", "tool registry file or directory, repeatable (default: the embedded examples/registry.yaml) [OPLEDGER_REGISTRY, comma-separated]", func(s string) error {
		registries = append(registries, s)
		return nil
	})
	apiURL := fs.String("api", def("OPLEDGER_API_URL", ""), "the operators' HTTP API: get_operation, list_operations and approval links [OPLEDGER_API_URL]")
	apiTokenFile := fs.String("api-token-file", def("OPLEDGER_MCP_API_TOKEN_FILE", ""), "file holding a viewer token for the API (or OPLEDGER_MCP_API_TOKEN) [OPLEDGER_MCP_API_TOKEN_FILE]")
	approverFile := fs.String("form-approver-token-file", def("OPLEDGER_MCP_FORM_APPROVER_TOKEN_FILE", ""),
		"file holding an approver token: lets users confirm calls that need approval in a form in their client (off without it) [OPLEDGER_MCP_FORM_APPROVER_TOKEN_FILE]")
	stateKeyFile := fs.String("state-key-file", def("OPLEDGER_MCP_STATE_KEY_FILE", ""), "file holding at least 32 bytes that sign approval elicitations' state, so they survive restarts [OPLEDGER_MCP_STATE_KEY_FILE]")
	httpAddr := fs.String("http", "", "serve streamable HTTP on this address (at /mcp) instead of stdio")
	httpTokens := fs.String("http-tokens", def("OPLEDGER_MCP_HTTP_TOKENS", ""), "tokens file (opledger token's format) for -http; required off loopback; the token's actor proposes the calls [OPLEDGER_MCP_HTTP_TOKENS]")
	logLevel := fs.String("log", "info", "log level (logs go to stderr)")
	logFormat := fs.String("log-format", app.LogAuto, "log format: json, console, or auto (console on a terminal)")
	instance := fs.String("instance", def("OPLEDGER_INSTANCE", ""), "instance name in logs (default: host name and process id) [OPLEDGER_INSTANCE]")
	var upURL, upCmd, upName *string
	if proxy {
		upName = fs.String("upstream-name", "", "the upstream's name, as the registry's adapter.server says (required)")
		upURL = fs.String("upstream-url", "", "the upstream's streamable HTTP endpoint")
		upCmd = fs.String("upstream-cmd", "", "the upstream as a program speaking MCP on stdio (split on spaces)")
	}
	if err := parse(fs, args[1:]); err != nil {
		return err
	}
	base, err := app.NewLogger(stderr, *logLevel, *logFormat)
	if err != nil {
		return err
	}
	// Every line says which service and which instance it comes from.
	log := base.With().Str("service", "mcp").Str("instance", cmp.Or(*instance, app.DefaultInstance())).Logger()
	if *workflow == "" {
		return errors.New("mcp: -workflow is required")
	}
	if len(registries) == 0 && getenv(env, "OPLEDGER_REGISTRY") != "" {
		registries = strings.Split(getenv(env, "OPLEDGER_REGISTRY"), ",")
	}
	var reg *registry.Registry
	if len(registries) > 0 {
		reg, err = registry.LoadPaths(registries, registry.Options{Catalog: true})
	} else {
		reg, err = registry.LoadSources([]registry.Source{{Name: "examples/registry.yaml (embedded)", Data: examples.Registry}}, registry.Options{Catalog: true})
	}
	if err != nil {
		return err
	}
	if err := natsAuth.Validate(); err != nil {
		return err
	}
	nopts, err := natsAuth.Options()
	if err != nil {
		return err
	}
	cl, err := client.Connect(*natsURL, "opledger-mcp", client.Tenant(*tenant), client.NATSOptions(append(nopts, nats.MaxReconnects(-1))...))
	if err != nil {
		return fmt.Errorf("mcp: %s: %w", bus.RedactURL(*natsURL), err)
	}
	defer cl.Close()
	door, err := agentcall.New(agentcall.Config{Client: cl, Tenant: *tenant, Registry: reg, Wait: *wait,
		Actor: wire.Actor{Type: "agent", ID: *actor}})
	if err != nil {
		return err
	}
	cfg := mcpserver.Config{Door: door, Workflow: *workflow, WorkflowFromMeta: *workflowMeta, ArgumentFallback: *metaArgs,
		APIURL: *apiURL, Name: "opledger", Log: log}
	if *apiURL != "" {
		tok, err := secret(env, "OPLEDGER_MCP_API_TOKEN", *apiTokenFile)
		if err != nil {
			return err
		}
		if tok != "" {
			if cfg.Reader, err = apiclient.New(*apiURL, tok, nil); err != nil {
				return err
			}
		}
		if *approverFile != "" {
			tok, err := secret(env, "", *approverFile)
			if err != nil {
				return err
			}
			if cfg.FormApprover, err = apiclient.New(*apiURL, tok, nil); err != nil {
				return err
			}
		}
	}
	if *stateKeyFile != "" {
		if cfg.StateKey, err = os.ReadFile(*stateKeyFile); err != nil {
			return fmt.Errorf("mcp: state key: %w", err)
		}
	}
	if proxy {
		if *upName == "" || (*upURL == "") == (*upCmd == "") {
			return errors.New("mcp proxy: -upstream-name and one of -upstream-url or -upstream-cmd are required")
		}
		up := mcpadapter.Upstream{URL: *upURL, Command: strings.Fields(*upCmd)}
		px, err := mcpserver.ConnectProxy(ctx, *upName, up)
		if err != nil {
			return err
		}
		defer px.Close()
		served := px.Configure(&cfg, reg, cfg.Log)
		cfg.Name = "opledger-proxy"
		log.Info().Strs("tools", served).Strs("hidden", px.Hidden).Msg("mcp proxy: upstream tools listed through")
	}
	srv, err := mcpserver.New(cfg)
	if err != nil {
		return err
	}
	if *httpAddr == "" {
		log.Info().Str("workflow_id", *workflow).Msg("mcp: serving on stdio")
		err := srv.Run(ctx, &mcp.StdioTransport{})
		if errors.Is(err, context.Canceled) || errors.Is(err, io.EOF) {
			return nil
		}
		return err
	}
	return serveMCPHTTP(ctx, srv, *httpAddr, *httpTokens, stdout, log)
}

// serveMCPHTTP serves streamable HTTP at /mcp. Off loopback it needs a
// tokens file: whoever reaches it could submit calls as the tenant.
func serveMCPHTTP(ctx context.Context, srv *mcp.Server, addr, tokensFile string, stdout io.Writer, log zerolog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	host, _, _ := net.SplitHostPort(ln.Addr().String())
	if ip := net.ParseIP(host); tokensFile == "" && (ip == nil || !ip.IsLoopback()) {
		ln.Close()
		return errors.New("mcp: -http off loopback needs -http-tokens: anyone who reaches it could submit calls")
	}
	var h http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{SessionTimeout: 30 * time.Minute})
	if tokensFile != "" {
		tokens, err := api.LoadTokens(tokensFile)
		if err != nil {
			ln.Close()
			return err
		}
		h = auth.RequireBearerToken(func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
			a, ok := tokens.Lookup(token)
			if !ok {
				return nil, auth.ErrInvalidToken
			}
			return &auth.TokenInfo{UserID: a.ID, Expiration: time.Now().Add(time.Hour)}, nil
		}, nil)(h)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	fmt.Fprintf(stdout, "opledger mcp: streamable HTTP at http://%s/mcp\n", ln.Addr())
	log.Info().Str("addr", ln.Addr().String()).Bool("tokens", tokensFile != "").Msg("mcp: serving streamable HTTP")
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}()
	if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// secret reads a secret from a file, else from the variable name.
func secret(env func(string) (string, bool), name, file string) (string, error) {
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("mcp: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	if name == "" {
		return "", nil
	}
	return getenv(env, name), nil
}
