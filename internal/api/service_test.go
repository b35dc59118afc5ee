package api_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/api"
	"github.com/opledger/opledger/internal/app"
	"github.com/opledger/opledger/internal/natsembed"
	"github.com/opledger/opledger/internal/ops"
	"github.com/opledger/opledger/internal/testdb"
)

// The planner-ingest binary serves the API on its HTTP address, behind the
// tokens file OPLEDGER_API_TOKENS names; without one the API answers 503,
// never open; a bad tokens file stops it at start. Other services serve no API.
func TestPlannerIngestServesTheAPI(t *testing.T) {
	t.Parallel()
	url := testdb.New(t)
	ns, err := natsembed.Start(natsembed.Options{})
	require.NoError(t, err)
	t.Cleanup(ns.Shutdown)
	token, entry, err := api.GenerateToken("vera", ops.RoleViewer)
	require.NoError(t, err)
	dir := t.TempDir()
	good := filepath.Join(dir, "tokens.yaml")
	require.NoError(t, os.WriteFile(good, []byte(entry.Line()+"\n"), 0o600))
	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("- {actor: vera, role: boss, sha256: "+entry.SHA256+"}\n"), 0o600))

	// start runs a service until the test ends; its error is on the channel.
	start := func(service, tokens string) (string, <-chan error) {
		addr := freeAddr(t)
		vars := map[string]string{"DATABASE_URL": url, "NATS_URL": ns.URL(), "OPLEDGER_HTTP_ADDR": addr}
		if tokens != "" {
			vars["OPLEDGER_API_TOKENS"] = tokens
		}
		env := func(k string) (string, bool) {
			if v, ok := vars[k]; ok {
				return v, true
			}
			if strings.HasPrefix(k, "OPLEDGER_VENDOR_") {
				return "http://127.0.0.1:9", true // nothing is sent in this test
			}
			return "", false
		}
		cfg, err := app.ParseServiceFlags(service, []string{"-log", "disabled"}, env, io.Discard)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done, stopped := make(chan error, 1), make(chan struct{})
		go func() {
			defer close(stopped)
			done <- app.RunService(ctx, cfg)
		}()
		t.Cleanup(func() { cancel(); <-stopped })
		// The HTTP address answers from the first moment (503 while the
		// service starts): wait until it is ready, or has given up.
		deadline := time.Now().Add(20 * time.Second)
		for {
			select {
			case <-stopped:
				return "http://" + addr, done
			default:
			}
			// /readyz needs a token; without tokens nothing does but
			// /healthz, and the API says so once it is mounted.
			path, auth := "/readyz", "Bearer "+token
			if tokens == "" {
				path = "/v1/operations"
			}
			req, _ := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
			req.Header.Set("Authorization", auth)
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK || (tokens == "" && strings.Contains(string(b), "no API tokens configured")) {
					break
				}
			}
			require.True(t, time.Now().Before(deadline), "%s never became ready", service)
			time.Sleep(50 * time.Millisecond)
		}
		return "http://" + addr, done
	}
	get := func(base, path, token string) (int, string) {
		deadline := time.Now().Add(20 * time.Second)
		for {
			req, err := http.NewRequest("GET", base+path, nil)
			require.NoError(t, err)
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				return resp.StatusCode, string(readAll(t, resp))
			}
			require.True(t, time.Now().Before(deadline), "%s never answered: %v", base, err)
			time.Sleep(50 * time.Millisecond)
		}
	}

	withTokens, _ := start(app.PlannerIngest, good)
	code, body := get(withTokens, "/v1/operations", token)
	require.Equal(t, http.StatusOK, code, body)
	require.JSONEq(t, `{"operations":[]}`, body)
	code, _ = get(withTokens, "/v1/operations", "")
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = get(withTokens, "/v1/openapi.yaml", "")
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = get(withTokens, "/v1/openapi.yaml", token)
	require.Equal(t, http.StatusOK, code)
	code, _ = get(withTokens, "/metrics", "")
	require.Equal(t, http.StatusUnauthorized, code, "/metrics needs a credential")
	code, _ = get(withTokens, "/metrics", token)
	require.Equal(t, http.StatusOK, code)

	without, _ := start(app.PlannerIngest, "")
	code, body = get(without, "/v1/operations", token)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "no API tokens configured")
	code, _ = get(without, "/healthz", "")
	require.Equal(t, http.StatusOK, code)
	code, body = get(without, "/readyz", token)
	require.Equal(t, http.StatusServiceUnavailable, code, "no tokens: never open")
	require.Contains(t, body, "no API tokens configured")

	dispatcher, _ := start(app.Dispatcher, good)
	code, _ = get(dispatcher, "/healthz", "")
	require.Equal(t, http.StatusOK, code)
	code, _ = get(dispatcher, "/v1/operations", token)
	require.Equal(t, http.StatusNotFound, code, "only planner-ingest serves the API")
	code, _ = get(dispatcher, "/metrics", "")
	require.Equal(t, http.StatusUnauthorized, code, "every service's /metrics needs a credential")
	code, _ = get(dispatcher, "/metrics", token)
	require.Equal(t, http.StatusOK, code, "a token of the tokens file, any role")

	_, done := start(app.PlannerIngest, bad)
	select {
	case err := <-done:
		require.ErrorContains(t, err, "role must be")
	case <-time.After(20 * time.Second):
		t.Fatal("planner-ingest started with a bad tokens file")
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return fmt.Sprint(ln.Addr())
}
