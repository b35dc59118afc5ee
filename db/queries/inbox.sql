-- name: InboxInsert :one
-- Returns no row when (source, event_id) already exists: a duplicate event.
INSERT INTO inbox (source, event_id, payload, payload_hash, workflow_id, decision, reason, received_at, last_seen_at)
VALUES (@source, @event_id, @payload, @payload_hash, @workflow_id, @decision, @reason,
        coalesce(sqlc.narg('now')::timestamptz, now()), coalesce(sqlc.narg('now')::timestamptz, now()))
ON CONFLICT (source, event_id) DO NOTHING
RETURNING source, event_id;

-- name: InboxSetDecision :exec
UPDATE inbox SET decision = @decision, reason = @reason, operation_id = sqlc.narg('operation_id')
WHERE source = @source AND event_id = @event_id;

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
