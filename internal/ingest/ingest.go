// Package ingest is planner-ingest: it turns intents from NATS into operations
// in the ledger. Each intent runs through one Postgres transaction — inbox row,
// canonical args, idempotency key, policy, operation row, its first events, the
// dispatch command and the agent's answer in the outbox — and is acknowledged
// to JetStream only after that transaction commits.
//
// Nothing is dropped silently: an invalid intent (bad JSON, unknown tool, args
// failing the schema, key conflict) is kept in the inbox with its raw bytes and
// reason and answered with a rejected result that says why.
package ingest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/opledger/opledger/internal/bus"
	"github.com/opledger/opledger/internal/failpoint"
	"github.com/opledger/opledger/internal/outbox"
	"github.com/opledger/opledger/internal/policy"
	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/telemetry"
	"github.com/opledger/opledger/pkg/canon"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/registry"
	"github.com/opledger/opledger/pkg/wire"
)

// Source is the inbox source of the default tenant's intents received
// over NATS; SourceFor names another tenant's.
const Source = "nats:intents"

// SourceFor is the inbox source of a tenant's intents: event ids are unique
// per tenant, so one tenant cannot take another's.
func SourceFor(tenant string) string {
	if tenant == "" || tenant == wire.DefaultTenant {
		return Source
	}
	return Source + "/" + tenant
}

// NoProposerReason answers an intent that needs approval but names no
// actor.
const NoProposerReason = "this call needs approval, and an approval must be by someone other than its proposer: " +
	"send actor {type, id} with the intent to say who proposes it"

// garbagePrefix keys the inbox row of an intent without a usable event id
// by the hash of its bytes.
const garbagePrefix = "sha256:"

// Config tunes the service.
type Config struct {
	// Durable is the JetStream consumer name shared by all instances (default "planner-ingest").
	Durable string
	// Workers is the number of intents processed at once per instance
	// (default 64: intents mostly wait on their commit, and more of them in
	// flight let Postgres group the commits).
	Workers int
	// Tuning overrides the consumer's AckWait, heartbeat and Nak delay.
	Tuning bus.Tuning
	// MaxBacklog is admission control: while more than this many dispatch
	// commands wait for a dispatcher across the fleet (JetStream's pending
	// count of the dispatchers' consumer, read every BacklogEvery), new
	// intents are held before they reach the ledger, each for at most
	// HoldFor, and wait in the INTENTS stream meanwhile. 0 means
	// DefaultMaxBacklog; a negative value turns it off.
	MaxBacklog int
	// HoldFor bounds how long one intent is held (default DefaultHoldFor,
	// and at most a quarter of Tuning.AckWait); it then goes in anyway, so
	// intents keep coming in, slowly, even while the dispatchers are all
	// down.
	HoldFor time.Duration
	// BacklogEvery is how often the backlog is read (default DefaultBacklogEvery).
	BacklogEvery time.Duration
	// DispatchDurable names the dispatchers' consumer (default "dispatcher").
	DispatchDurable string
}

// Service is planner-ingest.
type Service struct {
	cfg   Config
	store *store.Store
	bus   *bus.Bus
	reg   *registry.Registry
	log   zerolog.Logger
	m     *telemetry.Metrics
}

// New returns the service; call Start.
func New(cfg Config, st *store.Store, b *bus.Bus, reg *registry.Registry, m *telemetry.Metrics, log zerolog.Logger) *Service {
	if cfg.Durable == "" {
		cfg.Durable = "planner-ingest"
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 64
	}
	if cfg.MaxBacklog == 0 {
		cfg.MaxBacklog = DefaultMaxBacklog
	}
	if cfg.HoldFor <= 0 {
		cfg.HoldFor = DefaultHoldFor
	}
	if cfg.Tuning.AckWait > 0 {
		// The intents the client has pulled behind a held one wait without
		// heartbeats: keep them well inside AckWait, or JetStream delivers
		// them again.
		cfg.HoldFor = min(cfg.HoldFor, cfg.Tuning.AckWait/4)
	}
	if cfg.BacklogEvery <= 0 {
		cfg.BacklogEvery = DefaultBacklogEvery
	}
	if cfg.DispatchDurable == "" {
		cfg.DispatchDurable = "dispatcher"
	}
	return &Service{cfg: cfg, store: st, bus: b, reg: reg, m: m, log: log}
}

