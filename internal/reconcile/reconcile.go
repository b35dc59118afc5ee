// Package reconcile is the reconciler: it resolves operations whose outcome
// is unknown, or that a vendor acknowledged without completing, by asking the
// vendor (lookup by idempotency key or client reference) instead of
// re-sending, and its sweeper finds operations stuck in dispatched (a
// dispatcher died mid-call) and marks them unknown, fencing the old worker off
// with a new lease epoch.
//
// Verdicts: found → completed_success with the vendor's id; still pending →
// look again later; not found once the vendor has had time to settle →
// failed_retryable (confirmed not applied), then the tool's retry policy; no
// lookup, or too many failed lookups → escalated to a human.
package reconcile

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

// Config tunes the reconciler.
type Config struct {
	// Durable is the consumer shared by reconciler instances (default "reconciler").
	Durable string
	Name    string
	Workers int // default 8
	// SweepInterval is how often the sweeper looks for stuck operations (default 1s).
	SweepInterval time.Duration
	// DispatchedGrace is added to a tool's timeout before an operation in
	// dispatched counts as stuck (default 5s).
	DispatchedGrace time.Duration
	// SettleDelay is how long after the last change a vendor's "not found" is
	// trusted as "never applied" (default 2s; vendors with propagation delay
	// need more).
	SettleDelay time.Duration
	// MaxLookups escalates after this many deliveries of one reconcile
	// command (default 20).
	MaxLookups int
	// RedriveAfter is how long an operation may wait in pending_dispatch,
	// unknown_outcome or acknowledged with no command in the outbox before
	// its command is written again (default 5m): the safety net for a
	// command lost after it was published.
	RedriveAfter time.Duration
	// RedriveInterval is how often the sweeper looks for such operations
	// (default 1m; the query scans operations).
	RedriveInterval time.Duration
}

func (c *Config) setDefaults() {
	if c.Durable == "" {
		c.Durable = "reconciler"
	}
	if c.Name == "" {
		c.Name = "reconciler"
	}
	if c.Workers <= 0 {
		c.Workers = 8
	}
	if c.SweepInterval <= 0 {
		c.SweepInterval = time.Second
	}
	if c.DispatchedGrace <= 0 {
		c.DispatchedGrace = 5 * time.Second
	}
	if c.SettleDelay <= 0 {
		c.SettleDelay = 2 * time.Second
	}
	if c.MaxLookups <= 0 {
		c.MaxLookups = 20
	}
	if c.RedriveAfter <= 0 {
		c.RedriveAfter = 5 * time.Minute
	}
	if c.RedriveInterval <= 0 {
		c.RedriveInterval = time.Minute
	}
}

// Service is one reconciler instance.
type Service struct {
	cfg      Config
	store    *store.Store
	bus      *bus.Bus
	reg      *registry.Registry
	adapters map[string]adapter.Adapter
	m        *telemetry.Metrics
	log      zerolog.Logger
}

// New returns a reconciler.
func New(cfg Config, st *store.Store, b *bus.Bus, reg *registry.Registry, adapters map[string]adapter.Adapter, m *telemetry.Metrics, log zerolog.Logger) *Service {
	cfg.setDefaults()
	return &Service{cfg: cfg, store: st, bus: b, reg: reg, adapters: adapters, m: m,
		log: log}
}

// Start consumes reconcile commands and runs the sweeper until ctx ends.
func (s *Service) Start(ctx context.Context) (stop func(), err error) {
	stopConsume, err := s.bus.Consume(ctx, bus.ConsumerConfig{
		Stream: wire.StreamOps, Durable: s.cfg.Durable, Workers: s.cfg.Workers,
		Filters: []string{wire.OpsSubject(wire.KindUnknown, ">")}, AckWait: time.Minute,
	}, s.Handle)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(s.cfg.SweepInterval)
		defer t.Stop()
		var lastRedrive time.Time
		for {
			select {
			case <-sctx.Done():
				return
			case now := <-t.C:
				if _, err := s.Sweep(sctx, now); err != nil && sctx.Err() == nil {
					s.log.Warn().Err(err).Msg("sweep failed")
				}
				if now.Sub(lastRedrive) < s.cfg.RedriveInterval {
					continue
				}
				lastRedrive = now
				if _, err := s.Redrive(sctx, now); err != nil && sctx.Err() == nil {
					s.log.Warn().Err(err).Msg("redrive failed")
				}
			}
		}
	}()
	return func() { cancel(); <-done; stopConsume() }, nil
}

