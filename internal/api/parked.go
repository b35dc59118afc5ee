package api

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/opledger/opledger/internal/ops"
	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// ParkedResponse is GET /v1/outbox/parked: the parked rows shown and how
// many there are in all.
type ParkedResponse struct {
	Parked []store.ParkedRow `json:"parked"`
	Total  int64             `json:"total"`
}

// RequeueResponse is POST /v1/outbox/parked/{id}/requeue: the row, due
// again at once.
type RequeueResponse struct {
	Requeued RequeuedRow `json:"requeued"`
}

// RequeuedRow names the row that was put back.
type RequeuedRow struct {
	ID          int64  `json:"id"`
	Subject     string `json:"subject"`
	MsgID       string `json:"msg_id"`
	OperationID string `json:"operation_id,omitempty"`
}

func (a *API) parked(r *http.Request, actor ops.Actor) (any, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("the query string is malformed: %w", op.ErrInvalid)
	}
	limit := 100
	for name, vs := range q {
		n, err := strconv.Atoi(vs[0])
		switch {
		case name != "limit":
			return nil, fmt.Errorf("unknown query parameter %q (the parameter is limit): %w", wire.Clip(name), op.ErrInvalid)
		case len(vs) != 1:
			return nil, fmt.Errorf("query parameter limit appears more than once: %w", op.ErrInvalid)
		case err != nil || n < 1 || n > maxLimit:
			return nil, fmt.Errorf("limit must be an integer from 1 to %d, got %q: %w", maxLimit, wire.Clip(vs[0]), op.ErrInvalid)
		}
		limit = n
	}
	rows, total, err := a.cfg.Ops.Parked(r.Context(), actor, limit)
	if err != nil {
		return nil, err
	}
	if rows == nil {
		rows = []store.ParkedRow{}
	}
	return ParkedResponse{Parked: rows, Total: total}, nil
}

func (a *API) requeue(r *http.Request, actor ops.Actor) (any, error) {
	raw := r.PathValue("id")
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || id < 1 {
		return nil, fmt.Errorf("no parked outbox row %q: %w", clip(raw), op.ErrNotFound)
	}
	data, err := readBody(r)
	if err != nil {
		return nil, err
	}
	body, err := decodeFields(data, "reason")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 30*time.Second)
	defer cancel()
	row, err := a.cfg.Ops.Requeue(ctx, actor, id, body["reason"])
	status, _, _ := classify(err)
	ev := a.cfg.Log.Info()
	if err != nil {
		ev = a.cfg.Log.Warn().Str("error", err.Error())
	} else {
		status = http.StatusOK
	}
	ev.Str("actor", actor.ID).Str("role", string(actor.Role)).Str("action", "requeue").Int64("outbox_id", id).
		Str("operation_id", row.OperationID).Int("status", status).Msg("api: operator write")
	if err != nil {
		return nil, err
	}
	return RequeueResponse{Requeued: RequeuedRow{ID: row.ID, Subject: row.Subject, MsgID: row.MsgID, OperationID: row.OperationID}}, nil
}
