package store

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/opledger/opledger/db/dbsqlc"
	"github.com/opledger/opledger/pkg/op"
)

// MaxRejectedPayload is how much of a rejected message the inbox keeps.
const MaxRejectedPayload = 1024

// Submission is one inbound event and, when it is valid, the operation it asks for.
type Submission struct {
	// Source and EventID identify the inbound message: e.g. "intents" and the
	// model's tool-call id scoped by conversation, or "webhook:payments" and
	// the vendor's webhook id.
	Source  string
	EventID string
	// Payload is the raw message. The inbox keeps its SHA-256 (a reused
	// event id with other bytes is a conflict) and, for a rejected event
	// only, its first MaxRejectedPayload bytes, for a person to read.
	Payload []byte
	// Redact, when set, turns a rejected payload into what the inbox keeps
	// of it (the bytes without the values of sensitive arguments; nil keeps
	// nothing). The hash is always of Payload.
	Redact     func(payload []byte) []byte
	WorkflowID string
	// RejectReason, when set, records the event as rejected (malformed,
	// unknown tool, invalid args, policy) and creates nothing.
	RejectReason string
	// Operation is the prepared envelope (ID, key, canonical args and hash,
	// class, ...). Its State is ignored: a new operation starts in planned and
	// Initial moves it on. Required unless RejectReason is set.
	Operation *op.Operation
	// EntityVersion, when set, completes Operation.IdempotencyKey from the
	// entity's version (a key template with {entity_version}).
	EntityVersion *EntityVersion
	// ProposedBy is who asked for the operation (the intent's actor): an
	// approver must be someone else.
	ProposedBy string
	// Dedupe, when its Key is set, suppresses a new operation if another
	// with the same dedupe key was created within the window.
	Dedupe Dedupe
	// Guard, when set, is asked before a new operation is created, in the
	// transaction and under a lock on the operation's entity: a non-empty
	// reason refuses the operation (decision rejected).
	Guard func(ctx context.Context, tx *Tx, o *op.Operation) (reason string, err error)
	// Approval describes the approval a new operation waits for when
	// Initial is op.EventRequireApproval.
	Approval Approval
	// Initial is the event applied right after creation: op.EventEnqueue, or
	// op.EventRequireApproval. Empty leaves the operation in planned.
	Initial op.Event
	// Outbox builds the messages that set the operation going (its dispatch
	// command) from the operation as created, written in the same
	// transaction; nil for an operation that waits (approval). Not written
	// for duplicates. A submission with an Outbox also reopens an existing
	// operation with the same key and arguments that failed without any
	// effect (op.Operation.Reopenable): decision reopened, and Outbox is
	// called with the operation as reopened.
	Outbox func(o *op.Operation) []Message
	// Answer, when set, is called once the decision is known; the messages
	// it returns (the answer to the sender) are written in the same
	// transaction, whatever the decision. A simple submission's repeat
	// also hands them to the relay ahead of the statement that records it
	// (Message.Ahead); when its event id is new to the inbox, their msg ids
	// are then made from the event id (firstAnswers).
	Answer func(*SubmitResult) []Message
	Actor  string
}

// EntityVersion asks for a key that depends on its entity's version: the
// version is the last action's when Action repeats it, the next otherwise
// (see registry.EntityVersioning).
type EntityVersion struct {
	EntityType, EntityID string
	Action               string
	Key                  func(version int64) (string, error)
}

// Dedupe is a semantic dedupe window (the registry's dedupe).
type Dedupe struct {
	Key    string
	Window time.Duration
	// Override, when set, is the recorded reason to run despite the window.
	Override string
}

// Approval is what a new operation awaiting approval needs.
type Approval struct {
	// Required distinct approvers (at least 1).
	Required int
	// ExpiresAfter the request, it is cancelled.
	ExpiresAfter time.Duration
}

// SubmitResult says what the ledger made of a Submission.
type SubmitResult struct {
	Decision op.Decision
	// Operation is the new or already known operation; nil when the event was
	// rejected (now or the first time it was seen).
	Operation *op.Operation
	// Reason explains conflicts and rejections.
	Reason string
	// FirstDecision is, for a duplicate event, what was decided the first time.
	FirstDecision op.Decision
}

