// Package compensate is the compensator. A compensation is never invented on
// the fly: it is the playbook the operator's registry attaches to a tool (for
// capture_payment: refund_payment with the charge id). Running one creates a
// new operation with its own identity and idempotency key, linked to the
// original through compensates_operation_id, subject to the playbook tool's
// own approval rule; the original moves to compensating, and to compensated
// when the compensation completes (see followup.CompleteCompensation).
//
// The service consumes opledger.ops.failed.>: when a compensation itself fails
// permanently, the original operation is escalated to a person. When an
// operator gave up on an escalated operation, or the tool's playbook says
// on_failure, the playbook runs for the failed operation (once). Other
// failures confirmed nothing was applied, so there is nothing of theirs to
// undo; they are logged.
//
// A compensation that ends without doing anything (denied, cancelled, its
// approval expired) returns the original to the state it was compensated
// from (see followup.WithdrawCompensation); it may be compensated again.
package compensate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/rs/zerolog"

	"github.com/opledger/opledger/internal/bus"
	"github.com/opledger/opledger/internal/outbox"
	"github.com/opledger/opledger/internal/policy"
	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/telemetry"
	"github.com/opledger/opledger/pkg/canon"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/registry"
	"github.com/opledger/opledger/pkg/wire"
)

// Source is the inbox source of compensation requests.
const Source = "compensator"

// Config tunes the compensator.
type Config struct {
	Durable string // default "compensator"
	Name    string // default "compensator"
	Workers int    // default 4
	// Tuning overrides the consumer's AckWait, heartbeat and Nak delay.
	Tuning bus.Tuning
}

// Service is the compensator.
type Service struct {
	cfg   Config
	store *store.Store
	bus   *bus.Bus
	reg   *registry.Registry
	m     *telemetry.Metrics
	log   zerolog.Logger
}

// New returns a compensator.
func New(cfg Config, st *store.Store, b *bus.Bus, reg *registry.Registry, m *telemetry.Metrics, log zerolog.Logger) *Service {
	if cfg.Durable == "" {
		cfg.Durable = "compensator"
	}
	if cfg.Name == "" {
		cfg.Name = "compensator"
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 4
	}
	return &Service{cfg: cfg, store: st, bus: b, reg: reg, m: m, log: log}
}

// Start consumes failure commands until ctx ends.
func (s *Service) Start(ctx context.Context) (stop func(), err error) {
	return s.bus.Consume(ctx, s.cfg.Tuning.Apply(bus.ConsumerConfig{
		Stream: wire.StreamOps, Durable: s.cfg.Durable, Workers: s.cfg.Workers,
		Filters: []string{wire.OpsFilter(wire.KindFailed)}, Ready: s.store.Ping,
	}), s.Handle)
}

// Handle processes one failure command.
func (s *Service) Handle(ctx context.Context, d bus.Delivery) error {
	cmd, err := wire.DecodeCommand(d.Data)
	if err != nil {
		return bus.Permanent(fmt.Errorf("compensate: undecodable command on %s: %w", wire.Clip(d.Subject), err))
	}
	o, err := s.store.Operation(ctx, cmd.OperationID)
	if errors.Is(err, op.ErrNotFound) {
		return bus.Permanent(err)
	} else if err != nil {
		return err
	}
	log := s.log.With().Str("operation_id", o.ID).Str("tool", o.Tool).Str("idempotency_key", o.IdempotencyKey).Logger()
	if o.State != op.StateFailedPermanent {
		s.m.Suppressed(wire.KindFailed, o.Tool)
		return nil
	}
	if o.CompensatesID == "" {
		return s.trigger(ctx, o, log)
	}
	tp := telemetry.FromTraceID(o.TraceID)
	err = s.store.InTx(ctx, func(tx *store.Tx) error {
		orig, err := tx.Operation(ctx, o.CompensatesID)
		if err != nil {
			return err
		}
		if orig.State != op.StateCompensating {
			return nil
		}
		why := wire.Clip200("compensation " + o.ID + " failed: " + o.LastError)
		_, err = tx.Transition(ctx, store.Change{OperationID: orig.ID, From: orig.State, LeaseEpoch: orig.LeaseEpoch,
			Events: []op.Event{op.EventCompensationFail}, Actor: s.cfg.Name, ErrorCategory: "compensation_failed",
			Error: why, Detail: map[string]string{"reason": why}, Operation: orig,
			Outbox: func(after *op.Operation) []store.Message {
				r := wire.ResultFor(after, after.OriginEventID, op.DecisionNew)
				r.Reason = why
				return []store.Message{outbox.Result(r, tp)}
			}})
		return err
	})
	var stale *op.StaleError
	if err != nil && !errors.As(err, &stale) {
		return err
	}
	log.Warn().Str("compensates_operation_id", o.CompensatesID).Msg("compensation failed; original escalated")
	return nil
}

