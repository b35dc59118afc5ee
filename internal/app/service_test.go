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
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/docs"
	"github.com/opledger/opledger/internal/app"
	"github.com/opledger/opledger/internal/natsembed"
	"github.com/opledger/opledger/internal/testdb"
)

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
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
// do, instead of starting and failing on every statement.
func TestServiceRefusesAnUnmigratedDatabase(t *testing.T) {
	t.Parallel()
	url := testdb.New(t)
	conn, err := pgx.Connect(context.Background(), url)
	require.NoError(t, err)
	_, err = conn.Exec(context.Background(), `DROP TABLE schema_migrations`)
	require.NoError(t, err)
	conn.Close(context.Background())
	ns, err := natsembed.Start(natsembed.Options{})
	require.NoError(t, err)
	t.Cleanup(ns.Shutdown)
	cfg, err := app.ParseServiceFlags(app.PlannerIngest, []string{"-log", "disabled"},
		env(map[string]string{"DATABASE_URL": url, "NATS_URL": ns.URL()}), io.Discard)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = app.RunService(ctx, cfg)
	require.Error(t, err)
	require.Contains(t, err.Error(), "opledger migrate")
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
	cfg, err := app.ParseServiceFlags(app.Dispatcher, []string{"-log", "disabled", "-http", httpAddr},
		env(map[string]string{"DATABASE_URL": url, "NATS_URL": ns.URL()}), io.Discard)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.RunService(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		<-done
		ns.Shutdown()
	})
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
	code, body = get("/v1/openapi.yaml")
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
	require.NotEmpty(t, nats.Detail, "the reason is given")

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
