-- name: OutboxInsertMany :exec
-- available_ats of 0001-01-01 (Go's zero time) mean now.
INSERT INTO outbox (subject, msg_id, headers, payload, operation_id, available_at)
SELECT m.subject, m.msg_id, m.headers, m.payload, nullif(m.operation_id, ''),
       coalesce(nullif(m.available_at, '0001-01-01 00:00:00+00'), sqlc.narg('now')::timestamptz, now())
FROM (SELECT unnest(@subjects::text[]) AS subject, unnest(@msg_ids::text[]) AS msg_id,
             unnest(@headers::jsonb[]) AS headers, unnest(@payloads::bytea[]) AS payload,
             unnest(@operation_ids::text[]) AS operation_id,
             unnest(@available_ats::timestamptz[]) AS available_at) AS m;

-- name: OutboxClaimBatch :many
-- Claims unsent rows that are due and not claimed by a live relay. SKIP LOCKED
-- lets several relays claim disjoint batches; the claim is a lease, so a relay
-- that dies mid-batch only delays its rows until claimed_until passes.
WITH due AS (
    SELECT id FROM outbox
    WHERE sent_at IS NULL
      AND available_at <= coalesce(sqlc.narg('now')::timestamptz, now())
      AND (claimed_until IS NULL OR claimed_until < coalesce(sqlc.narg('now')::timestamptz, now()))
    ORDER BY available_at, id
    LIMIT @max_rows
    FOR UPDATE SKIP LOCKED
)
UPDATE outbox o SET
    claimed_by = @claimed_by,
    claimed_until = coalesce(sqlc.narg('now')::timestamptz, now()) + make_interval(secs => @lease_seconds::float8),
    publish_count = o.publish_count + 1
FROM due WHERE o.id = due.id
RETURNING o.id, o.subject, o.msg_id, o.headers, o.payload, o.operation_id, o.publish_count;

-- name: OutboxMarkSent :execrows
UPDATE outbox SET sent_at = coalesce(sqlc.narg('now')::timestamptz, now()), claimed_until = NULL
WHERE id = ANY(@ids::bigint[]) AND sent_at IS NULL;

-- name: OutboxRelease :execrows
-- Gives rows back after a failed publish, due again after a delay.
UPDATE outbox SET claimed_until = NULL, last_error = @last_error,
    available_at = coalesce(sqlc.narg('now')::timestamptz, now()) + make_interval(secs => @delay_seconds::float8)
WHERE id = ANY(@ids::bigint[]) AND sent_at IS NULL;

-- name: OutboxCountUnsent :one
SELECT count(*)::bigint FROM outbox WHERE sent_at IS NULL;

-- name: OutboxListByOperation :many
SELECT * FROM outbox WHERE operation_id = @operation_id ORDER BY id;
