package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/bus"
	"github.com/opledger/opledger/pkg/client"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// A publish that a full INTENTS refuses says so, as an error an agent can
// act on (ErrIntentsFull, retryable), not JetStream's code, through Publish
// and through Submit. Breaking it: without the mapping the error is "API
// error: code=503 err_code=10077", and matches neither; Submit said
// ErrClosed for any refused publish until it checked its scope before
// cancelling it.
func TestPublishToFullIntentsIsRetryable(t *testing.T) {
	t.Parallel()
	ns := startNATS(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := bus.Connect(ctx, ns.URL(), "setup", zerolog.Nop())
	require.NoError(t, err)
	t.Cleanup(b.Close)
	require.NoError(t, b.EnsureStreams(ctx, bus.StreamOptions{Memory: true, IntentsMaxBytes: 8 << 10}))

	cl, err := client.Connect(ns.URL(), "agent")
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	args, err := json.Marshal(map[string]string{"note": strings.Repeat("x", 400)})
	require.NoError(t, err)
	var refused error
	stored := 0
	for i := range 100 {
		in := wire.Intent{EventID: fmt.Sprintf("wf_1:call_%d", i), WorkflowID: "wf_1", Tool: "capture_payment", Args: args}
		if refused = cl.Publish(ctx, in, ""); refused != nil {
			break
		}
		stored++
	}
	require.Greater(t, stored, 5)
	require.ErrorIs(t, refused, client.ErrIntentsFull)
	require.ErrorIs(t, refused, op.ErrRetryable)
	require.Contains(t, refused.Error(), fmt.Sprintf("wf_1:call_%d", stored), "names the intent refused")
	require.False(t, errors.Is(refused, client.ErrClosed))

	// Submit says the same, not that the client closed (it read its own
	// scope's end after ending it).
	in := wire.Intent{EventID: "wf_1:call_submit", WorkflowID: "wf_1", Tool: "capture_payment", Args: args}
	_, err = cl.Submit(ctx, in)
	require.ErrorIs(t, err, client.ErrIntentsFull)
	require.NotErrorIs(t, err, client.ErrClosed)
}
