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
-- A new intent for a new key, whole, in one statement: the operation, its
-- inbox row (with its decision), its first events and its outbox rows (the
-- dispatch command and the answer); written is true and the row is the
-- operation created. It makes no decision: for an event id or a key the
-- ledger already has it writes nothing (ON CONFLICT DO NOTHING: a repeat
-- is not an error, and Postgres logs none) and returns, with written false,
-- what OperationRepeatLookup would read, so that the repeat is decided
-- without another round trip; or no row when that lookup finds nothing in
-- this statement's snapshot (what made the insert write nothing committed
-- after it began, or the event id names no operation), and the caller
-- takes the path that decides. A new key under a known event id would leave
-- the operation without its inbox row: submit_conflict fails the statement
-- with a unique violation, undoing it.
WITH created AS (
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
    ON CONFLICT DO NOTHING
    RETURNING *
), inbox_row AS (
    INSERT INTO inbox (source, event_id, payload, payload_hash, workflow_id, decision, reason, rejected, operation_id,
                       received_at, last_seen_at)
    SELECT @source, @event_id, '', @payload_hash, @workflow_id, 'new', '', false, created.id,
           created.created_at, created.created_at
    FROM created
    ON CONFLICT DO NOTHING
    RETURNING operation_id
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
           created.created_at + make_interval(secs => m.delay_seconds)
    FROM created,
         (SELECT unnest(@subjects::text[]) AS subject, unnest(@msg_ids::text[]) AS msg_id,
                 unnest(@headers::jsonb[]) AS headers, unnest(@payloads::bytea[]) AS payload,
                 unnest(@operation_ids::text[]) AS operation_id, unnest(@delays::float8[]) AS delay_seconds) AS m
), batch AS (
    -- The messages due at once (the dispatch command, the answer) in one
    -- row of outbox_batches, handed to the writer's relay after the commit.
    INSERT INTO outbox_batches (batch_id, available_at, subjects, msg_ids, headers, payloads, operation_ids)
    SELECT @batch_id, created.created_at + make_interval(secs => @batch_delay_seconds::float8),
           @batch_subjects::text[], @batch_msg_ids::text[], @batch_headers::jsonb[], @batch_payloads::bytea[], @batch_operation_ids::text[]
    FROM created
    WHERE cardinality(@batch_msg_ids::text[]) > 0
), seen AS (
    -- Read only when nothing was created (the second branch below).
    SELECT decision, reason, payload_hash, operation_id
    FROM inbox WHERE source = @source AND event_id = @event_id
)
SELECT created.*, true AS written, false AS seen, ''::text AS first_decision, ''::text AS first_reason,
       ''::text AS first_payload_hash
FROM created
WHERE CASE WHEN EXISTS (SELECT 1 FROM inbox_row) THEN true
           ELSE submit_conflict('the event id is already in the inbox, under another operation')
      END
UNION ALL
SELECT o.*, false, EXISTS (SELECT 1 FROM seen), coalesce((SELECT decision FROM seen), ''),
       coalesce((SELECT reason FROM seen), ''), coalesce((SELECT payload_hash FROM seen), '')
FROM operations o
WHERE NOT EXISTS (SELECT 1 FROM created)
  AND o.id = CASE WHEN EXISTS (SELECT 1 FROM seen) THEN (SELECT operation_id FROM seen)
                  ELSE (SELECT k.id FROM operations k WHERE k.idempotency_key = @idempotency_key) END;

