-- Vendor webhooks as evidence.
--
-- A webhook delivery is recorded in the inbox like an intent, under source
-- "webhook:<provider>" and the vendor's delivery id, so a redelivery is a
-- duplicate_event and changes nothing. A delivery whose event type the
-- registry maps to an operation is also evidence: one row here says which
-- operation it is about (by idempotency key, client reference, operation id
-- or the vendor's object id), what it says happened, and what the ledger
-- made of it:
--   held          waiting for its operation to reach a state it can settle
--                 (still pending dispatch, or not created yet)
--   applied       it settled its operation (the operation's event says so)
--   confirmed     its operation had already reached the outcome it reports
--   out_of_band   no operation the ledger dispatched explains it: a possible
--                 effect made outside opledger (flagged, alerted)
--   contradiction it contradicts its operation's settled outcome (flagged)
--   expired       its hold ran out with its operation in a state no
--                 webhook may settle (escalated): a person decides (flagged)
-- Held rows are looked at again with backoff (next_check_at) until
-- hold_until, on the database's clock.
CREATE TABLE webhook_evidence (
    provider           text        NOT NULL,
    delivery_id        text        NOT NULL,
    event_type         text        NOT NULL,
    tools              text[]      NOT NULL,
    match_by           text        NOT NULL CHECK (match_by IN
                           ('idempotency_key', 'client_reference', 'operation_id', 'external_object_id')),
    match_value        text        NOT NULL CHECK (octet_length(match_value) BETWEEN 1 AND 255),
    outcome            text        NOT NULL CHECK (outcome IN ('success', 'noop', 'failed')),
    external_object_id text        NOT NULL DEFAULT '',
    status             text        NOT NULL DEFAULT 'held' CHECK (status IN
                           ('held', 'applied', 'confirmed', 'out_of_band', 'contradiction', 'expired')),
    operation_id       text        REFERENCES operations (id),
    reason             text        NOT NULL DEFAULT '',
    received_at        timestamptz NOT NULL DEFAULT now(),
    hold_until         timestamptz NOT NULL,
    checks             integer     NOT NULL DEFAULT 0,
    next_check_at      timestamptz NOT NULL DEFAULT now(),
    decided_at         timestamptz,
    PRIMARY KEY (provider, delivery_id)
);

-- The held rows, by when they are due for another look.
CREATE INDEX webhook_evidence_held_idx ON webhook_evidence (next_check_at) WHERE status = 'held';
-- The reconciler asks for the held evidence about one operation.
CREATE INDEX webhook_evidence_held_match_idx ON webhook_evidence (match_value) WHERE status = 'held';
-- Operators list what was flagged, and an operation shows its evidence.
CREATE INDEX webhook_evidence_decided_idx ON webhook_evidence (status, decided_at);
CREATE INDEX webhook_evidence_operation_idx ON webhook_evidence (operation_id) WHERE operation_id IS NOT NULL;