// errLookAgain asks for the command to be redelivered later.
var errLookAgain = errors.New("vendor has no final answer yet")

// Handle processes one reconcile command.
func (s *Service) Handle(ctx context.Context, d bus.Delivery) error {
	var cmd wire.Command
	if err := json.Unmarshal(d.Data, &cmd); err != nil || cmd.OperationID == "" {
		return bus.Permanent(fmt.Errorf("reconcile: undecodable command on %s", d.Subject))
	}
	tp := telemetry.ParseTraceparent(d.Header[wire.HeaderTraceparent])
	log := s.log.With().Str("operation_id", cmd.OperationID).Str("tool", cmd.Tool).
		Str("idempotency_key", cmd.IdempotencyKey).Str("trace_id", tp.TraceID).Uint64("delivered", d.Delivered).Logger()
	o, err := s.store.Operation(ctx, cmd.OperationID)
	if errors.Is(err, op.ErrNotFound) {
		return bus.Permanent(err)
	} else if err != nil {
		return err
	}
	if o.State != op.StateUnknownOutcome && o.State != op.StateAcknowledged {
		s.m.Suppressed(wire.KindUnknown, cmd.Tool)
		log.Info().Str("state", string(o.State)).Msg("reconcile command changes nothing")
		return nil
	}
	tool, err := s.reg.Tool(o.Tool)
	if err != nil {
		// A live operation must not lose its only command to a registry
		// that (during a rolling deploy, say) lacks its tool: retry later.
		log.Error().Err(err).Msg("tool not in this instance's registry; will retry")
		return err
	}
	looker, ok := s.adapters[o.Tool].(adapter.Looker)
	if !ok || tool.Adapter.HTTP.Lookup == nil {
		return s.escalate(ctx, o, cmd.EventID, tp, "the vendor offers no lookup; a person must check", log)
	}
	lctx, cancel := context.WithTimeout(ctx, tool.Timeout)
	lr, err := looker.Lookup(lctx, adapter.Request{OperationID: o.ID, Tool: o.Tool, IdempotencyKey: o.IdempotencyKey, Args: o.Args,
		Header: map[string][]string{wire.HeaderTraceparent: {tp.Child().String()}}})
	cancel()
	switch {
	case err != nil:
		s.m.Reconciled(o.Tool, "error")
		if int(d.Delivered) >= s.cfg.MaxLookups {
			return s.escalate(ctx, o, cmd.EventID, tp, "lookups keep failing: "+err.Error(), log)
		}
		log.Warn().Err(err).Msg("lookup failed; will look again")
		return err
	case lr.Found && lr.Outcome == op.OutcomeAcknowledged:
		s.m.Reconciled(o.Tool, "pending")
		if int(d.Delivered) >= s.cfg.MaxLookups {
			return s.escalate(ctx, o, cmd.EventID, tp, "the vendor still reports the effect as pending", log)
		}
		return errLookAgain
	case lr.Found && lr.Outcome == op.OutcomePermanent:
		s.m.Reconciled(o.Tool, "found_failed")
		return s.resolve(ctx, tool, o, op.EventFailPermanent, lr.ExternalObjectID, cmd.EventID, tp, "the vendor reports the effect failed", log)
	case lr.Found && lr.Outcome != op.OutcomeSuccess:
		return fmt.Errorf("reconcile: lookup reported found with outcome %q", lr.Outcome)
	case lr.Found:
		s.m.Reconciled(o.Tool, "found")
		return s.resolve(ctx, tool, o, op.EventSucceed, lr.ExternalObjectID, cmd.EventID, tp, "found at vendor", log)
	case o.State == op.StateAcknowledged:
		// The vendor confirmed it received the request, yet has no record:
		// "not found" proves nothing here, and re-sending could duplicate it.
		s.m.Reconciled(o.Tool, "not_found")
		return s.escalate(ctx, o, cmd.EventID, tp, "the vendor acknowledged the request but its lookup has no record of it", log)
	case time.Since(o.UpdatedAt) < s.cfg.SettleDelay:
		return errLookAgain
	}
	// Not found, settled. That means "never applied" only if the vendor never
	// told us it had the request: an answered 2xx (an unreadable body) or an
	// acknowledgement on an attempt since the last dispatch is evidence it did.
	received, err := s.vendorAnswered(ctx, o)
	if err != nil {
		return err
	}
	switch {
	case received:
		s.m.Reconciled(o.Tool, "not_found")
		return s.escalate(ctx, o, cmd.EventID, tp, "the vendor answered the request but its lookup has no record of it", log)
	default:
		s.m.Reconciled(o.Tool, "not_found")
		return s.resolve(ctx, tool, o, op.EventFailRetryable, "", cmd.EventID, tp, "vendor has no record: never applied", log)
	}
}

