package api_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/api"
	"github.com/opledger/opledger/internal/ops"
)

// A generated token is found by its hash and by nothing else; the line it
// prints is a valid tokens file; JSON files work too.
func TestTokensFile(t *testing.T) {
	t.Parallel()
	alice, ea, err := api.GenerateToken("alice", ops.RoleApprover)
	require.NoError(t, err)
	oscar, eo, err := api.GenerateToken("oscar", ops.RoleOperator)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(alice, api.TokenPrefix))
	require.Len(t, alice, len(api.TokenPrefix)+43, "256 random bits")
	require.NotEqual(t, alice, oscar)
	require.Equal(t, api.HashToken(alice), ea.SHA256)
	require.NotContains(t, ea.Line(), alice)

	path := filepath.Join(t.TempDir(), "tokens.yaml")
	require.NoError(t, os.WriteFile(path, []byte("# operators\n"+ea.Line()+"\n"+eo.Line()+"\n"), 0o600))
	tokens, err := api.LoadTokens(path)
	require.NoError(t, err)
	require.Equal(t, 2, tokens.Len())
	got, ok := tokens.Lookup(alice)
	require.True(t, ok)
	require.Equal(t, ops.Actor{ID: "alice", Role: ops.RoleApprover}, got)
	got, ok = tokens.Lookup(oscar)
	require.True(t, ok)
	require.Equal(t, ops.Actor{ID: "oscar", Role: ops.RoleOperator}, got)
	for _, bad := range []string{"", ea.SHA256, alice + " ", strings.ToUpper(alice), alice[:len(alice)-1], strings.Repeat("a", api.MaxTokenLen+1)} {
		_, ok := tokens.Lookup(bad)
		require.False(t, ok, "%.12q", bad)
	}
	var none *api.Tokens
	_, ok = none.Lookup(alice)
	require.False(t, ok)

	js := `[{"actor":"alice","role":"approver","sha256":"` + ea.SHA256 + `"}]`
	entries, err := api.ParseTokens([]byte(js))
	require.NoError(t, err)
	require.Equal(t, []api.TokenEntry{ea}, entries)
	entries, err = api.ParseTokens(nil)
	require.NoError(t, err)
	require.Empty(t, entries)

	_, err = api.LoadTokens(filepath.Join(t.TempDir(), "missing.yaml"))
	require.Error(t, err)
}

// A tokens file is refused whole, naming each bad entry, never echoing a hash.
func TestTokensFileRefusals(t *testing.T) {
	t.Parallel()
	_, e, err := api.GenerateToken("alice", ops.RoleApprover)
	require.NoError(t, err)
	h := e.SHA256
	for doc, want := range map[string]string{
		"- {actor: alice, role: approver, sha256: " + h + ", token: x}":    "field token not found",
		"- {actor: alice, role: approver, sha256: " + h + ", role: admin}": "already defined",
		"- {Actor: alice, role: approver, sha256: " + h + "}":              "field Actor not found",
		"actor: alice": "cannot unmarshal",
		"- {actor: alice, role: approver, sha256: " + h + "}\n---\n- {actor: bob}":                                                  "one YAML document",
		"- {actor: alice, role: root, sha256: " + h + "}":                                                                           "role must be",
		"- {actor: '', role: admin, sha256: " + h + "}":                                                                             "actor must be",
		"- {actor: 'al ice', role: admin, sha256: " + h + "}":                                                                       "actor must be",
		"- {actor: alice, role: admin, sha256: " + strings.ToUpper(h) + "}":                                                         "64 lowercase hex",
		"- {actor: alice, role: admin, sha256: abc}":                                                                                "64 lowercase hex",
		"- {actor: alice, role: admin, sha256: " + h + "}\n- {actor: bob, role: admin, sha256: " + h + "}":                          "entry 2 (bob): the same token hash as entry 1",
		"- {actor: alice, role: admin, sha256: " + h + "}\n- {actor: alice, role: viewer, sha256: " + strings.Repeat("0", 64) + "}": "entry 2 (alice): role viewer",
	} {
		entries, err := api.ParseTokens([]byte(doc))
		if err == nil {
			_, err = api.NewTokens(entries)
		}
		require.ErrorContains(t, err, want, doc)
		if !strings.Contains(want, "hex") {
			require.NotContains(t, err.Error(), h, "no hash in an error")
		}
	}
	// Rotation: one actor, two tokens, one role.
	_, e2, err := api.GenerateToken("alice", ops.RoleApprover)
	require.NoError(t, err)
	tokens, err := api.NewTokens([]api.TokenEntry{e, e2})
	require.NoError(t, err)
	require.Equal(t, 2, tokens.Len())
}
