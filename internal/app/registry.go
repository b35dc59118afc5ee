package app

import (
	"strings"

	"github.com/opledger/opledger/examples"
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
