-- The human loop and the rules beyond keys.

-- Who proposed an operation (an approver must be someone else), and the
-- semantic dedupe key its tool's window compares. Neither is ever updated,
-- so their indexes keep transitions HOT.
ALTER TABLE operations ADD COLUMN proposed_by text NOT NULL DEFAULT '',
                       ADD COLUMN dedupe_key  text NOT NULL DEFAULT '';
CREATE INDEX operations_dedupe_idx ON operations (dedupe_key, created_at) WHERE dedupe_key <> '';
-- Operations of one entity, for leases in order and state guards.
CREATE INDEX operations_entity_idx ON operations (entity_type, entity_id, created_at) WHERE entity_id <> '';

-- An approval request is bound to the operation's arguments (their hash)
-- and expires; votes are one per approver.
DROP TABLE approvals;
CREATE TABLE approval_requests (
    operation_id text        PRIMARY KEY REFERENCES operations (id),
    args_hash    text        NOT NULL,
    required     integer     NOT NULL CHECK (required >= 1),
    requested_at timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    status       text        NOT NULL DEFAULT 'pending'
                             CHECK (status IN ('pending', 'approved', 'denied', 'expired', 'cancelled')),
    decided_at   timestamptz
);
CREATE INDEX approval_requests_expiry_idx ON approval_requests (expires_at) WHERE status = 'pending';

CREATE TABLE approval_votes (
    operation_id text        NOT NULL REFERENCES operations (id),
    approver     text        NOT NULL,
    decision     text        NOT NULL CHECK (decision IN ('approve', 'deny')),
    args_hash    text        NOT NULL,
    reason       text        NOT NULL,
    at           timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (operation_id, approver)
);

-- Every operator write, whatever its outcome.
CREATE TABLE audit_log (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at           timestamptz NOT NULL DEFAULT now(),
    actor        text        NOT NULL,
    role         text        NOT NULL,
    action       text        NOT NULL,
    operation_id text        NOT NULL DEFAULT '',
    reason       text        NOT NULL DEFAULT '',
    outcome      text        NOT NULL,
    detail       jsonb
);
CREATE INDEX audit_log_operation_idx ON audit_log (operation_id, at) WHERE operation_id <> '';

-- State guards find the operation that made a vendor object (the capture
-- behind a charge id). Setting the id makes that one update non-HOT.
CREATE INDEX operations_external_object_idx ON operations (external_object_id) WHERE external_object_id <> '';

-- Entity leases are released by the transition that ends an operation's
-- time in flight, found by operation.
CREATE INDEX entity_leases_operation_idx ON entity_leases (operation_id);

-- Tenants: every operation belongs to one. Its keys, entity ids and dedupe
-- keys carry the tenant as a prefix (the default tenant's carry none), so
-- the existing unique key is already per tenant.
ALTER TABLE operations ADD COLUMN tenant text NOT NULL DEFAULT 'default';
