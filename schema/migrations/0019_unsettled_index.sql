-- The maintenance leader's two scans by state, the sweeper's stranded
-- dispatched operations (OperationListDispatchedUnclaimed, every 5 s) and
-- the re-drive's unattended ones (OperationListUnattended, every 30 s),
-- read every row of operations while no index had the state: on a ledger of
-- ten million operations each pass took about 5 s of a core and of the
-- buffer cache, and throughput fell by a third (docs/architecture.md,
-- "Where the time goes"). This index holds only the operations that have
-- not settled, so it stays as small as the work in flight whatever the
-- ledger's size.
--
-- Its predicate is a function that only those two scans name, not
-- "state IN (...)": with that, every statement saying state =
-- 'pending_dispatch' (the claims) could use the index too, and while its
-- statistics said it was empty (as after it is built, and until autovacuum
-- comes by a large table) the planner took a full scan of it, every
-- pending operation, over the primary key's single row (1 ms a claim with
-- 5,000 waiting instead of 0.3). A PL/pgSQL function is never inlined, so
-- no other predicate implies this one. Its price: state is referenced by
-- an index, so no transition of an operation is a HOT update any more (the
-- claim was one in about half of the cases; the completion never was, it
-- sets the indexed object id).
--
-- On an existing large ledger, building it reads the table once under a
-- lock that blocks writes (about 10 s for ten million rows on the bench
-- machine); to avoid that, create the function and then the index by hand
-- with CREATE INDEX CONCURRENTLY, the same name and definition, and this
-- migration keeps them.
CREATE OR REPLACE FUNCTION operation_unsettled(state text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
BEGIN
    RETURN state IN ('pending_dispatch', 'dispatched', 'unknown_outcome', 'acknowledged');
END $$;

CREATE INDEX IF NOT EXISTS operations_unsettled_idx ON operations (updated_at, id)
    WHERE operation_unsettled(state);
