package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/docs"
	"github.com/opledger/opledger/internal/api"
	"github.com/opledger/opledger/internal/app"
	"github.com/opledger/opledger/internal/natsembed"
	"github.com/opledger/opledger/internal/ops"
	"github.com/opledger/opledger/internal/testdb"
)

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// refusedPort is a loopback port that refuses every connection for the
// whole test: a socket bound to it that never listens holds it, so no
// other test's server (a NATS server in a package running beside this one
// took a port freePort had handed out, and the Postgres client read its
// INFO line) can take it in the meantime.
func refusedPort(t *testing.T) int {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	t.Cleanup(func() { syscall.Close(fd) })
	require.NoError(t, syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
	sa, err := syscall.Getsockname(fd)
	require.NoError(t, err)
	return sa.(*syscall.SockaddrInet4).Port
}

// env is a service's environment: vars, and every vendor of the example
// registry at an address nothing listens on.
func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		if v, ok := vars[k]; ok {
			return v, ok
		}
		if strings.HasPrefix(k, "OPLEDGER_VENDOR_") {
			return "http://127.0.0.1:9", true
		}
		return "", false
	}
}

// A service refuses a database without opledger's schema and says what to
// do, instead of starting and failing on every statement. It says so at
// once, even while NATS is not reachable yet: a schema that is behind does
// not catch up by waiting.
func TestServiceRefusesAnUnmigratedDatabase(t *testing.T) {
	t.Parallel()
	url := testdb.New(t)
	conn, err := pgx.Connect(context.Background(), url)
	require.NoError(t, err)
	_, err = conn.Exec(context.Background(), `DROP TABLE schema_migrations`)
	require.NoError(t, err)
	conn.Close(context.Background())
	cfg, err := app.ParseServiceFlags(app.PlannerIngest, []string{"-log", "disabled"},
		env(map[string]string{"DATABASE_URL": url, "NATS_URL": fmt.Sprintf("nats://127.0.0.1:%d", freePort(t))}), io.Discard)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = app.RunService(ctx, cfg)
	require.Error(t, err)
	require.NoError(t, ctx.Err(), "refused at once, not after waiting for NATS")
	require.Contains(t, err.Error(), "postgres: no opledger schema")
	require.Contains(t, err.Error(), "opledger migrate")
}

// /healthz, /metrics and /readyz answer from a service's first moment.
// While start-up waits for its dependencies, /readyz is 503 and says what
// each answered on the last try, the service's routes (the operators' API)
// answer 503 "starting", and when the wait runs out the error names the
// real cause, not just the deadline.
//
// Breaking it: serving HTTP only after the wait (as before) refuses the
// connection; an error made of the backoff's own error says "context
// deadline exceeded".
func TestServiceAnswersWhileWaitingForDependencies(t *testing.T) {
	t.Parallel()
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	// Open to loopback (every request here comes from it), as compose runs
	// a service for its healthcheck.
	cfg, err := app.ParseServiceFlags(app.PlannerIngest, []string{"-log", "disabled", "-http", httpAddr, "-connect-timeout", "4s", "-http-open-loopback"},
		env(map[string]string{
			"DATABASE_URL": fmt.Sprintf("postgres://opledger:secret@127.0.0.1:%d/opledger?sslmode=disable", refusedPort(t)),
			"NATS_URL":     fmt.Sprintf("nats://127.0.0.1:%d", refusedPort(t)),
		}), io.Discard)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- app.RunService(context.Background(), cfg) }()
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + httpAddr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	type readiness struct {
		Ready  bool        `json:"ready"`
		Checks []app.Check `json:"checks"`
	}
	var r readiness
	require.Eventually(t, func() bool {
		code, body := get("/readyz")
		r = readiness{}
		if code != http.StatusServiceUnavailable || json.Unmarshal([]byte(body), &r) != nil {
			return false
		}
		for _, c := range r.Checks {
			if (c.Name == "postgres" || c.Name == "nats") && !strings.Contains(c.Detail, "(try ") {
				return false
			}
		}
		return true
	}, 3*time.Second, 20*time.Millisecond, "/readyz answers 503 with each dependency's last try")
	require.False(t, r.Ready)
	for _, c := range r.Checks {
		require.False(t, c.OK, "%+v", c)
		switch c.Name {
		case "postgres", "nats":
			require.Regexp(t, `^waiting: .*connection refused \(try \d+\)$`, c.Detail)
			require.NotContains(t, c.Detail, "secret", "no password in the reason")
		}
	}
	code, _ := get("/healthz")
	require.Equal(t, http.StatusOK, code)
	code, body := get("/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "go_goroutines")
	code, body = get("/v1/operations")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, `"code": "unavailable"`)
	require.Contains(t, body, "starting: postgres: waiting:")

	err = <-done
	require.Error(t, err)
	require.Regexp(t, `^not reachable within 4s \(try \d+\): postgres: .*connection refused; nats: .*connection refused$`, err.Error())
	require.NotContains(t, err.Error(), "secret")
}

