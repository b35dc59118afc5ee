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
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/rs/zerolog"

	"github.com/opledger/opledger/internal/bus"
	"github.com/opledger/opledger/internal/failpoint"
	"github.com/opledger/opledger/internal/followup"
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
	// Tuning overrides the consumer's AckWait (default 10s), heartbeat and
	// Nak delay.
	Tuning bus.Tuning
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
	// leased are the tools whose operations hold their entity's lease.
	leased []string
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
	var leased []string
	for _, name := range reg.Names() {
		if t, _ := reg.Tool(name); t.Lease.Required {
			leased = append(leased, name)
		}
	}
	return &Service{cfg: cfg, store: st, bus: b, reg: reg, adapters: adapters, m: m, log: log, leased: leased}
}

// Start consumes dispatch commands until ctx ends; stop waits for calls in flight.
func (s *Service) Start(ctx context.Context) (stop func(), err error) {
	// A short AckWait, with heartbeats while a vendor call runs: the
	// commands a dead dispatcher held come back within seconds. While the
	// ledger is unreachable the consumer pauses and gives its commands back.
	return s.bus.Consume(ctx, s.cfg.Tuning.Apply(bus.ConsumerConfig{
		Stream: wire.StreamOps, Durable: s.cfg.Durable, Workers: s.cfg.Workers,
		Filters: []string{wire.OpsFilter(wire.KindDispatch)},
		AckWait: 10 * time.Second, Ready: s.store.Ping,
	}), s.Handle)
}

