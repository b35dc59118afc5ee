-- name: EntityVersionFor :one
-- The version an intent for action gets on an entity: the last action's
-- version when it is the same action again, else the next version. The row
-- is locked until the transaction ends, so intents for one entity take
-- their versions one at a time.
INSERT INTO entity_versions AS ev (entity_type, entity_id, seq, last_action, last_seq)
VALUES (@entity_type, @entity_id, 1, @action, 1)
ON CONFLICT (entity_type, entity_id) DO UPDATE SET
    seq         = CASE WHEN ev.last_action = EXCLUDED.last_action THEN ev.seq ELSE ev.seq + 1 END,
    last_seq    = CASE WHEN ev.last_action = EXCLUDED.last_action THEN ev.last_seq ELSE ev.seq + 1 END,
    last_action = EXCLUDED.last_action
RETURNING last_seq;