// Submit records an inbound event and creates its operation if it is new, in
// one transaction:
//
//   - the inbox row keyed by (source, event id) is inserted; if it exists the
//     answer is duplicate_event with the known operation (or conflict when the
//     same event id arrives with a different payload);
//   - a rejected event is recorded with its reason and nothing else;
//   - otherwise the operation is created if its idempotency key is absent
//     (new, with its first events and outbox rows), or found: same args hash
//     → duplicate_operation (or reopened, when it failed without any effect
//     and the submission can reopen it), different → conflict (nothing
//     created, the reason recorded in the inbox).
func (t *Tx) Submit(ctx context.Context, s Submission) (*SubmitResult, error) {
	if s.Source == "" || s.EventID == "" {
		return nil, fmt.Errorf("submit: source and event id are required: %w", op.ErrInvalid)
	}
	if s.RejectReason == "" && s.Operation == nil {
		return nil, fmt.Errorf("submit %s/%s: operation or reject reason required: %w", s.Source, s.EventID, op.ErrInvalid)
	}
	sum := sha256.Sum256(s.Payload)
	payloadHash := hex.EncodeToString(sum[:])
	decision, reason := op.DecisionNew, ""
	if s.RejectReason != "" {
		decision, reason = op.DecisionRejected, s.RejectReason
	}
	var kept []byte
	if decision == op.DecisionRejected {
		kept = s.Payload
		if s.Redact != nil {
			kept = s.Redact(kept)
		}
		kept = kept[:min(len(kept), MaxRejectedPayload)]
	}
	_, err := t.q.InboxInsert(ctx, dbsqlc.InboxInsertParams{
		Source: s.Source, EventID: s.EventID, Payload: nonNil(kept), PayloadHash: payloadHash,
		WorkflowID: s.WorkflowID, Decision: string(decision), Reason: reason, Now: t.now(),
	})
	if err = translate(err); err != nil {
		if !isNotFound(err) {
			return nil, fmt.Errorf("submit %s/%s: inbox: %w", s.Source, s.EventID, err)
		}
		res, err := t.duplicateEvent(ctx, s, payloadHash)
		if err != nil {
			return nil, err
		}
		return res, t.answer(ctx, s, res)
	}
	if decision == op.DecisionRejected {
		res := &SubmitResult{Decision: op.DecisionRejected, Reason: reason}
		return res, t.answer(ctx, s, res)
	}

	o := s.Operation
	state, version := op.StatePlanned, int64(1) // the create event
	if s.Initial != "" {
		version = 2 // and the initial transition
		if state, err = op.Transition(op.StatePlanned, s.Initial); err != nil {
			return nil, fmt.Errorf("submit %s/%s: %w", s.Source, s.EventID, err)
		}
	}
	if ev := s.EntityVersion; ev != nil {
		v, err := t.q.EntityVersionFor(ctx, dbsqlc.EntityVersionForParams{EntityType: ev.EntityType, EntityID: ev.EntityID, Action: ev.Action})
		if err != nil {
			return nil, fmt.Errorf("submit %s/%s: entity version: %w", s.Source, s.EventID, translate(err))
		}
		if o.IdempotencyKey, err = ev.Key(v); err != nil {
			return nil, fmt.Errorf("submit %s/%s: %w", s.Source, s.EventID, err)
		}
	}
	// Rules beyond the key apply to an action the ledger does not know yet:
	// a repeat of a known key is a duplicate whatever they say.
	if _, err := t.q.OperationGetByKey(ctx, o.IdempotencyKey); isNotFound(translate(err)) {
		if res, err := t.beyondKey(ctx, s); err != nil || res != nil {
			if err != nil {
				return nil, err
			}
			return res, t.record(ctx, s, res)
		}
	} else if err != nil {
		return nil, fmt.Errorf("submit %s/%s: operation by key: %w", s.Source, s.EventID, translate(err))
	}
	var compensates *string
	if o.CompensatesID != "" {
		compensates = &o.CompensatesID
	}
	row, err := t.q.OperationInsertOrGet(ctx, dbsqlc.OperationInsertOrGetParams{
		ID: o.ID, WorkflowID: o.WorkflowID, RunID: o.RunID, Tool: o.Tool, ToolVersion: int32(o.ToolVersion),
		Intent: o.Intent, EntityType: o.EntityType, EntityID: o.EntityID,
		ArgsCanonical: string(o.Args), ArgsHash: o.ArgsHash, SideEffectClass: string(o.Class),
		IdempotencyKey: o.IdempotencyKey, State: string(state), Version: version, OriginEventID: s.EventID,
		CompensatesOperationID: compensates, TraceID: o.TraceID, ProposedBy: s.ProposedBy, DedupeKey: s.Dedupe.Key,
		Tenant: cmp.Or(o.Tenant, "default"), Now: t.now(),
	})
	if err != nil {
		return nil, fmt.Errorf("submit %s/%s: operation: %w", s.Source, s.EventID, translate(err))
	}
	got := toOperation(row.Operation)
	res := &SubmitResult{Decision: op.DecisionNew, Operation: got}
	if row.Duplicate {
		res.Decision, res.Reason = knownKey(s, got)
		if res.Decision == op.DecisionReopened {
			// It failed without any effect: this intent runs it again, under
			// the same key, as a new generation.
			after, err := t.Transition(ctx, Change{OperationID: got.ID, From: got.State, LeaseEpoch: got.LeaseEpoch,
				Events: []op.Event{op.EventReopen}, Reopen: true, Actor: s.Actor, Operation: got, Outbox: s.Outbox,
				Detail: map[string]string{"source": s.Source, "event_id": s.EventID}})
			if err != nil {
				return nil, fmt.Errorf("submit %s/%s: reopen %s: %w", s.Source, s.EventID, got.ID, err)
			}
			got, res.Operation = after, after
		}
	}
	// One statement writes the rest: a new operation's first events and
	// outbox rows, the caller's answer, and the inbox decision.
	p := dbsqlc.OperationCreatedParams{
		Decision: string(res.Decision), Reason: res.Reason, InboxOperationID: &got.ID,
		Source: s.Source, EventID: s.EventID, OperationID: got.ID, Actor: s.Actor, Now: t.now(),
		Seqs: []int32{}, Events: []string{}, FromStates: []string{}, ToStates: []string{}, Details: [][]byte{},
	}
	rows := outboxRows{grace: t.handoff}
	if res.Decision == op.DecisionNew {
		d := map[string]string{"source": s.Source, "event_id": s.EventID}
		if s.ProposedBy != "" {
			d["proposed_by"] = s.ProposedBy
		}
		if s.Dedupe.Key != "" && s.Dedupe.Override != "" {
			d["dedupe_override"] = s.Dedupe.Override
		}
		created, err := encodeDetail(d)
		if err != nil {
			return nil, err
		}
		if state == op.StateAwaitingApproval {
			err := t.q.ApprovalRequestCreate(ctx, dbsqlc.ApprovalRequestCreateParams{OperationID: got.ID, ArgsHash: got.ArgsHash,
				Required: int32(max(s.Approval.Required, 1)), ExpiresAfterSeconds: s.Approval.ExpiresAfter.Seconds(), Now: t.now()})
			if err != nil {
				return nil, fmt.Errorf("submit %s/%s: approval request: %w", s.Source, s.EventID, translate(err))
			}
		}
		p.Seqs, p.Events, p.FromStates, p.ToStates, p.Details = []int32{1}, []string{string(op.EventCreate)},
			[]string{""}, []string{string(op.StatePlanned)}, [][]byte{created}
		if state != op.StatePlanned {
			p.Seqs, p.Events = append(p.Seqs, 2), append(p.Events, string(s.Initial))
			p.FromStates, p.ToStates = append(p.FromStates, string(op.StatePlanned)), append(p.ToStates, string(state))
			p.Details = append(p.Details, nil)
		}
		if s.Outbox != nil {
			if err := rows.add(s.Outbox(got)); err != nil {
				return nil, err
			}
		}
	}
	if s.Answer != nil {
		msgs := s.Answer(res)
		if row.Duplicate && res.Decision != op.DecisionReopened && s.simple() {
			// The decision Store.Submit's repeat sends ahead: the same
			// msg ids, should a copy of this intent have sent its answer
			// ahead meanwhile.
			msgs = firstAnswers(msgs, s.Source, s.EventID)
		}
		if err := rows.add(msgs); err != nil {
			return nil, err
		}
	}
	p.Subjects, p.MsgIds, p.Headers, p.Payloads, p.OperationIds, p.Delays = rows.columns()
	if err := t.q.OperationCreated(ctx, p); err != nil {
		return nil, fmt.Errorf("submit %s/%s: record decision: %w", s.Source, s.EventID, translate(err))
	}
	t.due = append(t.due, rows.due...)
	return res, nil
}

