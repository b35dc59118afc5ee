-- ANALYZE of the ledger's busiest tables samples 300 rows per unit of the
-- largest statistics target among their columns: 30,000 rows at Postgres's
-- default of 100, and statistics of every column computed over them. At a
-- thousand operations a second each of these tables changes by more than
-- the 10% that triggers autovacuum's ANALYZE between two of its visits (one
-- a minute), until it holds millions of rows; every visit then analyzed
-- all four, for about 2 s of a core (operations alone 1.0 s), and every
-- ANALYZE makes each connection plan its statements on that table again.
-- On two saturated cores that came every minute as a stall of seconds
-- (docs/architecture.md, "Where the time goes").
--
-- Their statements find rows by key, through unique or small partial
-- indexes; none needs more than a coarse picture of a column (the number
-- of distinct values, a few common ones, a histogram of ten buckets). A
-- target of 10 samples 3,000 rows: autovacuum's ANALYZE of operations took
-- 0.04-0.10 s of CPU instead of 0.85-1.0 s, of all four together 0.5 s
-- instead of 4.3-4.8 s in a 4-minute run at 1,150 operations a second, and
-- the hot statements' execution times did not move (plans unchanged).
--
-- A column added to these tables later gets the default target again, and
-- with it the 30,000-row sample: schema's TestBusyTablesSampleFewRows
-- fails until the migration that adds it sets 10 too.
DO $$
DECLARE
    col record;
BEGIN
    FOR col IN
        SELECT c.relname, a.attname
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid
        WHERE c.relnamespace = current_schema()::regnamespace
          AND c.relname IN ('operations', 'operation_events', 'attempts', 'inbox')
          AND a.attnum > 0 AND NOT a.attisdropped
    LOOP
        EXECUTE format('ALTER TABLE %I ALTER COLUMN %I SET STATISTICS 10', col.relname, col.attname);
    END LOOP;
END $$;
