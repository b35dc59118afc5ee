package main

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testlog"
)

// TestDevAPIStaysOnLoopbackBehindItsToken: dev prints an admin token, so
// it refuses to serve its API anywhere but loopback, and even there every
// endpoint but /healthz asks for a token: the one it printed works, none
// or another does not, and the agent token it prints cannot read the
// operators' API.
func TestDevAPIStaysOnLoopbackBehindItsToken(t *testing.T) {
	t.Parallel()
	noEnv := func(string) (string, bool) { return "", false }
	for _, addr := range []string{"0.0.0.0:8480", "[::]:8480", ":8480", "192.0.2.1:8480", "example.com:8480"} {
		var out, errOut strings.Builder
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // a dev that started anyway ends
		err := runDev(ctx, []string{"-http", addr, "-log", "disabled"}, noEnv, &out, &errOut)
		cancel()
		require.ErrorIs(t, err, errUsage, addr)
		require.Contains(t, errOut.String(), "-http must be a loopback address", addr)
		require.Empty(t, out.String(), "%s: nothing started, no token printed", addr)
	}

	dbURL := testdb.New(t)
	env := func(k string) (string, bool) {
		if k == "DATABASE_URL" {
			return dbURL, true
		}
		return "", false
	}
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut testlog.Buffer
	done := make(chan error, 1)
	go func() {
		done <- runDev(ctx, []string{"-http", "127.0.0.1:0", "-log", "disabled", "-dispatchers", "1"}, env, &out, &errOut)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err, errOut.String())
		case <-time.After(30 * time.Second):
			t.Error("dev did not stop within 30 s of its context ending")
		}
	})
	tokenLine := regexp.MustCompile(`OPLEDGER_API_URL=(http://127\.0\.0\.1:\d+) OPLEDGER_API_TOKEN=(opl_\S+)`)
	agentLine := regexp.MustCompile(`OPLEDGER_AGENT_TOKEN=(opl_\S+)`)
	require.Eventually(t, func() bool { return agentLine.MatchString(out.String()) }, 60*time.Second, 50*time.Millisecond,
		"dev prints its tokens: %s %s", out.String(), errOut.String())
	m := tokenLine.FindStringSubmatch(out.String())
	require.NotNil(t, m, out.String())
	base, admin := m[1], m[2]
	agent := agentLine.FindStringSubmatch(out.String())[1]

	get := func(path, token string) int {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, get("/healthz", ""), "liveness is open")
	for _, path := range []string{"/readyz", "/metrics", "/v1/operations?workflow_id=wf_1", "/v1/openapi.yaml"} {
		require.Equal(t, http.StatusUnauthorized, get(path, ""), "%s without a token", path)
		require.Equal(t, http.StatusUnauthorized, get(path, "opl_not_a_token_of_this_run"), "%s with another token", path)
		require.Equal(t, http.StatusOK, get(path, admin), "%s with the printed dev token", path)
	}
	require.Equal(t, http.StatusForbidden, get("/v1/operations?workflow_id=wf_1", agent), "the agent token is not an operator's")
}
