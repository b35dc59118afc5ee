package api_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/api"
	"github.com/opledger/opledger/internal/ops"
)

// An agent token carries its tenant and workflow prefix from the tokens
// file to the actor; only agents have them, and every agent has a tenant.
func TestAgentTokens(t *testing.T) {
	t.Parallel()
	bot, e, err := api.GenerateAgentToken("bot", "acme", "support_")
	require.NoError(t, err)
	require.Equal(t, "- {actor: bot, role: agent, tenant: acme, workflow_prefix: support_, sha256: "+e.SHA256+"}", e.Line())
	entries, err := api.ParseTokens([]byte(e.Line()))
	require.NoError(t, err)
	require.Equal(t, []api.TokenEntry{e}, entries)
	tokens, err := api.NewTokens(entries)
	require.NoError(t, err)
	got, ok := tokens.Lookup(bot)
	require.True(t, ok)
	require.Equal(t, ops.Actor{ID: "bot", Role: ops.RoleAgent, Tenant: "acme", WorkflowPrefix: "support_"}, got)
	require.True(t, got.Sees("acme", "support_42"))
	require.False(t, got.Sees("acme", "billing_1"), "outside the prefix")
	require.False(t, got.Sees("default", "support_42"), "another tenant")
	require.False(t, got.Sees("", "support_42"), "the default tenant is another tenant")
	require.False(t, ops.ValidRole(ops.RoleAgent), "no role of the human loop")

	_, d, err := api.GenerateAgentToken("free", "default", "")
	require.NoError(t, err)
	require.NotContains(t, d.Line(), "workflow_prefix")
	tokens, err = api.NewTokens([]api.TokenEntry{d})
	require.NoError(t, err)
	require.Equal(t, 1, tokens.Len())

	h := strings.Repeat("a", 64)
	for doc, want := range map[string]string{
		"- {actor: bot, role: agent, sha256: " + h + "}":                                                                                                    "needs its tenant",
		"- {actor: bot, role: agent, tenant: ACME, sha256: " + h + "}":                                                                                      "needs its tenant",
		"- {actor: bot, role: agent, tenant: acme, workflow_prefix: 'a b', sha256: " + h + "}":                                                              "workflow_prefix must be",
		"- {actor: bot, role: agent, tenant: acme, workflow_prefix: a.b, sha256: " + h + "}":                                                                "workflow_prefix must be",
		"- {actor: vera, role: viewer, tenant: acme, sha256: " + h + "}":                                                                                    "only an agent token has",
		"- {actor: vera, role: admin, workflow_prefix: x, sha256: " + h + "}":                                                                               "only an agent token has",
		"- {actor: bot, role: agent, tenant: acme, sha256: " + h + "}\n- {actor: bot, role: agent, tenant: other, sha256: " + strings.Repeat("b", 64) + "}": "entry 2 (bot): role agent of tenant other",
		"- {actor: bot, role: agent, tenant: acme, tenant: other, sha256: " + h + "}":                                                                       "already defined",
		"- {actor: bot, role: agent, Tenant: acme, sha256: " + h + "}":                                                                                      "field Tenant not found",
	} {
		entries, err := api.ParseTokens([]byte(doc))
		if err == nil {
			_, err = api.NewTokens(entries)
		}
		require.ErrorContains(t, err, want, doc)
	}
	_, _, err = api.GenerateAgentToken("bot", "", "")
	require.ErrorContains(t, err, "needs its tenant")
}