// vendorAnswered reports whether the operation's latest attempt got an
// answer from the vendor that shows it received the request (a 2xx, or an
// acknowledgement), even though the outcome was recorded as unknown.
func (s *Service) vendorAnswered(ctx context.Context, o *op.Operation) (bool, error) {
	atts, err := s.store.Attempts(ctx, o.ID)
	if err != nil {
		return false, err
	}
	if len(atts) == 0 {
		return false, nil
	}
	last := atts[len(atts)-1]
	return last.Outcome == op.OutcomeAcknowledged || (last.HTTPStatus >= 200 && last.HTTPStatus < 300), nil
}

func (s *Service) resolve(ctx context.Context, tool *registry.Tool, o *op.Operation, ev op.Event, extID, eventID string,
	tp telemetry.Traceparent, why string, log zerolog.Logger) error {
	var cur *op.Operation
	err := s.store.InTx(ctx, func(tx *store.Tx) error {
		c := store.Change{OperationID: o.ID, From: o.State, LeaseEpoch: o.LeaseEpoch, Event: ev, ExternalObjectID: extID,
			Actor: s.cfg.Name, Detail: map[string]string{"verdict": why}}
		if ev == op.EventFailRetryable {
			c.ErrorCategory, c.Error = "not_applied", why
		}
		var err error
		if cur, err = tx.Transition(ctx, c); err != nil {
			return err
		}
		var msgs []store.Message
		if cur, msgs, err = followup.FollowUp(ctx, tx, tool, cur, eventID, tp, 0, s.cfg.Name); err != nil {
			return err
		}
		return tx.Enqueue(ctx, append(msgs, outbox.Result(wire.ResultFor(cur, eventID, op.DecisionNew), tp))...)
	})
	var stale *op.StaleError
	if errors.As(err, &stale) {
		s.m.Suppressed(wire.KindUnknown, o.Tool)
		return nil
	} else if err != nil {
		return err
	}
	s.m.Transition(o.Tool, string(cur.State))
	log.Info().Str("state_transition", string(o.State)+"->"+string(cur.State)).Str("verdict", why).
		Str("external_object_id", extID).Dur("reconciliation_lag_ms", time.Since(o.UpdatedAt)).Msg("reconciled")
	return nil
}

func (s *Service) escalate(ctx context.Context, o *op.Operation, eventID string, tp telemetry.Traceparent, why string, log zerolog.Logger) error {
	s.m.Reconciled(o.Tool, "escalated")
	var cur *op.Operation
	err := s.store.InTx(ctx, func(tx *store.Tx) error {
		var err error
		cur, err = tx.Transition(ctx, store.Change{OperationID: o.ID, From: o.State, LeaseEpoch: o.LeaseEpoch,
			Event: op.EventEscalate, Actor: s.cfg.Name, ErrorCategory: "escalated", Error: why})
		if err != nil {
			return err
		}
		return tx.Enqueue(ctx, outbox.Result(wire.ResultFor(cur, eventID, op.DecisionNew), tp))
	})
	var stale *op.StaleError
	if errors.As(err, &stale) {
		return nil
	} else if err != nil {
		return err
	}
	log.Warn().Str("state_transition", string(o.State)+"->"+string(cur.State)).Str("reason", why).Msg("escalated")
	return nil
}