// simple reports whether s may take the one-statement path for a new
// operation (execNew): a valid intent whose operation is dispatched at
// once, with no rule beyond the key to apply (dedupe window, guard, key
// depending on its entity's version).
func (s Submission) simple() bool {
	return s.RejectReason == "" && s.Operation != nil && s.Initial == op.EventEnqueue && s.Outbox != nil &&
		s.EntityVersion == nil && s.Guard == nil && s.Dedupe.Key == ""
}

// repeatFound is what a repeated simple submission meets in the ledger:
// the operation its event id names when the event id is known (seen, with
// the first decision recorded for it), else the operation of its key.
type repeatFound struct {
	op                                           dbsqlc.Operation
	seen                                         bool
	firstDecision, firstReason, firstPayloadHash string
}

// submitRepeat answers a simple submission that OperationSubmitNew wrote
// nothing for (its event id or its key is known) with one more statement
// instead of a transaction of five: knownEvent or knownKey decide on what
// the submission met (found, read by OperationSubmitNew; when nil, as
// after a group statement, OperationRepeatLookup reads it) as Tx.Submit
// would, and InboxRecordRepeat records the decision with the answer. It
// returns nil and no error when the transaction must decide: the event id
// is known but names no operation, the operation can be reopened, or
// something committed between the statements.
func (s *Store) submitRepeat(ctx context.Context, sub Submission, found *repeatFound) (*SubmitResult, error) {
	sum := sha256.Sum256(sub.Payload)
	payloadHash := hex.EncodeToString(sum[:])
	if found == nil {
		s.repeatLookups.Add(1)
		row, err := s.q.OperationRepeatLookup(ctx, dbsqlc.OperationRepeatLookupParams{
			Source: sub.Source, EventID: sub.EventID, IdempotencyKey: sub.Operation.IdempotencyKey})
		if err = translate(err); isNotFound(err) {
			return nil, nil
		} else if err != nil {
			return nil, fmt.Errorf("submit %s/%s: repeat: %w", sub.Source, sub.EventID, err)
		}
		found = &repeatFound{op: row.Operation, seen: row.Seen, firstDecision: row.FirstDecision,
			firstReason: row.FirstReason, firstPayloadHash: row.FirstPayloadHash}
	}
	got := toOperation(found.op)
	var res *SubmitResult
	if found.seen {
		res = knownEvent(found.firstDecision, found.firstReason, found.firstPayloadHash, payloadHash)
		res.Operation = got
	} else {
		res = &SubmitResult{Operation: got}
		if res.Decision, res.Reason = knownKey(sub, got); res.Decision == op.DecisionReopened {
			return nil, nil
		}
	}
	rows := outboxRows{grace: s.handoff, batched: true}
	if sub.Answer != nil {
		msgs := sub.Answer(res)
		if !found.seen {
			msgs = firstAnswers(msgs, sub.Source, sub.EventID)
		}
		if err := rows.add(msgs); err != nil {
			return nil, err
		}
	}
	if len(rows.msgIDs) > 0 {
		// A message due later has no place in this statement.
		return nil, nil
	}
	b := newBatch(s.handoff)
	b.add(&rows, 0)
	// The answer goes out now, ahead of the statement that records it: the
	// decision is the one the read found, and the agent need not wait for
	// a commit that changes nothing but the inbox. The same message, under
	// the same msg id, is written with the record and handed off after its
	// commit, so that it is sent even if this copy is lost. Should the
	// record find the event id arrived meanwhile (a copy of the same intent
	// racing this one), the transaction decides and answers again, and the
	// copy's answer sent ahead had the same msg id (firstAnswers).
	ahead := make([]Message, len(rows.due))
	for i, m := range rows.due {
		m.Ahead = true
		ahead[i] = m
	}
	s.handOff(ahead)
	p := dbsqlc.InboxRecordRepeatParams{
		Source: sub.Source, EventID: sub.EventID, PayloadHash: payloadHash, WorkflowID: sub.WorkflowID,
		Decision: string(res.Decision), Reason: res.Reason, OperationID: &got.ID, Now: s.now(), Seen: found.seen,
		BatchID: b.id,
	}
	p.BatchSubjects, p.BatchMsgIds, p.BatchHeaders, p.BatchPayloads, p.BatchOperationIds, p.BatchDelaySeconds = b.columns()
	n, err := s.q.InboxRecordRepeat(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("submit %s/%s: record repeat: %w", sub.Source, sub.EventID, translate(err))
	}
	if n == 0 {
		return nil, nil
	}
	s.handOff(b.due)
	return res, nil
}

