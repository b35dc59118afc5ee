package natsauth_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/rs/zerolog"

	"github.com/opledger/opledger/internal/bus"
)

func TestSmoke(t *testing.T) {
	s := startServer(t)
	b, err := bus.ConnectAuth(ctx(t), s.url, "x", s.serviceAuth("planner-ingest"), zerolog.Nop())
	require.NoError(t, err)
	defer b.Close()
	require.NoError(t, b.EnsureStreams(ctx(t), bus.StreamOptions{Memory: true}))
	a := s.agent(t, "acme")
	require.NoError(t, a.EnsureResultsStream(ctx(t), 0))
}
