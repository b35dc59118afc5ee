-- A counter that every change of an operation increments, so that results,
-- which reach agents through several relays and out of order, can be ordered.
ALTER TABLE operations ADD COLUMN version bigint NOT NULL DEFAULT 0;
