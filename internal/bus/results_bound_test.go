package bus_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/bus"
	"github.com/opledger/opledger/internal/natsembed"
	"github.com/opledger/opledger/internal/testlog"
	"github.com/opledger/opledger/pkg/wire"
)

// A full RESULTS drops its oldest results and stores every new one: the
// publisher is never refused, and the newest result is there. Breaking
// it: no bound (the stream grows with every result), or discard-new (the
// relays' publishes of new results are refused once full).
func TestResultsBoundedDropsOldest(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, bus.StreamOptions{Memory: true, ResultsMaxBytes: 8 << 10})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := e.js.Stream(ctx, wire.StreamResults)
	require.NoError(t, err)
	require.EqualValues(t, 8<<10, st.CachedInfo().Config.MaxBytes)
	require.Equal(t, jetstream.DiscardOld, st.CachedInfo().Config.Discard)

	body := []byte(strings.Repeat("r", 500))
	const n = 100
	for i := range n {
		_, err := e.bus.Publish(ctx, bus.Message{Subject: wire.ResultSubject("wf_" + strconv.Itoa(i)), MsgID: "res_" + strconv.Itoa(i), Data: body})
		require.NoError(t, err, "result %d refused", i)
	}
	info, err := st.Info(ctx)
	require.NoError(t, err)
	require.LessOrEqual(t, info.State.Bytes, uint64(8<<10))
	require.Less(t, info.State.Msgs, uint64(n), "the oldest were dropped")
	require.Greater(t, info.State.FirstSeq, uint64(1))
	require.EqualValues(t, n, info.State.LastSeq)
	m, err := st.GetLastMsgForSubject(ctx, wire.ResultSubject("wf_"+strconv.Itoa(n-1)))
	require.NoError(t, err)
	require.Equal(t, body, m.Data)
}

// A new RESULTS gets the default bound (in memory and on file); one found
// without a bound is named in a warning and left as it is (the services
// may not update RESULTS, deploy/nats/nats.conf); an operator's bound is
// kept.
func TestResultsBoundDefaultsAndExisting(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, memory := range []bool{true, false} {
		url, js := newServer(t)
		b, err := bus.Connect(ctx, url, "t", zerolog.Nop())
		require.NoError(t, err)
		t.Cleanup(b.Close)
		require.NoError(t, b.EnsureStreams(ctx, bus.StreamOptions{Memory: memory}))
		st, err := js.Stream(ctx, wire.StreamResults)
		require.NoError(t, err)
		want := int64(bus.DefaultResultsMaxBytes)
		if memory {
			want = bus.MemoryResultsMaxBytes
		}
		require.Equal(t, want, st.CachedInfo().Config.MaxBytes, "memory %v", memory)
	}

	for _, tc := range []struct {
		name     string
		maxBytes int64
		warned   bool
	}{
		{"unbounded", -1, true},
		{"operator's bound", 10 << 20, false},
	} {
		url, js := newServer(t)
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: wire.StreamResults, Subjects: []string{wire.ResultSubjectPrefix + ">"},
			MaxBytes: tc.maxBytes, Storage: jetstream.MemoryStorage})
		require.NoError(t, err)
		var logs testlog.Buffer
		b, err := bus.Connect(ctx, url, "t", zerolog.New(&logs))
		require.NoError(t, err)
		t.Cleanup(b.Close)
		require.NoError(t, b.EnsureStreams(ctx, bus.StreamOptions{Memory: true}))
		st, err := js.Stream(ctx, wire.StreamResults)
		require.NoError(t, err)
		require.Equal(t, tc.maxBytes, st.CachedInfo().Config.MaxBytes, tc.name)
		require.Equal(t, tc.warned, strings.Contains(logs.String(), "RESULTS has no byte bound"), tc.name)
	}
}

// On a server with less JetStream storage than RESULTS' bound, RESULTS is
// made without it, with a warning, and the services start. Breaking it: no
// fallback (EnsureStreams fails, and no service starts on such a server).
func TestResultsBoundFallsBackOnSmallServer(t *testing.T) {
	t.Parallel()
	conf := filepath.Join(t.TempDir(), "nats.conf")
	require.NoError(t, os.WriteFile(conf, []byte("jetstream { max_file_store: 2GB }\n"), 0o600))
	srv, err := natsembed.Start(natsembed.Options{ConfigFile: conf})
	require.NoError(t, err)
	t.Cleanup(srv.Shutdown)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var logs testlog.Buffer
	b, err := bus.Connect(ctx, srv.URL(), "t", zerolog.New(&logs))
	require.NoError(t, err)
	t.Cleanup(b.Close)
	require.NoError(t, b.EnsureStreams(ctx, bus.StreamOptions{}))
	nc, err := nats.Connect(srv.URL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	st, err := js.Stream(ctx, wire.StreamResults)
	require.NoError(t, err)
	require.EqualValues(t, -1, st.CachedInfo().Config.MaxBytes)
	require.Contains(t, logs.String(), "less JetStream storage than RESULTS' bound")
	st, err = js.Stream(ctx, wire.StreamIntents)
	require.NoError(t, err)
	require.EqualValues(t, bus.DefaultIntentsMaxBytes, st.CachedInfo().Config.MaxBytes, "INTENTS' bound fits")
}