-- name: OperationSubmitNewBatch :many
-- OperationSubmitNew for many new intents in one statement (group commit):
-- element i of every per-operation array is operation i; each has the two
-- first events (create, then @initial) and its outbox rows come flattened,
-- each naming its operation by its 1-based position. One statement pays its
-- executor start-up, constraint preparation, plan lookup and commit once
-- for all of them instead of once each. It makes no decision either: an
-- intent whose key the ledger has (or an earlier one of the batch has) is
-- skipped with its events and messages (ON CONFLICT DO NOTHING), and only
-- the operations created come back; the caller takes the path that decides
-- for the others. A new key under a known event id (a replan that kept
-- it, rare) fails the whole statement with a unique violation of the
-- inbox, nothing is written, and the caller submits each one on its own.
-- The inbox insert takes no ON CONFLICT for it: a speculative insertion
-- costs a WAL record per row.
WITH input AS (
    SELECT * FROM ROWS FROM (
        unnest(@ids::text[]), unnest(@sources::text[]), unnest(@event_ids::text[]), unnest(@payload_hashes::text[]),
        unnest(@workflow_ids::text[]), unnest(@run_ids::text[]), unnest(@tools::text[]), unnest(@tool_versions::int[]),
        unnest(@intents::text[]), unnest(@entity_types::text[]), unnest(@entity_ids::text[]),
        unnest(@args_canonicals::text[]), unnest(@args_hashes::text[]), unnest(@side_effect_classes::text[]),
        unnest(@idempotency_keys::text[]), unnest(@states::text[]), unnest(@compensates_operation_ids::text[]),
        unnest(@trace_ids::text[]), unnest(@proposed_bys::text[]), unnest(@tenants::text[]), unnest(@created_details::jsonb[]),
        unnest(@actors::text[])
    ) WITH ORDINALITY AS i(id, source, event_id, payload_hash, workflow_id, run_id, tool, tool_version, intent, entity_type, entity_id,
           args_canonical, args_hash, side_effect_class, idempotency_key, state, compensates_operation_id,
           trace_id, proposed_by, tenant, created_detail, actor, n)
), created AS (
    INSERT INTO operations (
        id, workflow_id, run_id, tool, tool_version, intent, entity_type, entity_id,
        args_canonical, args_hash, side_effect_class, idempotency_key, state, version, origin_event_id,
        compensates_operation_id, trace_id, proposed_by, dedupe_key, tenant, created_at, updated_at
    )
    SELECT i.id, i.workflow_id, i.run_id, i.tool, i.tool_version, i.intent, i.entity_type, i.entity_id,
           i.args_canonical, i.args_hash, i.side_effect_class, i.idempotency_key, i.state, 2, i.event_id,
           nullif(i.compensates_operation_id, ''), i.trace_id, i.proposed_by, '', i.tenant,
           coalesce(sqlc.narg('now')::timestamptz, now()), coalesce(sqlc.narg('now')::timestamptz, now())
    FROM input i
    -- In key order, as every batch takes them: two batches never wait for
    -- each other's keys crosswise. The first of a key in the batch wins.
    ORDER BY i.idempotency_key, i.n
    ON CONFLICT DO NOTHING
    RETURNING *
), inbox_rows AS (
    INSERT INTO inbox (source, event_id, payload, payload_hash, workflow_id, decision, reason, rejected, operation_id,
                       received_at, last_seen_at)
    SELECT i.source, i.event_id, '', i.payload_hash, i.workflow_id, 'new', '', false, i.id,
           created.created_at, created.created_at
    FROM created JOIN input i ON i.id = created.id
), events AS (
    INSERT INTO operation_events (operation_id, seq, event, from_state, to_state, lease_epoch, actor, detail, at)
    SELECT created.id, e.seq, e.event, e.from_state, e.to_state, 0, i.actor, e.detail, created.created_at
    FROM created
    JOIN input i ON i.id = created.id
    CROSS JOIN LATERAL (VALUES (1, 'create', '', 'planned', i.created_detail),
                               (2, @initial::text, 'planned', created.state, NULL::jsonb)) AS e(seq, event, from_state, to_state, detail)
), outbox_rows AS (
    INSERT INTO outbox (subject, msg_id, headers, payload, operation_id, available_at)
    SELECT m.subject, m.msg_id, m.headers, m.payload, nullif(m.operation_id, ''),
           coalesce(sqlc.narg('now')::timestamptz, now()) + make_interval(secs => m.delay_seconds)
    FROM ROWS FROM (unnest(@message_changes::int[]), unnest(@subjects::text[]), unnest(@msg_ids::text[]), unnest(@headers::jsonb[]),
                    unnest(@payloads::bytea[]), unnest(@operation_ids::text[]), unnest(@delays::float8[]))
         AS m(change, subject, msg_id, headers, payload, operation_id, delay_seconds)
    JOIN input i ON i.n = m.change
    JOIN created ON created.id = i.id
), batch AS (
    -- The messages due at once of the operations created, in one row of
    -- outbox_batches, in the order given.
    INSERT INTO outbox_batches (batch_id, available_at, subjects, msg_ids, headers, payloads, operation_ids)
    SELECT @batch_id, coalesce(sqlc.narg('now')::timestamptz, now()) + make_interval(secs => @batch_delay_seconds::float8),
           array_agg(m.subject ORDER BY m.ord), array_agg(m.msg_id ORDER BY m.ord), array_agg(m.headers ORDER BY m.ord),
           array_agg(m.payload ORDER BY m.ord), array_agg(m.operation_id ORDER BY m.ord)
    FROM ROWS FROM (unnest(@batch_changes::int[]), unnest(@batch_subjects::text[]), unnest(@batch_msg_ids::text[]),
                    unnest(@batch_headers::jsonb[]), unnest(@batch_payloads::bytea[]), unnest(@batch_operation_ids::text[]))
         WITH ORDINALITY AS m(change, subject, msg_id, headers, payload, operation_id, ord)
    JOIN input i ON i.n = m.change
    JOIN created ON created.id = i.id
    HAVING count(*) > 0
)
SELECT created.* FROM created;

