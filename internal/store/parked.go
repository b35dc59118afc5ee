package store

import (
	"context"
	"fmt"
	"time"

	"github.com/opledger/opledger/db/dbsqlc"
	"github.com/opledger/opledger/pkg/op"
)

// ParkedRow is an outbox row that could not be published (NATS refused it
// max_failures times), as operators see it: everything but its payload,
// of which only the size is shown.
type ParkedRow struct {
	ID           int64     `json:"id"`
	Subject      string    `json:"subject"`
	MsgID        string    `json:"msg_id"`
	OperationID  string    `json:"operation_id,omitempty"`
	PublishCount int       `json:"publish_count"`
	Failures     int       `json:"publish_failures"`
	LastError    string    `json:"last_error"`
	PayloadBytes int64     `json:"payload_bytes"`
	CreatedAt    time.Time `json:"created_at"`
	ParkedAt     time.Time `json:"parked_at"`
}

// ListParked returns up to limit parked rows, the longest parked first, and
// how many there are in all.
func (r reads) ListParked(ctx context.Context, limit int) ([]ParkedRow, int64, error) {
	n, err := r.q.OutboxCountParked(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("outbox count parked: %w", translate(err))
	}
	rows, err := r.q.OutboxListParkedForOperators(ctx, int32(limit))
	if err != nil {
		return nil, 0, fmt.Errorf("outbox list parked: %w", translate(err))
	}
	out := make([]ParkedRow, len(rows))
	for i, row := range rows {
		out[i] = ParkedRow{ID: row.ID, Subject: row.Subject, MsgID: row.MsgID, PublishCount: int(row.PublishCount),
			Failures: int(row.PublishFailures), LastError: row.LastError, PayloadBytes: row.PayloadBytes, CreatedAt: row.CreatedAt}
		if row.OperationID != nil {
			out[i].OperationID = *row.OperationID
		}
		if row.ParkedAt != nil {
			out[i].ParkedAt = *row.ParkedAt
		}
	}
	return out, n, nil
}

// RequeueParked puts parked outbox row id back to be published at once, its
// failures counted from zero. Errors: op.ErrNotFound when no such row is
// parked (never was, already requeued, or published).
func (t *Tx) RequeueParked(ctx context.Context, id int64) (ParkedRow, error) {
	rows, err := t.q.OutboxRequeueParked(ctx, dbsqlc.OutboxRequeueParkedParams{Ids: []int64{id}, Now: t.now()})
	if err != nil {
		return ParkedRow{}, fmt.Errorf("requeue outbox row %d: %w", id, translate(err))
	}
	if len(rows) == 0 {
		return ParkedRow{}, fmt.Errorf("no parked outbox row %d: %w", id, op.ErrNotFound)
	}
	row := ParkedRow{ID: rows[0].ID, Subject: rows[0].Subject, MsgID: rows[0].MsgID}
	if rows[0].OperationID != nil {
		row.OperationID = *rows[0].OperationID
	}
	return row, nil
}
