-- name: InboxInsert :one
-- Returns no row when (source, event_id) already exists: a duplicate event.
-- rejected is set here, once, and never updated.
INSERT INTO inbox (source, event_id, payload, payload_hash, workflow_id, decision, reason, rejected, received_at, last_seen_at)
VALUES (@source, @event_id, @payload, @payload_hash, @workflow_id, @decision, @reason, @decision = 'rejected',
        coalesce(sqlc.narg('now')::timestamptz, now()), coalesce(sqlc.narg('now')::timestamptz, now()))
ON CONFLICT (source, event_id) DO NOTHING
RETURNING source, event_id;

-- name: InboxMarkDuplicate :one
-- Counts a suppressed redelivery and returns what was decided the first time.
UPDATE inbox SET duplicate_count = duplicate_count + 1,
                 last_seen_at = coalesce(sqlc.narg('now')::timestamptz, now())
WHERE source = @source AND event_id = @event_id
RETURNING *;

-- name: InboxGet :one
SELECT * FROM inbox WHERE source = @source AND event_id = @event_id;

-- name: InboxCountByDecision :many
SELECT decision, count(*)::bigint AS n, coalesce(sum(duplicate_count), 0)::bigint AS duplicates
FROM inbox GROUP BY decision ORDER BY decision;

-- name: InboxDeleteRejected :execrows
-- Retention: deletes up to max_rows rejected events received before a cutoff.
-- Their event ids are forgotten with them: the same garbage arriving again
-- after that is rejected again, as new.
DELETE FROM inbox WHERE (source, event_id) IN (
    SELECT source, event_id FROM inbox
    WHERE rejected
      AND received_at < coalesce(sqlc.narg('now')::timestamptz, now()) - make_interval(secs => @older_than_seconds::float8)
    ORDER BY received_at LIMIT @max_rows
);
