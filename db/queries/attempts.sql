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

-- name: OperationDispatchLeased :one
-- OperationDispatch for an operation that holds its entity's lease while in
-- flight, in one statement: the lease goes to the operation only if no
-- older operation of the leased tools on the entity may still be sent
-- (leases are granted in the order operations were created) and the lease
-- is free, expired on the database's clock, or already this operation's;
-- then the claim, its event and its attempt row, as in OperationDispatch.
-- An older operation may still be sent while it waits (pending_dispatch),
-- is in flight (dispatched, acknowledged) or its outcome is unknown
-- (unknown_outcome, and failed_retryable on its way back): the reconciler
-- may send it again under its key, so a younger one waits for it however
-- long its lease has been expired, or the older request would land after
-- the younger one (a status set back, then overwritten by the step before
-- it). Only an older operation a person owns (escalated) lets the younger
-- ones by, once its lease has expired. The lease's primary key serialises
-- claimers of one entity: a second one waits for the first's commit and
-- then finds the lease taken. Because the probe counts those states, an
-- older operation going from one of them to another (dispatched back to
-- pending_dispatch, say, while this statement waits for the lease row)
-- never lets a younger one by either. No row: the operation is not
-- pending at that epoch any more (a stale command), or the lease is busy;
-- reading the operation tells which.
WITH cur AS (
    SELECT o.id, o.entity_type, o.entity_id, o.created_at FROM operations o
    WHERE o.id = @id AND o.state = 'pending_dispatch' AND o.lease_epoch = @lease_epoch AND o.entity_id <> ''
), older AS (
    -- A lateral probe with a limit, so that the planner looks the entity up
    -- in operations_entity_idx (whose predicate it repeats) instead of
    -- hashing a scan of the whole table, as it does with NOT EXISTS here.
    SELECT cur.id FROM cur
    LEFT JOIN LATERAL (
        SELECT 1 AS waiting FROM operations w
        WHERE w.entity_type = cur.entity_type AND w.entity_id = cur.entity_id AND w.entity_id <> '' AND w.id <> cur.id
          AND w.state IN ('pending_dispatch', 'dispatched', 'acknowledged', 'unknown_outcome', 'failed_retryable')
          AND w.tool = ANY(@tools::text[])
          AND (w.created_at, w.id) < (cur.created_at, cur.id)
        LIMIT 1) w ON true
    WHERE w.waiting IS NULL
), lease AS (
    INSERT INTO entity_leases AS l (entity_type, entity_id, operation_id, epoch, acquired_at, expires_at)
    SELECT cur.entity_type, cur.entity_id, cur.id, 1, coalesce(sqlc.narg('now')::timestamptz, now()),
           coalesce(sqlc.narg('now')::timestamptz, now()) + make_interval(secs => @ttl_seconds::float8)
    FROM cur JOIN older ON older.id = cur.id
    ON CONFLICT (entity_type, entity_id) DO UPDATE SET
        operation_id = EXCLUDED.operation_id, epoch = l.epoch + 1,
        acquired_at = EXCLUDED.acquired_at, expires_at = EXCLUDED.expires_at
    WHERE l.operation_id = EXCLUDED.operation_id OR l.expires_at < EXCLUDED.acquired_at
    RETURNING l.operation_id
), claimed AS (
    UPDATE operations SET
        state = 'dispatched', version = version + 1, lease_epoch = lease_epoch + 1, attempt_count = attempt_count + 1,
        -- The claim's time is when the lease was had, after any wait for
        -- the previous holder to let it go, not when the statement began:
        -- the claim's event never predates the end of the holder's.
        updated_at = coalesce(sqlc.narg('now')::timestamptz, clock_timestamp())
    FROM lease
    WHERE operations.id = lease.operation_id AND operations.state = 'pending_dispatch' AND operations.lease_epoch = @lease_epoch
    RETURNING operations.*
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

-- name: OperationDispatchLeasedBatch :many
-- OperationDispatchLeased for many claims in one statement (group commit):
-- element i of every array is claim i, all of them queueing for leases
-- with the same @tools. Each claim is taken exactly as its own statement
-- would take it; the operations returned are the ones claimed, and the
-- caller explains the others (stale, no entity, or the lease busy) by
-- reading them. An older operation that may still be sent keeps a
-- younger one waiting, as alone. Two claims for one entity in one
-- statement: the older waiting one goes first and the other is busy, as
-- alone; if neither
-- waits for the other (tools that do not queue together) the lease's
-- upsert fails the statement and the caller claims each on its own.
-- Leases are taken in entity order.
WITH input AS (
    SELECT * FROM ROWS FROM (unnest(@ids::text[]), unnest(@lease_epochs::bigint[]), unnest(@attempt_ids::text[]),
                             unnest(@workers::text[]), unnest(@timeout_seconds::float8[]), unnest(@ttl_seconds::float8[]))
         AS i(id, lease_epoch, attempt_id, worker, timeout_seconds, ttl_seconds)
), cur AS (
    -- One probe of the primary key per claim: a lateral subquery with a
    -- limit is never turned into a join, so the planner cannot hash a scan
    -- of operations against the claims, as it did while the table was
    -- still small enough for its cached plan to think that cheaper.
    SELECT o.id, o.entity_type, o.entity_id, o.created_at, i.ttl_seconds
    FROM input i CROSS JOIN LATERAL (
        SELECT o.id, o.entity_type, o.entity_id, o.created_at FROM operations o
        WHERE o.id = i.id AND o.state = 'pending_dispatch' AND o.lease_epoch = i.lease_epoch AND o.entity_id <> ''
        LIMIT 1) o
), older AS (
    SELECT cur.id FROM cur
    LEFT JOIN LATERAL (
        SELECT 1 AS waiting FROM operations w
        WHERE w.entity_type = cur.entity_type AND w.entity_id = cur.entity_id AND w.entity_id <> '' AND w.id <> cur.id
          AND w.state IN ('pending_dispatch', 'dispatched', 'acknowledged', 'unknown_outcome', 'failed_retryable')
          AND w.tool = ANY(@tools::text[])
          AND (w.created_at, w.id) < (cur.created_at, cur.id)
        LIMIT 1) w ON true
    WHERE w.waiting IS NULL
), lease AS (
    INSERT INTO entity_leases AS l (entity_type, entity_id, operation_id, epoch, acquired_at, expires_at)
    SELECT cur.entity_type, cur.entity_id, cur.id, 1, coalesce(sqlc.narg('now')::timestamptz, now()),
           coalesce(sqlc.narg('now')::timestamptz, now()) + make_interval(secs => cur.ttl_seconds)
    FROM cur JOIN older ON older.id = cur.id
    ORDER BY cur.entity_type, cur.entity_id
    ON CONFLICT (entity_type, entity_id) DO UPDATE SET
        operation_id = EXCLUDED.operation_id, epoch = l.epoch + 1,
        acquired_at = EXCLUDED.acquired_at, expires_at = EXCLUDED.expires_at
    WHERE l.operation_id = EXCLUDED.operation_id OR l.expires_at < EXCLUDED.acquired_at
    RETURNING l.operation_id
), claimed AS (
    UPDATE operations SET
        state = 'dispatched', version = operations.version + 1, lease_epoch = operations.lease_epoch + 1,
        attempt_count = operations.attempt_count + 1,
        updated_at = coalesce(sqlc.narg('now')::timestamptz, clock_timestamp())
    FROM lease JOIN input i ON i.id = lease.operation_id
    WHERE operations.id = lease.operation_id AND operations.state = 'pending_dispatch' AND operations.lease_epoch = i.lease_epoch
    RETURNING operations.*
), appended AS (
    INSERT INTO operation_events (operation_id, seq, event, from_state, to_state, lease_epoch, attempt_id, actor, at)
    SELECT claimed.id,
           (SELECT coalesce(max(oe.seq), 0) + 1 FROM operation_events oe WHERE oe.operation_id = claimed.id),
           'dispatch', 'pending_dispatch', 'dispatched', claimed.lease_epoch, i.attempt_id, i.worker, claimed.updated_at
    FROM claimed JOIN input i ON i.id = claimed.id
), attempt AS (
    INSERT INTO attempts (id, operation_id, number, lease_epoch, worker, started_at, deadline_at)
    SELECT i.attempt_id, claimed.id, claimed.attempt_count, claimed.lease_epoch, i.worker, claimed.updated_at,
           claimed.updated_at + make_interval(secs => i.timeout_seconds)
    FROM claimed JOIN input i ON i.id = claimed.id
)
SELECT * FROM claimed;
