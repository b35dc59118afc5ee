-- name: OperationInsertOrGet :one
-- Create-if-absent by idempotency key. The no-op update on conflict locks and
-- returns the existing row, so concurrent submitters of one key all get the
-- winner's row; duplicate is true for everyone but the creator.
INSERT INTO operations (
    id, workflow_id, run_id, tool, tool_version, intent, entity_type, entity_id,
    args_canonical, args_hash, side_effect_class, idempotency_key, state, version, origin_event_id,
    compensates_operation_id, trace_id, proposed_by, dedupe_key, tenant, created_at, updated_at
) VALUES (
    @id, @workflow_id, @run_id, @tool, @tool_version, @intent, @entity_type, @entity_id,
    @args_canonical, @args_hash, @side_effect_class, @idempotency_key, @state, @version, @origin_event_id,
    sqlc.narg('compensates_operation_id'), @trace_id, @proposed_by, @dedupe_key, @tenant,
    coalesce(sqlc.narg('now')::timestamptz, now()), coalesce(sqlc.narg('now')::timestamptz, now())
)
ON CONFLICT (idempotency_key) DO UPDATE SET updated_at = operations.updated_at
RETURNING sqlc.embed(operations), (xmax <> 0)::boolean AS duplicate;

-- name: OperationGet :one
SELECT * FROM operations WHERE id = @id;

-- name: OperationGetByKey :one
SELECT * FROM operations WHERE idempotency_key = @idempotency_key;

-- name: OperationListByWorkflow :many
SELECT * FROM operations WHERE workflow_id = @workflow_id ORDER BY created_at, id;

-- name: OperationListStuckDispatched :many
-- Operations still in dispatched whose current attempt is past its deadline
-- plus grace on the database's clock: their dispatcher died or hangs (the
-- sweeper). Found through attempts_open_deadline_idx, so that no index on
-- operations covers its state.
SELECT sqlc.embed(o), a.id AS attempt_id, a.deadline_at FROM attempts a JOIN operations o ON o.id = a.operation_id
WHERE a.finished_at IS NULL
  AND a.deadline_at < coalesce(sqlc.narg('now')::timestamptz, now()) - make_interval(secs => @grace_seconds::float8)
  AND o.state = 'dispatched' AND o.lease_epoch = a.lease_epoch
ORDER BY a.deadline_at
LIMIT @max_rows;