// firstAnswers gives the answers recorded with an event id's first inbox
// row, when a repeat sends them ahead of that record, msg ids made from the
// event id: two copies of one intent racing each other (a redelivery
// without Nats-Msg-Id) both send theirs ahead, and only one records its
// decision; the other's record finds the event id known and the
// transaction answers it as a redelivery. Under one msg id, JetStream's
// duplicate window keeps one of the two answers sent ahead, and the agent
// reads what the ledger recorded: one duplicate_operation, one
// duplicate_event. Tx.Submit gives the same decision the same msg ids. An
// event id's first record is never deleted (retention takes rejected
// events only), so the ids are unique in the outbox. The answers are
// copies, msgs is not changed.
func firstAnswers(msgs []Message, source, eventID string) []Message {
	out := make([]Message, len(msgs))
	for i, m := range msgs {
		sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%s\x00%d", source, eventID, i))
		m.MsgID = "answer_" + hex.EncodeToString(sum[:20])
		out[i] = m
	}
	return out
}

// newSubmission is a simple submission made ready for OperationSubmitNew
// or, with others, OperationSubmitNewBatch.
type newSubmission struct {
	sub     Submission
	p       dbsqlc.OperationSubmitNewParams
	rows    outboxRows
	res     *SubmitResult
	created []byte // the create event's detail
	// found is what OperationSubmitNew read when it wrote nothing (a
	// repeat), nil otherwise.
	found *repeatFound
}

