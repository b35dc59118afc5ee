-- Let state changes of operations be HOT updates. Every transition changes
-- state and updated_at; while an index covered either (even in a partial
-- index's predicate), each transition inserted into every index of the table.
-- The sweeper now finds stuck dispatches through their open attempts instead,
-- and operations pages keep room for new row versions.
DROP INDEX operations_stuck_idx;
ALTER TABLE operations SET (fillfactor = 70);
CREATE INDEX attempts_open_idx ON attempts (started_at) WHERE finished_at IS NULL;

-- History is keyed by (operation_id, seq) already; the surrogate id only cost
-- a second index insert per event.
ALTER TABLE operation_events DROP COLUMN id;
ALTER TABLE operation_events DROP CONSTRAINT operation_events_operation_id_seq_key,
    ADD PRIMARY KEY (operation_id, seq);

-- Claims rewrite outbox rows; room on the page lets those rewrites be HOT.
ALTER TABLE outbox SET (fillfactor = 60);
