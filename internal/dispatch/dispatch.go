// Package dispatch is the dispatcher: a horizontally scaled fleet sharing one
// durable pull consumer on opledger.ops.dispatch.>.
//
// For each command it commits "dispatched" plus an attempt row (taking the
// lease: epoch+1) before calling the vendor, calls the adapter with the
// operation's stable idempotency key, classifies the outcome and records it
// with the vendor's ids, and sends the agent's result and any follow-up
// command (reconcile, retry, compensate) through the outbox in the same
// transaction. A command for an operation already past pending_dispatch, or
// at another lease epoch, never reaches the vendor. No transaction is held
// across the vendor call.
package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/opledger/opledger/internal/bus"
	"github.com/opledger/opledger/internal/followup"
	"github.com/opledger/opledger/internal/outbox"
	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/telemetry"
	"github.com/opledger/opledger/pkg/adapter"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/registry"
	"github.com/opledger/opledger/pkg/wire"
)

// Config tunes a dispatcher instance.
type Config struct {
	// Durable is the consumer shared by the fleet (default "dispatcher").
	Durable string
	// Name identifies this instance in attempt rows and logs (default "dispatcher").
	Name string
	// Workers is the number of concurrent vendor calls per instance (default 32).
	Workers int
}

// Service is one dispatcher instance.
type Service struct {
	cfg      Config
	store    *store.Store
	bus      *bus.Bus
	reg      *registry.Registry
	adapters map[string]adapter.Adapter
	m        *telemetry.Metrics
	log      zerolog.Logger
}

// New returns a dispatcher; adapters maps tool names to their adapters.
func New(cfg Config, st *store.Store, b *bus.Bus, reg *registry.Registry, adapters map[string]adapter.Adapter, m *telemetry.Metrics, log zerolog.Logger) *Service {
	if cfg.Durable == "" {
		cfg.Durable = "dispatcher"
	}
	if cfg.Name == "" {
		cfg.Name = "dispatcher"
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 32
	}
	return &Service{cfg: cfg, store: st, bus: b, reg: reg, adapters: adapters, m: m,
		log: log}
}

// Start consumes dispatch commands until ctx ends; stop waits for calls in flight.
func (s *Service) Start(ctx context.Context) (stop func(), err error) {
	return s.bus.Consume(ctx, bus.ConsumerConfig{
		Stream: wire.StreamOps, Durable: s.cfg.Durable, Workers: s.cfg.Workers,
		Filters: []string{wire.OpsSubject(wire.KindDispatch, ">")},
		AckWait: time.Minute,
	}, s.Handle)
}

// Handle processes one dispatch command.
func (s *Service) Handle(ctx context.Context, d bus.Delivery) error {
	var cmd wire.Command
	if err := json.Unmarshal(d.Data, &cmd); err != nil || cmd.OperationID == "" {
		return bus.Permanent(fmt.Errorf("dispatch: undecodable command on %s", d.Subject))
	}
	tp := telemetry.ParseTraceparent(d.Header[wire.HeaderTraceparent])
	log := s.log.With().Str("operation_id", cmd.OperationID).Str("tool", cmd.Tool).
		Str("idempotency_key", cmd.IdempotencyKey).Str("trace_id", tp.TraceID).Logger()

	tool, err := s.reg.Tool(cmd.Tool)
	ad := s.adapters[cmd.Tool]
	if err != nil || ad == nil {
		// The command belongs to a live operation: never drop it because
		// this instance's registry lacks the tool (a rolling deploy, say).
		log.Error().Err(err).Msg("tool or adapter unknown to this dispatcher; will retry")
		return fmt.Errorf("dispatch: tool %s unknown to this instance", wire.Clip(cmd.Tool))
	}

	// The whole attempt, claim included, must end within the tool's timeout
	// counted from before the claim: the sweeper fences an attempt off once
	// that time (plus grace) has passed since the claim committed, and a
	// dispatcher whose claim answer arrived late must not call the vendor
	// after that, when another attempt may already be under way.
	deadline := time.Now().Add(tool.Timeout)
	claimCtx, cancelClaim := context.WithDeadline(ctx, deadline)
	o, att, err := s.store.BeginAttempt(claimCtx, cmd.OperationID, cmd.LeaseEpoch, s.cfg.Name)
	cancelClaim()
	var stale *op.StaleError
	switch {
	case errors.As(err, &stale):
		// A redelivery, a duplicate publish, or a command from an older epoch:
		// the ledger says the operation has moved on. Never call the vendor.
		s.m.Suppressed(wire.KindDispatch, cmd.Tool)
		log.Info().Str("dedupe_decision", "command_suppressed").Str("state", string(stale.GotState)).
			Int64("lease_epoch", stale.GotEpoch).Int64("command_epoch", cmd.LeaseEpoch).Uint64("delivered", d.Delivered).
			Msg("dispatch command changes nothing")
		return nil
	case errors.Is(err, op.ErrNotFound):
		return bus.Permanent(err)
	case err != nil:
		return err
	}
	log = log.With().Str("attempt_id", att.ID).Int("attempt", att.Number).Str("workflow_id", o.WorkflowID).
		Str("side_effect_class", string(o.Class)).Str("args_hash", o.ArgsHash).Logger()

	var res adapter.Result
	if remaining := time.Until(deadline); remaining < minCallTime {
		// Too late to call safely: nothing was sent, so this is a failure
		// that may be retried under the same key.
		res = adapter.Result{Outcome: op.OutcomeRetryable, ErrorCategory: "not_sent",
			Error: fmt.Sprintf("claim took too long; %s of the tool's %s timeout left, not sent", remaining.Round(time.Millisecond), tool.Timeout)}
	} else {
		callCtx, cancel := context.WithDeadline(ctx, deadline)
		res = ad.Call(callCtx, adapter.Request{
			OperationID: o.ID, AttemptID: att.ID, Tool: o.Tool, IdempotencyKey: o.IdempotencyKey, Args: o.Args,
			Header: map[string][]string{wire.HeaderTraceparent: {tp.Child().String()}},
		})
		cancel()
	}
	s.m.Attempt(o.Tool, string(o.Class), string(res.Outcome), res.ErrorCategory, res.Latency)

	// Record with a context that outlives shutdown: the vendor already acted.
	final, err := Record(context.WithoutCancel(ctx), s.store, tool, o, att, res, cmd.EventID, tp)
	if errors.As(err, &stale) {
		// The sweeper gave up on this attempt and fenced it off; the attempt
		// row still says what the vendor answered, for the reconciler.
		log.Warn().Str("outcome", string(res.Outcome)).Str("state", string(stale.GotState)).Msg("attempt fenced off; outcome kept on the attempt only")
		return nil
	}
	if err != nil {
		// The operation stays in dispatched; the reconciler's sweeper will
		// find it. A redelivery of this command is suppressed above.
		log.Error().Err(err).Str("outcome", string(res.Outcome)).Msg("could not record outcome")
		return err
	}
	s.m.Transition(o.Tool, string(final.State))
	// A failed attempt (connection refused, timeout, 5xx, 429) is worth a
	// warning; a vendor that answered as asked is not.
	ev := log.Info()
	if res.ErrorCategory != "" {
		ev = log.Warn()
	}
	ev.Str("outcome", string(res.Outcome)).Str("state_transition", string(op.StateDispatched)+"->"+string(final.State)).
		Str("error_category", res.ErrorCategory).Int("http_status", res.HTTPStatus).Bool("vendor_replayed", res.Replayed).
		Str("provider_request_id", res.ExternalRequestID).Str("external_object_id", res.ExternalObjectID).
		Dur("latency_ms", res.Latency).Msg("attempt recorded")
	return nil
}