// CategoryGivenUp is the error category of an operation an operator gave
// up on (ops.VerdictGiveUp): it may have had an effect, so its playbook runs.
const CategoryGivenUp = "given_up"

// Automatic is who proposes a compensation the compensator starts by
// itself (compensation.on_failure): no person, and no approver's name
// (approvers' names have no ":"), so any approver may approve it.
const Automatic = "system:compensator"

// trigger runs the playbook of an operation that failed permanently, when
// it may have had an effect and someone asked for it: an operator gave up
// on it (category given_up), or its tool's playbook says on_failure (not
// when every attempt was refused before any effect: nothing was done, and
// the same action sent again reopens it).
//
// A trigger runs once per operation: it never loops, and a redelivered
// command finds the original compensating or its compensation requested.
// Once a compensation has been requested, only an operator asks again.
func (s *Service) trigger(ctx context.Context, o *op.Operation, log zerolog.Logger) error {
	tool, err := s.reg.Tool(o.Tool)
	if err != nil {
		log.Error().Err(err).Msg("tool not in this instance's registry; will retry")
		return err
	}
	pb := tool.Compensation
	givenUp := o.LastErrorCategory == CategoryGivenUp
	switch {
	case pb == nil || (!givenUp && (!pb.OnFailure || o.LastErrorCategory == op.CategoryRetriesExhausted)):
		log.Info().Str("error_category", o.LastErrorCategory).Msg("operation failed permanently; no compensation playbook asked for")
		return nil
	case o.CompensationID != "":
		s.m.Suppressed(wire.KindFailed, o.Tool)
		log.Info().Str("compensation_operation_id", o.CompensationID).Msg("a compensation was requested before; only an operator asks again")
		return nil
	}
	proposer, reason := Automatic, "the tool's compensation playbook runs on failure: "+o.LastError
	if givenUp {
		// The operator who gave up asked for the playbook: they may not
		// approve it too.
		if proposer, err = givenUpBy(ctx, s.store, o); err != nil {
			return err
		}
		reason = "given up: " + o.LastError
	}
	comp, err := Request(ctx, s.store, s.reg, o.ID, proposer, wire.Clip200(reason))
	switch {
	case err == nil:
		s.m.Transition(comp.Tool, string(comp.State))
		log.Info().Str("compensation_operation_id", comp.ID).Str("compensation_tool", comp.Tool).Str("state", string(comp.State)).
			Msg("compensation playbook started")
		return nil
	case errors.Is(err, op.ErrInvalid), errors.Is(err, op.ErrConflict), errors.Is(err, op.ErrIllegalTransition):
		// It cannot start as things are; trying again changes nothing.
	case errors.As(err, new(*op.StaleError)):
		return nil // the original moved on meanwhile
	default:
		return err
	}
	why := wire.Clip200("the compensation playbook could not start: " + err.Error())
	if givenUp {
		// A person decided already, and was told whether the playbook
		// would run (ops.Resolve renders it first).
		log.Warn().Str("reason", why).Msg("compensation playbook could not start")
		return nil
	}
	// The registry asked for a compensation that cannot happen: a person
	// must look. Giving up on it then makes it given_up, which never
	// escalates again.
	tp := telemetry.FromTraceID(o.TraceID)
	_, err = s.store.Transition(ctx, store.Change{OperationID: o.ID, From: o.State, LeaseEpoch: o.LeaseEpoch,
		Events: []op.Event{op.EventEscalate}, Actor: s.cfg.Name, ErrorCategory: "compensation_not_started", Error: why,
		Detail: map[string]string{"reason": why}, Operation: o,
		Outbox: func(after *op.Operation) []store.Message {
			r := wire.ResultFor(after, after.OriginEventID, op.DecisionNew)
			r.Reason = why
			return []store.Message{outbox.Result(r, tp)}
		}})
	if err != nil && !errors.As(err, new(*op.StaleError)) {
		return err
	}
	log.Warn().Str("reason", why).Msg("compensation playbook could not start; escalated")
	return nil
}

