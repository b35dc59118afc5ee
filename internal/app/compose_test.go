package app_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/opledger/opledger/internal/api"
	"github.com/opledger/opledger/internal/pipetest"
)

// compose.yaml runs the operators' API: planner-ingest publishes its HTTP
// address on loopback only and reads its tokens from a secret file, which
// ships holding no token (every route 401, never open) and loads as the
// service will load it.
//
// Breaking it: without the port or the tokens file planner-ingest's API
// answers nobody, or 503 to everybody; publishing on every interface puts
// bearer tokens on the network in clear.
func TestComposeServesTheAPI(t *testing.T) {
	t.Parallel()
	root := pipetest.RepoRoot(t)
	data, err := os.ReadFile(filepath.Join(root, "compose.yaml"))
	require.NoError(t, err)
	var doc struct {
		Services map[string]struct {
			Ports       []string          `yaml:"ports"`
			Environment map[string]string `yaml:"environment"`
			Secrets     []struct {
				Source string `yaml:"source"`
				Target string `yaml:"target"`
			} `yaml:"secrets"`
		} `yaml:"services"`
		Secrets map[string]struct {
			File string `yaml:"file"`
		} `yaml:"secrets"`
	}
	require.NoError(t, yaml.Unmarshal(data, &doc))
	pi := doc.Services["planner-ingest"]
	require.True(t, slices.Contains(pi.Ports, "127.0.0.1:8480:8480"), "the API on loopback: %v", pi.Ports)
	for name, s := range doc.Services {
		for _, p := range s.Ports {
			require.True(t, strings.HasPrefix(p, "127.0.0.1:"), "%s publishes %s beyond this host", name, p)
		}
	}
	path := pi.Environment["OPLEDGER_API_TOKENS"]
	require.Equal(t, "/run/secrets/api_tokens", path)
	var source string
	for _, s := range pi.Secrets {
		if "/run/secrets/"+s.Target == path {
			source = s.Source
		}
	}
	require.NotEmpty(t, source, "OPLEDGER_API_TOKENS names a secret of the service")
	file := doc.Secrets[source].File
	require.NotEmpty(t, file)
	tokens, err := api.LoadTokens(filepath.Join(root, file))
	require.NoError(t, err, "the shipped tokens file loads")
	require.Zero(t, tokens.Len(), "and grants nothing")
}