// Record writes an attempt's outcome: the attempt row, the operation's
// transition from dispatched (fenced by the attempt's lease epoch), the
// agent's result and the follow-up command. Most outcomes take one statement
// (store.RecordOutcome); a retryable failure, or the completion of a
// compensation, takes a transaction because more follows: retryable outcomes
// go back to pending_dispatch with a delayed dispatch command while the
// tool's retry budget lasts, then fail permanently. It returns the
// operation's new state.
func Record(ctx context.Context, st *store.Store, tool *registry.Tool, o *op.Operation, att *op.Attempt,
	res adapter.Result, eventID string, tp telemetry.Traceparent) (*op.Operation, error) {
	att.Outcome, att.ErrorCategory, att.Error, att.HTTPStatus = res.Outcome, res.ErrorCategory, res.Error, res.HTTPStatus
	att.ExternalRequestID, att.ExternalObjectID = res.ExternalRequestID, res.ExternalObjectID
	result := func(cur *op.Operation) store.Message {
		r := wire.ResultFor(cur, eventID, op.DecisionNew)
		r.RawStatusCode, r.Reason = res.HTTPStatus, res.Error
		return outbox.Result(r, tp)
	}
	if res.Outcome != op.OutcomeRetryable && o.CompensatesID == "" {
		cur, err := st.RecordOutcome(ctx, store.Outcome{
			Operation: o, Attempt: att, Actor: att.Worker, Detail: attemptDetail(res),
			Outbox: func(after *op.Operation) []store.Message {
				msgs := followup.Commands(after, eventID, tp)
				return append(msgs, result(after))
			},
		})
		if err != nil {
			return nil, fmt.Errorf("record attempt %s of operation %s: %w", att.ID, o.ID, err)
		}
		return cur, nil
	}
	// The attempt row records the vendor's answer on its own, first, so that
	// it survives even if the transition below finds the attempt fenced off.
	if _, err := st.FinishAttempt(ctx, att); err != nil {
		return nil, fmt.Errorf("record attempt %s of operation %s: %w", att.ID, o.ID, err)
	}
	var out *op.Operation
	err := st.InTx(ctx, func(tx *store.Tx) error {
		cur, err := tx.Transition(ctx, store.Change{
			OperationID: o.ID, From: op.StateDispatched, LeaseEpoch: o.LeaseEpoch, Event: res.Outcome.Event(),
			ExternalRequestID: res.ExternalRequestID, ExternalObjectID: res.ExternalObjectID,
			ErrorCategory: res.ErrorCategory, Error: res.Error, AttemptID: att.ID, Actor: att.Worker,
			Detail: attemptDetail(res),
		})
		if err != nil {
			return err
		}
		cur, msgs, err := followup.FollowUp(ctx, tx, tool, cur, eventID, tp, res.RetryAfter, att.Worker)
		if err != nil {
			return err
		}
		out = cur
		return tx.Enqueue(ctx, append(msgs, result(cur))...)
	})
	if err != nil {
		return nil, fmt.Errorf("record attempt %s of operation %s: %w", att.ID, o.ID, err)
	}
	return out, nil
}

// minCallTime is the least time left before an attempt's deadline for which
// a vendor call is still started.
const minCallTime = 50 * time.Millisecond

func attemptDetail(res adapter.Result) map[string]any {
	d := map[string]any{"outcome": res.Outcome, "latency_ms": res.Latency.Milliseconds()}
	if res.HTTPStatus != 0 {
		d["http_status"] = res.HTTPStatus
	}
	if res.Replayed {
		d["vendor_replayed"] = true
	}
	return d
}
