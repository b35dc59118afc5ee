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
	grace                          time.Duration
	subjects, msgIDs, operationIDs []string
	headers, payloads              [][]byte
	delays                         []float64 // seconds
	// due are the messages due at once.
	due []Message
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
		r.subjects = append(r.subjects, m.Subject)
		r.msgIDs = append(r.msgIDs, m.MsgID)
		r.headers = append(r.headers, hdr)
		r.payloads = append(r.payloads, m.Payload)
		r.operationIDs = append(r.operationIDs, m.OperationID)
		delay := m.Delay
		if delay <= 0 {
			delay = r.grace
			r.due = append(r.due, m)
		}
		r.delays = append(r.delays, delay.Seconds())
	}
	return nil
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

// OutboxSentByMsgID deletes the rows of handed-off messages (see
// Options.OnOutbox) that were published; it returns how many it deleted.
func (s *Store) OutboxSentByMsgID(ctx context.Context, msgIDs []string) (int64, error) {
	n, err := s.q.OutboxDeleteHandedOff(ctx, msgIDs)
	if err != nil {
		return 0, fmt.Errorf("outbox delete handed off: %w", translate(err))
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
