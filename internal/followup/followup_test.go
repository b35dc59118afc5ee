package followup_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/followup"
	"github.com/opledger/opledger/internal/telemetry"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/registry"
)

// The retry budget is bounded by attempts and by time, both counted from
// the start of the operation's current generation, on the database's clock
// (the Now an outcome carries).
func TestRetryBudget(t *testing.T) {
	t.Parallel()
	tool := &registry.Tool{Name: "t", Retry: registry.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Second, MaxBackoff: time.Minute, MaxElapsed: time.Minute}}
	start := time.Date(2026, 12, 1, 2, 13, 0, 0, time.UTC)
	o := &op.Operation{ID: "op_1", Tool: "t", State: op.StateDispatched, AttemptCount: 1, GenerationStartedAt: start}
	decide := func(o *op.Operation, now time.Time) followup.Plan {
		p, err := followup.Decide(tool, o, followup.Outcome{Event: op.EventFailRetryable, Now: now, Error: "429"}, "evt", telemetry.Traceparent{})
		require.NoError(t, err)
		return p
	}
	p := decide(o, start.Add(10*time.Second))
	require.Equal(t, []op.Event{op.EventFailRetryable, op.EventRetry}, p.Events)
	require.Equal(t, op.StatePendingDispatch, p.To)

	p = decide(o, start.Add(61*time.Second))
	require.Equal(t, []op.Event{op.EventFailRetryable, op.EventFailPermanent}, p.Events, "out of time")
	require.Equal(t, op.CategoryRetriesExhausted, p.ErrorCategory)
	require.Contains(t, p.Error, "nothing was done")

	spent := *o
	spent.AttemptCount = 3
	p = decide(&spent, start.Add(time.Second))
	require.Equal(t, op.StateFailedPermanent, p.To, "out of attempts")

	// A reopened generation has a budget of its own.
	reopened := spent
	reopened.Generation, reopened.GenerationAttemptBase, reopened.GenerationStartedAt = 2, 3, start.Add(time.Hour)
	reopened.AttemptCount = 4
	p = decide(&reopened, start.Add(time.Hour+time.Second))
	require.Equal(t, op.StatePendingDispatch, p.To)
}
