package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/opledger/opledger/db/dbsqlc"
	"github.com/opledger/opledger/pkg/op"
)

// Message is one row of the transactional outbox: a NATS message to publish
// after the transaction that wrote it commits.
type Message struct {
	Subject string
	// MsgID becomes the Nats-Msg-Id header, so a re-publish after a crash
	// between PubAck and mark-sent is absorbed by JetStream's duplicate window.
	// It must be unique in the outbox.
	MsgID       string
	Header      map[string]string
	Payload     []byte
	OperationID string
	// Delay holds the message back (retry backoff): it is due that long after
	// the database's now() when it commits; zero means at once.
	Delay time.Duration
	// Batch names the row of outbox_batches the message was written in,
	// with the other messages due at once of its statement; "" for a row of
	// outbox. Set by the store on the messages it hands off.
	Batch string
	// Ahead marks a copy handed off before its row commits (a repeat's
	// answer, Store.Submit): the relay publishes it and deletes nothing.
	// The row, written with the decision, is handed off again after its
	// commit under the same msg id, and JetStream's duplicate window
	// stores the message once.
	Ahead bool
}

// Claimed is an outbox row claimed by a relay.
type Claimed struct {
	ID           int64
	Message      Message
	PublishCount int
}

// Enqueue writes messages to the outbox in this transaction, in one statement.
func (t *Tx) Enqueue(ctx context.Context, msgs ...Message) error {
	if len(msgs) == 0 {
		return nil
	}
	rows := outboxRows{grace: t.handoff}
	if err := rows.add(msgs); err != nil {
		return err
	}
	p := dbsqlc.OutboxInsertManyParams{Now: t.now()}
	p.Subjects, p.MsgIds, p.Headers, p.Payloads, p.OperationIds, p.Delays = rows.columns()
	err := t.q.OutboxInsertMany(ctx, p)
	if err != nil {
		return fmt.Errorf("outbox: insert %d messages: %w", len(msgs), translate(err))
	}
	t.due = append(t.due, rows.due...)
	return nil
}

// outboxRows is messages as the column arrays the insert statements unnest.
type outboxRows struct {
	// grace delays the rows of messages due at once, which are handed to
	// the process's relay after the commit (Options.HandoffGrace).
	grace time.Duration
	// batched leaves the messages due at once out of the rows: the
	// statement writes them in its row of outbox_batches (see batch).
	batched                        bool
	subjects, msgIDs, operationIDs []string
	headers, payloads              [][]byte
	delays                         []float64 // seconds
	// due are the messages due at once, and dueHeaders their encoded
	// headers.
	due        []Message
	dueHeaders [][]byte
}

// columns returns the arrays the statements unnest, never nil.
func (r *outboxRows) columns() (subjects, msgIDs []string, headers, payloads [][]byte, operationIDs []string, delays []float64) {
	return nonNil(r.subjects), nonNil(r.msgIDs), nonNil(r.headers), nonNil(r.payloads), nonNil(r.operationIDs), nonNil(r.delays)
}

func (r *outboxRows) add(msgs []Message) error {
	for _, m := range msgs {
		if m.Subject == "" || m.MsgID == "" {
			return fmt.Errorf("outbox: subject and msg id are required: %w", op.ErrInvalid)
		}
		hdr := []byte("{}")
		if m.Header != nil {
			var err error
			if hdr, err = json.Marshal(m.Header); err != nil {
				return fmt.Errorf("outbox %s: encode headers: %w", m.MsgID, err)
			}
		}
		delay := m.Delay
		if delay <= 0 {
			delay = r.grace
			r.due, r.dueHeaders = append(r.due, m), append(r.dueHeaders, hdr)
			if r.batched {
				continue
			}
		}
		r.subjects = append(r.subjects, m.Subject)
		r.msgIDs = append(r.msgIDs, m.MsgID)
		r.headers = append(r.headers, hdr)
		r.payloads = append(r.payloads, m.Payload)
		r.operationIDs = append(r.operationIDs, m.OperationID)
		r.delays = append(r.delays, delay.Seconds())
	}
	return nil
}

