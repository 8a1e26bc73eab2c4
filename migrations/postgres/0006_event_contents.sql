-- The content an event key was accepted with (DESIGN §3): the SHA-256 of its
-- type, entity (with its version), occurred_at and data, kept apart from the
-- request fingerprint, which also covers the audience. The primary key makes
-- the database decide between two concurrent posts of one event with different
-- content: one is accepted, the other is a 409.
CREATE TABLE events (
    event_key       TEXT   PRIMARY KEY,
    tenant          TEXT   NOT NULL,
    event_type      TEXT   NOT NULL,
    entity_type     TEXT   NOT NULL,
    entity_id       TEXT   NOT NULL,
    occurred_at     TEXT   NOT NULL,
    content_digest  TEXT   NOT NULL,
    created_at      BIGINT NOT NULL
);
-- Retention walks them by age, once their intents are gone.
CREATE INDEX events_by_age ON events (created_at);