// Sweep marks operations stuck in dispatched past their tool's timeout plus
// grace as unknown_outcome — taking a new lease epoch so a late dispatcher's
// write is refused — and sends them to reconciliation. It returns how many it
// moved. (Acknowledged operations need no sweep: the dispatcher schedules
// their reconciliation when it records the acknowledgement.)
func (s *Service) Sweep(ctx context.Context, now time.Time) (int, error) {
	stuck, err := s.store.OperationsStuckDispatched(ctx, now.Add(-s.cfg.DispatchedGrace), 100)
	if err != nil {
		return 0, err
	}
	moved := 0
	for _, o := range stuck {
		if tool, err := s.reg.Tool(o.Tool); err == nil && now.Sub(o.UpdatedAt) < tool.Timeout+s.cfg.DispatchedGrace {
			continue
		}
		tp := telemetry.FromTraceID(o.TraceID)
		err := s.store.InTx(ctx, func(tx *store.Tx) error {
			cur, err := tx.Transition(ctx, store.Change{OperationID: o.ID, From: op.StateDispatched, LeaseEpoch: o.LeaseEpoch,
				Event: op.EventOutcomeUnknown, BumpEpoch: true, Actor: s.cfg.Name + "/sweeper",
				ErrorCategory: "stuck", Error: fmt.Sprintf("no outcome recorded %s after the last change", now.Sub(o.UpdatedAt).Round(time.Millisecond))})
			if err != nil {
				return err
			}
			return tx.Enqueue(ctx, outbox.Command(wire.KindUnknown, cur, cur.OriginEventID, tp, time.Time{}),
				outbox.Result(wire.ResultFor(cur, cur.OriginEventID, op.DecisionNew), tp))
		})
		var stale *op.StaleError
		if errors.As(err, &stale) {
			continue // it moved on by itself
		} else if err != nil {
			return moved, err
		}
		moved++
		s.log.Warn().Str("operation_id", o.ID).Str("tool", o.Tool).Str("idempotency_key", o.IdempotencyKey).
			Str("state_transition", "dispatched->unknown_outcome").Msg("swept stuck operation")
	}
	return moved, nil
}

// Redrive writes the command again for operations that have waited longer
// than RedriveAfter in pending_dispatch (a dispatch command), unknown_outcome
// or acknowledged (a reconcile command) with nothing in the outbox to move
// them: their command was published and then lost. The command carries the
// operation's current state and epoch, so a late original and its copy are
// told apart by the ledger and only one acts. It returns how many it wrote.
func (s *Service) Redrive(ctx context.Context, now time.Time) (int, error) {
	ops, err := s.store.OperationsUnattended(ctx, now.Add(-s.cfg.RedriveAfter), 100)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, o := range ops {
		kind := wire.KindUnknown
		if o.State == op.StatePendingDispatch {
			kind = wire.KindDispatch
		}
		err := s.store.InTx(ctx, func(tx *store.Tx) error {
			return tx.Enqueue(ctx, outbox.Command(kind, o, o.OriginEventID, telemetry.FromTraceID(o.TraceID), time.Time{}))
		})
		if err != nil {
			return n, err
		}
		n++
		s.m.Redriven(kind, o.Tool)
		s.log.Warn().Str("operation_id", o.ID).Str("tool", o.Tool).Str("idempotency_key", o.IdempotencyKey).
			Str("state", string(o.State)).Dur("waiting_ms", now.Sub(o.UpdatedAt)).Msg("command lost after publish; written again")
	}
	return n, nil
}