// batch is the messages due at once that one statement writes in its row
// of outbox_batches: one row however many operations the statement
// carries, instead of a row of outbox per message (migration 0021).
type batch struct {
	// id names the row; grace delays it as outboxRows.grace does.
	id    string
	grace time.Duration
	// changes holds, per message, the 1-based position of the change it
	// belongs to in an outcome statement (0 elsewhere).
	changes                        []int32
	subjects, msgIDs, operationIDs []string
	headers, payloads              [][]byte
	// due are the messages, named with id, for the hand-off.
	due []Message
}

func newBatch(grace time.Duration) *batch { return &batch{id: op.NewID("batch"), grace: grace} }

// add takes r's messages due at once, those of change (0: none).
func (b *batch) add(r *outboxRows, change int32) {
	for i, m := range r.due {
		m.Batch = b.id
		b.changes = append(b.changes, change)
		b.subjects = append(b.subjects, m.Subject)
		b.msgIDs = append(b.msgIDs, m.MsgID)
		b.headers = append(b.headers, r.dueHeaders[i])
		b.payloads = append(b.payloads, m.Payload)
		b.operationIDs = append(b.operationIDs, m.OperationID)
		b.due = append(b.due, m)
	}
}

// columns returns the arrays the statements take, never nil, and the delay
// of the row in seconds.
func (b *batch) columns() (subjects, msgIDs []string, headers, payloads [][]byte, operationIDs []string, delay float64) {
	return nonNil(b.subjects), nonNil(b.msgIDs), nonNil(b.headers), nonNil(b.payloads), nonNil(b.operationIDs), b.grace.Seconds()
}

// dueOf returns the messages of the changes kept says were written.
func (b *batch) dueOf(kept func(change int32) bool) []Message {
	var out []Message
	for i, m := range b.due {
		if kept(b.changes[i]) {
			out = append(out, m)
		}
	}
	return out
}

// OutboxClaim leases up to max due, unsent rows to relay for lease. Rows
// another relay holds are skipped (SKIP LOCKED), never waited for; a relay
// that dies only delays its rows until the lease ends.
func (s *Store) OutboxClaim(ctx context.Context, relay string, max int, lease time.Duration) ([]Claimed, error) {
	return s.OutboxClaimSubjects(ctx, relay, nil, max, lease)
}

// OutboxClaimSubjects is OutboxClaim for a relay that may publish only on
// subjects starting with one of prefixes (none: every subject), as its NATS
// user may: rows of other subjects are left to relays that may.
func (s *Store) OutboxClaimSubjects(ctx context.Context, relay string, prefixes []string, max int, lease time.Duration) ([]Claimed, error) {
	rows, err := s.q.OutboxClaimBatch(ctx, dbsqlc.OutboxClaimBatchParams{
		ClaimedBy: relay, LeaseSeconds: lease.Seconds(), MaxRows: int32(max), Now: s.now(), SubjectPrefixes: nonNil(prefixes),
	})
	if err != nil {
		return nil, fmt.Errorf("outbox claim: %w", translate(err))
	}
	out := make([]Claimed, len(rows))
	for i, r := range rows {
		c := Claimed{ID: r.ID, PublishCount: int(r.PublishCount), Message: Message{
			Subject: r.Subject, MsgID: r.MsgID, Payload: r.Payload,
		}}
		if len(r.Headers) > 0 {
			if err := json.Unmarshal(r.Headers, &c.Message.Header); err != nil {
				return nil, fmt.Errorf("outbox %d: decode headers: %w", r.ID, err)
			}
		}
		if r.OperationID != nil {
			c.Message.OperationID = *r.OperationID
		}
		out[i] = c
	}
	return out, nil
}

// OutboxSent deletes rows that relay claimed and published; it returns how
// many it deleted (rows another relay claimed since are not).
func (s *Store) OutboxSent(ctx context.Context, relay string, ids []int64) (int64, error) {
	n, err := s.q.OutboxDeletePublished(ctx, dbsqlc.OutboxDeletePublishedParams{Ids: ids, ClaimedBy: relay})
	if err != nil {
		return 0, fmt.Errorf("outbox delete published: %w", translate(err))
	}
	return n, nil
}

