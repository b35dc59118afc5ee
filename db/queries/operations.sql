-- name: OperationInsertOrGet :one
-- Create-if-absent by idempotency key. The no-op update on conflict locks and
-- returns the existing row, so concurrent submitters of one key all get the
-- winner's row; duplicate is true for everyone but the creator.
INSERT INTO operations (
    id, workflow_id, run_id, tool, tool_version, intent, entity_type, entity_id,
    args_canonical, args_hash, side_effect_class, idempotency_key, state, version, origin_event_id,
    compensates_operation_id, trace_id, created_at, updated_at
) VALUES (
    @id, @workflow_id, @run_id, @tool, @tool_version, @intent, @entity_type, @entity_id,
    @args_canonical, @args_hash, @side_effect_class, @idempotency_key, @state, @version, @origin_event_id,
    sqlc.narg('compensates_operation_id'), @trace_id,
    coalesce(sqlc.narg('now')::timestamptz, now()), coalesce(sqlc.narg('now')::timestamptz, now())
)
ON CONFLICT (idempotency_key) DO UPDATE SET idempotency_key = EXCLUDED.idempotency_key
RETURNING sqlc.embed(operations), (xmax <> 0)::boolean AS duplicate;

-- name: OperationGet :one
SELECT * FROM operations WHERE id = @id;

-- name: OperationGetByKey :one
SELECT * FROM operations WHERE idempotency_key = @idempotency_key;

-- name: OperationListByWorkflow :many
SELECT * FROM operations WHERE workflow_id = @workflow_id ORDER BY created_at, id;

-- name: OperationListStuckDispatched :many
-- Operations still in dispatched whose open attempt started before a cutoff:
-- their dispatcher died or hangs (the sweeper). Found through
-- attempts_open_idx, so that no index on operations covers its state.
SELECT o.* FROM attempts a JOIN operations o ON o.id = a.operation_id
WHERE a.finished_at IS NULL AND a.started_at < @older_than
  AND o.state = 'dispatched' AND o.lease_epoch = a.lease_epoch
ORDER BY a.started_at
LIMIT @max_rows;

-- name: OperationTransition :one
-- Conditional on the state and lease epoch the writer expects: a late or
-- duplicate writer updates no row (and appends no event) and learns why from
-- OperationGet. The event row is appended in the same statement.
WITH changed AS (
    UPDATE operations SET
        state               = @to_state,
        version             = version + 1,
        lease_epoch         = lease_epoch + CASE WHEN @bump_epoch::boolean THEN 1 ELSE 0 END,
        attempt_count       = attempt_count + CASE WHEN @new_attempt::boolean THEN 1 ELSE 0 END,
        external_request_id = coalesce(nullif(@external_request_id::text, ''), external_request_id),
        external_object_id  = coalesce(nullif(@external_object_id::text, ''), external_object_id),
        last_error_category = CASE WHEN @set_error::boolean THEN @error_category::text ELSE last_error_category END,
        last_error          = CASE WHEN @set_error::boolean THEN @error::text ELSE last_error END,
        updated_at          = coalesce(sqlc.narg('now')::timestamptz, now())
    WHERE operations.id = @id AND operations.state = @from_state AND operations.lease_epoch = @lease_epoch
    RETURNING *
), appended AS (
    INSERT INTO operation_events (operation_id, seq, event, from_state, to_state, lease_epoch, attempt_id, actor, detail, at)
    SELECT changed.id,
           (SELECT coalesce(max(oe.seq), 0) + 1 FROM operation_events oe WHERE oe.operation_id = changed.id),
           @event, @from_state, changed.state, changed.lease_epoch, @attempt_id, @actor, sqlc.narg('detail')::jsonb,
           changed.updated_at
    FROM changed
)
SELECT * FROM changed;

-- name: OperationCountByState :many
SELECT state, count(*)::bigint AS n FROM operations GROUP BY state ORDER BY state;

-- name: OperationListUnattended :many
-- Operations waiting on a command (pending_dispatch, unknown_outcome,
-- acknowledged) that changed before a cutoff and have no unsent outbox row:
-- their command was published and then lost (a terminated message, a stream
-- past its MaxAge, a JetStream failure). Without an index on state (so that
-- transitions stay HOT) this scans operations, so it runs rarely; the
-- NOT EXISTS probes only unsent outbox rows (outbox_unsent_idx), few by design.
SELECT o.* FROM operations o
WHERE o.state IN ('pending_dispatch', 'unknown_outcome', 'acknowledged')
  AND o.updated_at < @older_than
  AND NOT EXISTS (SELECT 1 FROM outbox b WHERE b.operation_id = o.id AND b.sent_at IS NULL)
ORDER BY o.updated_at
LIMIT @max_rows;
