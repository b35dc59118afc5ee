-- opledger ledger schema, version 1.
-- Postgres is the ledger of truth: operations is the materialized current state,
-- operation_events the append-only history, inbox/outbox the transactional edges.

CREATE TABLE operations (
    id                       text        PRIMARY KEY,
    workflow_id              text        NOT NULL,
    run_id                   text        NOT NULL DEFAULT '',
    tool                     text        NOT NULL,
    tool_version             integer     NOT NULL CHECK (tool_version >= 1),
    intent                   text        NOT NULL DEFAULT '',
    entity_type              text        NOT NULL DEFAULT '',
    entity_id                text        NOT NULL DEFAULT '',
    -- canonical JSON exactly as hashed; text keeps the bytes (jsonb would reorder them)
    args_canonical           text        NOT NULL,
    args_hash                text        NOT NULL CHECK (args_hash ~ '^[0-9a-f]{64}$'),
    side_effect_class        text        NOT NULL CHECK (side_effect_class IN
                                 ('pure_read', 'internal_write', 'external_idempotent',
                                  'external_non_idempotent', 'external_irreversible')),
    idempotency_key          text        NOT NULL CHECK (octet_length(idempotency_key) BETWEEN 1 AND 255),
    state                    text        NOT NULL CHECK (state IN
                                 ('planned', 'awaiting_approval', 'rejected', 'pending_dispatch',
                                  'dispatched', 'acknowledged', 'completed_success', 'completed_noop',
                                  'failed_retryable', 'failed_permanent', 'unknown_outcome',
                                  'escalated', 'compensating', 'compensated', 'cancelled')),
    attempt_count            integer     NOT NULL DEFAULT 0,
    lease_epoch              bigint      NOT NULL DEFAULT 0,
    external_request_id      text        NOT NULL DEFAULT '',
    external_object_id       text        NOT NULL DEFAULT '',
    compensates_operation_id text        REFERENCES operations (id),
    trace_id                 text        NOT NULL DEFAULT '',
    last_error_category      text        NOT NULL DEFAULT '',
    last_error               text        NOT NULL DEFAULT '',
    created_at               timestamptz NOT NULL DEFAULT now(),
    updated_at               timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT operations_idempotency_key_key UNIQUE (idempotency_key)
);

CREATE INDEX operations_workflow_idx ON operations (workflow_id, created_at);
-- the sweeper and reconciler look for operations stuck in an in-flight state
CREATE INDEX operations_inflight_idx ON operations (state, updated_at)
    WHERE state IN ('pending_dispatch', 'dispatched', 'acknowledged', 'unknown_outcome', 'failed_retryable', 'compensating');
CREATE INDEX operations_entity_idx ON operations (entity_type, entity_id) WHERE entity_id <> '';

CREATE TABLE inbox (
    source           text        NOT NULL,
    event_id         text        NOT NULL,
    received_at      timestamptz NOT NULL DEFAULT now(),
    payload          bytea       NOT NULL,
    payload_hash     text        NOT NULL,
    workflow_id      text        NOT NULL DEFAULT '',
    decision         text        NOT NULL CHECK (decision IN
                         ('new', 'duplicate_operation', 'conflict', 'rejected')),
    reason           text        NOT NULL DEFAULT '',
    operation_id     text        REFERENCES operations (id),
    -- how many times the same (source, event_id) arrived again and was suppressed
    duplicate_count  integer     NOT NULL DEFAULT 0,
    last_seen_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source, event_id)
);

CREATE INDEX inbox_operation_idx ON inbox (operation_id) WHERE operation_id IS NOT NULL;

CREATE TABLE operation_events (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    operation_id  text        NOT NULL REFERENCES operations (id),
    seq           integer     NOT NULL,
    event         text        NOT NULL,
    from_state    text        NOT NULL DEFAULT '',
    to_state      text        NOT NULL,
    lease_epoch   bigint      NOT NULL,
    attempt_id    text        NOT NULL DEFAULT '',
    actor         text        NOT NULL DEFAULT '',
    detail        jsonb,
    at            timestamptz NOT NULL DEFAULT now(),
    UNIQUE (operation_id, seq)
);

-- History is append-only: the database itself refuses to rewrite it.
CREATE FUNCTION operation_events_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'operation_events is append-only (% refused)', TG_OP
        USING ERRCODE = 'restrict_violation';
END;
$$;

CREATE TRIGGER operation_events_no_update BEFORE UPDATE OR DELETE ON operation_events
    FOR EACH ROW EXECUTE FUNCTION operation_events_append_only();

CREATE TABLE attempts (
    id                  text        PRIMARY KEY,
    operation_id        text        NOT NULL REFERENCES operations (id),
    number              integer     NOT NULL,
    lease_epoch         bigint      NOT NULL,
    worker              text        NOT NULL DEFAULT '',
    started_at          timestamptz NOT NULL DEFAULT now(),
    finished_at         timestamptz,
    outcome             text        NOT NULL DEFAULT '' CHECK (outcome IN
                            ('', 'success', 'noop', 'acknowledged', 'retryable', 'permanent', 'unknown')),
    error_category      text        NOT NULL DEFAULT '',
    error               text        NOT NULL DEFAULT '',
    http_status         integer     NOT NULL DEFAULT 0,
    external_request_id text        NOT NULL DEFAULT '',
    external_object_id  text        NOT NULL DEFAULT '',
    UNIQUE (operation_id, number)
);

CREATE TABLE outbox (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    subject       text        NOT NULL,
    msg_id        text        NOT NULL UNIQUE,
    headers       jsonb       NOT NULL DEFAULT '{}',
    payload       bytea       NOT NULL,
    operation_id  text        REFERENCES operations (id),
    created_at    timestamptz NOT NULL DEFAULT now(),
    available_at  timestamptz NOT NULL DEFAULT now(),
    claimed_by    text        NOT NULL DEFAULT '',
    claimed_until timestamptz,
    publish_count integer     NOT NULL DEFAULT 0,
    last_error    text        NOT NULL DEFAULT '',
    sent_at       timestamptz
);

-- relays claim from this partial index only; sent rows drop out of it
CREATE INDEX outbox_unsent_idx ON outbox (available_at, id) WHERE sent_at IS NULL;

-- NOTIFY is only a wake-up hint for relays; polling remains the fallback.
CREATE FUNCTION outbox_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('opledger_outbox', '');
    RETURN NULL;
END;
$$;

CREATE TRIGGER outbox_notify AFTER INSERT ON outbox
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify();

CREATE TABLE entity_leases (
    entity_type  text        NOT NULL,
    entity_id    text        NOT NULL,
    operation_id text        NOT NULL REFERENCES operations (id),
    epoch        bigint      NOT NULL DEFAULT 1,
    acquired_at  timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    PRIMARY KEY (entity_type, entity_id)
);

CREATE TABLE approvals (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    operation_id text        NOT NULL REFERENCES operations (id),
    status       text        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'approved', 'rejected')),
    rule         text        NOT NULL DEFAULT '',
    requested_at timestamptz NOT NULL DEFAULT now(),
    decided_at   timestamptz,
    decided_by   text        NOT NULL DEFAULT '',
    reason       text        NOT NULL DEFAULT ''
);

CREATE UNIQUE INDEX approvals_one_pending_idx ON approvals (operation_id) WHERE status = 'pending';
