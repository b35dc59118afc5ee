-- name: InboxRecordDelivery :one
-- Records a webhook delivery in the inbox, or counts a redelivery of one
-- already recorded, in one statement: duplicate says which. The inbox keeps
-- the payload's hash, never its bytes.
INSERT INTO inbox (source, event_id, payload, payload_hash, workflow_id, decision, reason, rejected, received_at, last_seen_at)
VALUES (@source, @event_id, ''::bytea, @payload_hash, '', 'new', @reason, false,
        coalesce(sqlc.narg('now')::timestamptz, now()), coalesce(sqlc.narg('now')::timestamptz, now()))
ON CONFLICT (source, event_id) DO UPDATE SET duplicate_count = inbox.duplicate_count + 1,
                                             last_seen_at = EXCLUDED.last_seen_at
RETURNING payload_hash, (xmax <> 0)::boolean AS duplicate;

-- name: WebhookEvidenceInsert :one
-- Held until hold_seconds after now, on the database's clock.
INSERT INTO webhook_evidence (provider, delivery_id, event_type, tools, match_by, match_value, outcome,
                              external_object_id, received_at, hold_until, next_check_at)
VALUES (@provider, @delivery_id, @event_type, @tools::text[], @match_by, @match_value, @outcome, @external_object_id,
        coalesce(sqlc.narg('now')::timestamptz, now()),
        coalesce(sqlc.narg('now')::timestamptz, now()) + make_interval(secs => @hold_seconds::float8),
        coalesce(sqlc.narg('now')::timestamptz, now()))
RETURNING *;

-- name: WebhookEvidenceDecide :one
-- Settles held evidence once: no row when another writer decided it first.
UPDATE webhook_evidence SET status = @status, operation_id = sqlc.narg('operation_id'), reason = @reason,
                            decided_at = coalesce(sqlc.narg('now')::timestamptz, now())
WHERE provider = @provider AND delivery_id = @delivery_id AND status = 'held'
RETURNING *;

-- name: WebhookEvidencePostpone :exec
-- Held evidence that cannot be applied yet is looked at again later, each
-- time twice as late (from 250 ms, at most 30 s apart).
UPDATE webhook_evidence SET operation_id = coalesce(sqlc.narg('operation_id'), operation_id), reason = @reason,
                            checks = checks + 1,
                            next_check_at = coalesce(sqlc.narg('now')::timestamptz, now())
                                + make_interval(secs => least(30, 0.25 * power(2, least(checks, 10))))
WHERE provider = @provider AND delivery_id = @delivery_id AND status = 'held';

-- name: WebhookEvidenceListDue :many
-- Held evidence due for another look, the longest waiting first; expired
-- says its hold ran out.
SELECT sqlc.embed(webhook_evidence), (hold_until <= coalesce(sqlc.narg('now')::timestamptz, now()))::boolean AS expired
FROM webhook_evidence
WHERE status = 'held' AND next_check_at <= coalesce(sqlc.narg('now')::timestamptz, now())
ORDER BY next_check_at LIMIT @max_rows;

-- name: WebhookEvidenceListHeld :many
-- Held evidence whose match value is one of values: what is known about an
-- operation by its key, id or vendor object id.
SELECT sqlc.embed(webhook_evidence), (hold_until <= coalesce(sqlc.narg('now')::timestamptz, now()))::boolean AS expired
FROM webhook_evidence
WHERE status = 'held' AND match_value = ANY(@match_values::text[])
ORDER BY received_at, delivery_id;

-- name: WebhookEvidenceList :many
-- For operators: evidence in the given statuses (all when empty), of one
-- provider (all when empty), the most recent first.
SELECT * FROM webhook_evidence
WHERE (cardinality(@statuses::text[]) = 0 OR status = ANY(@statuses::text[]))
  AND (@provider::text = '' OR provider = @provider::text)
ORDER BY coalesce(decided_at, received_at) DESC, provider, delivery_id
LIMIT @max_rows;

-- name: WebhookEvidenceListByOperation :many
SELECT * FROM webhook_evidence WHERE operation_id = @operation_id ORDER BY received_at, delivery_id;

-- name: WebhookEvidenceGet :one
SELECT * FROM webhook_evidence WHERE provider = @provider AND delivery_id = @delivery_id;
