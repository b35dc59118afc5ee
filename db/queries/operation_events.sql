-- name: OperationCreated :exec
-- Everything a new operation needs besides its row, in one statement: its
-- first events (create, and the initial transition when there is one), its
-- outbox rows, and the inbox decision.
WITH events AS (
    INSERT INTO operation_events (operation_id, seq, event, from_state, to_state, lease_epoch, actor, detail, at)
    SELECT @operation_id, e.seq, e.event, e.from_state, e.to_state, 0, @actor, e.detail,
           coalesce(sqlc.narg('now')::timestamptz, now())
    FROM (SELECT unnest(@seqs::int[]) AS seq, unnest(@events::text[]) AS event,
                 unnest(@from_states::text[]) AS from_state, unnest(@to_states::text[]) AS to_state,
                 unnest(@details::jsonb[]) AS detail) AS e
), outbox_rows AS (
    INSERT INTO outbox (subject, msg_id, headers, payload, operation_id, available_at)
    SELECT m.subject, m.msg_id, m.headers, m.payload, nullif(m.operation_id, ''),
           coalesce(sqlc.narg('now')::timestamptz, now()) + make_interval(secs => m.delay_seconds)
    FROM (SELECT unnest(@subjects::text[]) AS subject, unnest(@msg_ids::text[]) AS msg_id,
                 unnest(@headers::jsonb[]) AS headers, unnest(@payloads::bytea[]) AS payload,
                 unnest(@operation_ids::text[]) AS operation_id, unnest(@delays::float8[]) AS delay_seconds) AS m
)
UPDATE inbox SET decision = @decision, reason = @reason, operation_id = sqlc.narg('inbox_operation_id')
WHERE source = @source AND event_id = @event_id;

-- name: OperationEventList :many
SELECT * FROM operation_events WHERE operation_id = @operation_id ORDER BY seq;

-- name: OperationSubmitNew :one
-- A new intent for a new key, whole, in one statement: its inbox row (with
-- its decision), the operation, its first events and its outbox rows (the
-- dispatch command and the answer). It makes no decision: an event id or a
-- key the ledger already has fails the statement with a unique violation,
-- leaving nothing written, and the caller takes the path that decides
-- (Tx.Submit). Foreign keys are checked at the end of the statement, when
-- the operation exists.
WITH inbox_row AS (
    INSERT INTO inbox (source, event_id, payload, payload_hash, workflow_id, decision, reason, rejected, operation_id,
                       received_at, last_seen_at)
    VALUES (@source, @event_id, '', @payload_hash, @workflow_id, 'new', '', false, @id,
            coalesce(sqlc.narg('now')::timestamptz, now()), coalesce(sqlc.narg('now')::timestamptz, now()))
), created AS (
    INSERT INTO operations (
        id, workflow_id, run_id, tool, tool_version, intent, entity_type, entity_id,
        args_canonical, args_hash, side_effect_class, idempotency_key, state, version, origin_event_id,
        compensates_operation_id, trace_id, proposed_by, dedupe_key, tenant, created_at, updated_at
    ) VALUES (
        @id, @workflow_id, @run_id, @tool, @tool_version, @intent, @entity_type, @entity_id,
        @args_canonical, @args_hash, @side_effect_class, @idempotency_key, @state, @version, @event_id,
        sqlc.narg('compensates_operation_id'), @trace_id, @proposed_by, @dedupe_key, @tenant,
        coalesce(sqlc.narg('now')::timestamptz, now()), coalesce(sqlc.narg('now')::timestamptz, now())
    )
    RETURNING *
), events AS (
    INSERT INTO operation_events (operation_id, seq, event, from_state, to_state, lease_epoch, actor, detail, at)
    SELECT created.id, e.seq, e.event, e.from_state, e.to_state, 0, @actor, e.detail, created.created_at
    FROM created,
         (SELECT unnest(@seqs::int[]) AS seq, unnest(@events::text[]) AS event,
                 unnest(@from_states::text[]) AS from_state, unnest(@to_states::text[]) AS to_state,
                 unnest(@details::jsonb[]) AS detail) AS e
), outbox_rows AS (
    INSERT INTO outbox (subject, msg_id, headers, payload, operation_id, available_at)
    SELECT m.subject, m.msg_id, m.headers, m.payload, nullif(m.operation_id, ''),
           coalesce(sqlc.narg('now')::timestamptz, now()) + make_interval(secs => m.delay_seconds)
    FROM (SELECT unnest(@subjects::text[]) AS subject, unnest(@msg_ids::text[]) AS msg_id,
                 unnest(@headers::jsonb[]) AS headers, unnest(@payloads::bytea[]) AS payload,
                 unnest(@operation_ids::text[]) AS operation_id, unnest(@delays::float8[]) AS delay_seconds) AS m
)
SELECT * FROM created;
