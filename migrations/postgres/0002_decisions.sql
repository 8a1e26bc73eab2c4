-- Decisions (issue: preferences, quiet hours, digests, superseded versions).

-- The preferences version that decided an intent, and the intent it is linked
-- to: the newer version that superseded it, or the digest it was batched into.
ALTER TABLE intents ADD COLUMN preferences_version BIGINT;
ALTER TABLE intents ADD COLUMN link_key TEXT;
CREATE INDEX intents_by_link ON intents (link_key) WHERE link_key IS NOT NULL;
-- Superseded checks look for a newer version of an entity for one recipient and channel.
CREATE INDEX intents_by_entity_recipient ON intents (tenant, entity_type, entity_id, recipient_id, channel, entity_version);

-- Every version of every recipient's preferences, kept so a decision can be
-- explained by the preferences that made it.
CREATE TABLE recipient_preferences (
    tenant        TEXT   NOT NULL,
    recipient_id  TEXT   NOT NULL,
    version       BIGINT NOT NULL,
    preferences   TEXT   NOT NULL,
    created_at    BIGINT NOT NULL,
    PRIMARY KEY (tenant, recipient_id, version)
);

-- One row per digest window: (tenant, route, channel, recipient, group, window).
-- Its key is the key of the digest intent it becomes when it closes.
CREATE TABLE digests (
    key           TEXT   PRIMARY KEY,
    tenant        TEXT   NOT NULL,
    event_type    TEXT   NOT NULL,
    channel       TEXT   NOT NULL,
    recipient_id  TEXT   NOT NULL,
    group_key     TEXT   NOT NULL,
    destination   TEXT,
    locale        TEXT,
    window_start  BIGINT NOT NULL,
    closes_at     BIGINT NOT NULL,
    state         TEXT   NOT NULL,
    created_at    BIGINT NOT NULL
);
CREATE INDEX digests_due ON digests (closes_at) WHERE state = 'open';
