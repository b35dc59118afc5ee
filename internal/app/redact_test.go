package app_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/app"
	"github.com/opledger/opledger/internal/natsembed"
	"github.com/opledger/opledger/internal/testdb"
)

// A service waiting for Postgres and NATS logs every try and returns an
// error, and neither holds a credential of DATABASE_URL or NATS_URL, in any
// of the shapes those take (a NATS token as the whole user information, a
// password in the query, a keyword/value string). Breaking it: the old
// redactErr, which replaced only a URL with a password in its user
// information and left nats://TOKEN@host as it was.
func TestServiceWaitingLogsNoCredentials(t *testing.T) {
	t.Parallel()
	const canary = "CANARY-not-a-secret-7f3a"
	for name, urls := range map[string][2]string{
		"token url":            {"postgres://svc:" + canary + "@127.0.0.1:1/x?sslmode=disable", "nats://" + canary + "@127.0.0.1:1"},
		"query password":       {"postgres://127.0.0.1:1/x?user=svc&password=" + canary + "&sslmode=disable", "nats://svc:" + canary + "@127.0.0.1:1"},
		"keyword/value string": {"host=127.0.0.1 port=1 user=svc password=" + canary + " dbname=x sslmode=disable", "127.0.0.1:1"},
	} {
		var logs bytes.Buffer
		cfg, err := app.ParseServiceFlags(app.Dispatcher, []string{"-log", "debug", "-log-format", "json", "-connect-timeout", "1500ms"},
			env(map[string]string{"DATABASE_URL": urls[0], "NATS_URL": urls[1]}), &logs)
		require.NoError(t, err, name)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err = app.RunService(ctx, cfg)
		cancel()
		require.Error(t, err, name)
		require.NotContains(t, err.Error(), canary, name)
		require.Contains(t, logs.String(), "waiting for dependency", name)
		require.NotContains(t, logs.String(), canary, name)
		require.NotContains(t, logs.String(), "7f3a", name)
	}
}

// What StartInfra prints about where NATS and Postgres are (opledger dev
// shows it) names them without their credentials, for a NATS server that
// takes a token in the URL (nats://TOKEN@host). Breaking it: the old
// redact, which masked only a password and printed a token-only URL whole.
func TestInfraPrintsNoCredentials(t *testing.T) {
	t.Parallel()
	const canary = "CANARY-not-a-secret-7f3a"
	dir := t.TempDir()
	conf := filepath.Join(dir, "nats.conf")
	require.NoError(t, os.WriteFile(conf, []byte("jetstream: enabled\nauthorization { token: \""+canary+"\" }\n"), 0o600))
	ns, err := natsembed.Start(natsembed.Options{ConfigFile: conf})
	require.NoError(t, err)
	t.Cleanup(ns.Shutdown)
	natsURL := strings.Replace(ns.URL(), "nats://", "nats://"+canary+"@", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	in, err := app.StartInfra(ctx, app.InfraConfig{DatabaseURL: testdb.New(t), NATSURL: natsURL, MemoryStreams: true, Log: zerolog.Nop()})
	require.NoError(t, err)
	t.Cleanup(in.Close)
	where := strings.Join(in.Where, "\n")
	require.Contains(t, where, "nats: nats://***@127.0.0.1:")
	require.NotContains(t, where, canary)
}
