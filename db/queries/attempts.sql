-- name: OperationDispatch :one
-- Claims a pending operation for one attempt in one statement: the
-- conditional transition to dispatched taking the lease (epoch + 1), its event
-- row and the attempt row. No row: another worker won, or the command is stale.
WITH claimed AS (
    UPDATE operations SET
        state = 'dispatched', version = version + 1, lease_epoch = lease_epoch + 1, attempt_count = attempt_count + 1,
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

-- name: OperationRecordOutcome :one
-- Records an attempt's outcome in one statement: the attempt row is finished
-- whatever happens, and only if the operation is still dispatched at the
-- attempt's lease epoch does it move to its new state, with its event row and
-- its outbox rows (the agent's result, a follow-up command). No row returned:
-- the operation moved on (a sweeper fenced this attempt off).
WITH finished AS (
    UPDATE attempts SET
        finished_at = coalesce(sqlc.narg('now')::timestamptz, now()),
        outcome = @outcome, error_category = @error_category, error = @error, http_status = @http_status,
        external_request_id = @external_request_id, external_object_id = @external_object_id
    WHERE attempts.id = @attempt_id AND attempts.finished_at IS NULL
), changed AS (
    UPDATE operations SET
        state               = @to_state,
        version             = operations.version + 1,
        external_request_id = coalesce(nullif(@external_request_id::text, ''), operations.external_request_id),
        external_object_id  = coalesce(nullif(@external_object_id::text, ''), operations.external_object_id),
        last_error_category = @last_error_category,
        last_error          = @last_error,
        updated_at          = coalesce(sqlc.narg('now')::timestamptz, now())
    WHERE operations.id = @id AND operations.state = 'dispatched' AND operations.lease_epoch = @lease_epoch
    RETURNING *
), appended AS (
    INSERT INTO operation_events (operation_id, seq, event, from_state, to_state, lease_epoch, attempt_id, actor, detail, at)
    SELECT changed.id,
           (SELECT coalesce(max(oe.seq), 0) + 1 FROM operation_events oe WHERE oe.operation_id = changed.id),
           @event, 'dispatched', changed.state, changed.lease_epoch, @attempt_id, @actor, sqlc.narg('detail')::jsonb,
           changed.updated_at
    FROM changed
), queued AS (
    INSERT INTO outbox (subject, msg_id, headers, payload, operation_id, available_at)
    SELECT m.subject, m.msg_id, m.headers, m.payload, nullif(m.operation_id, ''),
           coalesce(nullif(m.available_at, '0001-01-01 00:00:00+00'), sqlc.narg('now')::timestamptz, now())
    FROM (SELECT unnest(@subjects::text[]) AS subject, unnest(@msg_ids::text[]) AS msg_id,
                 unnest(@headers::jsonb[]) AS headers, unnest(@payloads::bytea[]) AS payload,
                 unnest(@operation_ids::text[]) AS operation_id,
                 unnest(@available_ats::timestamptz[]) AS available_at) AS m
    WHERE EXISTS (SELECT 1 FROM changed)
)
SELECT * FROM changed;
