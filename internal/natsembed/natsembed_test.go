package natsembed_test

import (
	"context"
	"net"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/natsembed"
	"github.com/opledger/opledger/pkg/op"
)

func connect(t *testing.T, s *natsembed.Server) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(s.URL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return js
}

func TestStartPublishDedupe(t *testing.T) {
	t.Parallel()
	s, err := natsembed.Start(natsembed.Options{})
	require.NoError(t, err)
	t.Cleanup(s.Shutdown)

	u, err := url.Parse(s.URL())
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1", u.Hostname())
	require.NotEqual(t, "4222", u.Port())

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js := connect(t, s)
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "INTENTS", Subjects: []string{"opledger.intents.>"}})
	require.NoError(t, err)

	first, err := js.Publish(ctx, "opledger.intents.pay", []byte(`{"n":1}`), jetstream.WithMsgID("evt_1"))
	require.NoError(t, err)
	require.False(t, first.Duplicate)
	second, err := js.Publish(ctx, "opledger.intents.pay", []byte(`{"n":1}`), jetstream.WithMsgID("evt_1"))
	require.NoError(t, err)
	require.True(t, second.Duplicate)
	require.Equal(t, first.Sequence, second.Sequence)

	info, err := stream.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(1), info.State.Msgs)
}

func TestShutdownRemovesTempStore(t *testing.T) {
	t.Parallel()
	s, err := natsembed.Start(natsembed.Options{})
	require.NoError(t, err)
	dir := s.StoreDir()
	require.DirExists(t, dir)
	s.Shutdown()
	s.Shutdown() // idempotent
	_, err = os.Stat(dir)
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestGivenStoreDirSurvivesRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	s1, err := natsembed.Start(natsembed.Options{StoreDir: dir})
	require.NoError(t, err)
	js := connect(t, s1)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "OPS", Subjects: []string{"ops.>"}})
	require.NoError(t, err)
	_, err = js.Publish(ctx, "ops.a", []byte("x"), jetstream.WithMsgID("m1"))
	require.NoError(t, err)
	s1.Shutdown()
	require.DirExists(t, dir)

	s2, err := natsembed.Start(natsembed.Options{StoreDir: dir})
	require.NoError(t, err)
	t.Cleanup(s2.Shutdown)
	stream, err := connect(t, s2).Stream(ctx, "OPS")
	require.NoError(t, err)
	info, err := stream.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(1), info.State.Msgs)
}

func TestStartErrors(t *testing.T) {
	t.Parallel()

	_, err := natsembed.Start(natsembed.Options{Port: -1})
	require.ErrorIs(t, err, op.ErrInvalid)

	// A port someone else holds: Start must fail fast and say why.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	start := time.Now()
	_, err = natsembed.Start(natsembed.Options{Port: port})
	require.Error(t, err)
	require.Contains(t, err.Error(), "listen")
	require.Less(t, time.Since(start), 5*time.Second)
}

// A configuration file brings its users and permissions, but not where the
// server listens or stores: tests stay on a random loopback port. Breaking
// it: honouring the file's listen (a test taking 0.0.0.0:4222) or dropping
// its authorization (anyone connects).
func TestStartFromConfigFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	conf := dir + "/nats.conf"
	require.NoError(t, os.WriteFile(conf, []byte(`
listen: "0.0.0.0:4222"
http: 8222
jetstream { store_dir: "/nonexistent" }
authorization { users: [ { user: u1, password: "pw-1", permissions: { publish: "allowed.>" } } ] }
`), 0o600))
	s, err := natsembed.Start(natsembed.Options{ConfigFile: conf})
	require.NoError(t, err)
	t.Cleanup(s.Shutdown)
	u, err := url.Parse(s.URL())
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1", u.Hostname())
	require.NotEqual(t, "4222", u.Port())
	require.NotEqual(t, "/nonexistent", s.StoreDir())

	_, err = nats.Connect(s.URL())
	require.ErrorIs(t, err, nats.ErrAuthorization)
	nc, err := nats.Connect(s.URL(), nats.UserInfo("u1", "pw-1"))
	require.NoError(t, err)
	nc.Close()

	_, err = natsembed.Start(natsembed.Options{ConfigFile: dir + "/missing.conf"})
	require.Error(t, err)
}