// givenUpBy is the actor of the event that gave o up (Automatic if the
// history names none).
func givenUpBy(ctx context.Context, st *store.Store, o *op.Operation) (string, error) {
	events, err := st.Events(ctx, o.ID)
	if err != nil {
		return "", err
	}
	for i := len(events) - 1; i >= 0; i-- {
		if e := events[i]; e.Event == op.EventFailPermanent && e.From == op.StateEscalated && e.Actor != "" {
			return e.Actor, nil
		}
	}
	return Automatic, nil
}

// Request starts the registry's compensation playbook for a completed (or
// escalated, or permanently failed) operation: it creates the compensation
// operation — keyed "compensate:<original id>" in the inbox, so asking twice
// creates it once; after earlier compensations ended without effect,
// "compensate:<original id>:<n>" with a numbered key — links the original
// to it and moves the original to compensating, in one transaction. It
// returns the compensation operation.
//
// Errors: op.ErrNotFound; op.ErrInvalid when the tool has no playbook or the
// playbook's arguments do not fit; *op.TransitionError when the original's
// state does not allow compensation.
func Request(ctx context.Context, st *store.Store, reg *registry.Registry, originalID, actor, reason string) (*op.Operation, error) {
	var comp *op.Operation
	err := st.InTx(ctx, func(tx *store.Tx) error {
		var err error
		comp, err = RequestTx(ctx, tx, reg, originalID, actor, reason)
		return err
	})
	if err != nil {
		return nil, err
	}
	return comp, nil
}

// Existing returns the compensation that stands for the operation
// originalID: the latest one requested, unless it ended without doing
// anything (rejected by an approver, cancelled, its approval expired),
// after which a new one may be requested. nil when none stands. Asking
// again, whatever the original's state is by now, finds the one that
// stands.
func Existing(ctx context.Context, tx *store.Tx, originalID string) (*op.Operation, error) {
	orig, err := tx.Operation(ctx, originalID)
	if err != nil {
		return nil, fmt.Errorf("compensation of %s: %w", originalID, err)
	}
	id := orig.CompensationID
	if id == "" {
		// Requested before the original named its compensation: the inbox
		// row of the first request does.
		in, err := tx.InboxEntry(ctx, Source, eventID(originalID, 1))
		if errors.Is(err, op.ErrNotFound) {
			return nil, nil
		} else if err != nil {
			return nil, fmt.Errorf("compensation of %s: %w", originalID, err)
		}
		if in.Decision != op.DecisionNew || in.OperationID == "" {
			return nil, nil // an earlier request that created nothing
		}
		id = in.OperationID
	}
	comp, err := tx.Operation(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("compensation of %s: %w", originalID, err)
	}
	if EndedWithoutEffect(comp) {
		return nil, nil
	}
	return comp, nil
}

// EndedWithoutEffect reports whether a compensation ended before anything
// was sent: rejected by an approver or cancelled (by an operator, or when
// its approval expired). Its original may be compensated again.
func EndedWithoutEffect(comp *op.Operation) bool {
	return comp.State == op.StateRejected || comp.State == op.StateCancelled
}