// Start consumes intents until ctx ends; the returned function stops it and
// waits for intents in flight.
func (s *Service) Start(ctx context.Context) (stop func(), err error) {
	admit := func(context.Context) {}
	stopAdmission := func() {}
	if s.cfg.MaxBacklog > 0 {
		a := newAdmission(s.cfg.MaxBacklog, s.cfg.HoldFor, s.cfg.BacklogEvery, func(ctx context.Context) (uint64, error) {
			return s.bus.Unclaimed(ctx, wire.StreamOps, s.cfg.DispatchDurable)
		}, s.m, s.log.With().Str("component", "admission").Logger())
		actx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); a.run(actx) }()
		admit, stopAdmission = a.wait, func() { cancel(); <-done }
	}
	stopConsume, err := s.bus.Consume(ctx, s.cfg.Tuning.Apply(bus.ConsumerConfig{
		Stream: wire.StreamIntents, Durable: s.cfg.Durable, Workers: s.cfg.Workers,
		Filters: []string{wire.IntentSubjectPrefix + ">"}, Ready: s.store.Ping,
	}), func(ctx context.Context, d bus.Delivery) error {
		admit(ctx)
		_, err := s.Ingest(ctx, d.Subject, d.Header, d.Data)
		if err == nil {
			failpoint.Hit(failpoint.IngestBeforeAck)
		}
		if errors.Is(err, op.ErrInvalid) {
			// Even the rejection could not be stored: redelivering would
			// fail forever and hold a slot of the shared consumer. The
			// agent still gets an answer, published directly: it is the
			// one result that is not in the ledger, so it is counted.
			s.answerUnstored(ctx, d, err)
			return bus.Permanent(err)
		}
		return err
	})
	if err != nil {
		stopAdmission()
		return nil, err
	}
	return func() {
		// Release held intents first, so that stopping does not wait out
		// their holds.
		stopAdmission()
		stopConsume()
	}, nil
}

// answerUnstored is the last resort for an intent the ledger refused even
// as a rejection: a rejected answer published straight to NATS, on the
// results subject of the tenant and workflow the subject names, or on the
// fixed unroutable subject, under the event id Ingest would have used for
// garbage (a valid Nats-Msg-Id, else the body's hash). It is counted as
// decision "unstored" in opledger_intents_total and logged.
func (s *Service) answerUnstored(ctx context.Context, d bus.Delivery, cause error) {
	sum := sha256.Sum256(d.Data)
	eventID := d.Header[wire.HeaderMsgID]
	if !wire.ValidID(eventID) {
		eventID = garbagePrefix + hex.EncodeToString(sum[:])
	}
	subject, tenant, workflow := wire.UnroutableSubject, wire.DefaultTenant, ""
	if t, wf, ok := wire.ParseIntentSubject(d.Subject); ok {
		tenant, workflow = t, wf
		subject = wire.TenantResultSubject(t, wf)
	}
	r := wire.Rejection(eventID, workflow, "", "the ledger could not store this intent, nor its rejection: "+reason(cause), op.DecisionRejected, time.Now())
	r.Tenant = wire.ResultTenant(tenant)
	tp := telemetry.ParseTraceparent(d.Header[wire.HeaderTraceparent])
	m := outbox.AnswerOn(subject, r, tp)
	_, perr := s.bus.Publish(context.WithoutCancel(ctx), bus.Message{Subject: m.Subject, MsgID: m.MsgID, Header: m.Header, Data: m.Payload})
	s.m.Intent("", "unstored", 0)
	ev := s.log.Error().Err(cause).Str("payload_sha256", hex.EncodeToString(sum[:])).Str("event_id", wire.Clip(eventID)).Str("subject", subject)
	if perr != nil {
		ev.AnErr("publish_error", perr).Msg("intent refused by the ledger, even as a rejection; dropped, and its answer could not be published")
		return
	}
	ev.Msg("intent refused by the ledger, even as a rejection; answered directly, not recorded")
}

// Answer is what Ingest decided and told the agent.
type Answer struct {
	Decision op.Decision
	Result   wire.Result
}