// OutboxSentHandedOff deletes the rows of handed-off messages (see
// Options.OnOutbox) that were published, by msg id, and the batches all of
// whose messages were; it returns how many rows of outbox it deleted. Each
// kind is one statement, made only when there is something of that kind to
// delete.
func (s *Store) OutboxSentHandedOff(ctx context.Context, msgIDs, batchIDs []string) (int64, error) {
	var n int64
	if len(batchIDs) > 0 {
		if _, err := s.q.OutboxBatchesDeleteHandedOff(ctx, batchIDs); err != nil {
			return 0, fmt.Errorf("outbox delete handed-off batches: %w", translate(err))
		}
	}
	if len(msgIDs) > 0 {
		var err error
		if n, err = s.q.OutboxDeleteHandedOff(ctx, msgIDs); err != nil {
			return 0, fmt.Errorf("outbox delete handed off: %w", translate(err))
		}
	}
	return n, nil
}

// ClaimedBatch is a row of outbox_batches claimed by a relay: its messages,
// in the order written.
type ClaimedBatch struct {
	ID           string
	Messages     []Message
	PublishCount int
}

// OutboxClaimBatches is OutboxClaimSubjects for outbox_batches: up to max
// due batches nobody holds, each whole, leased to relay; with prefixes,
// only batches all of whose subjects start with one of them.
func (s *Store) OutboxClaimBatches(ctx context.Context, relay string, prefixes []string, max int, lease time.Duration) ([]ClaimedBatch, error) {
	rows, err := s.q.OutboxBatchClaim(ctx, dbsqlc.OutboxBatchClaimParams{
		ClaimedBy: relay, LeaseSeconds: lease.Seconds(), MaxRows: int32(max), Now: s.now(), SubjectPrefixes: nonNil(prefixes),
	})
	if err != nil {
		return nil, fmt.Errorf("outbox claim batches: %w", translate(err))
	}
	out := make([]ClaimedBatch, len(rows))
	for i, r := range rows {
		n := len(r.MsgIds)
		if len(r.Subjects) != n || len(r.Headers) != n || len(r.Payloads) != n || len(r.OperationIds) != n {
			return nil, fmt.Errorf("outbox batch %s: arrays of unequal lengths", r.BatchID)
		}
		b := ClaimedBatch{ID: r.BatchID, PublishCount: int(r.PublishCount), Messages: make([]Message, n)}
		for j := range n {
			m := Message{Subject: r.Subjects[j], MsgID: r.MsgIds[j], Payload: r.Payloads[j], OperationID: r.OperationIds[j], Batch: r.BatchID}
			if len(r.Headers[j]) > 0 {
				if err := json.Unmarshal(r.Headers[j], &m.Header); err != nil {
					return nil, fmt.Errorf("outbox batch %s: decode headers: %w", r.BatchID, err)
				}
			}
			b.Messages[j] = m
		}
		out[i] = b
	}
	return out, nil
}

// OutboxBatchesSent deletes batches that relay claimed and published whole;
// it returns how many it deleted (those another relay claimed since are
// not).
func (s *Store) OutboxBatchesSent(ctx context.Context, relay string, ids []string) (int64, error) {
	n, err := s.q.OutboxBatchDelete(ctx, dbsqlc.OutboxBatchDeleteParams{BatchIds: ids, ClaimedBy: relay})
	if err != nil {
		return 0, fmt.Errorf("outbox delete published batches: %w", translate(err))
	}
	return n, nil
}

// Split says what becomes of a claimed batch that could not be published
// whole.
type Split struct {
	Relay, BatchID string
	// Unsent are the msg ids of its messages JetStream did not
	// acknowledge; Refused those of them NATS refused itself (a failure
	// counted against their rows) rather than being unreachable.
	Unsent, Refused []string
	// Delay before the rows are due; Reason is their last error.
	Delay  time.Duration
	Reason string
}

