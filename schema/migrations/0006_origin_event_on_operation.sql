-- The event that created an operation is kept on the operation itself, so
-- the sweeper, the re-drive pass and the compensator read it from the row
-- they already hold. The inbox no longer needs an index on operation_id, and
-- the inbox row's decision update, which touches no indexed column now, can
-- be a HOT update on a page with room.
ALTER TABLE operations ADD COLUMN origin_event_id text NOT NULL DEFAULT '';
UPDATE operations o SET origin_event_id = i.event_id
    FROM inbox i WHERE i.operation_id = o.id AND i.decision = 'new';
DROP INDEX inbox_operation_idx;
ALTER TABLE inbox SET (fillfactor = 80);