-- name: OperationRepeatLookup :one
-- What a repeated simple intent (one OperationSubmitNew wrote nothing for)
-- meets, in one read: its inbox row when the event id is known, with the
-- operation that row names; otherwise the operation of its key. No row
-- when neither applies (the event id is known but names no operation, or
-- what made the statement write nothing committed after this read's
-- snapshot): the caller takes the transaction, which decides those.
WITH seen AS (
    SELECT decision, reason, payload_hash, operation_id
    FROM inbox WHERE source = @source AND event_id = @event_id
)
SELECT sqlc.embed(o),
       EXISTS (SELECT 1 FROM seen)::boolean AS seen,
       coalesce((SELECT decision FROM seen), '')::text AS first_decision,
       coalesce((SELECT reason FROM seen), '')::text AS first_reason,
       coalesce((SELECT payload_hash FROM seen), '')::text AS first_payload_hash
FROM operations o
WHERE o.id = CASE WHEN EXISTS (SELECT 1 FROM seen) THEN (SELECT operation_id FROM seen)
                  ELSE (SELECT k.id FROM operations k WHERE k.idempotency_key = @idempotency_key) END;

-- name: InboxRecordRepeat :one
-- Records a repeat decided from OperationRepeatLookup, with its answer, in
-- one statement. For a new event id (@seen false) it inserts the inbox row
-- with the decision; for a known one it counts the redelivery. The answer
-- goes in one row of outbox_batches, written only with the inbox change:
-- no row comes back when the event id arrived meanwhile (the insert found
-- it), and the caller takes the transaction.
WITH inserted AS (
    INSERT INTO inbox (source, event_id, payload, payload_hash, workflow_id, decision, reason, rejected, operation_id,
                       received_at, last_seen_at)
    SELECT @source, @event_id, '', @payload_hash, @workflow_id, @decision, @reason, false, @operation_id,
           coalesce(sqlc.narg('now')::timestamptz, now()), coalesce(sqlc.narg('now')::timestamptz, now())
    WHERE NOT @seen::boolean
    ON CONFLICT DO NOTHING
    RETURNING event_id
), counted AS (
    UPDATE inbox SET duplicate_count = duplicate_count + 1,
                     last_seen_at = coalesce(sqlc.narg('now')::timestamptz, now())
    WHERE @seen::boolean AND source = @source AND event_id = @event_id
    RETURNING event_id
), changed AS (
    SELECT event_id FROM inserted UNION ALL SELECT event_id FROM counted
), batch AS (
    INSERT INTO outbox_batches (batch_id, available_at, subjects, msg_ids, headers, payloads, operation_ids)
    SELECT @batch_id, coalesce(sqlc.narg('now')::timestamptz, now()) + make_interval(secs => @batch_delay_seconds::float8),
           @batch_subjects::text[], @batch_msg_ids::text[], @batch_headers::jsonb[], @batch_payloads::bytea[], @batch_operation_ids::text[]
    FROM changed
    WHERE cardinality(@batch_msg_ids::text[]) > 0
)
SELECT count(*)::int AS changed FROM changed;
