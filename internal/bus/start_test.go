package bus_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/bus"
	"github.com/opledger/opledger/internal/natsembed"
	"github.com/opledger/opledger/pkg/wire"
)

// Every service creates the streams at start, and a fleet starts at once
// against a fresh NATS server: eight processes racing to create them all
// start (once seen: planner-ingest exiting with "stream RESULTS: subjects
// overlap with an existing stream"), and the streams exist once each. Half
// of them ask for other settings (memory storage, as dev mode and tests
// do), so that a racing create is refused rather than answered with the
// stream the winner made. Ten cold starts.
//
// Breaking it: treating the server's refusal of a racing create ("already
// in use", "subjects overlap") as fatal instead of looking again.
func TestEnsureStreamsConcurrentColdStarts(t *testing.T) {
	t.Parallel()
	for range 10 {
		srv, err := natsembed.Start(natsembed.Options{StoreDir: t.TempDir()})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var buses []*bus.Bus
		for range 8 {
			b, err := bus.Connect(ctx, srv.URL(), "cold", zerolog.Nop())
			require.NoError(t, err)
			buses = append(buses, b)
		}
		errs := make([]error, len(buses))
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, b := range buses {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[i] = b.EnsureStreams(ctx, bus.StreamOptions{Memory: i%2 == 1})
			}()
		}
		close(start)
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		for _, name := range []string{wire.StreamIntents, wire.StreamOps, wire.StreamResults} {
			_, err := buses[0].StreamCreated(ctx, name)
			require.NoError(t, err, name)
		}
		for _, b := range buses {
			b.Close()
		}
		cancel()
		srv.Shutdown()
	}
}
