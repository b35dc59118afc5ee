-- name: LeaderTryLock :one
-- Session-level advisory lock held by the maintenance leader's connection for
-- as long as it leads; it is released when that connection ends.
SELECT pg_try_advisory_lock(@lock_key::bigint) AS locked;

-- name: LeaderUnlock :exec
SELECT pg_advisory_unlock(@lock_key::bigint);

-- name: LeaderRecord :exec
-- Records, for people, who leads and that it is alive.
INSERT INTO maintenance_leader (id, holder, elected_at, heartbeat_at)
VALUES (1, @holder, now(), now())
ON CONFLICT (id) DO UPDATE SET
    holder = EXCLUDED.holder,
    elected_at = CASE WHEN maintenance_leader.holder = EXCLUDED.holder THEN maintenance_leader.elected_at ELSE now() END,
    heartbeat_at = now();

-- name: LeaderGet :one
SELECT * FROM maintenance_leader WHERE id = 1;

-- name: LeaderKeepalive :exec
-- Has the server probe a silent client of the leader's session over TCP
-- (ignored on unix sockets), so that a holder whose host vanished is found
-- dead in seconds rather than after the operating system's two hours.
SELECT set_config('tcp_keepalives_idle', @idle_seconds::text, false),
       set_config('tcp_keepalives_interval', @interval_seconds::text, false),
       set_config('tcp_keepalives_count', @count::text, false);

-- name: LeaderIdleTimeout :exec
-- Has the server end the leader's session, and so release the lock, once
-- it has been idle for longer than the leader's heartbeats can be apart
-- (PostgreSQL 14+; older servers answer undefined_object).
SELECT set_config('idle_session_timeout', @timeout_ms::text, false);

-- name: LeaderOpsStreamCreated :one
-- The OPS stream's creation time as the maintenance leader last saw it
-- (NULL: never seen), kept in the ledger so that the next leader compares
-- with it.
SELECT ops_stream_created_at FROM maintenance_leader WHERE id = 1;

-- name: LeaderSetOpsStreamCreated :execrows
UPDATE maintenance_leader SET ops_stream_created_at = @created WHERE id = 1;
