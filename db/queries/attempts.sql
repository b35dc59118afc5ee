-- name: AttemptInsert :one
INSERT INTO attempts (id, operation_id, number, lease_epoch, worker, started_at)
VALUES (@id, @operation_id, @number, @lease_epoch, @worker, coalesce(sqlc.narg('now')::timestamptz, now()))
RETURNING *;

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
