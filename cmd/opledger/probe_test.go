package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/api"
	"github.com/opledger/opledger/internal/app"
)

// A token of role metrics, written by "opledger token -token-file", is what
// "opledger probe -token-file" sends: /readyz and /metrics answer it, and
// refuse the probe without it (so a healthcheck without its token fails
// rather than the endpoints being open). Breaking it: a probe that sends
// nothing, or operational endpoints served without a credential.
func TestProbeSendsItsToken(t *testing.T) {
	t.Parallel()
	c := cli{t: t, env: map[string]string{}}
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "probe.token")
	code, out, errOut := c.run("", "token", "-actor", "healthcheck", "-role", "metrics", "-token-file", tokenFile)
	require.Equal(t, 0, code, errOut)
	token, err := os.ReadFile(tokenFile)
	require.NoError(t, err)
	require.NotContains(t, out, strings.TrimSpace(string(token)), "written, not printed")
	fi, err := os.Stat(tokenFile)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	code, _, _ = c.run("", "token", "-actor", "healthcheck", "-role", "metrics", "-token-file", tokenFile)
	require.Equal(t, 1, code, "an existing token file is never overwritten")

	tokensPath := filepath.Join(dir, "tokens.yaml")
	require.NoError(t, os.WriteFile(tokensPath, []byte(out[strings.Index(out, "- {actor: "):]), 0o600))
	tokens, err := api.LoadTokens(tokensPath)
	require.NoError(t, err)
	guard, err := api.NewGuard(api.GuardConfig{Tokens: tokens, Log: zerolog.Nop()})
	require.NoError(t, err)
	srv, err := app.ServeHTTP(app.HTTPConfig{Addr: "127.0.0.1:0", Gatherer: prometheus.NewRegistry(), Guard: guard,
		Ready: func(context.Context) []app.Check { return nil }})
	require.NoError(t, err)
	t.Cleanup(srv.Close)

	for _, path := range []string{"/readyz", "/metrics"} {
		code, _, errOut = c.run("", "probe", "-token-file", tokenFile, srv.URL()+path)
		require.Equal(t, 0, code, "%s: %s", path, errOut)
		code, _, errOut = c.run("", "probe", srv.URL()+path)
		require.Equal(t, 1, code, path)
		require.Contains(t, errOut, "401", path)
	}
	c.env["OPLEDGER_PROBE_TOKEN_FILE"] = tokenFile
	code, _, errOut = c.run("", "probe", srv.URL()+"/readyz")
	require.Equal(t, 0, code, errOut)
	resp, err := http.Get(srv.URL() + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "liveness needs no credential")
}
