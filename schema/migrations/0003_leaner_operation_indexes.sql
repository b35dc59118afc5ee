-- Every transition changes state, so no update of operations is HOT and each
-- one adds an entry to every index on the table. Keep only the indexes that a
-- query uses: the entity index had no reader yet (entity leases will bring
-- their own), and the sweeper only looks for operations stuck in dispatched or
-- acknowledged.
DROP INDEX operations_entity_idx;
DROP INDEX operations_inflight_idx;
CREATE INDEX operations_stuck_idx ON operations (updated_at) WHERE state IN ('dispatched', 'acknowledged');