// Each service binary shows and takes only its own flags: -instances is the
// dispatcher's, -api-database-url and -webhook-secrets-file
// planner-ingest's, the retention period the reconciler's (its process
// campaigns for the maintenance leadership). Every one takes -api-tokens
// and -http-open-loopback: its /metrics and /readyz need a credential.
func TestServiceFlagsAreEachBinarysOwn(t *testing.T) {
	t.Parallel()
	own := map[string][]string{app.Dispatcher: {"-instances"}, app.PlannerIngest: {"-api-database-url", "-webhook-secrets-file"},
		app.Reconciler: {"-rejected-retention"}}
	for _, name := range app.AllServices {
		var usage strings.Builder
		_, err := app.ParseServiceFlags(name, []string{"-h"}, env(nil), &usage)
		require.ErrorIs(t, err, flag.ErrHelp)
		for _, other := range app.AllServices {
			for _, f := range own[other] {
				if other == name {
					require.Contains(t, usage.String(), "  "+f+" ", "%s -h", name)
					continue
				}
				require.NotContains(t, usage.String(), "  "+f+" ", "%s -h shows %s's flag", name, other)
				_, err := app.ParseServiceFlags(name, []string{f, "2"}, env(map[string]string{"DATABASE_URL": "x", "NATS_URL": "y"}), io.Discard)
				require.ErrorContains(t, err, "flag provided but not defined", "%s takes %s", name, f)
			}
		}
		require.NotContains(t, usage.String(), "only)", "%s -h: no flag of another binary", name)
		require.Contains(t, usage.String(), "  -api-tokens ", "%s -h", name)
		require.Contains(t, usage.String(), "  -http-open-loopback\n", "%s -h", name)
	}
}

func TestServiceHelpIsNotAnError(t *testing.T) {
	t.Parallel()
	_, err := app.ParseServiceFlags(app.Dispatcher, []string{"-h"}, env(nil), io.Discard)
	require.True(t, errors.Is(err, flag.ErrHelp))
}

// Every service binary serves /healthz, /metrics and /readyz. /readyz says
// why it is not ready: here NATS goes away, and comes back having lost its
// store; the service recreates its stream and consumer and is ready again
// without a restart.
func TestServiceReadiness(t *testing.T) {
	t.Parallel()
	url := testdb.New(t)
	natsPort := freePort(t)
	ns, err := natsembed.Start(natsembed.Options{Port: natsPort})
	require.NoError(t, err)
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	// Open to loopback, as compose runs it for the container's healthcheck
	// (every request here comes from 127.0.0.1).
	docToken, entry, err := api.GenerateToken("reader", ops.RoleMetrics)
	require.NoError(t, err)
	tokens := filepath.Join(t.TempDir(), "tokens.yaml")
	require.NoError(t, os.WriteFile(tokens, []byte(entry.Line()+"\n"), 0o600))
	cfg, err := app.ParseServiceFlags(app.Dispatcher, []string{"-log", "disabled", "-http", httpAddr, "-http-open-loopback"},
		env(map[string]string{"DATABASE_URL": url, "NATS_URL": ns.URL(), "OPLEDGER_API_TOKENS": tokens}), io.Discard)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.RunService(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		<-done
		ns.Shutdown()
	})
	getWith := func(path, token string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, "http://"+httpAddr+path, nil)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	get := func(path string) (int, string) { return getWith(path, "") }
	type readiness struct {
		Ready  bool        `json:"ready"`
		Checks []app.Check `json:"checks"`
	}
	ready := func() (readiness, int) {
		code, body := get("/readyz")
		var r readiness
		_ = json.Unmarshal([]byte(body), &r)
		return r, code
	}
	require.Eventually(t, func() bool { _, code := ready(); return code == http.StatusOK }, 20*time.Second, 50*time.Millisecond)
	r, _ := ready()
	require.True(t, r.Ready)
	require.Len(t, r.Checks, 3)
	code, _ := get("/healthz")
	require.Equal(t, http.StatusOK, code)
	code, body := get("/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "go_goroutines")
	// Every service hands out the operators' API document, which says that
	// planner-ingest serves the routes; a dispatcher serves none of them.
	// Open to loopback or not, the document needs a token of any role.
	code, _ = get("/v1/openapi.yaml")
	require.Equal(t, http.StatusUnauthorized, code)
	code, body = getWith("/v1/openapi.yaml", docToken)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, string(docs.OpenAPI), body)
	require.Contains(t, body, "planner-ingest")
	code, _ = get("/v1/operations")
	require.Equal(t, http.StatusNotFound, code)

	ns.Shutdown()
	require.Eventually(t, func() bool { _, code := ready(); return code == http.StatusServiceUnavailable }, 10*time.Second, 50*time.Millisecond)
	r, _ = ready()
	require.False(t, r.Ready)
	var nats app.Check
	for _, c := range r.Checks {
		if c.Name == "nats" {
			nats = c
		}
	}
	require.False(t, nats.OK)
	for _, conn := range []string{"/setup: ", "/dispatcher: ", "/relay-1"} {
		require.Contains(t, nats.Detail, conn, "each connection that is down is named, not only the first")
	}

	// NATS comes back on the same port with an empty store.
	ns, err = natsembed.Start(natsembed.Options{Port: natsPort})
	require.NoError(t, err)
	require.Eventually(t, func() bool { _, code := ready(); return code == http.StatusOK }, 30*time.Second, 100*time.Millisecond,
		"the service recreated its stream and consumer by itself")
	r, _ = ready()
	require.True(t, r.Ready, "%+v", r)
	require.False(t, strings.Contains(fmt.Sprint(r.Checks), "not found"))
}