// Ingest records one intent and answers it. The returned error is only for
// infrastructure failures (the message should be redelivered); every verdict
// about the intent itself is in the Answer.
func (s *Service) Ingest(ctx context.Context, subject string, header map[string]string, body []byte) (*Answer, error) {
	start := time.Now()
	tp := telemetry.ParseTraceparent(header[wire.HeaderTraceparent])
	sub, tenant, tool, reject, code := s.plan(subject, header, body, tp)
	ans, err := s.submit(ctx, sub, tenant, tool, reject, tp)
	if errors.Is(err, op.ErrInvalid) && sub.RejectReason == "" {
		// The ledger refused something in the intent that validation let
		// through. The agent still gets an answer: the intent is recorded
		// and answered as rejected.
		s.log.Warn().Err(err).Str("event_id", sub.EventID).Msg("the ledger refused the intent; rejecting it")
		sub.Operation, sub.Outbox, sub.Initial = nil, nil, ""
		sub.RejectReason = "the ledger could not store this intent: " + reason(err)
		code = wire.ReasonLedgerRefused
		ans, err = s.submit(ctx, sub, tenant, tool, sub.RejectReason, tp)
	}
	if err != nil {
		return nil, fmt.Errorf("ingest %s: %w", wire.Clip(sub.EventID), err)
	}
	s.m.Intent(tool, string(ans.Decision), time.Since(start))
	switch ans.Decision {
	case op.DecisionRejected:
		if code == "" {
			code = wire.ReasonGuard // the ledger's own refusal of a valid intent
		}
		s.m.IntentRefused(code)
	case op.DecisionConflict:
		s.m.IntentRefused(wire.ReasonConflict)
	}
	ev := s.log.Info()
	if ans.Decision == op.DecisionRejected || ans.Decision == op.DecisionConflict {
		ev = s.log.Warn().Str("reason", ans.Result.Reason)
	}
	if sub.Operation != nil {
		ev = ev.Str("args_hash", sub.Operation.ArgsHash).Str("side_effect_class", string(sub.Operation.Class))
	}
	ev.Str("event_id", wire.Clip(sub.EventID)).Str("workflow_id", sub.WorkflowID).Str("tool", wire.Clip(tool)).
		Str("operation_id", ans.Result.OperationID).Str("idempotency_key", ans.Result.IdempotencyKey).
		Str("dedupe_decision", string(ans.Decision)).Str("status", ans.Result.Status).
		Str("trace_id", tp.TraceID).Dur("latency_ms", time.Since(start)).Msg("intent")
	return ans, nil
}

// submit records sub and builds its answer, in one transaction.
func (s *Service) submit(ctx context.Context, sub store.Submission, tenant, tool, reject string, tp telemetry.Traceparent) (*Answer, error) {
	var ans Answer
	// A malformed intent (plan could not read it) names no tool; every
	// readable one does.
	malformed := tool == "" && reject != ""
	sub.Answer = func(res *store.SubmitResult) []store.Message {
		ans.Decision = res.Decision
		// A resent event whose first answer was a rejection or a conflict is
		// answered the same way again, never with another operation's status.
		firstRefused := res.Decision == op.DecisionDuplicateEvent &&
			(res.FirstDecision == op.DecisionRejected || res.FirstDecision == op.DecisionConflict)
		switch {
		case res.Operation == nil || res.Decision == op.DecisionConflict || firstRefused:
			reason := res.Reason
			if reason == "" {
				reason = reject
			}
			ans.Result = wire.Rejection(sub.EventID, sub.WorkflowID, tool, reason, res.Decision, time.Now())
			ans.Result.Tenant = wire.ResultTenant(tenant)
			if res.Operation != nil {
				ans.Result.OperationID = res.Operation.ID
			}
		default:
			ans.Result = wire.ResultFor(res.Operation, sub.EventID, res.Decision)
			if res.Reason != "" {
				ans.Result.Reason = res.Reason
			}
			// The answer goes to the asking workflow, even when another
			// workflow created the operation.
			ans.Result.WorkflowID = sub.WorkflowID
		}
		failpoint.Hit(failpoint.IngestMidTx)
		if res.Decision == op.DecisionDuplicateEvent && res.FirstDecision == op.DecisionRejected && malformed {
			// The same unreadable bytes again (keyed by their hash, or by a
			// Nats-Msg-Id they carry): they were answered once, and
			// answering every copy would let garbage multiply outbox rows.
			return nil
		}
		if ans.Result.WorkflowID == "" {
			// No workflow to answer on: the protocol's fixed subject.
			return []store.Message{outbox.AnswerOn(wire.UnroutableSubject, ans.Result, tp)}
		}
		return []store.Message{outbox.Answer(ans.Result, tp)}
	}
	if _, err := s.store.Submit(ctx, sub); err != nil {
		return nil, err
	}
	return &ans, nil
}

