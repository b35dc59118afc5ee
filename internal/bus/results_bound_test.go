package bus_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/bus"
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
		// Room for every bound on file, whatever the machine's disk has free
		// (a server sets 75% of it aside by default).
		url, js := newServerConf(t, "jetstream { max_file_store: 16GB }\n")
		ensureStreams(t, ctx, url, bus.StreamOptions{Memory: memory})
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
		discard  jetstream.DiscardPolicy
		warned   string
	}{
		{"unbounded", -1, jetstream.DiscardOld, "RESULTS has no byte bound"},
		{"operator's bound", 10 << 20, jetstream.DiscardOld, ""},
		{"operator's bound, discard new", 10 << 20, jetstream.DiscardNew, "RESULTS refuses new results when full"},
	} {
		url, js := newServer(t)
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: wire.StreamResults, Subjects: []string{wire.ResultSubjectPrefix + ">"},
			MaxBytes: tc.maxBytes, Discard: tc.discard, Storage: jetstream.MemoryStorage})
		require.NoError(t, err)
		_, logs := ensureStreams(t, ctx, url, bus.StreamOptions{Memory: true})
		st, err := js.Stream(ctx, wire.StreamResults)
		require.NoError(t, err)
		require.Equal(t, tc.maxBytes, st.CachedInfo().Config.MaxBytes, tc.name)
		if tc.warned == "" {
			require.NotContains(t, logs.String(), "RESULTS", tc.name)
		} else {
			require.Contains(t, logs.String(), tc.warned, tc.name)
		}
	}
}

// On a server with less JetStream storage than RESULTS' bound, RESULTS
// gets the largest halving of it that fits, with a warning, and below
// client.MinResultsMaxBytes no byte bound; the services start either way.
// Breaking it: no fallback (EnsureStreams fails, and no service starts on
// such a server).
func TestResultsBoundFallsBackOnSmallServer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tc := range []struct {
		store string // the server's max_file_store; INTENTS takes 1 GiB of it
		want  int64
	}{
		{"1400MB", bus.DefaultResultsMaxBytes / 16}, // 376 MiB left: 256 MiB fits
		{"1050MB", -1}, // 26 MiB left: not even 64 MiB
	} {
		url, js := newServerConf(t, "jetstream { max_file_store: "+tc.store+" }\n")
		_, logs := ensureStreams(t, ctx, url, bus.StreamOptions{})
		st, err := js.Stream(ctx, wire.StreamResults)
		require.NoError(t, err)
		require.EqualValues(t, tc.want, st.CachedInfo().Config.MaxBytes, tc.store)
		require.Contains(t, logs.String(), "less JetStream storage than RESULTS' bound", tc.store)
		st, err = js.Stream(ctx, wire.StreamIntents)
		require.NoError(t, err)
		require.EqualValues(t, bus.DefaultIntentsMaxBytes, st.CachedInfo().Config.MaxBytes, "INTENTS' bound fits")
	}
}
