-- name: LeaseAcquire :one
-- Takes the entity's lease for an operation: when it is free, expired on
-- the database's clock, or already this operation's. No row: another
-- operation holds it.
INSERT INTO entity_leases AS l (entity_type, entity_id, operation_id, epoch, acquired_at, expires_at)
VALUES (@entity_type, @entity_id, @operation_id, 1, coalesce(sqlc.narg('now')::timestamptz, now()),
        coalesce(sqlc.narg('now')::timestamptz, now()) + make_interval(secs => @ttl_seconds::float8))
ON CONFLICT (entity_type, entity_id) DO UPDATE SET
    operation_id = EXCLUDED.operation_id, epoch = l.epoch + 1,
    acquired_at = EXCLUDED.acquired_at, expires_at = EXCLUDED.expires_at
WHERE l.operation_id = EXCLUDED.operation_id OR l.expires_at < EXCLUDED.acquired_at
RETURNING epoch;

-- name: LeaseHolder :one
SELECT * FROM entity_leases WHERE entity_type = @entity_type AND entity_id = @entity_id;

-- name: EntityOlderWaiting :one
-- Whether an older operation of the leased tools waits to be dispatched on
-- the entity: the lease goes to operations in the order they were created.
SELECT EXISTS (
    SELECT 1 FROM operations
    WHERE entity_type = @entity_type AND entity_id = @entity_id AND id <> @operation_id
      AND state = 'pending_dispatch' AND tool = ANY(@tools::text[])
      AND (created_at, id) < (@created_at::timestamptz, @operation_id::text)
)::boolean AS waiting;