// plan validates an intent and prepares its submission. When the intent is
// invalid the submission carries the reason and the raw bytes, reject
// repeats the reason and code is its stable name (wire.Reason*).
func (s *Service) plan(subject string, header map[string]string, body []byte, tp telemetry.Traceparent) (sub store.Submission, tenant, tool, reject, code string) {
	sub = store.Submission{Source: Source, Payload: body, Actor: "planner-ingest", Redact: s.keep}
	msgID := header[wire.HeaderMsgID]
	// Headers are part of the intent: one that is not UTF-8 is refused like
	// such a body, never read with replacement characters (and is no event
	// id). A readable body still names the event the refusal answers.
	herr := wire.CheckHeaders(header)
	if herr != nil {
		msgID = ""
	}
	in, err := wire.DecodeIntent(subject, msgID, body)
	if err == nil && herr != nil {
		tenant = in.Tenant
		sub.Source = SourceFor(tenant)
		sub.EventID, sub.WorkflowID = in.EventID, in.WorkflowID
		sub.RejectReason = reason(herr)
		return sub, tenant, in.Tool, sub.RejectReason, wire.RefusalReason(herr)
	}
	if err != nil {
		// The subject is the only tenant there is (the body is not
		// trusted); an intent on a subject naming no tenant is answered
		// nowhere but the unroutable subject.
		tenant = wire.DefaultTenant
		if t, wf, ok := wire.ParseIntentSubject(subject); ok {
			tenant, sub.WorkflowID = t, wf
		}
		sub.Source = SourceFor(tenant)
		// Without a trustworthy event id, key the inbox row by the header if
		// it is a valid id or, failing that, by the bytes themselves: a
		// redelivery lands on the same row. Nothing unvalidated reaches a
		// text column, so hostile bytes cannot make the write fail forever.
		sub.EventID = msgID
		if !wire.ValidID(sub.EventID) {
			sum := sha256.Sum256(body)
			sub.EventID = garbagePrefix + hex.EncodeToString(sum[:])
		}
		sub.RejectReason = reason(err)
		return sub, tenant, "", sub.RejectReason, wire.RefusalReason(err)
	}
	tenant = in.Tenant
	sub.Source = SourceFor(tenant)
	sub.EventID, sub.WorkflowID, tool = in.EventID, in.WorkflowID, in.Tool
	t, err := s.reg.Tool(in.Tool)
	if err != nil {
		sub.RejectReason = fmt.Sprintf("tool %q is not registered", wire.Clip(in.Tool))
		return sub, tenant, tool, sub.RejectReason, wire.ReasonUnknownTool
	}
	p, err := t.Prepare(registry.Proposal{WorkflowID: in.WorkflowID, Tenant: tenant, RunID: in.RunID, Intent: in.Intent, TraceID: tp.TraceID, Args: in.Args})
	if err != nil {
		sub.RejectReason = reason(err)
		code = wire.ReasonInvalid
		if errors.Is(err, canon.ErrInvalidArgs) {
			code = wire.ReasonInvalidArgs
		}
		return sub, tenant, tool, sub.RejectReason, code
	}
	sub.Operation, sub.Initial = p.Operation, p.Initial
	if in.Actor != nil {
		sub.ProposedBy = in.Actor.ID
	}
	if p.DedupeKey != "" {
		sub.Dedupe = store.Dedupe{Key: p.DedupeKey, Window: t.Dedupe.Window}
		if in.DedupeOverride != nil {
			sub.Dedupe.Override = in.DedupeOverride.Reason
		}
	}
	sub.Approval = store.Approval{Required: t.Approval.Required, ExpiresAfter: t.Approval.ExpiresAfter}
	sub.Guard = policy.Guard(s.reg, t)
	if p.Initial == op.EventRequireApproval && in.Actor == nil {
		// Nobody may approve a call they proposed; a call whose proposer is
		// unknown could be approved by anyone, the proposer included. It is
		// refused, as a rule beyond the key: a repeat of a known key is
		// still its duplicate.
		sub.Guard = func(context.Context, *store.Tx, *op.Operation) (string, error) {
			return NoProposerReason, nil
		}
	}
	if ev := p.EntityVersion; ev != nil {
		sub.EntityVersion = &store.EntityVersion{EntityType: ev.EntityType, EntityID: ev.EntityID, Action: ev.Action, Key: ev.Key}
	}
	if p.Initial == op.EventEnqueue {
		p.Operation.State = op.StatePendingDispatch
		sub.Outbox = func(o *op.Operation) []store.Message {
			return []store.Message{outbox.Command(wire.KindDispatch, o, in.EventID, tp, 0)}
		}
	}
	return sub, tenant, tool, "", ""
}

// keep is what the inbox keeps of a rejected intent: its bytes without the
// values of its tool's sensitive arguments, or nothing when those cannot be
// found in them.
func (s *Service) keep(body []byte) []byte {
	out, ok := s.reg.RedactIntent(body)
	if !ok {
		return nil
	}
	return out
}

// reason is an error's text for a rejection, without the sentinel's suffix,
// made safe for a text column: valid UTF-8, no NUL, at most 500 bytes.
func reason(err error) string {
	s := strings.TrimSuffix(err.Error(), ": "+op.ErrInvalid.Error())
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
	if len(s) > 500 {
		s = wire.Clip(s[:500])
	}
	return s
}
