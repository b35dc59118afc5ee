// Package reconcile is the reconciler: it resolves operations whose outcome
// is unknown, or that a vendor acknowledged without completing, by asking the
// vendor (lookup by idempotency key or client reference) instead of
// re-sending.
//
// Verdicts: found → completed_success with the vendor's id (or
// failed_permanent when the vendor reports the effect failed); still pending
// → look again later; not found once the vendor has had time to settle, on
// the database's clock, and with no sign the vendor ever had the request →
// failed_retryable (confirmed not applied), then the tool's retry policy; no
// lookup, contradicting evidence, or lookups or writes that keep failing →
// escalated to a person, with the reason in the event and in the result.
//
// The sweeper and the re-drive pass, which find operations whose commands
// or dispatchers were lost, run in the maintenance leader (internal/maintain).
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/opledger/opledger/internal/bus"
	"github.com/opledger/opledger/internal/evidence"
	"github.com/opledger/opledger/internal/failpoint"
	"github.com/opledger/opledger/internal/followup"
	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/telemetry"
	"github.com/opledger/opledger/pkg/adapter"
	"github.com/opledger/opledger/pkg/adapter/httpadapter"
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
	// SettleDelay is how long after the last change, on the database's
	// clock, a vendor's "not found" is trusted as "never applied" (default
	// 2s; vendors with propagation delay need more).
	SettleDelay time.Duration
	// Tuning overrides the consumer's AckWait (default 10s), heartbeat and
	// Nak delay.
	Tuning bus.Tuning
	// Evidence, when set, applies held webhook evidence about an operation
	// before the vendor is asked about it.
	Evidence *evidence.Settler
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
	if c.SettleDelay <= 0 {
		c.SettleDelay = 2 * time.Second
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
	return &Service{cfg: cfg, store: st, bus: b, reg: reg, adapters: adapters, m: m, log: log}
}

// Start consumes reconcile commands until ctx ends.
func (s *Service) Start(ctx context.Context) (stop func(), err error) {
	// Short AckWait with heartbeats, and a pause while the ledger is
	// unreachable: a reconciler cut off from Postgres holds no commands.
	return s.bus.Consume(ctx, s.cfg.Tuning.Apply(bus.ConsumerConfig{
		Stream: wire.StreamOps, Durable: s.cfg.Durable, Workers: s.cfg.Workers,
		Filters: []string{wire.OpsFilter(wire.KindUnknown)}, AckWait: 10 * time.Second, Ready: s.store.Ping,
	}), s.Handle)
}

// errLookAgain asks for the command to be redelivered later.
var errLookAgain = errors.New("vendor has no final answer yet")

