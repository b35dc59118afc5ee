-- name: OperationEventAppend :one
INSERT INTO operation_events (operation_id, seq, event, from_state, to_state, lease_epoch, attempt_id, actor, detail, at)
VALUES (
    @operation_id,
    (SELECT coalesce(max(seq), 0) + 1 FROM operation_events WHERE operation_id = @operation_id),
    @event, @from_state, @to_state, @lease_epoch, @attempt_id, @actor, @detail,
    coalesce(sqlc.narg('now')::timestamptz, now())
)
RETURNING *;

-- name: OperationEventList :many
SELECT * FROM operation_events WHERE operation_id = @operation_id ORDER BY seq;
