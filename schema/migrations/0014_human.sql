-- The human loop, second pass.

-- An operation names its latest compensation (a compensation names its
-- original through compensates_operation_id): set by the transition that
-- moves the original to compensating. Not indexed, so that update stays HOT.
ALTER TABLE operations ADD COLUMN compensation_operation_id text REFERENCES operations (id);

-- An original's compensations, oldest first: a new one after others ended
-- without effect (denied, cancelled, expired) is numbered after them. Set
-- only when a compensation is created, never updated.
CREATE INDEX operations_compensates_idx ON operations (compensates_operation_id, created_at)
    WHERE compensates_operation_id IS NOT NULL;
