-- name: OperationDispatch :one
-- Claims a pending operation for one attempt in one statement: the
-- conditional transition to dispatched taking the lease (epoch + 1), its event
-- row and the attempt row. No row: another worker won, or the command is stale.
WITH claimed AS (
    UPDATE operations SET
        state = 'dispatched', lease_epoch = lease_epoch + 1, attempt_count = attempt_count + 1,
        updated_at = coalesce(sqlc.narg('now')::timestamptz, now())
    WHERE operations.id = @id AND operations.state = 'pending_dispatch' AND operations.lease_epoch = @lease_epoch
    RETURNING *
), appended AS (
    INSERT INTO operation_events (operation_id, seq, event, from_state, to_state, lease_epoch, attempt_id, actor, at)
    SELECT claimed.id,
           (SELECT coalesce(max(oe.seq), 0) + 1 FROM operation_events oe WHERE oe.operation_id = claimed.id),
           'dispatch', 'pending_dispatch', 'dispatched', claimed.lease_epoch, @attempt_id, @worker, claimed.updated_at
    FROM claimed
), attempt AS (
    INSERT INTO attempts (id, operation_id, number, lease_epoch, worker, started_at)
    SELECT @attempt_id, claimed.id, claimed.attempt_count, claimed.lease_epoch, @worker, claimed.updated_at
    FROM claimed
)
SELECT * FROM claimed;

-- name: AttemptFinish :one
-- Only an unfinished attempt can be finished, once.
UPDATE attempts SET
    finished_at = coalesce(sqlc.narg('now')::timestamptz, now()),
    outcome = @outcome, error_category = @error_category, error = @error, http_status = @http_status,
    external_request_id = @external_request_id, external_object_id = @external_object_id
WHERE id = @id AND finished_at IS NULL
RETURNING *;

-- name: AttemptList :many
SELECT * FROM attempts WHERE operation_id = @operation_id ORDER BY number;
