package app

import (
	"fmt"
	"strings"

	"github.com/opledger/opledger/examples"
	"github.com/opledger/opledger/pkg/adapter/mcpadapter"
	"github.com/opledger/opledger/pkg/registry"
)

// RegistryConfig says where the tool registry comes from.
type RegistryConfig struct {
	// Paths are registry files or directories; none means the embedded
	// example registry (examples/registry.yaml).
	Paths []string
	// YAML, when set, is used instead of Paths.
	YAML []byte
	// Vendors maps vendor names to base URLs, before LookupEnv is asked.
	Vendors map[string]string
	// LookupEnv reads the program's environment (os.LookupEnv): vendor base
	// URLs from OPLEDGER_VENDOR_<NAME>_URL and the secrets that ${NAME}
	// references in adapter headers name. nil reads nothing.
	LookupEnv func(string) (string, bool)
}

// LoadRegistry loads and validates the registry cfg names.
func LoadRegistry(cfg RegistryConfig) (*registry.Registry, error) {
	opts := registry.Options{Vendors: cfg.Vendors}
	if cfg.LookupEnv != nil {
		opts.VendorURL = func(name string) (string, bool) {
			return cfg.LookupEnv(VendorEnv(name))
		}
		opts.Secret = cfg.LookupEnv
	}
	switch {
	case cfg.YAML != nil:
		return registry.Load(cfg.YAML, opts)
	case len(cfg.Paths) > 0:
		return registry.LoadPaths(cfg.Paths, opts)
	}
	return registry.LoadSources([]registry.Source{{Name: "examples/registry.yaml (embedded)", Data: examples.Registry}}, opts)
}

// VendorEnv is the environment variable that holds a vendor's base URL.
func VendorEnv(vendor string) string {
	return "OPLEDGER_VENDOR_" + strings.ToUpper(vendor) + "_URL"
}

// MCPEnv are the environment variables that say where an upstream MCP
// server is: OPLEDGER_MCP_<NAME>_URL (streamable HTTP) or
// OPLEDGER_MCP_<NAME>_COMMAND (a program on stdio, its arguments split on
// spaces).
func MCPEnv(server string) (urlVar, commandVar string) {
	n := "OPLEDGER_MCP_" + strings.ToUpper(server)
	return n + "_URL", n + "_COMMAND"
}

// MCPUpstreamsFromEnv reads the address of every upstream MCP server the
// registry's mcp tools name. A server without one is left out (the
// dispatcher then refuses to start: its tools could not be called); one
// with both is an error.
func MCPUpstreamsFromEnv(reg *registry.Registry, lookupEnv func(string) (string, bool)) (map[string]mcpadapter.Upstream, error) {
	out := map[string]mcpadapter.Upstream{}
	if lookupEnv == nil {
		return out, nil
	}
	for _, server := range reg.MCPServers() {
		uv, cv := MCPEnv(server)
		u, _ := lookupEnv(uv)
		c, _ := lookupEnv(cv)
		switch {
		case u != "" && c != "":
			return nil, fmt.Errorf("mcp upstream %s: set %s or %s, not both", server, uv, cv)
		case u != "":
			out[server] = mcpadapter.Upstream{URL: u}
		case strings.TrimSpace(c) != "":
			out[server] = mcpadapter.Upstream{Command: strings.Fields(c)}
		}
	}
	return out, nil
}