// submittedOperation is the operation of an OperationSubmitNew row: the
// one it created, or the one a repeat met.
func submittedOperation(r dbsqlc.OperationSubmitNewRow) dbsqlc.Operation {
	return dbsqlc.Operation{
		ID: r.ID, WorkflowID: r.WorkflowID, RunID: r.RunID, Tool: r.Tool, ToolVersion: r.ToolVersion,
		Intent: r.Intent, EntityType: r.EntityType, EntityID: r.EntityID, ArgsCanonical: r.ArgsCanonical,
		ArgsHash: r.ArgsHash, SideEffectClass: r.SideEffectClass, IdempotencyKey: r.IdempotencyKey,
		State: r.State, AttemptCount: r.AttemptCount, LeaseEpoch: r.LeaseEpoch,
		ExternalRequestID: r.ExternalRequestID, ExternalObjectID: r.ExternalObjectID,
		CompensatesOperationID: r.CompensatesOperationID, TraceID: r.TraceID,
		LastErrorCategory: r.LastErrorCategory, LastError: r.LastError, CreatedAt: r.CreatedAt,
		UpdatedAt: r.UpdatedAt, Version: r.Version, OriginEventID: r.OriginEventID, Generation: r.Generation,
		GenerationStartedAt: r.GenerationStartedAt, GenerationAttemptBase: r.GenerationAttemptBase,
		ProposedBy: r.ProposedBy, DedupeKey: r.DedupeKey, Tenant: r.Tenant,
		CompensationOperationID: r.CompensationOperationID,
	}
}

// prepareNew builds what execNew writes for sub: the operation as it will
// be created, its outbox rows (the dispatch command and the answer, whose
// Answer sees the operation as created) and the statement's parameters.
func (s *Store) prepareNew(sub Submission) (*newSubmission, error) {
	o := *sub.Operation
	state, err := op.Transition(op.StatePlanned, sub.Initial)
	if err != nil {
		return nil, fmt.Errorf("submit %s/%s: %w", sub.Source, sub.EventID, err)
	}
	now := time.Now().UTC()
	if n := s.now(); n != nil {
		now = *n
	}
	o.State, o.Version, o.OriginEventID, o.ProposedBy, o.DedupeKey = state, 2, sub.EventID, sub.ProposedBy, sub.Dedupe.Key
	o.Tenant = cmp.Or(o.Tenant, "default")
	o.CreatedAt, o.UpdatedAt, o.GenerationStartedAt = now, now, now
	d := map[string]string{"source": sub.Source, "event_id": sub.EventID}
	if sub.ProposedBy != "" {
		d["proposed_by"] = sub.ProposedBy
	}
	created, err := encodeDetail(d)
	if err != nil {
		return nil, err
	}
	rows := outboxRows{grace: s.handoff, batched: true}
	if err := rows.add(sub.Outbox(&o)); err != nil {
		return nil, err
	}
	res := &SubmitResult{Decision: op.DecisionNew, Operation: &o}
	if sub.Answer != nil {
		if err := rows.add(sub.Answer(res)); err != nil {
			return nil, err
		}
	}
	sum := sha256.Sum256(sub.Payload)
	var compensates *string
	if o.CompensatesID != "" {
		compensates = &o.CompensatesID
	}
	p := dbsqlc.OperationSubmitNewParams{
		Source: sub.Source, EventID: sub.EventID, PayloadHash: hex.EncodeToString(sum[:]), WorkflowID: sub.WorkflowID,
		ID: o.ID, Now: s.now(), RunID: o.RunID, Tool: o.Tool, ToolVersion: int32(o.ToolVersion), Intent: o.Intent,
		EntityType: o.EntityType, EntityID: o.EntityID, ArgsCanonical: string(o.Args), ArgsHash: o.ArgsHash,
		SideEffectClass: string(o.Class), IdempotencyKey: o.IdempotencyKey, State: string(state), Version: o.Version,
		CompensatesOperationID: compensates, TraceID: o.TraceID, ProposedBy: sub.ProposedBy, DedupeKey: sub.Dedupe.Key,
		Tenant: o.Tenant, Actor: sub.Actor,
		Seqs: []int32{1, 2}, Events: []string{string(op.EventCreate), string(sub.Initial)},
		FromStates: []string{"", string(op.StatePlanned)}, ToStates: []string{string(op.StatePlanned), string(state)},
		Details: [][]byte{created, nil},
	}
	p.Subjects, p.MsgIds, p.Headers, p.Payloads, p.OperationIds, p.Delays = rows.columns()
	return &newSubmission{sub: sub, p: p, rows: rows, res: res, created: created}, nil
}

