-- The messages a hot statement writes are one row of outbox_batches, tens of
-- kB for a group statement (every message's subject, id, headers and
-- payload, as arrays), and Postgres compresses a value that large before it
-- stores it, with pglz unless told otherwise. Seven interleaved pairs of
-- `bench -pgss -baseline=false -high-load 0` without and with this
-- migration (docs/architecture.md, "Where the time goes"): the intents'
-- statement 0.070 -> 0.061 ms of execution an operation (mean), the
-- outcomes' 0.090 -> 0.084, all statements 0.244 -> 0.232, the same WAL.
-- LZ4 is faster at both ends, and these rows live for milliseconds.
--
-- SET COMPRESSION changes the catalog only: values already stored keep
-- their method, new ones take LZ4. A server built without LZ4 support
-- refuses the method; then nothing changes here, and pglz stays.
DO $$
BEGIN
    ALTER TABLE outbox_batches
        ALTER COLUMN subjects SET COMPRESSION lz4,
        ALTER COLUMN msg_ids SET COMPRESSION lz4,
        ALTER COLUMN headers SET COMPRESSION lz4,
        ALTER COLUMN payloads SET COMPRESSION lz4,
        ALTER COLUMN operation_ids SET COMPRESSION lz4;
    ALTER TABLE outbox
        ALTER COLUMN headers SET COMPRESSION lz4,
        ALTER COLUMN payload SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
    RAISE NOTICE 'this server was built without LZ4 support: the outbox keeps pglz';
END $$;
