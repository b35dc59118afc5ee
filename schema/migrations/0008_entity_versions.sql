-- The version of each business entity that tools with {entity_version} in
-- their key template act on: seq moves on with every new action accepted on
-- the entity; last_action (the key with the version left out) and last_seq
-- let a repeat of the last action get that action's version, and so its key.
CREATE TABLE entity_versions (
    entity_type text   NOT NULL,
    entity_id   text   NOT NULL,
    seq         bigint NOT NULL,
    last_action text   NOT NULL,
    last_seq    bigint NOT NULL,
    PRIMARY KEY (entity_type, entity_id)
);