// eventID is the inbox key of the n-th compensation requested for an
// operation: "compensate:<id>" for the first, "compensate:<id>:<n>" after.
// Concurrent requests for the same n meet on it, so each is created once.
func eventID(originalID string, n int) string {
	if n <= 1 {
		return "compensate:" + originalID
	}
	return "compensate:" + originalID + ":" + strconv.Itoa(n)
}

// nthKey is the idempotency key of the n-th compensation of one original
// (n > 1): the playbook's key, which the earlier ones (that ended before
// anything was sent) hold, numbered. The vendor never saw those.
func nthKey(key string, n int) string {
	if n <= 1 || key == "" {
		return key
	}
	return canon.CapKey(key + ":req" + strconv.Itoa(n))
}

// Playbook renders the registry's compensation playbook for orig without
// doing anything: the compensating tool and its prepared operation. It
// says, before anyone relies on it, whether compensating orig can work.
//
// Errors: op.ErrInvalid when the tool has no playbook or the playbook's
// arguments do not fit the compensating tool; op.ErrNotFound for a tool
// the registry lacks.
func Playbook(reg *registry.Registry, orig *op.Operation) (*registry.Tool, *registry.Prepared, []byte, error) {
	tool, err := reg.Tool(orig.Tool)
	if err != nil {
		return nil, nil, nil, err
	}
	pb := tool.Compensation
	if pb == nil {
		return nil, nil, nil, fmt.Errorf("tool %s has no compensation playbook: %w", orig.Tool, op.ErrInvalid)
	}
	ctool, err := reg.Tool(pb.Tool)
	if err != nil {
		return nil, nil, nil, err
	}
	args, err := PlaybookArgs(pb, orig, ctool)
	if err != nil {
		return nil, nil, nil, err
	}
	p, err := ctool.Prepare(registry.Proposal{WorkflowID: orig.WorkflowID, Tenant: orig.Tenant, RunID: orig.RunID, TraceID: orig.TraceID, Args: args})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("compensation of %s: %w", orig.ID, err)
	}
	return ctool, p, args, nil
}

// RequestTx is Request in tx.
func RequestTx(ctx context.Context, tx *store.Tx, reg *registry.Registry, originalID, actor, reason string) (*op.Operation, error) {
	var comp *op.Operation
	err := func() error {
		var err error
		if comp, err = Existing(ctx, tx, originalID); err != nil || comp != nil {
			return err // asked before: the same compensation stands
		}
		orig, err := tx.Operation(ctx, originalID)
		if err != nil {
			return err
		}
		ctool, p, args, err := Playbook(reg, orig)
		if err != nil {
			return err
		}
		// The earlier compensations of orig ended before anything was sent
		// (Existing found none standing): this one is numbered after them.
		earlier, err := tx.CompensationCount(ctx, orig.ID)
		if err != nil {
			return err
		}
		n := earlier + 1
		p.Operation.CompensatesID = orig.ID
		p.Operation.IdempotencyKey = nthKey(p.Operation.IdempotencyKey, n)
		var sub0 *store.EntityVersion
		if ev := p.EntityVersion; ev != nil {
			key := ev.Key
			sub0 = &store.EntityVersion{EntityType: ev.EntityType, EntityID: ev.EntityID, Action: ev.Action,
				Key: func(v int64) (string, error) {
					k, err := key(v)
					return nthKey(k, n), err
				}}
		}
		tp := telemetry.FromTraceID(orig.TraceID)
		sub := store.Submission{Source: Source, EventID: eventID(orig.ID, n), Payload: args, WorkflowID: orig.WorkflowID,
			Operation: p.Operation, Initial: p.Initial, Actor: actor, EntityVersion: sub0, ProposedBy: actor,
			Approval: store.Approval{Required: ctool.Approval.Required, ExpiresAfter: ctool.Approval.ExpiresAfter},
			Guard:    policy.Guard(reg, ctool)}
		if p.Initial == op.EventEnqueue {
			p.Operation.State = op.StatePendingDispatch
			sub.Outbox = func(o *op.Operation) []store.Message {
				return []store.Message{outbox.Command(wire.KindDispatch, o, sub.EventID, tp, 0)}
			}
		}
		res, err := tx.Submit(ctx, sub)
		if err != nil {
			return err
		}
		switch {
		case res.Decision == op.DecisionDuplicateEvent && res.FirstDecision == op.DecisionNew:
			comp = res.Operation
			return nil // asked at the same moment: the same compensation stands
		case res.Decision != op.DecisionNew:
			// The playbook's key belongs to another operation (say, the agent
			// already refunded this charge by hand): not this compensation.
			return fmt.Errorf("compensation of %s would be %s of operation %s (%s): %w",
				orig.ID, res.Decision, opID(res.Operation), res.Reason, op.ErrConflict)
		}
		comp = res.Operation
		_, err = tx.Transition(ctx, store.Change{OperationID: orig.ID, From: orig.State, LeaseEpoch: orig.LeaseEpoch,
			Events: []op.Event{op.EventCompensate}, Actor: actor, Operation: orig, CompensationID: comp.ID,
			Detail: map[string]string{"compensation_operation_id": comp.ID, "reason": reason},
			Outbox: func(after *op.Operation) []store.Message {
				return []store.Message{outbox.Result(wire.ResultFor(after, after.OriginEventID, op.DecisionNew), tp)}
			}})
		return err
	}()
	if err != nil {
		return nil, fmt.Errorf("compensate %s: %w", originalID, err)
	}
	return comp, nil
}

