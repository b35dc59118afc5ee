// Package compensate is the compensator. A compensation is never invented on
// the fly: it is the playbook the operator's registry attaches to a tool (for
// capture_payment: refund_payment with the charge id). Running one creates a
// new operation with its own identity and idempotency key, linked to the
// original through compensates_operation_id, subject to the playbook tool's
// own approval rule; the original moves to compensating, and to compensated
// when the compensation completes (see followup.CompleteCompensation).
//
// The service consumes opledger.ops.failed.>: when a compensation itself fails
// permanently, the original operation is escalated to a person. Failures of
// ordinary operations confirmed nothing was applied, so there is nothing of
// theirs to undo; they are logged and counted.
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
		log.Info().Str("error_category", o.LastErrorCategory).Msg("operation failed permanently; nothing was applied, nothing to compensate")
		return nil
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

// Request starts the registry's compensation playbook for a completed (or
// escalated, or permanently failed) operation: it creates the compensation
// operation — keyed "compensate:<original id>" in the inbox, so asking twice
// creates it once — and moves the original to compensating, in one
// transaction. It returns the compensation operation.
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

// Existing returns the compensation operation already requested for the
// operation originalID, or nil when none was. A compensation is recorded
// under the inbox key (Source, "compensate:<original id>"), so asking again,
// whatever the original's state is by now, finds it.
func Existing(ctx context.Context, tx *store.Tx, originalID string) (*op.Operation, error) {
	in, err := tx.InboxEntry(ctx, Source, "compensate:"+originalID)
	if errors.Is(err, op.ErrNotFound) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("compensation of %s: %w", originalID, err)
	}
	if in.Decision != op.DecisionNew || in.OperationID == "" {
		return nil, nil // an earlier request that created nothing
	}
	comp, err := tx.Operation(ctx, in.OperationID)
	if err != nil {
		return nil, fmt.Errorf("compensation of %s: %w", originalID, err)
	}
	return comp, nil
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
		tool, err := reg.Tool(orig.Tool)
		if err != nil {
			return err
		}
		pb := tool.Compensation
		if pb == nil {
			return fmt.Errorf("tool %s has no compensation playbook: %w", orig.Tool, op.ErrInvalid)
		}
		ctool, err := reg.Tool(pb.Tool)
		if err != nil {
			return err
		}
		args, err := PlaybookArgs(pb, orig, ctool)
		if err != nil {
			return err
		}
		p, err := ctool.Prepare(registry.Proposal{WorkflowID: orig.WorkflowID, Tenant: orig.Tenant, RunID: orig.RunID, TraceID: orig.TraceID, Args: args})
		if err != nil {
			return fmt.Errorf("compensation of %s: %w", orig.ID, err)
		}
		p.Operation.CompensatesID = orig.ID
		var sub0 *store.EntityVersion
		if ev := p.EntityVersion; ev != nil {
			sub0 = &store.EntityVersion{EntityType: ev.EntityType, EntityID: ev.EntityID, Action: ev.Action, Key: ev.Key}
		}
		tp := telemetry.FromTraceID(orig.TraceID)
		sub := store.Submission{Source: Source, EventID: "compensate:" + orig.ID, Payload: args, WorkflowID: orig.WorkflowID,
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
			return nil // asked before: the same compensation stands
		case res.Decision != op.DecisionNew:
			// The playbook's key belongs to another operation (say, the agent
			// already refunded this charge by hand): not this compensation.
			return fmt.Errorf("compensation of %s would be %s of operation %s (%s): %w",
				orig.ID, res.Decision, opID(res.Operation), res.Reason, op.ErrConflict)
		}
		comp = res.Operation
		_, err = tx.Transition(ctx, store.Change{OperationID: orig.ID, From: orig.State, LeaseEpoch: orig.LeaseEpoch,
			Events: []op.Event{op.EventCompensate}, Actor: actor, Operation: orig,
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
