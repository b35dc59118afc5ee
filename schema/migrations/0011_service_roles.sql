-- Least privilege: a group role (NOLOGIN) per part of opledger that touches
-- the ledger. Services log in as users that are members of the roles of the
-- parts their process runs (see docs/security.md); what each role may do is
-- decided in schema/grants.sql, which the migrator applies after every
-- migrate, and nowhere else. Only the migrator, which owns every table, may
-- alter or drop them.
--
-- Roles belong to the whole PostgreSQL cluster, not to one database, and
-- several databases (or test binaries) may migrate at once: each role is
-- created only if absent, and a concurrent creator winning the race is fine.
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['opledger_ingest', 'opledger_dispatcher', 'opledger_reconciler',
                             'opledger_compensator', 'opledger_maintainer', 'opledger_relay',
                             'opledger_operator']
    LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', r);
            EXCEPTION WHEN duplicate_object OR unique_violation THEN
                NULL; -- another migrator created it first
            END;
        END IF;
    END LOOP;
END;
$$;

-- Before PostgreSQL 15 every user may create objects in schema public; then
-- a service could create a table, own it and do anything with it. (A
-- migrator that does not own the schema gets a warning here, not an error.)
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
