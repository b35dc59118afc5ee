-- What each opledger role may do: the whole grant matrix, in one file.
--
-- The migrator (the owner of every table) applies this file after every
-- migrate, in one transaction: it first takes every privilege of the roles
-- away, then grants what is written here, so that removing a line here
-- removes the privilege. It then refuses to finish while any table, view,
-- sequence or function in schema public has no decision here: some grant to
-- an opledger role, or an "owner-only:" line saying why no role needs it.
--
-- To add a table: add its GRANT lines below (one block per table, the roles
-- and the exact columns each statement in db/queries needs), or an
-- "owner-only: <name>: <why>" line, then run
-- `go test ./schema/ -run TestGrantMatrixDoc -update` to regenerate the matrix
-- in docs/security.md.
--
-- Roles (created by migrations/0011_service_roles.sql; NOLOGIN):
--   opledger_ingest       planner-ingest: intents into the inbox and operations
--   opledger_dispatcher   dispatchers: claim, attempt, record the vendor's answer
--   opledger_reconciler   the reconciler: settles unknown outcomes
--   opledger_compensator  the compensator: compensations are operations too
--   opledger_maintainer   the maintenance leader: sweeper, re-drive, expiry, retention
--   opledger_relay        outbox relays (every service process runs them)
--   opledger_operator     the operators' API (approvals, resolve, cancel, audit)
--
-- Where a statement references a column (WHERE, RETURNING, a subquery), the
-- role needs SELECT on it; SELECT ... FOR UPDATE needs UPDATE on some column.
-- Identity columns (outbox.id, audit_log.id) need no grant on their sequence;
-- another table's default that takes its next value (outbox_batches.seq) does.

REVOKE ALL ON ALL TABLES IN SCHEMA public FROM opledger_ingest, opledger_dispatcher, opledger_reconciler,
    opledger_compensator, opledger_maintainer, opledger_relay, opledger_operator;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM opledger_ingest, opledger_dispatcher, opledger_reconciler,
    opledger_compensator, opledger_maintainer, opledger_relay, opledger_operator;
REVOKE ALL ON ALL ROUTINES IN SCHEMA public FROM PUBLIC, opledger_ingest, opledger_dispatcher, opledger_reconciler,
    opledger_compensator, opledger_maintainer, opledger_relay, opledger_operator;
GRANT USAGE ON SCHEMA public TO opledger_ingest, opledger_dispatcher, opledger_reconciler,
    opledger_compensator, opledger_maintainer, opledger_relay, opledger_operator;

-- schema_migrations: every service checks at start and in /readyz that the
-- schema is up to date; only the migrator writes it.
GRANT SELECT ON schema_migrations TO opledger_ingest, opledger_dispatcher, opledger_reconciler,
    opledger_compensator, opledger_maintainer, opledger_relay, opledger_operator;

-- operations: created by intents (ingest, and compensations: the
-- compensator's, and an operator's "compensate", whose intake runs in the
-- operator's transaction, so operators have the intake grants too); moved by transitions (OperationTransition: everyone who
-- decides; OperationDispatch: dispatchers, who also count attempts). Nobody
-- rewrites what an operation is (tool, arguments, key, tenant) or deletes one.
-- OperationInsertOrGet's no-op conflict update sets updated_at to itself.
GRANT SELECT ON operations TO opledger_ingest, opledger_dispatcher, opledger_reconciler,
    opledger_compensator, opledger_maintainer, opledger_operator;
GRANT INSERT ON operations TO opledger_ingest, opledger_compensator, opledger_operator;
GRANT UPDATE (state, version, lease_epoch, generation, generation_started_at, generation_attempt_base,
              external_request_id, external_object_id, compensation_operation_id, last_error_category, last_error,
              updated_at)
    ON operations TO opledger_ingest, opledger_dispatcher, opledger_reconciler,
    opledger_compensator, opledger_maintainer, opledger_operator;
GRANT UPDATE (attempt_count) ON operations TO opledger_dispatcher;

-- operation_events: append-only history (a trigger refuses UPDATE and DELETE
-- even to the owner); every writer of a transition appends.
GRANT SELECT, INSERT ON operation_events TO opledger_ingest, opledger_dispatcher, opledger_reconciler,
    opledger_compensator, opledger_maintainer, opledger_operator;

-- attempts: dispatchers start and finish them; the sweeper (maintainer)
-- finishes the ones whose dispatcher died. planner-ingest never sees them.
GRANT SELECT ON attempts TO opledger_dispatcher, opledger_reconciler, opledger_maintainer, opledger_operator;
GRANT INSERT ON attempts TO opledger_dispatcher;
GRANT UPDATE (finished_at, outcome, error_category, error, http_status, external_request_id, external_object_id)
    ON attempts TO opledger_dispatcher, opledger_maintainer;

