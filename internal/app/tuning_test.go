package app_test

import (
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/app"
	"github.com/opledger/opledger/internal/bus"
)

// The consumer knobs come from the environment, flags win, and a value that
// is not a duration is refused rather than silently ignored. Breaking it:
// a typo in OPLEDGER_ACK_WAIT would run with the default without a word.
func TestServiceConsumerKnobs(t *testing.T) {
	t.Parallel()
	base := map[string]string{"DATABASE_URL": "postgres://x", "NATS_URL": "nats://x",
		"OPLEDGER_ACK_WAIT": "20s", "OPLEDGER_HEARTBEAT": "4s", "OPLEDGER_STATEMENT_TIMEOUT": "3s"}
	cfg, err := app.ParseServiceFlags(app.Dispatcher, []string{"-nak-delay", "2s", "-heartbeat", "5s"}, env(base), io.Discard)
	require.NoError(t, err)
	require.Equal(t, bus.Tuning{AckWait: 20 * time.Second, Heartbeat: 5 * time.Second, NakDelay: 2 * time.Second}, cfg.Consumer)
	require.Equal(t, 3*time.Second, cfg.StatementTimeout)

	bad := map[string]string{"DATABASE_URL": "postgres://x", "NATS_URL": "nats://x", "OPLEDGER_ACK_WAIT": "ten seconds"}
	_, err = app.ParseServiceFlags(app.Reconciler, nil, env(bad), io.Discard)
	require.ErrorContains(t, err, "OPLEDGER_ACK_WAIT")
}

// planner-ingest's admission bound comes from OPLEDGER_MAX_BACKLOG or
// -max-backlog (the flag wins); a value that is not a whole number is
// refused, and the other services have no such knob. Breaking it: a typo
// that silently ran with the default bound.
func TestIngestMaxBacklogKnob(t *testing.T) {
	t.Parallel()
	base := map[string]string{"DATABASE_URL": "postgres://x", "NATS_URL": "nats://x", "OPLEDGER_MAX_BACKLOG": "500"}
	cfg, err := app.ParseServiceFlags(app.PlannerIngest, nil, env(base), io.Discard)
	require.NoError(t, err)
	require.Equal(t, 500, cfg.MaxBacklog)
	cfg, err = app.ParseServiceFlags(app.PlannerIngest, []string{"-max-backlog", "-1"}, env(base), io.Discard)
	require.NoError(t, err)
	require.Equal(t, -1, cfg.MaxBacklog, "the flag wins; negative turns admission control off")

	base["OPLEDGER_MAX_BACKLOG"] = "lots"
	_, err = app.ParseServiceFlags(app.PlannerIngest, nil, env(base), io.Discard)
	require.ErrorContains(t, err, "OPLEDGER_MAX_BACKLOG")
	_, err = app.ParseServiceFlags(app.Dispatcher, []string{"-max-backlog", "5"}, env(map[string]string{"DATABASE_URL": "postgres://x", "NATS_URL": "nats://x"}), io.Discard)
	require.Error(t, err, "only planner-ingest admits intents")
}
