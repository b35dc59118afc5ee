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

// Whichever worker escalates (the dispatcher with an attempt's outcome,
// the reconciler with a verdict), the escalation's event carries the
// reason a person must act, next to the worker's own detail, and the
// agent's result says the same. Here the retry budget runs out on an
// outcome that may have been applied.
//
// Breaking it: a Plan without Detail leaves the event with the attempt's
// numbers only, the reason in the result and a log line.
func TestEscalationPlanSaysWhy(t *testing.T) {
	t.Parallel()
	tool := &registry.Tool{Name: "t", Retry: registry.RetryPolicy{MaxAttempts: 2, InitialBackoff: time.Second, MaxBackoff: time.Minute, MaxElapsed: time.Hour}}
	now := time.Date(2026, 12, 1, 2, 13, 0, 0, time.UTC)
	o := &op.Operation{ID: "op_1", Tool: "t", Class: op.ClassExternalIdempotent, State: op.StateDispatched, AttemptCount: 2, GenerationStartedAt: now}
	p, err := followup.Decide(tool, o, followup.Outcome{Event: op.EventFailRetryable, Now: now.Add(time.Second), Error: "HTTP 503",
		MayHaveApplied: true}, "evt", telemetry.Traceparent{})
	require.NoError(t, err)
	require.Equal(t, op.StateEscalated, p.To)
	c := p.Change(o, "dispatcher-1", map[string]any{"outcome": op.OutcomeRetryable, "http_status": 503})
	d, ok := c.Detail.(map[string]any)
	require.True(t, ok)
	require.Contains(t, d["reason"], "the retry budget ran out")
	require.Equal(t, 503, d["http_status"], "the worker's own detail is kept")
	after := *o
	after.State = op.StateEscalated
	msgs := p.Messages(&after)
	require.Contains(t, string(msgs[len(msgs)-1].Payload), "the retry budget ran out")

	// A plan that does not escalate adds nothing of its own.
	o.AttemptCount = 1
	p, err = followup.Decide(tool, o, followup.Outcome{Event: op.EventFailRetryable, Now: now, Error: "HTTP 429"}, "evt", telemetry.Traceparent{})
	require.NoError(t, err)
	require.Nil(t, p.Change(o, "dispatcher-1", nil).Detail)
}
