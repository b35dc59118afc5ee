package ops

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// Parked returns up to limit outbox rows NATS refused until they were parked
// (a result or command too large for its max_payload, say), the longest
// parked first, and how many there are (viewer). Each is a message that
// never reached its reader: an agent's answer, a worker's command.
func (s *Service) Parked(ctx context.Context, a Actor, limit int) ([]store.ParkedRow, int64, error) {
	if err := allowed(a, RoleViewer); err != nil {
		return nil, 0, err
	}
	return s.st.ListParked(ctx, limit)
}

// Requeue puts parked outbox row id back to be published (operator), once
// what made NATS refuse it is fixed; it is parked again if NATS still
// refuses it. The request, refused or not, is audited (action "requeue",
// the row's operation, its id and message id in the detail). Errors:
// ErrForbidden, op.ErrInvalid (no reason), op.ErrNotFound (no such parked
// row).
func (s *Service) Requeue(ctx context.Context, a Actor, id int64, reason string) (store.ParkedRow, error) {
	detail := map[string]string{"outbox_id": strconv.FormatInt(id, 10)}
	entry := store.AuditEntry{Actor: a.ID, Role: string(a.Role), Action: "requeue", Reason: wire.Clip200(reason), Outcome: "ok", Detail: detail}
	err := allowed(a, RoleOperator)
	if err == nil && (strings.TrimSpace(reason) == "" || !wire.ValidText(reason, 500)) {
		err = fmt.Errorf("a reason is required (1-500 printable characters): %w", op.ErrInvalid)
	}
	var row store.ParkedRow
	if err == nil {
		err = s.st.InTx(ctx, func(tx *store.Tx) error {
			var err error
			if row, err = tx.RequeueParked(ctx, id); err != nil {
				return err
			}
			entry.OperationID, detail["msg_id"], detail["subject"] = row.OperationID, row.MsgID, wire.Clip200(row.Subject)
			return tx.Audit(ctx, entry)
		})
	}
	if err != nil {
		entry.Outcome = wire.Clip200(err.Error())
		if aerr := s.st.Audit(context.WithoutCancel(ctx), entry); aerr != nil {
			return store.ParkedRow{}, errors.Join(err, aerr)
		}
		return store.ParkedRow{}, err
	}
	return row, nil
}
