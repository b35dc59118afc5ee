-- Never stuck, never lost.
--
-- Each attempt stores its deadline, computed by the database when the
-- attempt is claimed (now() + the tool's timeout): the sweeper compares it
-- with the database's now(), never a host clock with a database timestamp.
-- The sweeper's index covers open attempts by deadline.
ALTER TABLE attempts ADD COLUMN deadline_at timestamptz;
UPDATE attempts SET deadline_at = started_at + interval '10 seconds';
ALTER TABLE attempts ALTER COLUMN deadline_at SET NOT NULL;
DROP INDEX attempts_open_idx;
CREATE INDEX attempts_open_deadline_idx ON attempts (deadline_at) WHERE finished_at IS NULL;

-- An outbox row that fails to publish for a reason of its own (too large for
-- NATS, refused by the stream) is retried a bounded number of times, then
-- parked with its error: visible to operators and counted, never
-- republished forever. Failures that are not the message's fault (NATS
-- down) do not count.
ALTER TABLE outbox ADD COLUMN publish_failures integer NOT NULL DEFAULT 0,
                   ADD COLUMN parked_at timestamptz;
DROP INDEX outbox_unsent_idx;
CREATE INDEX outbox_unsent_idx ON outbox (available_at, id) WHERE sent_at IS NULL AND parked_at IS NULL;
CREATE INDEX outbox_parked_idx ON outbox (parked_at) WHERE parked_at IS NOT NULL;

-- The inbox keeps a hash of every message, and raw bytes only of rejected
-- ones (a bounded prefix), so that garbage can be read by a person and then
-- deleted by retention. "rejected" is set when the row is inserted and never
-- updated, so the decision update of accepted intents stays HOT.
ALTER TABLE inbox ADD COLUMN rejected boolean NOT NULL DEFAULT false;
UPDATE inbox SET rejected = true WHERE decision = 'rejected';
UPDATE inbox SET payload = '' WHERE decision <> 'rejected';
UPDATE inbox SET payload = substring(payload FROM 1 FOR 1024) WHERE decision = 'rejected';
CREATE INDEX inbox_rejected_idx ON inbox (received_at) WHERE rejected;

-- Maintenance (sweeper, re-drive, retention) runs in one elected instance at
-- a time: whoever holds this row's advisory lock. The row records who leads,
-- for people.
CREATE TABLE maintenance_leader (
    id          integer     PRIMARY KEY CHECK (id = 1),
    holder      text        NOT NULL,
    elected_at  timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now()
);

-- An operation that failed without any effect (every attempt confirmed not
-- applied) may be reopened by a new intent for its key: a new generation,
-- with its own retry budget counted from its own start.
ALTER TABLE operations ADD COLUMN generation integer NOT NULL DEFAULT 1,
                       ADD COLUMN generation_started_at timestamptz,
                       ADD COLUMN generation_attempt_base integer NOT NULL DEFAULT 0;

-- A reopened operation is answered with the decision "reopened".
ALTER TABLE inbox DROP CONSTRAINT inbox_decision_check,
    ADD CONSTRAINT inbox_decision_check CHECK (decision IN ('new', 'duplicate_operation', 'conflict', 'rejected', 'reopened'));
