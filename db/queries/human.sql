-- name: ApprovalRequestCreate :exec
INSERT INTO approval_requests (operation_id, args_hash, required, requested_at, expires_at)
VALUES (@operation_id, @args_hash, @required, coalesce(sqlc.narg('now')::timestamptz, now()),
        coalesce(sqlc.narg('now')::timestamptz, now()) + make_interval(secs => @expires_after_seconds::float8));

-- name: ApprovalRequestLock :one
-- The request, locked until the deciding transaction ends, and whether it
-- has expired on the database's clock.
SELECT r.*, (r.expires_at < coalesce(sqlc.narg('now')::timestamptz, now()))::boolean AS expired
FROM approval_requests r WHERE r.operation_id = @operation_id FOR UPDATE;

-- name: ApprovalRequestGet :one
SELECT * FROM approval_requests WHERE operation_id = @operation_id;

-- name: ApprovalRequestClose :exec
UPDATE approval_requests SET status = @status, decided_at = coalesce(sqlc.narg('now')::timestamptz, now())
WHERE operation_id = @operation_id AND status = 'pending';

-- name: ApprovalVoteInsert :one
-- One vote per approver; no row when this approver already voted.
INSERT INTO approval_votes (operation_id, approver, decision, args_hash, reason, at)
VALUES (@operation_id, @approver, @decision, @args_hash, @reason, coalesce(sqlc.narg('now')::timestamptz, now()))
ON CONFLICT (operation_id, approver) DO NOTHING
RETURNING approver;

-- name: ApprovalVoteList :many
SELECT * FROM approval_votes WHERE operation_id = @operation_id ORDER BY at, approver;

-- name: ApprovalListExpired :many
SELECT r.operation_id FROM approval_requests r
WHERE r.status = 'pending' AND r.expires_at < coalesce(sqlc.narg('now')::timestamptz, now())
ORDER BY r.expires_at LIMIT @max_rows;

-- name: AuditInsert :exec
INSERT INTO audit_log (at, actor, role, action, operation_id, reason, outcome, detail)
VALUES (coalesce(sqlc.narg('now')::timestamptz, now()), @actor, @role, @action, @operation_id, @reason, @outcome, sqlc.narg('detail')::jsonb);

-- name: AuditListByOperation :many
SELECT * FROM audit_log WHERE operation_id = @operation_id ORDER BY at, id;

-- name: OperationList :many
-- Operations for operators, newest change first, filtered by what is given.
SELECT * FROM operations
WHERE (sqlc.narg('state')::text IS NULL OR state = sqlc.narg('state')::text)
  AND (sqlc.narg('tool')::text IS NULL OR tool = sqlc.narg('tool')::text)
  AND (sqlc.narg('workflow_id')::text IS NULL OR workflow_id = sqlc.narg('workflow_id')::text)
  AND (sqlc.narg('older_than_seconds')::float8 IS NULL
       OR updated_at < coalesce(sqlc.narg('now')::timestamptz, now()) - make_interval(secs => sqlc.narg('older_than_seconds')::float8))
ORDER BY updated_at DESC, id
LIMIT @max_rows;

-- name: OperationDedupeFind :one
-- The operation inside a dedupe window that suppresses a new one: the
-- oldest with the same dedupe key created within the window that did not
-- end without effect.
SELECT * FROM operations
WHERE dedupe_key = @dedupe_key
  AND created_at > coalesce(sqlc.narg('now')::timestamptz, now()) - make_interval(secs => @window_seconds::float8)
  AND state NOT IN ('rejected', 'cancelled')
  AND NOT (state = 'failed_permanent' AND last_error_category = 'retries_exhausted')
ORDER BY created_at LIMIT 1;

-- name: OperationListByEntity :many
-- A tenant's operations on an entity (entity ids are tenant-scoped already;
-- the tenant is checked again so that a guard can never count another's).
SELECT * FROM operations WHERE entity_type = @entity_type AND entity_id = @entity_id AND tenant = @tenant ORDER BY created_at, id;

-- name: OperationListByExternalObject :many
-- A tenant's operations of a tool on a vendor object ('' : any tenant's,
-- for a vendor's own evidence). Vendor ids are not tenant-scoped: a guard
-- must pass its tenant, or it would take its limit from another tenant's
-- capture and name it in the refusal.
SELECT * FROM operations WHERE external_object_id = @external_object_id AND tool = @tool
  AND (@tenant::text = '' OR tenant = @tenant::text) ORDER BY created_at, id;

-- name: XactLock :exec
-- A transaction-level advisory lock on a name (an entity, a dedupe key),
-- serialising the transactions that check and then write about it.
SELECT pg_advisory_xact_lock(hashtextextended(@name::text, 0));
