-- A repeated intent (its event id or its key already in the ledger) is an
-- expected answer, not an error. OperationSubmitNew used to fail with a
-- unique violation for it, which Postgres logs as an ERROR with the
-- constraint's key (an idempotency key: business data) and the statement's
-- text, and which took about twice a successful statement's time before the
-- transaction that decides could begin. It now inserts with ON CONFLICT DO
-- NOTHING and writes nothing for a repeat. The one case it cannot settle
-- without writing half of it, a new key under a known event id (the
-- operation would be written without its inbox row), still fails the
-- statement with a unique violation, raised by this function so that the
-- whole statement is undone.
CREATE OR REPLACE FUNCTION submit_conflict(what text) RETURNS boolean
    LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RAISE unique_violation USING MESSAGE = what;
END $$;