// Handle processes one reconcile command.
func (s *Service) Handle(ctx context.Context, d bus.Delivery) error {
	cmd, err := wire.DecodeCommand(d.Data)
	if err != nil {
		return bus.Permanent(fmt.Errorf("reconcile: undecodable command on %s: %w", wire.Clip(d.Subject), err))
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
	// A webhook may have told already: evidence held until the operation
	// could be settled settles it now, and nobody asks the vendor.
	if s.cfg.Evidence != nil {
		if applied, err := s.webhookEvidence(ctx, o, log); err != nil || applied {
			return err
		}
	}
	// The tool's reconciliation schedule: after max_lookups lookups that
	// failed or found the effect pending, counted in the ledger (a command
	// written again starts JetStream's delivery count from one), or past
	// its deadline since the outcome became ambiguous (on the database's
	// clock), a lookup that settles nothing escalates.
	now, err := s.store.DBNow(ctx)
	if err != nil {
		return err
	}
	sched := tool.Reconcile
	overdue := sched.Deadline > 0 && now.Sub(o.UpdatedAt) >= sched.Deadline
	v := s.verdict(ctx, tool, o, log)
	if v.event == "" && overdue {
		why := fmt.Sprintf("no verdict within the tool's reconciliation deadline (%s): a person must check", sched.Deadline)
		if v.failure != "" {
			why = fmt.Sprintf("%s: past the tool's reconciliation deadline (%s)", v.failure, sched.Deadline)
		}
		v = verdict{event: op.EventEscalate, metric: "escalated", why: why}
	}
	if v.event == "" {
		wait := sched.Interval
		if v.wait > 0 {
			// Not found, and not yet to be trusted: look again at the
			// tool's interval, and at the latest when it can be trusted.
			wait = min(wait, v.wait)
		}
		if sched.Deadline > 0 {
			// Never sleep past the deadline: look then, and decide.
			wait = min(wait, max(sched.Deadline-now.Sub(o.UpdatedAt), 10*time.Millisecond))
		}
		wait = min(wait, maxRetryIn)
		n, err := s.store.NoteLookup(ctx, o.ID, o.Version, v.failure != "", wait)
		if err != nil {
			return err
		}
		if v.failure == "" || n.Moved || n.Failures < sched.MaxLookups {
			s.m.Reconciled(o.Tool, v.metric)
			cause := errLookAgain
			if v.err != nil {
				cause = v.err
			}
			return bus.RetryIn(cause, wait)
		}
		v = verdict{event: op.EventEscalate, why: fmt.Sprintf("%s: after %d lookups (the tool's max_lookups)", v.failure, n.Failures), metric: "escalated"}
	}
	s.m.Reconciled(o.Tool, v.metric)
	failpoint.Hit(failpoint.ReconcileBeforeCommit)
	err = s.write(ctx, tool, o, v, cmd.EventID, tp, log)
	if err != nil && v.event != op.EventEscalate {
		// A verdict that cannot be written must not be retried forever: at
		// once when the database refuses a value, else after max_lookups
		// failures, counted like failed lookups.
		escalate := errors.Is(err, op.ErrInvalid)
		if !escalate {
			n, nerr := s.store.NoteLookup(ctx, o.ID, o.Version, true, sched.Interval)
			escalate = nerr == nil && !n.Moved && n.Failures >= sched.MaxLookups
		}
		if escalate {
			v = verdict{event: op.EventEscalate, why: "the verdict could not be recorded: " + wire.Clip200(err.Error()), metric: "escalated"}
			err = s.write(ctx, tool, o, v, cmd.EventID, tp, log)
		}
	}
	return err
}

// webhookEvidence applies the held webhook evidence about o, if any. It
// reports whether some evidence settled o; evidence that cannot (it
// contradicts what the vendor answered, say) is left to its own fate and
// the vendor is asked as usual.
func (s *Service) webhookEvidence(ctx context.Context, o *op.Operation, log zerolog.Logger) (bool, error) {
	held, err := s.store.HeldEvidenceAbout(ctx, o)
	if err != nil {
		return false, err
	}
	for _, e := range held {
		if !evidence.Matches(e, o) {
			continue
		}
		d, err := s.cfg.Evidence.SettleIn(ctx, s.store, e)
		if err != nil {
			return false, err
		}
		if d.Status == store.EvidenceApplied {
			s.m.Reconciled(o.Tool, "webhook")
			log.Info().Str("provider", e.Provider).Str("delivery_id", e.DeliveryID).Str("state_transition", string(d.From)+"->"+string(d.Operation.State)).
				Msg("reconciled by a webhook that arrived before the operation could be settled")
			return true, nil
		}
	}
	return false, nil
}

// maxRetryIn is the longest delay bus.RetryIn honours.
const maxRetryIn = 5 * time.Minute

// verdict is what a lookup decided: an event to apply, or none (look again).
type verdict struct {
	event  op.Event
	extID  string
	why    string
	metric string
	now    time.Time // the database's clock, for the retry budget
	err    error     // a read failed: look again
	// failure, with no event, says why the lookup settled nothing in a way
	// that counts against max_lookups (it failed, or the effect is still
	// pending); it is the escalation's reason once they are spent.
	failure string
	// wait, with no event, is how long until a "not found" can be trusted.
	wait time.Duration
	// mayHaveApplied: a retry that is not confirmed not applied.
	mayHaveApplied bool
}

func (s *Service) verdict(ctx context.Context, tool *registry.Tool, o *op.Operation, log zerolog.Logger) verdict {
	looker, ok := s.adapters[o.Tool].(adapter.Looker)
	if !ok || !tool.Adapter.HasLookup() {
		if o.Class.ResendAfterAmbiguity(tool.Adapter.VendorIdempotency) && o.State == op.StateUnknownOutcome {
			// A read, or a write the vendor deduplicates by our key: sending
			// it again under the same key cannot make a second effect.
			now, err := s.store.DBNow(ctx)
			if err != nil {
				return failed(err)
			}
			return verdict{event: op.EventFailRetryable, why: "no lookup, but the vendor deduplicates by key: sent again under the same key",
				metric: "resent", now: now, mayHaveApplied: true}
		}
		return verdict{event: op.EventEscalate, why: "the vendor offers no lookup; a person must check", metric: "escalated"}
	}
	lctx, cancel := context.WithTimeout(ctx, tool.Timeout)
	lr, err := looker.Lookup(lctx, adapter.Request{OperationID: o.ID, Tool: o.Tool, IdempotencyKey: o.IdempotencyKey, Args: o.Args})
	cancel()
	secrets := tool.CallSecrets(s.adapters[o.Tool], o.Args)
	if err == nil && lr.Found && !adapter.ValidVendorID(lr.ExternalObjectID) {
		err = &httpadapter.LookupError{HTTPStatus: lr.HTTPStatus, Category: adapter.CategoryMalformedResponse,
			Reason: "the vendor's record has an identifier that is too long, not UTF-8 or holds control characters"}
	}
	if err == nil && lr.Found && adapter.HoldsSecret(lr.ExternalObjectID, secrets) {
		// The adapter checks its own credentials; the call's sensitive
		// arguments only the worker knows.
		lr = adapter.LookupResult{HTTPStatus: lr.HTTPStatus}
		err = &httpadapter.LookupError{HTTPStatus: lr.HTTPStatus, Category: adapter.CategoryCredentialEcho,
			Reason: "the vendor's record has an identifier that holds a secret of the call; it is not kept"}
	}
	if err != nil {
		// Errors quote what the vendor said: never a secret of the call.
		err = scrubbedError{err: err, text: adapter.RedactText(err.Error(), secrets)}
	}
	switch {
	case err != nil:
		log.Warn().Err(err).Msg("lookup failed; will look again")
		return verdict{metric: "error", failure: "lookups keep failing: " + wire.Clip200(err.Error())}
	case lr.Found && lr.Outcome == op.OutcomeAcknowledged:
		return verdict{metric: "pending", failure: "the vendor still reports the effect as pending"}
	case lr.Found && lr.Outcome == op.OutcomePermanent:
		return verdict{event: op.EventFailPermanent, extID: lr.ExternalObjectID, why: "the vendor reports the effect failed", metric: "found_failed"}
	case lr.Found && lr.Outcome == op.OutcomeSuccess:
		return verdict{event: op.EventSucceed, extID: lr.ExternalObjectID, why: "found at the vendor", metric: "found"}
	case lr.Found:
		return failed(fmt.Errorf("reconcile: lookup reported found with outcome %q", lr.Outcome))
	case o.State == op.StateAcknowledged:
		// The vendor confirmed it received the request, yet has no record:
		// "not found" proves nothing here, and re-sending could duplicate it.
		return verdict{event: op.EventEscalate, why: "the vendor acknowledged the request but its lookup has no record of it", metric: "not_found"}
	}
	// Not found. That means "never applied" only once the request can no
	// longer take effect: the vendor may still be applying it until the
	// tool's apply bound has passed since the last attempt was sent, and
	// may take the settle delay after that to show it. Both are measured
	// on the database's clock. Before then, look again when it has passed.
	now, err := s.store.DBNow(ctx)
	if err != nil {
		return failed(err)
	}
	atts, err := s.store.Attempts(ctx, o.ID)
	if err != nil {
		return failed(err)
	}
	trustAt := o.UpdatedAt.Add(s.cfg.SettleDelay)
	if len(atts) > 0 {
		if t := atts[len(atts)-1].StartedAt.Add(tool.ApplyBound + s.cfg.SettleDelay); t.After(trustAt) {
			trustAt = t
		}
	}
	if now.Before(trustAt) {
		return verdict{metric: "settling", wait: trustAt.Sub(now)}
	}
	if vendorAnswered(atts) {
		return verdict{event: op.EventEscalate, why: "the vendor answered the request but its lookup has no record of it", metric: "not_found"}
	}
	return verdict{event: op.EventFailRetryable, why: "the vendor has no record: never applied", metric: "not_found", now: now}
}

// failed is the verdict when a read the verdict needs failed: look again,
// and count it against max_lookups.
func failed(err error) verdict {
	return verdict{err: err, metric: "error", failure: "the verdict could not be established: " + wire.Clip200(err.Error())}
}

// vendorAnswered reports whether the operation's latest attempt got an
// answer from the vendor that shows it received the request (a 2xx, or an
// acknowledgement), even though the outcome was recorded as unknown.
func vendorAnswered(atts []*op.Attempt) bool {
	if len(atts) == 0 {
		return false
	}
	last := atts[len(atts)-1]
	return last.Outcome == op.OutcomeAcknowledged || (last.HTTPStatus >= 200 && last.HTTPStatus < 300)
}

// write records a verdict as one decision, with its follow-up and result.
func (s *Service) write(ctx context.Context, tool *registry.Tool, o *op.Operation, v verdict, eventID string,
	tp telemetry.Traceparent, log zerolog.Logger) error {
	oc := followup.Outcome{Event: v.event, Now: v.now, Reason: v.why, MayHaveApplied: v.mayHaveApplied}
	switch {
	case v.event == op.EventFailRetryable && v.mayHaveApplied:
		oc.ErrorCategory, oc.Error = "resent_after_ambiguity", v.why
	case v.event == op.EventFailRetryable:
		oc.ErrorCategory, oc.Error = "not_applied", v.why
	case v.event == op.EventEscalate:
		oc.ErrorCategory, oc.Error = "escalated", v.why
	case v.event == op.EventFailPermanent:
		oc.ErrorCategory, oc.Error = "vendor_failed", v.why
	}
	plan, err := followup.Decide(tool, o, oc, eventID, tp)
	if err != nil {
		return bus.Permanent(err)
	}
	c := plan.Change(o, s.cfg.Name, map[string]any{"verdict": v.why})
	c.ExternalObjectID = v.extID
	cur, err := plan.Write(ctx, s.store, c)
	var stale *op.StaleError
	if errors.As(err, &stale) {
		s.m.Suppressed(wire.KindUnknown, o.Tool)
		return nil
	} else if err != nil {
		return err
	}
	s.m.Transition(o.Tool, string(cur.State))
	ev := log.Info()
	if cur.State == op.StateEscalated {
		ev = log.Warn()
	}
	ev.Str("state_transition", string(o.State)+"->"+string(cur.State)).Str("verdict", v.why).
		Str("external_object_id", v.extID).Dur("reconciliation_lag_ms", cur.UpdatedAt.Sub(o.UpdatedAt)).Msg("reconciled")
	return nil
}

// scrubbedError is a lookup error whose text has the call's secrets masked.
type scrubbedError struct {
	err  error
	text string
}

func (e scrubbedError) Error() string { return e.text }
func (e scrubbedError) Unwrap() error { return e.err }