-- inbox: every intent (and every compensation's) and every webhook delivery
-- is recorded with its decision; the maintainer deletes rejected garbage
-- after retention.
GRANT SELECT, INSERT ON inbox TO opledger_ingest, opledger_compensator, opledger_operator;
GRANT UPDATE (decision, reason, operation_id, duplicate_count, last_seen_at)
    ON inbox TO opledger_ingest, opledger_compensator, opledger_operator;
GRANT SELECT, DELETE ON inbox TO opledger_maintainer;

-- outbox: whoever decides writes its messages in the same statement; relays
-- publish them (claiming the rows nobody published), and delete them once
-- published; the maintainer re-drives lost commands and reports parked rows.
GRANT INSERT ON outbox TO opledger_ingest, opledger_dispatcher, opledger_reconciler,
    opledger_compensator, opledger_maintainer, opledger_operator;
GRANT SELECT ON outbox TO opledger_relay, opledger_maintainer, opledger_operator;
GRANT UPDATE (claimed_by, claimed_until, publish_count, last_error, publish_failures, parked_at, available_at)
    ON outbox TO opledger_relay;
GRANT DELETE ON outbox TO opledger_relay;
-- Operators put parked rows back to be published (OutboxRequeueParked).
GRANT UPDATE (parked_at, publish_failures, claimed_until, available_at) ON outbox TO opledger_operator;

-- outbox_batches: the messages due at once of a statement of the hot path
-- (a new intent, an outcome), one row per statement, written by the roles
-- that write outbox rows; relays claim, delete and split them; the
-- maintainer's re-drive looks for an operation's waiting messages in them.
-- Their seq takes the next value of outbox's identity sequence.
GRANT INSERT ON outbox_batches TO opledger_ingest, opledger_dispatcher, opledger_reconciler,
    opledger_compensator, opledger_maintainer, opledger_operator;
GRANT USAGE ON SEQUENCE outbox_id_seq TO opledger_ingest, opledger_dispatcher, opledger_reconciler,
    opledger_compensator, opledger_maintainer, opledger_operator;
GRANT SELECT ON outbox_batches TO opledger_relay, opledger_maintainer, opledger_operator;
GRANT UPDATE (claimed_by, claimed_until, publish_count) ON outbox_batches TO opledger_relay;
GRANT DELETE ON outbox_batches TO opledger_relay;
-- A relay that cannot publish a batch whole has its unpublished messages
-- made rows of outbox by outbox_split_batch, which runs as the owner: a
-- relay may not write rows of outbox itself.
GRANT EXECUTE ON FUNCTION outbox_split_batch(text, text, text[], text[], float8, text, timestamptz) TO opledger_relay;

-- outbox_messages: every unpublished message, rows and batches alike, for
-- the reads that ask about messages (an operation's, the unsent count).
GRANT SELECT ON outbox_messages TO opledger_relay, opledger_maintainer, opledger_operator;

-- reconcile_lookups: the reconciler counts the lookups of each ambiguous
-- outcome in the ledger; the maintainer reads them (a command only held
-- back is not re-driven) and deletes those of episodes that are over.
GRANT SELECT, INSERT, UPDATE (version, failures, lookups, last_at, next_at) ON reconcile_lookups TO opledger_reconciler;
GRANT SELECT, DELETE ON reconcile_lookups TO opledger_maintainer;

-- entity_leases: dispatchers take an entity's lease; every transition that
-- ends an operation's time in flight gives it back.
GRANT SELECT, DELETE ON entity_leases TO opledger_ingest, opledger_dispatcher, opledger_reconciler,
    opledger_compensator, opledger_maintainer, opledger_operator;
GRANT INSERT, UPDATE (operation_id, epoch, acquired_at, expires_at) ON entity_leases TO opledger_dispatcher;

-- entity_versions: the version an intent acts on, taken at intake.
GRANT SELECT, INSERT, UPDATE (seq, last_seq, last_action) ON entity_versions TO opledger_ingest, opledger_compensator,
    opledger_operator;

-- approval_requests / approval_votes: opened at intake, voted on by
-- operators, expired by the maintainer.
GRANT SELECT ON approval_requests TO opledger_ingest, opledger_compensator, opledger_maintainer, opledger_operator;
GRANT INSERT ON approval_requests TO opledger_ingest, opledger_compensator, opledger_operator;
GRANT UPDATE (status, decided_at) ON approval_requests TO opledger_maintainer, opledger_operator;
GRANT SELECT ON approval_votes TO opledger_ingest, opledger_compensator, opledger_maintainer, opledger_operator;
GRANT INSERT ON approval_votes TO opledger_operator;

-- audit_log: every operator write, whatever its outcome; never rewritten.
GRANT SELECT, INSERT ON audit_log TO opledger_operator;

-- maintenance_leader: who leads maintenance, for people.
GRANT SELECT, INSERT, UPDATE (holder, elected_at, heartbeat_at, ops_stream_created_at) ON maintenance_leader TO opledger_maintainer;
GRANT SELECT ON maintenance_leader TO opledger_operator;

-- webhook_evidence: planner-ingest's webhook intake records what a delivery
-- says and settles its operation when it can; the reconciler applies held
-- evidence about the operation it reconciles; the maintenance leader looks
-- at held evidence again and expires it; operators read it. Nobody rewrites
-- what a delivery said (its match, outcome, object id) or deletes it.
GRANT SELECT ON webhook_evidence TO opledger_ingest, opledger_reconciler, opledger_maintainer, opledger_operator;
GRANT INSERT ON webhook_evidence TO opledger_ingest;
GRANT UPDATE (status, operation_id, reason, decided_at, checks, next_check_at)
    ON webhook_evidence TO opledger_ingest, opledger_reconciler, opledger_maintainer;

-- operation_unsettled: the predicate of operations_unsettled_idx. Postgres
-- evaluates it, as the writing role, whenever a row of operations is
-- written, so every role that writes operations may execute it; the
-- maintenance leader also names it in its scans.
GRANT EXECUTE ON FUNCTION operation_unsettled(text) TO opledger_ingest, opledger_dispatcher, opledger_reconciler,
    opledger_compensator, opledger_maintainer, opledger_operator;

-- submit_conflict: OperationSubmitNew's way of failing with a unique
-- violation (a new key under a known event id); every role that may submit
-- an intent runs it.
GRANT EXECUTE ON FUNCTION submit_conflict(text) TO opledger_ingest, opledger_compensator, opledger_operator;

-- owner-only: operation_events_append_only: the trigger function that keeps history append-only; triggers need no EXECUTE grant