// execNew writes one prepared submission with OperationSubmitNew.
func (s *Store) execNew(ctx context.Context, n *newSubmission) error {
	b := newBatch(s.handoff)
	b.add(&n.rows, 0)
	p := n.p
	p.BatchID = b.id
	p.BatchSubjects, p.BatchMsgIds, p.BatchHeaders, p.BatchPayloads, p.BatchOperationIds, p.BatchDelaySeconds = b.columns()
	row, err := s.q.OperationSubmitNew(ctx, p)
	if errors.Is(err, pgx.ErrNoRows) {
		return n.repeat()
	}
	if err != nil {
		return fmt.Errorf("submit %s/%s: %w", n.sub.Source, n.sub.EventID, translate(err))
	}
	if !row.Written {
		n.found = &repeatFound{op: submittedOperation(row), seen: row.Seen, firstDecision: row.FirstDecision,
			firstReason: row.FirstReason, firstPayloadHash: row.FirstPayloadHash}
		return n.repeat()
	}
	n.res.Operation = toOperation(submittedOperation(row))
	s.handOff(b.due)
	return nil
}

// repeat is the error of a submission that was not written because its
// event id or its key is known.
func (n *newSubmission) repeat() error {
	return fmt.Errorf("submit %s/%s: event id or key already known: %w", n.sub.Source, n.sub.EventID, op.ErrConflict)
}

// execNewBatch writes prepared submissions with one OperationSubmitNewBatch;
// they must share Initial (simple ones do: op.EventEnqueue). It reports
// which were written: the others repeat an event id or a key (see
// execNew), and for each the caller takes the path that decides. Each one
// written has its operation as created in its result. An error means
// nothing was written.
func (s *Store) execNewBatch(ctx context.Context, batch []*newSubmission) (written []bool, err error) {
	first := batch[0].sub
	p := dbsqlc.OperationSubmitNewBatchParams{Now: s.now(), Initial: string(first.Initial)}
	b := newBatch(s.handoff)
	for i, n := range batch {
		q := n.p
		p.Ids = append(p.Ids, q.ID)
		p.Sources = append(p.Sources, q.Source)
		p.EventIds = append(p.EventIds, q.EventID)
		p.PayloadHashes = append(p.PayloadHashes, q.PayloadHash)
		p.WorkflowIds = append(p.WorkflowIds, q.WorkflowID)
		p.RunIds = append(p.RunIds, q.RunID)
		p.Tools = append(p.Tools, q.Tool)
		p.ToolVersions = append(p.ToolVersions, q.ToolVersion)
		p.Intents = append(p.Intents, q.Intent)
		p.EntityTypes = append(p.EntityTypes, q.EntityType)
		p.EntityIds = append(p.EntityIds, q.EntityID)
		p.ArgsCanonicals = append(p.ArgsCanonicals, q.ArgsCanonical)
		p.ArgsHashes = append(p.ArgsHashes, q.ArgsHash)
		p.SideEffectClasses = append(p.SideEffectClasses, q.SideEffectClass)
		p.IdempotencyKeys = append(p.IdempotencyKeys, q.IdempotencyKey)
		p.States = append(p.States, q.State)
		p.CompensatesOperationIds = append(p.CompensatesOperationIds, derefOr(q.CompensatesOperationID))
		p.TraceIds = append(p.TraceIds, q.TraceID)
		p.ProposedBys = append(p.ProposedBys, q.ProposedBy)
		p.Tenants = append(p.Tenants, q.Tenant)
		p.CreatedDetails = append(p.CreatedDetails, n.created)
		p.Actors = append(p.Actors, q.Actor)
		for range q.Subjects {
			p.MessageChanges = append(p.MessageChanges, int32(i+1))
		}
		p.Subjects = append(p.Subjects, q.Subjects...)
		p.MsgIds = append(p.MsgIds, q.MsgIds...)
		p.Headers = append(p.Headers, q.Headers...)
		p.Payloads = append(p.Payloads, q.Payloads...)
		p.OperationIds = append(p.OperationIds, q.OperationIds...)
		p.Delays = append(p.Delays, q.Delays...)
		b.add(&n.rows, int32(i+1))
	}
	p.MessageChanges = nonNil(p.MessageChanges)
	p.BatchID, p.BatchChanges = b.id, nonNil(b.changes)
	p.BatchSubjects, p.BatchMsgIds, p.BatchHeaders, p.BatchPayloads, p.BatchOperationIds, p.BatchDelaySeconds = b.columns()
	rows, err := s.q.OperationSubmitNewBatch(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("submit %d intents at once: %w", len(batch), translate(err))
	}
	// Committed: each answer of an operation written keeps the operation as
	// its row came back.
	byID := make(map[string]dbsqlc.Operation, len(rows))
	for _, r := range rows {
		byID[r.ID] = dbsqlc.Operation(r)
	}
	written = make([]bool, len(batch))
	for i, n := range batch {
		if row, ok := byID[n.p.ID]; ok {
			n.res.Operation, written[i] = toOperation(row), true
		}
	}
	s.handOff(b.dueOf(func(change int32) bool { return written[change-1] }))
	return written, nil
}

