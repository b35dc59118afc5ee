-- What every operation's writes paid per row that no guarantee needs
-- (docs/architecture.md, "Where the time goes"):
--
-- Foreign keys from the tables each operation writes to (its events,
-- attempts, outbox rows, inbox row and entity lease) to operations. Postgres
-- checks each inserted row with a query of its own that also locks the
-- operation's row (FOR KEY SHARE): in a CPU profile of a bench run that was
-- about 15% of Postgres's time. No row of operations is ever deleted (no
-- role may: schema/grants.sql), and every statement that writes one of
-- these rows takes its operation id from the operation it has just written
-- or read in the same statement, so the check never had anything to find;
-- the tests that run the services as processes assert that no such row
-- names a missing operation (internal/proctest, CheckReferences). The foreign keys of the
-- human loop, webhooks and lookups, written rarely, stay.
--
-- The args hash's check read the hash with a regular expression, a tenth
-- of the time Postgres spent on constraints: the same rule without one.
ALTER TABLE operation_events DROP CONSTRAINT IF EXISTS operation_events_operation_id_fkey;
ALTER TABLE attempts DROP CONSTRAINT IF EXISTS attempts_operation_id_fkey;
ALTER TABLE outbox DROP CONSTRAINT IF EXISTS outbox_operation_id_fkey;
ALTER TABLE inbox DROP CONSTRAINT IF EXISTS inbox_operation_id_fkey;
ALTER TABLE entity_leases DROP CONSTRAINT IF EXISTS entity_leases_operation_id_fkey;

ALTER TABLE operations DROP CONSTRAINT IF EXISTS operations_args_hash_check,
    ADD CONSTRAINT operations_args_hash_check
        CHECK (octet_length(args_hash) = 64 AND ltrim(args_hash, '0123456789abcdef') = '');
