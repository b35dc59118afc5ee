-- name: OperationDispatch :one
-- Claims a pending operation for one attempt in one statement: the
-- conditional transition to dispatched taking the lease (epoch + 1), its event
-- row and the attempt row, whose deadline the database computes from its own
-- clock. No row: another worker won, or the command is stale.
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
    INSERT INTO attempts (id, operation_id, number, lease_epoch, worker, started_at, deadline_at)
    SELECT @attempt_id, claimed.id, claimed.attempt_count, claimed.lease_epoch, @worker, claimed.updated_at,
           claimed.updated_at + make_interval(secs => @timeout_seconds::float8)
    FROM claimed
)
SELECT * FROM claimed;

-- name: AttemptList :many
SELECT * FROM attempts WHERE operation_id = @operation_id ORDER BY number;
