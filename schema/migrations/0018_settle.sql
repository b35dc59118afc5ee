-- Never stuck, never lost: what the reconciler and the maintenance leader
-- must remember in the ledger rather than in NATS or in one process.

-- The reconciler counts the lookups (and verdict writes) of an ambiguous
-- outcome that failed or found the effect still pending, per episode: the
-- operation's version while it waits does not change, so a row whose
-- version is not the operation's belongs to an earlier episode and counts
-- from zero again. JetStream's delivery count cannot do this: a command
-- written again (the re-drive, a NATS server that lost its store) starts
-- from one. next_at is when the next lookup is due, on the database's
-- clock: the re-drive writes a command again only once that has passed by
-- its own delay, so a command that is merely waiting is never multiplied.
CREATE TABLE reconcile_lookups (
    operation_id text        PRIMARY KEY REFERENCES operations (id),
    version      bigint      NOT NULL,
    failures     integer     NOT NULL DEFAULT 0,
    lookups      integer     NOT NULL DEFAULT 0,
    last_at      timestamptz NOT NULL DEFAULT now(),
    next_at      timestamptz NOT NULL DEFAULT now()
);
-- Retention deletes the rows of episodes long over.
CREATE INDEX reconcile_lookups_last_idx ON reconcile_lookups (last_at);

-- The OPS stream's creation time as the maintenance leader last saw it, so
-- that a leader elected after the NATS server lost its store (and the
-- streams were created again) still sees that they were, and re-drives
-- every waiting operation at once.
ALTER TABLE maintenance_leader ADD COLUMN ops_stream_created_at timestamptz;