// Handle processes one dispatch command.
func (s *Service) Handle(ctx context.Context, d bus.Delivery) error {
	cmd, err := wire.DecodeCommand(d.Data)
	if err != nil {
		return bus.Permanent(fmt.Errorf("dispatch: undecodable command on %s: %w", wire.Clip(d.Subject), err))
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
	var o *op.Operation
	var att *op.Attempt
	if tool.Lease.Required {
		o, att, err = s.store.BeginLeasedAttempt(claimCtx, cmd.OperationID, cmd.LeaseEpoch, s.cfg.Name, tool.Timeout,
			store.EntityLease{TTL: tool.Lease.TTL, Tools: s.leased})
	} else {
		o, att, err = s.store.BeginAttempt(claimCtx, cmd.OperationID, cmd.LeaseEpoch, s.cfg.Name, tool.Timeout)
	}
	cancelClaim()
	if errors.Is(err, store.ErrLeaseBusy) {
		// Another operation on the entity is in flight, or an older one
		// may still be sent (it waits, is in flight, or its outcome is
		// unknown) and goes first: look again shortly. The older one's
		// settling (or escalation, then its lease's TTL) bounds the wait.
		s.m.Suppressed("lease_wait", cmd.Tool)
		log.Debug().Msg("entity lease busy; waiting")
		return bus.RetryIn(err, 200*time.Millisecond)
	}
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

	failpoint.Hit(failpoint.DispatchAfterClaim)
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
		// A vendor that echoes a credential or a sensitive argument does
		// not get it stored, logged or published.
		res = adapter.Redact(res, tool.CallSecrets(ad, o.Args))
	}
	s.m.Attempt(o.Tool, string(o.Class), string(res.Outcome), res.ErrorCategory, res.Latency)

	failpoint.Hit(failpoint.DispatchAfterCall)
	// Record with a context that outlives shutdown: the vendor already acted.
	final, err := s.record(context.WithoutCancel(ctx), tool, o, att, res, cmd.EventID, tp, log)
	if errors.As(err, &stale) {
		// The sweeper gave up on this attempt and fenced it off; the attempt
		// row still says what the vendor answered, for the reconciler.
		log.Warn().Str("outcome", string(res.Outcome)).Str("state", string(stale.GotState)).Msg("attempt fenced off; outcome kept on the attempt only")
		return nil
	}
	if err != nil {
		// The operation stays in dispatched; the sweeper fences it off once
		// its attempt's deadline has passed and the reconciler asks the
		// vendor. A redelivery of this command is suppressed above.
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
		Str("provider_request_id", wire.Clip(res.ExternalRequestID)).Str("external_object_id", wire.Clip(res.ExternalObjectID)).
		Dur("latency_ms", res.Latency).Msg("attempt recorded")
	failpoint.Hit(failpoint.DispatchBeforeAck)
	return nil
}

// record writes the outcome, retrying a write that failed for a reason of
// the database's (a lost connection, a failover) for a few seconds: the
// vendor has acted, and what it said is worth keeping. A value the database
// refuses outright is not retried: Record has already stripped it.
func (s *Service) record(ctx context.Context, tool *registry.Tool, o *op.Operation, att *op.Attempt, res adapter.Result,
	eventID string, tp telemetry.Traceparent, log zerolog.Logger) (*op.Operation, error) {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.MaxElapsedTime = 100*time.Millisecond, time.Second, 5*time.Second
	var final *op.Operation
	err := backoff.Retry(func() error {
		var err error
		final, err = Record(ctx, s.store, tool, o, att, res, eventID, tp)
		var stale *op.StaleError
		if errors.As(err, &stale) || errors.Is(err, op.ErrInvalid) || errors.Is(err, op.ErrIllegalTransition) {
			return backoff.Permanent(err)
		}
		if err != nil {
			log.Warn().Err(err).Msg("recording the outcome failed; trying again")
		}
		return err
	}, b)
	var perm *backoff.PermanentError
	if errors.As(err, &perm) {
		err = perm.Err
	}
	return final, err
}

// Record writes an attempt's outcome as one decision: the attempt row, the
// operation's transition from dispatched (fenced by the attempt's lease
// epoch) with everything the decision implies (a retry with its delayed
// dispatch command, or a permanent failure once the budget is spent; a
// reconcile or compensate command), and the agent's result, in one
// statement. Only the completion of a compensation, which also completes
// the operation it compensates, takes a transaction of two statements.
//
// Values the vendor sent are bounded first (see adapter.Sanitize). Should the
// database still refuse the write (op.ErrInvalid), the outcome is recorded
// again as unknown without the vendor's values, so that the operation never
// stays in dispatched for want of a writable answer.
//
// For a tool with lease.required, the outcome is written only while the
// operation still holds its entity's lease, unexpired on the database's
// clock; a worker whose lease expired (another operation may hold it now)
// records the outcome as unknown instead (category lease_expired), for the
// reconciler to confirm, the vendor's answer kept on the attempt row.
//
// It returns the operation after the change. Errors: *op.StaleError when
// the attempt was fenced off (its answer is kept on the attempt row).
func Record(ctx context.Context, st *store.Store, tool *registry.Tool, o *op.Operation, att *op.Attempt,
	res adapter.Result, eventID string, tp telemetry.Traceparent) (*op.Operation, error) {
	res = adapter.Sanitize(res)
	leased := tool.Lease.Required && o.EntityID != ""
	cur, err := record(ctx, st, tool, o, att, res, eventID, tp, leased)
	if errors.Is(err, op.ErrInvalid) {
		res = adapter.Result{Outcome: op.OutcomeUnknown, HTTPStatus: res.HTTPStatus, ErrorCategory: CategoryUnrecordable,
			Error: "the ledger refused a value from the vendor's answer; the outcome is unknown", Latency: res.Latency}
		cur, err = record(ctx, st, tool, o, att, res, eventID, tp, leased)
	}
	if errors.Is(err, store.ErrLeaseLost) {
		// The entity's lease expired while the call ran, and another
		// operation may have taken it: this worker no longer decides. The
		// attempt row keeps what the vendor said; the operation goes to the
		// reconciler, which confirms it with the vendor before anything
		// else is done.
		res = adapter.Result{Outcome: op.OutcomeUnknown, HTTPStatus: res.HTTPStatus, ErrorCategory: CategoryLeaseExpired,
			Error: wire.Clip200(fmt.Sprintf("the entity's lease expired before the outcome (%s) was recorded; the vendor is asked before anything else is done",
				res.Outcome)), Latency: res.Latency}
		cur, err = record(ctx, st, tool, o, att, res, eventID, tp, false)
	}
	if err != nil {
		return nil, fmt.Errorf("record attempt %s of operation %s: %w", att.ID, o.ID, err)
	}
	return cur, nil
}

func record(ctx context.Context, st *store.Store, tool *registry.Tool, o *op.Operation, att *op.Attempt,
	res adapter.Result, eventID string, tp telemetry.Traceparent, leased bool) (*op.Operation, error) {
	a := *att
	a.Outcome, a.ErrorCategory, a.Error, a.HTTPStatus = res.Outcome, res.ErrorCategory, res.Error, res.HTTPStatus
	a.ExternalRequestID, a.ExternalObjectID = res.ExternalRequestID, res.ExternalObjectID
	plan, err := followup.Decide(tool, o, followup.Outcome{Event: res.Outcome.Event(), Now: att.StartedAt, RetryAfter: res.RetryAfter,
		ErrorCategory: res.ErrorCategory, Error: res.Error, HTTPStatus: res.HTTPStatus}, eventID, tp)
	if err != nil {
		return nil, err
	}
	c := plan.Change(o, att.Worker, attemptDetail(res))
	c.AttemptID, c.Finish = att.ID, &a
	c.RequireLease = leased
	c.ExternalRequestID, c.ExternalObjectID = res.ExternalRequestID, res.ExternalObjectID
	return plan.Write(ctx, st, c)
}

// CategoryLeaseExpired: the entity's lease of a leased tool's operation
// expired (on the database's clock) before its attempt's outcome was
// recorded; the outcome is recorded as unknown and reconciled.
const CategoryLeaseExpired = "lease_expired"

// CategoryUnrecordable: the vendor's answer could not be written to the
// ledger even after it was bounded; the outcome is recorded as unknown.
const CategoryUnrecordable = "unrecordable_response"

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