// OutboxSplitBatch turns the messages of a batch that were not published
// into rows of outbox, which relays retry, count and park one by one, and
// deletes the batch, in one statement fenced by the claim
// (outbox_split_batch). It returns how many rows it wrote (none when
// another relay holds the batch now).
func (s *Store) OutboxSplitBatch(ctx context.Context, sp Split) (int64, error) {
	n, err := s.q.OutboxBatchSplit(ctx, dbsqlc.OutboxBatchSplitParams{BatchID: sp.BatchID, ClaimedBy: sp.Relay,
		Unsent: nonNil(sp.Unsent), Refused: nonNil(sp.Refused), DelaySeconds: sp.Delay.Seconds(), LastError: sp.Reason, Now: s.now()})
	if err != nil {
		return 0, fmt.Errorf("outbox split batch %s: %w", sp.BatchID, translate(err))
	}
	return n, nil
}

// Release says why claimed rows go back unpublished.
type Release struct {
	Relay string
	IDs   []int64
	// Delay before they are due again.
	Delay  time.Duration
	Reason string
	// MessageFault counts the failure against the rows themselves (the
	// server refused these messages); at MaxFailures such failures a row is
	// parked. A transport failure (NATS unreachable) is not the message's
	// fault and is not counted.
	MessageFault bool
	MaxFailures  int
}

// OutboxRelease gives claimed rows back after a failed publish.
func (s *Store) OutboxRelease(ctx context.Context, r Release) error {
	_, err := s.q.OutboxRelease(ctx, dbsqlc.OutboxReleaseParams{
		Ids: r.IDs, ClaimedBy: r.Relay, DelaySeconds: r.Delay.Seconds(), LastError: r.Reason,
		CountFailure: r.MessageFault, MaxFailures: int32(max(r.MaxFailures, 1)), Now: s.now(),
	})
	if err != nil {
		return fmt.Errorf("outbox release: %w", translate(err))
	}
	return nil
}

// ParkedMessage is an outbox row that could not be published.
type ParkedMessage struct {
	ID          int64
	Subject     string
	MsgID       string
	OperationID string
	Failures    int
	LastError   string
	ParkedAt    time.Time
}

// OutboxParked returns up to limit parked rows, oldest first, and how many
// there are in all.
func (r reads) OutboxParked(ctx context.Context, limit int) ([]ParkedMessage, int64, error) {
	n, err := r.q.OutboxCountParked(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("outbox count parked: %w", translate(err))
	}
	rows, err := r.q.OutboxListParked(ctx, int32(limit))
	if err != nil {
		return nil, 0, fmt.Errorf("outbox list parked: %w", translate(err))
	}
	out := make([]ParkedMessage, len(rows))
	for i, row := range rows {
		out[i] = ParkedMessage{ID: row.ID, Subject: row.Subject, MsgID: row.MsgID, Failures: int(row.PublishFailures),
			LastError: row.LastError}
		if row.OperationID != nil {
			out[i].OperationID = *row.OperationID
		}
		if row.ParkedAt != nil {
			out[i].ParkedAt = *row.ParkedAt
		}
	}
	return out, n, nil
}

// OutboxUnsent counts rows not yet published.
func (r reads) OutboxUnsent(ctx context.Context) (int64, error) {
	n, err := r.q.OutboxCountUnsent(ctx)
	if err != nil {
		return 0, fmt.Errorf("outbox count: %w", translate(err))
	}
	return n, nil
}

// OutboxByOperation returns an operation's outbox rows in order.
func (r reads) OutboxByOperation(ctx context.Context, operationID string) ([]Message, error) {
	rows, err := r.q.OutboxListByOperation(ctx, &operationID)
	if err != nil {
		return nil, fmt.Errorf("outbox of operation %s: %w", operationID, translate(err))
	}
	out := make([]Message, len(rows))
	for i, r := range rows {
		out[i] = Message{Subject: r.Subject, MsgID: r.MsgID, Payload: r.Payload, OperationID: operationID}
	}
	return out, nil
}
