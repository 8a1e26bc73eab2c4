-- The status outbox: what became of each intent, waiting to be published on
-- the bus (`[publish.nats]`). A row is written IN THE TRANSACTION that
-- changes the intent's state (or applies a `delivered` receipt), by triggers
-- a Herald process with [publish.nats] creates on its writer connection (TEMP
-- triggers, see `store::publications`): without it nothing is written. A
-- publisher claims unpublished rows under a lease, publishes them with a
-- JetStream ack, then stamps `published_at`.
--
-- `msg_id` is `key:state:n` (n: the intent's attempt count at the
-- transition): the bus's Nats-Msg-Id, so a re-publication after a crash is
-- dropped by the stream's duplicate window, and the primary key, so one
-- transition is one row however often it is written.
CREATE TABLE publications (
    msg_id          TEXT    PRIMARY KEY,
    tenant          TEXT    NOT NULL,
    intent_key      TEXT    NOT NULL,
    entity_type     TEXT    NOT NULL,
    entity_id       TEXT    NOT NULL,
    entity_version  BIGINT,
    channel         TEXT    NOT NULL,
    recipient_id    TEXT    NOT NULL,
    state           TEXT    NOT NULL,
    reason          TEXT,
    attempts        BIGINT  NOT NULL,
    at              BIGINT  NOT NULL,
    leased_until    BIGINT,
    published_at    BIGINT
);
CREATE INDEX publications_unpublished ON publications (at) WHERE published_at IS NULL;
CREATE INDEX publications_published ON publications (published_at) WHERE published_at IS NOT NULL;
