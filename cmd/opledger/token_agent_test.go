package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/api"
	"github.com/opledger/opledger/internal/ops"
)

// "opledger token -role agent" makes an agent token bound to its tenant
// (and a workflow prefix): the printed line is a valid tokens file whose
// token is that agent; an agent without a tenant, or a tenant for another
// role, is a usage error.
func TestTokenForAnAgent(t *testing.T) {
	t.Parallel()
	c := cli{t: t, env: map[string]string{}}
	code, out, errOut := c.run("", "token", "-actor", "bot", "-role", "agent", "-tenant", "acme", "-workflow-prefix", "support_")
	require.Equal(t, 0, code, errOut)
	m := tokenRE.FindStringSubmatch(out)
	require.NotNil(t, m, out)
	line := strings.TrimSpace(out[strings.Index(out, "- {actor: "):])
	entries, err := api.ParseTokens([]byte(line))
	require.NoError(t, err)
	tokens, err := api.NewTokens(entries)
	require.NoError(t, err)
	a, ok := tokens.Lookup(m[1])
	require.True(t, ok)
	require.Equal(t, ops.Actor{ID: "bot", Role: ops.RoleAgent, Tenant: "acme", WorkflowPrefix: "support_"}, a)

	for _, args := range [][]string{
		{"token", "-actor", "bot", "-role", "agent"},
		{"token", "-actor", "vera", "-role", "viewer", "-tenant", "acme"},
	} {
		code, _, errOut := c.run("", args...)
		require.Equal(t, 2, code, "%v", args)
		require.NotEmpty(t, errOut)
	}
}
