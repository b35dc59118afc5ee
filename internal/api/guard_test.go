package api_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/api"
	"github.com/opledger/opledger/internal/ops"
)

// The operational routes' guard: a token of any role passes (the metrics
// role too); without one a request is refused, counted by reason, unless
// the guard was opened to loopback and the request comes from it; a
// request from elsewhere never passes without a token, and nothing passes
// without tokens configured. Breaking it: OpenOnLoopback trusting a
// forwarded header or any address, or an unconfigured guard letting
// requests through.
func TestGuardProbe(t *testing.T) {
	t.Parallel()
	token, entry, err := api.GenerateToken("prom", ops.RoleMetrics)
	require.NoError(t, err)
	tokens, err := api.NewTokens([]api.TokenEntry{entry})
	require.NoError(t, err)
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	do := func(g *api.Guard, remote, auth string, header ...string) int {
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		req.RemoteAddr = remote
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		rec := httptest.NewRecorder()
		g.Probe(ok).ServeHTTP(rec, req)
		return rec.Code
	}
	reg := prometheus.NewRegistry()
	closed, err := api.NewGuard(api.GuardConfig{Tokens: tokens, Registerer: reg})
	require.NoError(t, err)
	open, err := api.NewGuard(api.GuardConfig{Tokens: tokens, OpenOnLoopback: true})
	require.NoError(t, err)
	for _, remote := range []string{"127.0.0.1:5000", "10.1.2.3:5000", "[::1]:5000"} {
		require.Equal(t, http.StatusNoContent, do(closed, remote, "Bearer "+token), remote)
		require.Equal(t, http.StatusUnauthorized, do(closed, remote, ""), remote)
		require.Equal(t, http.StatusUnauthorized, do(closed, remote, "Bearer opl_nope"), remote)
	}
	require.Equal(t, http.StatusNoContent, do(open, "127.0.0.1:5000", ""))
	require.Equal(t, http.StatusNoContent, do(open, "[::1]:5000", ""))
	require.Equal(t, http.StatusUnauthorized, do(open, "10.1.2.3:5000", ""), "only loopback is open")
	require.Equal(t, http.StatusUnauthorized, do(open, "10.1.2.3:5000", "", "X-Forwarded-For", "127.0.0.1", "X-Real-Ip", "127.0.0.1"))
	require.Equal(t, http.StatusNoContent, do(open, "10.1.2.3:5000", "Bearer "+token))
	require.Equal(t, 3.0, unauthorized(t, reg, "missing"))
	require.Equal(t, 3.0, unauthorized(t, reg, "unknown"))

	// An agent's token (bound to one tenant) reads no process metrics.
	agentToken, agentEntry, err := api.GenerateAgentToken("agent-1", "acme", "")
	require.NoError(t, err)
	withAgent, err := api.NewTokens([]api.TokenEntry{entry, agentEntry})
	require.NoError(t, err)
	ga, err := api.NewGuard(api.GuardConfig{Tokens: withAgent})
	require.NoError(t, err)
	require.Equal(t, http.StatusForbidden, do(ga, "10.1.2.3:5000", "Bearer "+agentToken))
	require.Equal(t, http.StatusNoContent, do(ga, "10.1.2.3:5000", "Bearer "+token))

	none, err := api.NewGuard(api.GuardConfig{})
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, do(none, "127.0.0.1:1", "Bearer "+token))
	var zero *api.Guard
	require.Equal(t, http.StatusServiceUnavailable, do(zero, "127.0.0.1:1", "Bearer "+token), "no guard refuses")
}

// unauthorized reads opledger_api_unauthorized_total{reason}.
func unauthorized(t *testing.T, reg *prometheus.Registry, reason string) float64 {
	t.Helper()
	return counter(t, reg, "opledger_api_unauthorized_total", reason)
}

// counter reads the counter name{reason} from reg (0 when it has none).
func counter(t *testing.T, reg *prometheus.Registry, name, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