func derefOr(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// beyondKey applies the rules beyond the key to a submission whose key is
// new: the dedupe window, then the guard. It returns the result when one
// of them decides (duplicate_operation naming the suppressing operation,
// or rejected with the guard's reason), nil when the operation may be
// created.
func (t *Tx) beyondKey(ctx context.Context, s Submission) (*SubmitResult, error) {
	if d := s.Dedupe; d.Key != "" && d.Window > 0 {
		// Every submission with this dedupe key takes its lock, overrides
		// too, so that the key can be checked again under it: an operation
		// with this very key committed since the first check (while this
		// one waited for the lock) makes this a duplicate of its own
		// operation, never "suppressed by the window" of another.
		if err := t.q.XactLock(ctx, "dedupe:"+d.Key); err != nil {
			return nil, fmt.Errorf("submit %s/%s: dedupe lock: %w", s.Source, s.EventID, translate(err))
		}
		if known, err := t.keyKnown(ctx, s); err != nil || known {
			return nil, err
		}
	}
	if d := s.Dedupe; d.Key != "" && d.Window > 0 && d.Override == "" {
		row, err := t.q.OperationDedupeFind(ctx, dbsqlc.OperationDedupeFindParams{DedupeKey: d.Key, WindowSeconds: d.Window.Seconds(), Now: t.now()})
		switch err = translate(err); {
		case err == nil:
			prev := toOperation(row)
			return &SubmitResult{Decision: op.DecisionDuplicateOperation, Operation: prev,
				Reason: fmt.Sprintf("suppressed by the tool's dedupe window (%s): operation %s did the same (%s) at %s; "+
					"send it with dedupe_override and a reason to run it anyway", d.Window, prev.ID, d.Key, prev.CreatedAt.UTC().Format(time.RFC3339))}, nil
		case !isNotFound(err):
			return nil, fmt.Errorf("submit %s/%s: dedupe: %w", s.Source, s.EventID, err)
		}
	}
	if s.Guard != nil {
		o := s.Operation
		if o.EntityID != "" {
			if err := t.q.XactLock(ctx, "entity:"+o.EntityType+":"+o.EntityID); err != nil {
				return nil, fmt.Errorf("submit %s/%s: entity lock: %w", s.Source, s.EventID, translate(err))
			}
			// As for the window: the key decides first, also when its
			// operation committed while this one waited for the lock.
			if known, err := t.keyKnown(ctx, s); err != nil || known {
				return nil, err
			}
		}
		reason, err := s.Guard(ctx, t, o)
		if err != nil {
			return nil, fmt.Errorf("submit %s/%s: guard: %w", s.Source, s.EventID, err)
		}
		if reason != "" {
			return &SubmitResult{Decision: op.DecisionRejected, Reason: reason}, nil
		}
	}
	return nil, nil
}

// keyKnown reports whether an operation with the submission's key exists
// now (read committed: it sees what committed since the first check).
func (t *Tx) keyKnown(ctx context.Context, s Submission) (bool, error) {
	_, err := t.q.OperationGetByKey(ctx, s.Operation.IdempotencyKey)
	switch err = translate(err); {
	case err == nil:
		return true, nil
	case isNotFound(err):
		return false, nil
	}
	return false, fmt.Errorf("submit %s/%s: operation by key: %w", s.Source, s.EventID, err)
}

// record writes a decision that creates no operation: the inbox decision
// (naming the operation that suppressed this one, if any) and the answer.
func (t *Tx) record(ctx context.Context, s Submission, res *SubmitResult) error {
	p := dbsqlc.OperationCreatedParams{
		Decision: string(res.Decision), Reason: res.Reason, Source: s.Source, EventID: s.EventID, Actor: s.Actor, Now: t.now(),
		Seqs: []int32{}, Events: []string{}, FromStates: []string{}, ToStates: []string{}, Details: [][]byte{},
	}
	if res.Operation != nil {
		p.InboxOperationID, p.OperationID = &res.Operation.ID, res.Operation.ID
	}
	rows := outboxRows{grace: t.handoff}
	if s.Answer != nil {
		if err := rows.add(s.Answer(res)); err != nil {
			return err
		}
	}
	p.Subjects, p.MsgIds, p.Headers, p.Payloads, p.OperationIds, p.Delays = rows.columns()
	if err := t.q.OperationCreated(ctx, p); err != nil {
		return fmt.Errorf("submit %s/%s: record decision: %w", s.Source, s.EventID, translate(err))
	}
	t.due = append(t.due, rows.due...)
	return nil
}

// answer writes the submission's answer for res, if it has one.
func (t *Tx) answer(ctx context.Context, s Submission, res *SubmitResult) error {
	if s.Answer == nil {
		return nil
	}
	return t.Enqueue(ctx, s.Answer(res)...)
}

// nonNil turns a nil slice into an empty one: the statements unnest arrays,
// and a NULL array would unnest to nothing only by accident.
func nonNil[T any](xs []T) []T {
	if xs == nil {
		return []T{}
	}
	return xs
}

// knownKey decides for a submission whose key names got, an operation the
// ledger already has: duplicate_operation with the same arguments, conflict
// with others, reopened when got failed without any effect and the
// submission can set it going again (the caller reopens it).
func knownKey(s Submission, got *op.Operation) (op.Decision, string) {
	switch {
	case got.ArgsHash != s.Operation.ArgsHash:
		return op.DecisionConflict, fmt.Sprintf("idempotency key already used by operation %s with different arguments", got.ID)
	case got.Reopenable() && s.Outbox != nil:
		return op.DecisionReopened, ""
	}
	return op.DecisionDuplicateOperation, ""
}

// knownEvent decides for an event id the inbox already has, from what was
// decided the first time and the payload's hash then and now.
func knownEvent(firstDecision, firstReason, firstHash, payloadHash string) *SubmitResult {
	res := &SubmitResult{Decision: op.DecisionDuplicateEvent, FirstDecision: op.Decision(firstDecision), Reason: firstReason}
	if firstHash != payloadHash {
		res.Decision = op.DecisionConflict
		res.Reason = "event id already used with a different payload"
	}
	return res
}

func (t *Tx) duplicateEvent(ctx context.Context, s Submission, payloadHash string) (*SubmitResult, error) {
	in, err := t.q.InboxMarkDuplicate(ctx, dbsqlc.InboxMarkDuplicateParams{Source: s.Source, EventID: s.EventID, Now: t.now()})
	if err != nil {
		return nil, fmt.Errorf("submit %s/%s: duplicate: %w", s.Source, s.EventID, translate(err))
	}
	res := knownEvent(in.Decision, in.Reason, in.PayloadHash, payloadHash)
	if in.OperationID != nil {
		if res.Operation, err = t.Operation(ctx, *in.OperationID); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// InboxEntry is what the inbox knows of one inbound event.
type InboxEntry struct {
	Source, EventID string
	// Payload is empty for accepted events, and at most MaxRejectedPayload
	// bytes of a rejected one.
	Payload        []byte
	PayloadHash    string
	Decision       op.Decision
	Reason         string
	OperationID    string
	DuplicateCount int
}

// InboxEntry returns the inbox row of (source, eventID). Errors: op.ErrNotFound.
func (r reads) InboxEntry(ctx context.Context, source, eventID string) (*InboxEntry, error) {
	in, err := r.q.InboxGet(ctx, dbsqlc.InboxGetParams{Source: source, EventID: eventID})
	if err != nil {
		return nil, fmt.Errorf("inbox %s/%s: %w", source, eventID, translate(err))
	}
	e := &InboxEntry{Source: in.Source, EventID: in.EventID, Payload: in.Payload, PayloadHash: in.PayloadHash, Decision: op.Decision(in.Decision),
		Reason: in.Reason, DuplicateCount: int(in.DuplicateCount)}
	if in.OperationID != nil {
		e.OperationID = *in.OperationID
	}
	return e, nil
}

// DecisionCounts returns, per inbox decision, how many events got it, plus the
// number of suppressed redeliveries of an already seen event id under
// op.DecisionDuplicateEvent.
func (r reads) DecisionCounts(ctx context.Context) (map[op.Decision]int64, error) {
	rows, err := r.q.InboxCountByDecision(ctx)
	if err != nil {
		return nil, fmt.Errorf("count inbox decisions: %w", translate(err))
	}
	out := map[op.Decision]int64{}
	for _, row := range rows {
		out[op.Decision(row.Decision)] = row.N
		out[op.DecisionDuplicateEvent] += row.Duplicates
	}
	return out, nil
}
