-- One outbox row for every message a statement of the hot path commits,
-- instead of one row per message (docs/architecture.md, "Where the time
-- goes"). A new intent writes two messages (its dispatch command and its
-- answer) and an outcome one or two (the agent's result, a follow-up
-- command); each was a row of outbox with three index entries, inserted,
-- then deleted once published: about a quarter of the WAL records an
-- operation cost. The statements that write them (OperationSubmitNew,
-- OperationTransitionFinishing and their group-commit forms) now put the
-- messages they write due at once into one row of outbox_batches, whatever
-- the number of operations they carry; messages due later (a retry's
-- backoff) and every other writer's stay rows of outbox.
--
-- A batch is published as its messages: handed to the writer's relay in
-- memory after the commit and deleted once JetStream has acknowledged every
-- one of them, or claimed by any relay after the hand-off grace, as outbox
-- rows are. A batch that cannot be published whole is split: the messages
-- JetStream did not acknowledge become rows of outbox (with the failure
-- counted when NATS refused the message itself), the batch is deleted in the
-- same statement, and from then on they are retried, parked and requeued
-- as any row is (internal/outbox).
CREATE TABLE outbox_batches (
    -- Named by the writer (a fresh id), so that its relay can delete it.
    batch_id      text        PRIMARY KEY,
    -- Orders batches among outbox rows (the same sequence as outbox.id),
    -- for the outbox_messages view; nothing looks a batch up by it.
    seq           bigint      NOT NULL DEFAULT nextval(pg_get_serial_sequence('outbox', 'id')),
    created_at    timestamptz NOT NULL DEFAULT now(),
    available_at  timestamptz NOT NULL,
    claimed_by    text        NOT NULL DEFAULT '',
    claimed_until timestamptz,
    publish_count integer     NOT NULL DEFAULT 0,
    subjects      text[]      NOT NULL,
    msg_ids       text[]      NOT NULL,
    headers       jsonb[]     NOT NULL,
    payloads      bytea[]     NOT NULL,
    -- '' for a message of no operation.
    operation_ids text[]      NOT NULL,
    CHECK (cardinality(msg_ids) >= 1 AND cardinality(subjects) = cardinality(msg_ids)
           AND cardinality(headers) = cardinality(msg_ids) AND cardinality(payloads) = cardinality(msg_ids)
           AND cardinality(operation_ids) = cardinality(msg_ids))
);

-- Relays claim the due batches nobody published, oldest first.
CREATE INDEX outbox_batches_due_idx ON outbox_batches (available_at, batch_id);

-- Every message not yet published, one row each, wherever it is kept: the
-- rows of outbox and the messages of outbox_batches, in the order they
-- were written (seq; ord within a batch). For people, the tests, and the
-- reads that ask about messages rather than rows.
CREATE VIEW outbox_messages AS
    SELECT o.id AS seq, 0::bigint AS ord, o.subject, o.msg_id, o.headers, o.payload, o.operation_id,
           o.created_at, o.available_at, o.claimed_by, o.publish_count, o.publish_failures, o.last_error,
           o.sent_at, o.parked_at, NULL::text AS batch_id
    FROM outbox o
    UNION ALL
    SELECT b.seq, m.ord, m.subject, m.msg_id, m.headers, m.payload, nullif(m.operation_id, ''),
           b.created_at, b.available_at, b.claimed_by, b.publish_count, 0, '',
           NULL::timestamptz, NULL::timestamptz, b.batch_id
    FROM outbox_batches b
    CROSS JOIN LATERAL unnest(b.subjects, b.msg_ids, b.headers, b.payloads, b.operation_ids)
        WITH ORDINALITY AS m(subject, msg_id, headers, payload, operation_id, ord);

-- A relay's split of a batch it could not publish whole: the messages named
-- in p_unsent (those JetStream did not acknowledge) become rows of outbox,
-- due after p_delay seconds, each with one failure counted when it is also
-- in p_refused (NATS refused the message itself), and the batch is deleted,
-- fenced by the relay's claim. It returns how many rows it wrote (none when
-- another relay holds the batch now). A relay may not write rows of outbox
-- itself (schema/grants.sql): this function moves only a batch's own
-- messages, as they were written.
CREATE FUNCTION outbox_split_batch(p_batch_id text, p_relay text, p_unsent text[], p_refused text[],
                                   p_delay float8, p_error text, p_now timestamptz) RETURNS bigint
    LANGUAGE sql SECURITY DEFINER SET search_path = public, pg_temp AS $$
    WITH gone AS (
        DELETE FROM outbox_batches WHERE batch_id = p_batch_id AND claimed_by = p_relay
        RETURNING subjects, msg_ids, headers, payloads, operation_ids
    ), moved AS (
        INSERT INTO outbox (subject, msg_id, headers, payload, operation_id, available_at, publish_failures, last_error)
        SELECT m.subject, m.msg_id, m.headers, m.payload, nullif(m.operation_id, ''),
               coalesce(p_now, now()) + make_interval(secs => p_delay),
               CASE WHEN m.msg_id = ANY(p_refused) THEN 1 ELSE 0 END, p_error
        FROM gone CROSS JOIN LATERAL unnest(gone.subjects, gone.msg_ids, gone.headers, gone.payloads, gone.operation_ids)
             AS m(subject, msg_id, headers, payload, operation_id)
        WHERE m.msg_id = ANY(p_unsent)
        RETURNING 1
    )
    SELECT count(*) FROM moved
$$;