// NATS credentials come from flags or OPLEDGER_NATS_* variables, flags
// winning, and two kinds at once are refused at start. Breaking it: a flag
// not wired to its variable, or a combination let through.
func TestServiceNATSAuthFlags(t *testing.T) {
	t.Parallel()
	base := map[string]string{"DATABASE_URL": "postgres://x", "NATS_URL": "nats://127.0.0.1:1"}
	with := func(extra map[string]string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	cfg, err := app.ParseServiceFlags(app.Dispatcher, nil, env(with(map[string]string{
		"OPLEDGER_NATS_USER": "dispatcher", "OPLEDGER_NATS_PASSWORD_FILE": "/run/secrets/dispatcher.password",
		"OPLEDGER_NATS_TLS_CA": "/ca.pem", "OPLEDGER_NATS_INBOX_PREFIX": "_INBOX_SVC.dispatcher",
	})), io.Discard)
	require.NoError(t, err)
	require.Equal(t, "dispatcher", cfg.NATSAuth.User)
	require.Equal(t, "/run/secrets/dispatcher.password", cfg.NATSAuth.PasswordFile)
	require.Equal(t, "/ca.pem", cfg.NATSAuth.TLSCA)
	require.True(t, cfg.NATSAuth.TLS())
	require.Equal(t, "_INBOX_SVC.dispatcher", cfg.NATSAuth.InboxPrefix)

	cfg, err = app.ParseServiceFlags(app.Dispatcher, []string{"-nats-user", "other", "-nats-nkey-seed", ""},
		env(with(map[string]string{"OPLEDGER_NATS_USER": "dispatcher", "OPLEDGER_NATS_PASSWORD": "x"})), io.Discard)
	require.NoError(t, err)
	require.Equal(t, "other", cfg.NATSAuth.User, "the flag wins")

	_, err = app.ParseServiceFlags(app.Dispatcher, []string{"-nats-token-file", "/t"},
		env(with(map[string]string{"OPLEDGER_NATS_USER": "dispatcher", "OPLEDGER_NATS_PASSWORD": "x"})), io.Discard)
	require.ErrorContains(t, err, "more than one kind of nats credential")
	_, err = app.ParseServiceFlags(app.Dispatcher, []string{"-nats-user", "u"}, env(base), io.Discard)
	require.ErrorContains(t, err, "without a password")
}

// TestServiceRegistryFlagReplacesTheEnvironment: -registry replaces
// OPLEDGER_REGISTRY's list (the image sets it to the example registry), as
// every other flag overrides its variable; repeated, the flags add up.
func TestServiceRegistryFlagReplacesTheEnvironment(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"DATABASE_URL": "postgres://x", "NATS_URL": "nats://127.0.0.1:1",
		"OPLEDGER_REGISTRY": "/etc/opledger/registry.yaml,/etc/opledger/more"}
	cfg, err := app.ParseServiceFlags(app.Dispatcher, nil, env(vars), io.Discard)
	require.NoError(t, err)
	require.Equal(t, []string{"/etc/opledger/registry.yaml", "/etc/opledger/more"}, cfg.Registry.Paths)

	cfg, err = app.ParseServiceFlags(app.Dispatcher, []string{"-registry", "mine.yaml", "-registry", "tools/", "-registry", "mine.yaml"}, env(vars), io.Discard)
	require.NoError(t, err)
	require.Equal(t, []string{"mine.yaml", "tools/"}, cfg.Registry.Paths, "the flags replace the variable's list")
}