-- name: OperationTransitionFinishing :one
-- One decision, one statement: a chain of events (usually one) moves the
-- operation from from_state to to_state, conditional on the state and lease
-- epoch the writer expects; every event of the chain gets its row; the
-- writer's attempt, when given, is finished with its outcome (whatever
-- happens, so that a fenced-off attempt still records what the vendor said;
-- an attempt the sweeper marked finished as "swept" takes the real answer
-- when it comes late, as evidence for the reconciler);
-- and the outbox rows (the agent's result, the follow-up command) are
-- written only if the operation changed. A late or duplicate writer updates
-- no operation and learns why from OperationGet.
-- A dispatcher recording an attempt of a leased tool asks for require_lease:
-- the operation changes only if its entity's lease is still its own and
-- unexpired (the attempt row takes the answer all the same, as evidence).
-- OperationTransitionFinishing also finishes the writer's attempt: only the
-- roles that finish attempts (dispatcher, maintainer) may run it, so the
-- roles that never touch attempts run OperationTransition, which does not
-- name the attempts table (schema/grants.sql).
WITH finished AS (
    UPDATE attempts SET
        finished_at = coalesce(sqlc.narg('now')::timestamptz, now()),
        outcome = @outcome, error_category = @attempt_error_category, error = @attempt_error, http_status = @http_status,
        external_request_id = @attempt_external_request_id, external_object_id = @attempt_external_object_id
    WHERE attempts.id = @finish_attempt_id
      AND (attempts.finished_at IS NULL OR (attempts.error_category = 'swept' AND @attempt_error_category::text <> 'swept'))
), changed AS (
    UPDATE operations SET
        state               = @to_state,
        version             = operations.version + cardinality(@events::text[]),
        lease_epoch         = operations.lease_epoch + CASE WHEN @bump_epoch::boolean THEN 1 ELSE 0 END,
        generation          = operations.generation + CASE WHEN @reopen::boolean THEN 1 ELSE 0 END,
        generation_started_at = CASE WHEN @reopen::boolean THEN coalesce(sqlc.narg('now')::timestamptz, now())
                                     ELSE operations.generation_started_at END,
        generation_attempt_base = CASE WHEN @reopen::boolean THEN operations.attempt_count
                                       ELSE operations.generation_attempt_base END,
        external_request_id = coalesce(nullif(@external_request_id::text, ''), operations.external_request_id),
        external_object_id  = coalesce(nullif(@external_object_id::text, ''), operations.external_object_id),
        compensation_operation_id = coalesce(sqlc.narg('compensation_operation_id')::text, operations.compensation_operation_id),
        last_error_category = CASE WHEN @set_error::boolean THEN @error_category::text ELSE operations.last_error_category END,
        last_error          = CASE WHEN @set_error::boolean THEN @error::text ELSE operations.last_error END,
        updated_at          = coalesce(sqlc.narg('now')::timestamptz, now())
    WHERE operations.id = @id AND operations.state = @from_state AND operations.lease_epoch = @lease_epoch
      -- A holder of an entity lease writes only while the lease is still
      -- its own and unexpired on the database's clock.
      AND (NOT @require_lease::boolean OR EXISTS (
          SELECT 1 FROM entity_leases l
          WHERE l.entity_type = operations.entity_type AND l.entity_id = operations.entity_id AND l.operation_id = operations.id
            AND l.expires_at >= coalesce(sqlc.narg('now')::timestamptz, now())))
    RETURNING *
), released AS (
    -- An operation no longer in flight gives its entity's lease back.
    DELETE FROM entity_leases WHERE operation_id = @id AND @release_lease::boolean AND EXISTS (SELECT 1 FROM changed)
), appended AS (
    -- The chain's rows come from one ROWS FROM (unnest …) WITH ORDINALITY,
    -- not a generate_series beside it: the planner guesses 1,000 rows for a
    -- generate_series over a parameter, which made the cached generic plan
    -- look costlier than re-planning and so had every execution planned
    -- again (about as long as executing it; docs/architecture.md).
    INSERT INTO operation_events (operation_id, seq, event, from_state, to_state, lease_epoch, attempt_id, actor, detail, at)
    SELECT changed.id, prev.seq + e.ord,
           e.event, e.from_state, e.to_state, changed.lease_epoch, @attempt_id, @actor, e.detail, changed.updated_at
    FROM changed
    CROSS JOIN LATERAL (SELECT coalesce(max(oe.seq), 0) AS seq FROM operation_events oe WHERE oe.operation_id = changed.id) AS prev
    CROSS JOIN ROWS FROM (unnest(@events::text[]), unnest(@from_states::text[]), unnest(@to_states::text[]), unnest(@details::jsonb[]))
               WITH ORDINALITY AS e(event, from_state, to_state, detail, ord)
), queued AS (
    INSERT INTO outbox (subject, msg_id, headers, payload, operation_id, available_at)
    SELECT m.subject, m.msg_id, m.headers, m.payload, nullif(m.operation_id, ''),
           coalesce(sqlc.narg('now')::timestamptz, now()) + make_interval(secs => m.delay_seconds)
    FROM (SELECT unnest(@subjects::text[]) AS subject, unnest(@msg_ids::text[]) AS msg_id,
                 unnest(@headers::jsonb[]) AS headers, unnest(@payloads::bytea[]) AS payload,
                 unnest(@operation_ids::text[]) AS operation_id, unnest(@delays::float8[]) AS delay_seconds) AS m
    WHERE EXISTS (SELECT 1 FROM changed)
), batch AS (
    -- The messages due at once (the result, a follow-up command) in one
    -- row of outbox_batches, handed to the writer's relay after the commit.
    INSERT INTO outbox_batches (batch_id, available_at, subjects, msg_ids, headers, payloads, operation_ids)
    SELECT @batch_id, coalesce(sqlc.narg('now')::timestamptz, now()) + make_interval(secs => @batch_delay_seconds::float8),
           @batch_subjects::text[], @batch_msg_ids::text[], @batch_headers::jsonb[], @batch_payloads::bytea[], @batch_operation_ids::text[]
    WHERE cardinality(@batch_msg_ids::text[]) > 0 AND EXISTS (SELECT 1 FROM changed)
)
SELECT * FROM changed;

-- name: OperationTransition :one
-- OperationTransitionFinishing without the attempt: the same statement for
-- the writers that finish no attempt (planner-ingest reopening, the
-- reconciler, the compensator, operators), which may not update attempts.
-- Keep the two in step.
WITH changed AS (
    UPDATE operations SET
        state               = @to_state,
        version             = operations.version + cardinality(@events::text[]),
        lease_epoch         = operations.lease_epoch + CASE WHEN @bump_epoch::boolean THEN 1 ELSE 0 END,
        generation          = operations.generation + CASE WHEN @reopen::boolean THEN 1 ELSE 0 END,
        generation_started_at = CASE WHEN @reopen::boolean THEN coalesce(sqlc.narg('now')::timestamptz, now())
                                     ELSE operations.generation_started_at END,
        generation_attempt_base = CASE WHEN @reopen::boolean THEN operations.attempt_count
                                       ELSE operations.generation_attempt_base END,
        external_request_id = coalesce(nullif(@external_request_id::text, ''), operations.external_request_id),
        external_object_id  = coalesce(nullif(@external_object_id::text, ''), operations.external_object_id),
        compensation_operation_id = coalesce(sqlc.narg('compensation_operation_id')::text, operations.compensation_operation_id),
        last_error_category = CASE WHEN @set_error::boolean THEN @error_category::text ELSE operations.last_error_category END,
        last_error          = CASE WHEN @set_error::boolean THEN @error::text ELSE operations.last_error END,
        updated_at          = coalesce(sqlc.narg('now')::timestamptz, now())
    WHERE operations.id = @id AND operations.state = @from_state AND operations.lease_epoch = @lease_epoch
    RETURNING *
), released AS (
    -- An operation no longer in flight gives its entity's lease back.
    DELETE FROM entity_leases WHERE operation_id = @id AND @release_lease::boolean AND EXISTS (SELECT 1 FROM changed)
), appended AS (
    INSERT INTO operation_events (operation_id, seq, event, from_state, to_state, lease_epoch, attempt_id, actor, detail, at)
    SELECT changed.id, prev.seq + e.ord,
           e.event, e.from_state, e.to_state, changed.lease_epoch, @attempt_id, @actor, e.detail, changed.updated_at
    FROM changed
    CROSS JOIN LATERAL (SELECT coalesce(max(oe.seq), 0) AS seq FROM operation_events oe WHERE oe.operation_id = changed.id) AS prev
    CROSS JOIN ROWS FROM (unnest(@events::text[]), unnest(@from_states::text[]), unnest(@to_states::text[]), unnest(@details::jsonb[]))
               WITH ORDINALITY AS e(event, from_state, to_state, detail, ord)
), queued AS (
    INSERT INTO outbox (subject, msg_id, headers, payload, operation_id, available_at)
    SELECT m.subject, m.msg_id, m.headers, m.payload, nullif(m.operation_id, ''),
           coalesce(sqlc.narg('now')::timestamptz, now()) + make_interval(secs => m.delay_seconds)
    FROM (SELECT unnest(@subjects::text[]) AS subject, unnest(@msg_ids::text[]) AS msg_id,
                 unnest(@headers::jsonb[]) AS headers, unnest(@payloads::bytea[]) AS payload,
                 unnest(@operation_ids::text[]) AS operation_id, unnest(@delays::float8[]) AS delay_seconds) AS m
    WHERE EXISTS (SELECT 1 FROM changed)
)
SELECT * FROM changed;

-- name: OperationCountByState :many
SELECT state, count(*)::bigint AS n FROM operations GROUP BY state ORDER BY state;

-- name: OperationListUnattended :many
-- Operations waiting on a command (pending_dispatch, unknown_outcome,
-- acknowledged) that changed before a cutoff on the database's clock and
-- have no message waiting in the outbox (an unsent row, or one in a batch):
-- their command was published and then lost (a terminated message, a NATS
-- server that lost its store). It runs in the
-- maintenance leader only and reads operations_unsettled_idx (only the
-- operations that have not settled, named by its predicate
-- operation_unsettled); the NOT EXISTS probes only unsent
-- outbox rows (outbox_unsent_idx), few by design, and the operations with a
-- message in outbox_batches are read once, as a set (NOT IN over a hashed
-- subplan), not searched batch by batch for every candidate: during a NATS
-- outage every pending operation is a candidate and every batch still
-- waits. A reconcile command that
-- the reconciler is only holding back (it looked and will look again:
-- reconcile_lookups.next_at) is alive, not lost, until its next lookup is
-- overdue by the cutoff as well: writing it again would only reset
-- JetStream's delivery count and add outbox rows.
SELECT o.* FROM operations o
WHERE operation_unsettled(o.state) AND o.state IN ('pending_dispatch', 'unknown_outcome', 'acknowledged')
  AND o.updated_at < coalesce(sqlc.narg('now')::timestamptz, now()) - make_interval(secs => @older_than_seconds::float8)
  AND NOT EXISTS (SELECT 1 FROM outbox b WHERE b.operation_id = o.id AND b.sent_at IS NULL AND b.parked_at IS NULL)
  AND o.id NOT IN (SELECT q.id FROM outbox_batches bb CROSS JOIN LATERAL unnest(bb.operation_ids) AS q(id) WHERE q.id IS NOT NULL)
  AND NOT EXISTS (SELECT 1 FROM reconcile_lookups l WHERE l.operation_id = o.id AND l.version = o.version
                  AND l.next_at >= coalesce(sqlc.narg('now')::timestamptz, now()) - make_interval(secs => @older_than_seconds::float8))
  -- the next page of one pass: re-driving changes nothing this orders by
  AND (sqlc.narg('after_updated_at')::timestamptz IS NULL
       OR (o.updated_at, o.id) > (sqlc.narg('after_updated_at')::timestamptz, @after_id::text))
ORDER BY o.updated_at, o.id
LIMIT @max_rows;

-- name: OperationListDispatchedUnclaimed :many
-- Operations in dispatched that no unfinished attempt at their lease epoch
-- holds (the attempt says it finished, yet the operation never moved; or
-- there is no attempt at all), past the deadline of their latest attempt
-- at that epoch plus grace on the database's clock (without one: the time
-- they entered dispatched plus grace). Open attempts past their deadline
-- are OperationListStuckDispatched's; between them the sweeper catches
-- every operation in dispatched past its attempt's deadline, whatever its
-- attempts say. operation_unsettled(o.state) is operations_unsettled_idx's
-- predicate: the index holds only operations that have not settled, so
-- this reads the work in flight, not the ledger. The bound on updated_at
-- adds nothing the deadline test does not imply (an operation enters
-- dispatched with the attempt of that epoch, started at its updated_at and
-- due after it, and no event keeps it in dispatched), but it lets the scan
-- of the index, which is in updated_at order, stop at the cutoff: the
-- newest part of the index, where the claims and outcomes leave their
-- entries until vacuum, is not read.
SELECT o.* FROM operations o
WHERE operation_unsettled(o.state) AND o.state = 'dispatched'
  AND o.updated_at < coalesce(sqlc.narg('now')::timestamptz, now()) - make_interval(secs => @grace_seconds::float8)
  AND NOT EXISTS (SELECT 1 FROM attempts a WHERE a.operation_id = o.id AND a.lease_epoch = o.lease_epoch
                  AND a.finished_at IS NULL)
  AND coalesce((SELECT max(a.deadline_at) FROM attempts a WHERE a.operation_id = o.id AND a.lease_epoch = o.lease_epoch),
               o.updated_at)
      < coalesce(sqlc.narg('now')::timestamptz, now()) - make_interval(secs => @grace_seconds::float8)
