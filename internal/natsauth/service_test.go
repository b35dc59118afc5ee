package natsauth_test

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
	"golang.org/x/crypto/bcrypt"

	"github.com/opledger/opledger/internal/app"
	"github.com/opledger/opledger/internal/natsauth"
	"github.com/opledger/opledger/internal/natsembed"
	"github.com/opledger/opledger/internal/pipetest"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testlog"
)

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// A service binary configured only through its environment, as compose
// runs it (OPLEDGER_NATS_USER and OPLEDGER_NATS_PASSWORD_FILE), connects as
// its user, becomes ready, and after the server lost its store recreates
// the streams and its consumer with the permissions it has. Its logs never
// contain its password. Breaking it: the start-up probe or the bus ignoring
// the credentials (never ready), or a service lacking STREAM.CREATE or
// CONSUMER.CREATE for its own (not ready again after the loss).
func TestServiceBinaryAuthenticatesFromItsEnvironment(t *testing.T) {
	t.Parallel()
	conf, err := os.ReadFile(filepath.Join(pipetest.RepoRoot(t), "deploy", "nats", "nats.conf"))
	require.NoError(t, err)
	dir := t.TempDir()
	confPath := filepath.Join(dir, "nats.conf")
	require.NoError(t, os.WriteFile(confPath, conf, 0o600))
	secrets, err := natsauth.Write(dir, conf, bcrypt.MinCost, false)
	require.NoError(t, err)
	port := freePort(t)
	start := func() *natsembed.Server {
		ns, err := natsembed.Start(natsembed.Options{ConfigFile: confPath, Port: port, StoreDir: t.TempDir()})
		require.NoError(t, err)
		return ns
	}
	ns := start()
	t.Cleanup(func() { ns.Shutdown() })

	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	logs := &testlog.Buffer{}
	cfg, err := app.ParseServiceFlags(app.Reconciler, []string{"-log", "debug", "-log-format", "json", "-http", httpAddr}, func(k string) (string, bool) {
		v, ok := map[string]string{
			"DATABASE_URL": testdb.New(t), "NATS_URL": ns.URL(),
			"OPLEDGER_NATS_USER": "reconciler", "OPLEDGER_NATS_PASSWORD_FILE": natsauth.PasswordFile(dir, "reconciler"),
			"OPLEDGER_HTTP_OPEN_LOOPBACK": "true", // as compose.yaml sets it for the healthcheck
		}[k]
		if !ok && strings.HasPrefix(k, "OPLEDGER_VENDOR_") {
			return "http://127.0.0.1:9", true
		}
		return v, ok
	}, logs)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.RunService(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	ready := func() bool {
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode == http.StatusOK
	}
	require.Eventually(t, ready, 30*time.Second, 50*time.Millisecond, "ready as its NATS user")

	ns.Shutdown()
	require.Eventually(t, func() bool { return !ready() }, 10*time.Second, 50*time.Millisecond)
	ns = start() // same port, empty store
	require.Eventually(t, ready, 30*time.Second, 100*time.Millisecond, "streams and consumer recreated as its user")

	out := logs.String()
	require.NotContains(t, out, secrets["reconciler"])
	require.NotContains(t, strings.ToLower(out), "permissions violation")
}