func opID(o *op.Operation) string {
	if o == nil {
		return "-"
	}
	return o.ID
}

// PlaybookArgs renders a playbook's argument templates over the original
// operation: {field} of its canonical args, {external_object_id},
// {external_request_id}, {operation_id}. Values that the compensation tool's
// schema declares as integers are emitted as JSON numbers.
func PlaybookArgs(pb *registry.Compensation, orig *op.Operation, ctool *registry.Tool) ([]byte, error) {
	var src map[string]any
	dec := json.NewDecoder(bytes.NewReader(orig.Args))
	dec.UseNumber()
	if err := dec.Decode(&src); err != nil {
		return nil, fmt.Errorf("compensation of %s: decode args: %w", orig.ID, err)
	}
	src["external_object_id"] = orig.ExternalObjectID
	src["external_request_id"] = orig.ExternalRequestID
	src["operation_id"] = orig.ID
	out := map[string]any{}
	for name, tmpl := range pb.Args {
		v, err := expand(tmpl, src)
		if err != nil {
			return nil, fmt.Errorf("compensation of %s: argument %s: %w", orig.ID, name, err)
		}
		if ctool.ArgType(name) == "integer" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("compensation of %s: argument %s is not an integer: %w", orig.ID, name, op.ErrInvalid)
			}
			out[name] = n
			continue
		}
		out[name] = v
	}
	return json.Marshal(out)
}

// expand replaces {name} placeholders with top-level values of src.
func expand(tmpl string, src map[string]any) (string, error) {
	var b strings.Builder
	for {
		i := strings.IndexByte(tmpl, '{')
		if i < 0 {
			b.WriteString(tmpl)
			return b.String(), nil
		}
		j := strings.IndexByte(tmpl[i:], '}')
		if j < 0 {
			return "", fmt.Errorf("unbalanced brace: %w", op.ErrInvalid)
		}
		b.WriteString(tmpl[:i])
		name := tmpl[i+1 : i+j]
		v, ok := src[name]
		if !ok {
			return "", fmt.Errorf("the original has no %q: %w", name, op.ErrInvalid)
		}
		switch x := v.(type) {
		case string:
			b.WriteString(x)
		case json.Number:
			b.WriteString(x.String())
		default:
			raw, _ := json.Marshal(x)
			b.WriteString(string(raw))
		}
		tmpl = tmpl[i+j+1:]
	}
}