ORDER BY o.updated_at
LIMIT @max_rows;

-- name: DBNow :one
-- The database's clock (or the injected one): deadlines are compared on it,
-- never on a host's clock.
SELECT coalesce(sqlc.narg('now')::timestamptz, now())::timestamptz AS db_now;

-- name: OperationCompensationCount :one
-- How many compensations an operation has had (operations_compensates_idx).
SELECT count(*)::bigint AS n FROM operations WHERE compensates_operation_id = @id;

-- name: OperationTransitionFinishingBatch :many
-- OperationTransitionFinishing for many outcomes in one statement (group
-- commit): element i of every per-change array is change i, each
-- finishing its own attempt; the events and outbox rows of all of them
-- come flattened, each naming its change by its 1-based position. Every
-- attempt is finished and every change is written exactly as its own
-- OperationTransitionFinishing would write it; the operations returned are
-- the ones that changed, and the caller explains the others (stale, or the
-- lease lost) by reading them. One statement pays its executor start-up,
-- constraint preparation, plan lookup and commit once for all.
WITH input AS (
    SELECT * FROM ROWS FROM (
        unnest(@ids::text[]), unnest(@from_states::text[]), unnest(@lease_epochs::bigint[]), unnest(@to_states::text[]),
        unnest(@event_counts::int[]), unnest(@bump_epochs::boolean[]), unnest(@reopens::boolean[]),
        unnest(@external_request_ids::text[]), unnest(@external_object_ids::text[]), unnest(@compensation_operation_ids::text[]),
        unnest(@set_errors::boolean[]), unnest(@error_categories::text[]), unnest(@errors::text[]),
        unnest(@release_leases::boolean[]), unnest(@require_leases::boolean[]), unnest(@attempt_ids::text[]), unnest(@actors::text[]),
        unnest(@finish_attempt_ids::text[]), unnest(@outcomes::text[]), unnest(@attempt_error_categories::text[]),
        unnest(@attempt_errors::text[]), unnest(@http_statuses::int[]), unnest(@attempt_external_request_ids::text[]),
        unnest(@attempt_external_object_ids::text[])
    ) WITH ORDINALITY AS i(id, from_state, lease_epoch, to_state, event_count, bump_epoch, reopen,
                           external_request_id, external_object_id, compensation_operation_id,
                           set_error, error_category, error, release_lease, require_lease, attempt_id, actor,
                           finish_attempt_id, outcome, attempt_error_category, attempt_error, http_status,
                           attempt_external_request_id, attempt_external_object_id, n)
), finished AS (
    UPDATE attempts SET
        finished_at = coalesce(sqlc.narg('now')::timestamptz, now()),
        outcome = i.outcome, error_category = i.attempt_error_category, error = i.attempt_error, http_status = i.http_status,
        external_request_id = i.attempt_external_request_id, external_object_id = i.attempt_external_object_id
    FROM input i
    WHERE attempts.id = i.finish_attempt_id
      AND (attempts.finished_at IS NULL OR (attempts.error_category = 'swept' AND i.attempt_error_category <> 'swept'))
), changed AS (
    UPDATE operations SET
        state               = i.to_state,
        version             = operations.version + i.event_count,
        lease_epoch         = operations.lease_epoch + CASE WHEN i.bump_epoch THEN 1 ELSE 0 END,
        generation          = operations.generation + CASE WHEN i.reopen THEN 1 ELSE 0 END,
        generation_started_at = CASE WHEN i.reopen THEN coalesce(sqlc.narg('now')::timestamptz, now())
                                     ELSE operations.generation_started_at END,
        generation_attempt_base = CASE WHEN i.reopen THEN operations.attempt_count
                                       ELSE operations.generation_attempt_base END,
        external_request_id = coalesce(nullif(i.external_request_id, ''), operations.external_request_id),
        external_object_id  = coalesce(nullif(i.external_object_id, ''), operations.external_object_id),
        compensation_operation_id = coalesce(nullif(i.compensation_operation_id, ''), operations.compensation_operation_id),
        last_error_category = CASE WHEN i.set_error THEN i.error_category ELSE operations.last_error_category END,
        last_error          = CASE WHEN i.set_error THEN i.error ELSE operations.last_error END,
        updated_at          = coalesce(sqlc.narg('now')::timestamptz, now())
    FROM input i
    WHERE operations.id = i.id AND operations.state = i.from_state AND operations.lease_epoch = i.lease_epoch
      AND (NOT i.require_lease OR EXISTS (
          SELECT 1 FROM entity_leases l
          WHERE l.entity_type = operations.entity_type AND l.entity_id = operations.entity_id AND l.operation_id = operations.id
            AND l.expires_at >= coalesce(sqlc.narg('now')::timestamptz, now())))
    RETURNING operations.*
), released AS (
    DELETE FROM entity_leases
    USING changed JOIN input i ON i.id = changed.id
    WHERE entity_leases.operation_id = changed.id AND i.release_lease
), appended AS (
    INSERT INTO operation_events (operation_id, seq, event, from_state, to_state, lease_epoch, attempt_id, actor, detail, at)
    SELECT changed.id, prev.seq + e.ord,
           e.event, e.from_state, e.to_state, changed.lease_epoch, i.attempt_id, i.actor, e.detail, changed.updated_at
    FROM changed
    JOIN input i ON i.id = changed.id
    CROSS JOIN LATERAL (SELECT coalesce(max(oe.seq), 0) AS seq FROM operation_events oe WHERE oe.operation_id = changed.id) AS prev
    JOIN ROWS FROM (unnest(@event_changes::int[]), unnest(@event_ords::int[]), unnest(@events::text[]),
                    unnest(@event_from_states::text[]), unnest(@event_to_states::text[]), unnest(@details::jsonb[]))
         AS e(change, ord, event, from_state, to_state, detail) ON e.change = i.n
), queued AS (
    INSERT INTO outbox (subject, msg_id, headers, payload, operation_id, available_at)
    SELECT m.subject, m.msg_id, m.headers, m.payload, nullif(m.operation_id, ''),
           coalesce(sqlc.narg('now')::timestamptz, now()) + make_interval(secs => m.delay_seconds)
    FROM ROWS FROM (unnest(@message_changes::int[]), unnest(@subjects::text[]), unnest(@msg_ids::text[]), unnest(@headers::jsonb[]),
                    unnest(@payloads::bytea[]), unnest(@operation_ids::text[]), unnest(@delays::float8[]))
         AS m(change, subject, msg_id, headers, payload, operation_id, delay_seconds)
    JOIN input i ON i.n = m.change
    JOIN changed ON changed.id = i.id
), batch AS (
    -- The messages due at once of the changes that were written, in one
    -- row of outbox_batches, in the order given.
    INSERT INTO outbox_batches (batch_id, available_at, subjects, msg_ids, headers, payloads, operation_ids)
    SELECT @batch_id, coalesce(sqlc.narg('now')::timestamptz, now()) + make_interval(secs => @batch_delay_seconds::float8),
           array_agg(m.subject ORDER BY m.ord), array_agg(m.msg_id ORDER BY m.ord), array_agg(m.headers ORDER BY m.ord),
           array_agg(m.payload ORDER BY m.ord), array_agg(m.operation_id ORDER BY m.ord)
    FROM ROWS FROM (unnest(@batch_changes::int[]), unnest(@batch_subjects::text[]), unnest(@batch_msg_ids::text[]),
                    unnest(@batch_headers::jsonb[]), unnest(@batch_payloads::bytea[]), unnest(@batch_operation_ids::text[]))
         WITH ORDINALITY AS m(change, subject, msg_id, headers, payload, operation_id, ord)
    JOIN input i ON i.n = m.change
    JOIN changed ON changed.id = i.id
    HAVING count(*) > 0
)
SELECT * FROM changed;
