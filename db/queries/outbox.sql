-- name: OutboxInsertMany :exec
-- Each row is due delay_seconds after now on the database's clock.
INSERT INTO outbox (subject, msg_id, headers, payload, operation_id, available_at)
SELECT m.subject, m.msg_id, m.headers, m.payload, nullif(m.operation_id, ''),
       coalesce(sqlc.narg('now')::timestamptz, now()) + make_interval(secs => m.delay_seconds)
FROM (SELECT unnest(@subjects::text[]) AS subject, unnest(@msg_ids::text[]) AS msg_id,
             unnest(@headers::jsonb[]) AS headers, unnest(@payloads::bytea[]) AS payload,
             unnest(@operation_ids::text[]) AS operation_id, unnest(@delays::float8[]) AS delay_seconds) AS m;

-- name: OutboxClaimBatch :many
-- Claims unsent, unparked rows that are due and not claimed by a live relay.
-- SKIP LOCKED lets several relays claim disjoint batches; the claim is a
-- lease, so a relay that dies mid-batch only delays its rows until
-- claimed_until passes. With subject_prefixes, only rows whose subject
-- starts with one of them: those the relay's NATS user may publish.
WITH due AS (
    SELECT id FROM outbox
    WHERE sent_at IS NULL AND parked_at IS NULL
      AND available_at <= coalesce(sqlc.narg('now')::timestamptz, now())
      AND (claimed_until IS NULL OR claimed_until < coalesce(sqlc.narg('now')::timestamptz, now()))
      AND (cardinality(@subject_prefixes::text[]) = 0
           OR EXISTS (SELECT 1 FROM unnest(@subject_prefixes::text[]) AS p(prefix) WHERE starts_with(subject, p.prefix)))
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

-- name: OutboxDeletePublished :execrows
-- A published row is deleted: JetStream has it, and the ledger needs it no
-- more. Fenced by the claim: a relay whose lease ran out and whose rows
-- another relay claimed deletes nothing of theirs.
DELETE FROM outbox WHERE id = ANY(@ids::bigint[]) AND sent_at IS NULL AND claimed_by = @claimed_by;

-- name: OutboxDeleteHandedOff :execrows
-- Deletes the rows of messages that were handed to a relay in memory after
-- their commit and that JetStream acknowledged. No claim fences it: a relay
-- that claimed such a row after the hand-off grace publishes it again
-- under the same Nats-Msg-Id, and then finds it gone. Never called with no
-- msg id: a custom plan for an empty array costs nothing, and Postgres,
-- comparing, would plan the statement again at every execution.
DELETE FROM outbox WHERE msg_id = ANY(@msg_ids::text[]);

-- name: OutboxBatchesDeleteHandedOff :execrows
-- OutboxDeleteHandedOff for the batches all of whose messages JetStream
-- acknowledged.
DELETE FROM outbox_batches WHERE batch_id = ANY(@batch_ids::text[]);

-- name: OutboxBatchClaim :many
-- OutboxClaimBatch for outbox_batches: due batches nobody holds, each
-- claimed whole. With subject_prefixes, only batches all of whose subjects
-- start with one of them.
WITH due AS (
    SELECT batch_id FROM outbox_batches b
    WHERE available_at <= coalesce(sqlc.narg('now')::timestamptz, now())
      AND (claimed_until IS NULL OR claimed_until < coalesce(sqlc.narg('now')::timestamptz, now()))
      AND (cardinality(@subject_prefixes::text[]) = 0
           OR NOT EXISTS (SELECT 1 FROM unnest(b.subjects) AS s(subject)
                          WHERE NOT EXISTS (SELECT 1 FROM unnest(@subject_prefixes::text[]) AS p(prefix)
                                            WHERE starts_with(s.subject, p.prefix))))
    ORDER BY available_at, batch_id
    LIMIT @max_rows
    FOR UPDATE SKIP LOCKED
)
UPDATE outbox_batches b SET
    claimed_by = @claimed_by,
    claimed_until = coalesce(sqlc.narg('now')::timestamptz, now()) + make_interval(secs => @lease_seconds::float8),
    publish_count = b.publish_count + 1
FROM due WHERE b.batch_id = due.batch_id
RETURNING b.batch_id, b.subjects, b.msg_ids, b.headers, b.payloads, b.operation_ids, b.publish_count;

-- name: OutboxBatchDelete :execrows
-- A claimed batch all of whose messages JetStream acknowledged, fenced by
-- the claim as OutboxDeletePublished is.
DELETE FROM outbox_batches WHERE batch_id = ANY(@batch_ids::text[]) AND claimed_by = @claimed_by;

-- name: OutboxBatchSplit :one
-- A claimed batch that could not be published whole becomes rows of
-- outbox: see the function outbox_split_batch (migration 0021).
SELECT outbox_split_batch(@batch_id::text, @claimed_by::text, @unsent::text[], @refused::text[],
                          @delay_seconds::float8, @last_error::text, sqlc.narg('now')::timestamptz)::bigint AS moved;

-- name: OutboxRelease :execrows
-- Gives rows back after a failed publish, due again after a delay. A failure
-- of the message's own (counted) parks it once it has failed max_failures
-- times; a failure of the transport (NATS down) is not counted.
UPDATE outbox SET claimed_until = NULL, last_error = @last_error,
    publish_failures = publish_failures + CASE WHEN @count_failure::boolean THEN 1 ELSE 0 END,
    parked_at = CASE WHEN @count_failure::boolean AND publish_failures + 1 >= @max_failures::int
                     THEN coalesce(sqlc.narg('now')::timestamptz, now()) END,
    available_at = coalesce(sqlc.narg('now')::timestamptz, now()) + make_interval(secs => @delay_seconds::float8)
WHERE id = ANY(@ids::bigint[]) AND sent_at IS NULL AND claimed_by = @claimed_by;

-- name: OutboxCountUnsent :one
-- Messages not yet published: unsent rows, and the messages of batches.
SELECT ((SELECT count(*) FROM outbox WHERE sent_at IS NULL AND parked_at IS NULL)
        + (SELECT coalesce(sum(cardinality(msg_ids)), 0) FROM outbox_batches))::bigint;

-- name: OutboxListParked :many
SELECT * FROM outbox WHERE parked_at IS NOT NULL ORDER BY parked_at, id LIMIT @max_rows;

-- name: OutboxCountParked :one
SELECT count(*)::bigint FROM outbox WHERE parked_at IS NOT NULL;

-- name: OutboxListByOperation :many
-- An operation's messages not yet deleted, rows and batched alike, in the
-- order they were written.
SELECT subject, msg_id, payload FROM outbox_messages WHERE operation_id = @operation_id ORDER BY seq, ord;

-- name: OutboxListParkedForOperators :many
-- Parked rows for people, oldest first, without their payloads (which may
-- be the megabytes NATS refused): only how big they are.
SELECT id, subject, msg_id, operation_id, publish_count, publish_failures, last_error, created_at, parked_at,
       octet_length(payload)::bigint AS payload_bytes
FROM outbox WHERE parked_at IS NOT NULL
ORDER BY parked_at, id LIMIT @max_rows;

-- name: OutboxRequeueParked :many
-- An operator puts parked rows back to be published (once the reason they
-- were refused is fixed, say NATS's max_payload raised): due at once, with
-- their failures counted from zero again. Their last error is kept.
UPDATE outbox SET parked_at = NULL, publish_failures = 0, claimed_until = NULL,
    available_at = coalesce(sqlc.narg('now')::timestamptz, now())
WHERE id = ANY(@ids::bigint[]) AND parked_at IS NOT NULL AND sent_at IS NULL
RETURNING id, subject, msg_id, operation_id;
