package natsauth_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/opledger/opledger/internal/app"
	"github.com/opledger/opledger/internal/bus"
	"github.com/opledger/opledger/internal/natsauth"
	"github.com/opledger/opledger/internal/natsembed"
	"github.com/opledger/opledger/internal/pipetest"
	"github.com/opledger/opledger/pkg/client"
)

// server is a nats-server running the shipped deploy/nats/nats.conf, with
// fresh passwords written next to a copy of it.
type server struct {
	url     string
	dir     string
	secrets natsauth.Secrets
}

func startServer(t *testing.T) *server {
	t.Helper()
	conf, err := os.ReadFile(filepath.Join(pipetest.RepoRoot(t), "deploy", "nats", "nats.conf"))
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "nats.conf"), conf, 0o600))
	secrets, err := natsauth.Write(dir, conf, bcrypt.MinCost, false)
	require.NoError(t, err)
	ns, err := natsembed.Start(natsembed.Options{ConfigFile: filepath.Join(dir, "nats.conf")})
	require.NoError(t, err)
	t.Cleanup(ns.Shutdown)
	return &server{url: ns.URL(), dir: dir, secrets: secrets}
}

// serviceAuth is how a service authenticates: its user, its password file,
// its inbox.
func (s *server) serviceAuth(service string) bus.Auth {
	return bus.Auth{User: service, PasswordFile: natsauth.PasswordFile(s.dir, service), InboxPrefix: app.ServiceInboxPrefix(service)}
}

// serviceJS is JetStream on a raw connection as a service's user.
func (s *server) serviceJS(t *testing.T, service string) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(s.raw(t, service, app.ServiceInboxPrefix(service)).nc)
	require.NoError(t, err)
	return js
}

// agent connects pkg/client as the agent of tenant.
func (s *server) agent(t *testing.T, tenant string) *client.Client {
	t.Helper()
	user := "agent-" + tenant
	c, err := client.Connect(s.url, t.Name()+"/"+user, client.Tenant(tenant),
		client.NATSOptions(nats.UserInfo(user, s.secrets[user])))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// conn is a raw connection as user, collecting the permission errors the
// server reports for it.
type conn struct {
	nc   *nats.Conn
	mu   sync.Mutex
	errs []string
	got  chan struct{}
}

func (s *server) raw(t *testing.T, user, inbox string) *conn {
	t.Helper()
	c := &conn{got: make(chan struct{}, 64)}
	nc, err := nats.Connect(s.url, nats.Name(t.Name()+"/raw-"+user), nats.UserInfo(user, s.secrets[user]),
		nats.CustomInboxPrefix(inbox), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			c.mu.Lock()
			c.errs = append(c.errs, err.Error())
			c.mu.Unlock()
			select {
			case c.got <- struct{}{}:
			default:
			}
		}))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	c.nc = nc
	return c
}

// violation waits for the server to report a permission violation for
// subject ("publish" or "subscription"), or fails after a while.
func (c *conn) violation(t *testing.T, kind, subject string) {
	t.Helper()
	want := strings.ToLower("permissions violation for " + kind + ` to "` + subject + `"`)
	deadline := time.After(10 * time.Second)
	for {
		c.mu.Lock()
		for _, e := range c.errs {
			if strings.Contains(strings.ToLower(e), want) {
				c.mu.Unlock()
				return
			}
		}
		c.mu.Unlock()
		select {
		case <-c.got:
		case <-deadline:
			c.mu.Lock()
			defer c.mu.Unlock()
			t.Fatalf("no %s violation for %q reported; errors seen: %v", kind, subject, c.errs)
		}
	}
}

// deniedPublish publishes on subject and requires the server to refuse it.
func (c *conn) deniedPublish(t *testing.T, subject string) {
	t.Helper()
	require.NoError(t, c.nc.Publish(subject, []byte(`{}`)))
	require.NoError(t, c.nc.Flush())
	c.violation(t, "publish", subject)
}

// deniedSubscribe subscribes to subject and requires the server to refuse it.
func (c *conn) deniedSubscribe(t *testing.T, subject string) {
	t.Helper()
	sub, err := c.nc.SubscribeSync(subject)
	require.NoError(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	require.NoError(t, c.nc.Flush())
	c.violation(t, "subscription", subject)
}

// noViolations requires that the server reported nothing for c.
func (c *conn) noViolations(t *testing.T) {
	t.Helper()
	require.NoError(t, c.nc.Flush())
	c.mu.Lock()
	defer c.mu.Unlock()
	require.Empty(t, c.errs)
}

func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func isAuthError(err error) bool {
	return errors.Is(err, nats.ErrAuthorization) || (err != nil && strings.Contains(strings.ToLower(err.Error()), "authorization violation"))
}
