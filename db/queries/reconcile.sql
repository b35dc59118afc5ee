-- name: ReconcileLookupNote :one
-- Records a lookup (or a verdict write) of an ambiguous outcome that settled
-- nothing, for the operation's current episode (its version), and when the
-- next one is due, on the database's clock. failed counts it against the
-- tool's max_lookups (a lookup that failed or found the effect pending, a
-- verdict that could not be written); every one counts in lookups. A row of
-- an earlier episode starts over; a writer holding an older version than
-- the row's changes nothing and gets no row.
INSERT INTO reconcile_lookups AS l (operation_id, version, failures, lookups, last_at, next_at)
VALUES (@operation_id, @version, CASE WHEN @failed::boolean THEN 1 ELSE 0 END, 1,
        coalesce(sqlc.narg('now')::timestamptz, now()),
        coalesce(sqlc.narg('now')::timestamptz, now()) + make_interval(secs => @next_seconds::float8))
ON CONFLICT (operation_id) DO UPDATE SET
    failures = CASE WHEN l.version = EXCLUDED.version THEN l.failures ELSE 0 END + EXCLUDED.failures,
    lookups  = CASE WHEN l.version = EXCLUDED.version THEN l.lookups ELSE 0 END + 1,
    version  = EXCLUDED.version,
    last_at  = EXCLUDED.last_at,
    next_at  = EXCLUDED.next_at
WHERE l.version <= EXCLUDED.version
RETURNING l.failures, l.lookups;

-- name: ReconcileLookupDeleteDone :execrows
-- Retention: deletes up to max_rows counters of episodes that are over (the
-- operation has moved on from the version they count) and have not moved
-- for older_than on the database's clock.
DELETE FROM reconcile_lookups WHERE operation_id IN (
    SELECT l.operation_id FROM reconcile_lookups l
    WHERE l.last_at < coalesce(sqlc.narg('now')::timestamptz, now()) - make_interval(secs => @older_than_seconds::float8)
      AND NOT EXISTS (SELECT 1 FROM operations o WHERE o.id = l.operation_id AND o.version = l.version)
    ORDER BY l.last_at LIMIT @max_rows
);
