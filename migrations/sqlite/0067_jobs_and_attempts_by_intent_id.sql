-- A job and an attempt name their intent by a number the intent is given as
-- it is inserted, `intents.id`, rather than by its key. The key is a hash
-- (DESIGN rule 1), so each new job and each new attempt put an entry on a
-- leaf of its own of the key's index: on a filled file most of the log pages
-- a notification wrote. A number that grows with each intent lands at the
-- index's end, on a page the same commit's neighbours share
-- (docs/performance.md, "Jobs and attempts named by the intent's number").
--
-- The key stays the intent's identity: still unique (one intent per key,
-- rule 9), still what every read, answer and publication names. The number
-- is never shown and never leaves the database. It is an
-- `INTEGER PRIMARY KEY`, the table's rowid by name: an unnamed rowid may be
-- renumbered by `VACUUM`, a named one is not. Numbers of deleted intents may
-- be reused (no AUTOINCREMENT): retention deletes an intent's attempts in
-- the transaction that deletes the intent, and no job outlives its intent,
-- so a reused number names nothing else.
--
-- SQLite cannot add a primary key to a table, so the three tables are
-- rebuilt (SQLite's twelve-step ALTER), each existing intent keeping its
-- rowid as its number. A job or an attempt whose intent is gone names
-- nothing and is not kept (none should exist: see above).

CREATE TABLE intents_numbered (
    id                   INTEGER PRIMARY KEY,
    key                  TEXT   NOT NULL UNIQUE,
    tenant               TEXT   NOT NULL,
    event_type           TEXT   NOT NULL,
    entity_type          TEXT   NOT NULL,
    entity_id            TEXT   NOT NULL,
    entity_version       BIGINT,
    occurred_at          TEXT   NOT NULL,
    channel              TEXT   NOT NULL,
    recipient_id         TEXT   NOT NULL,
    destination          TEXT,
    locale               TEXT,
    template_id          TEXT   NOT NULL,
    template_revision    TEXT,
    event_digest         TEXT   NOT NULL,
    payload_digest       TEXT,
    decision             TEXT   NOT NULL,
    reason               TEXT,
    detail               TEXT,
    state                TEXT   NOT NULL,
    attempts             BIGINT NOT NULL DEFAULT 0,
    created_at           BIGINT NOT NULL,
    updated_at           BIGINT NOT NULL,
    preferences_version  BIGINT,
    link_key             TEXT,
    retry_base           BIGINT NOT NULL DEFAULT 0,
    mode                 TEXT   NOT NULL DEFAULT 'live',
    traceparent          TEXT,
    publication_seq      BIGINT NOT NULL DEFAULT 0,
    dead_at              INTEGER GENERATED ALWAYS AS (CASE WHEN state = 'dead' THEN updated_at END) VIRTUAL,
    content              TEXT,
    event_body           TEXT
);
INSERT INTO intents_numbered (id, key, tenant, event_type, entity_type, entity_id, entity_version, occurred_at,
    channel, recipient_id, destination, locale, template_id, template_revision, event_digest, payload_digest,
    decision, reason, detail, state, attempts, created_at, updated_at, preferences_version, link_key, retry_base,
    mode, traceparent, publication_seq, content, event_body)
SELECT rowid, key, tenant, event_type, entity_type, entity_id, entity_version, occurred_at,
    channel, recipient_id, destination, locale, template_id, template_revision, event_digest, payload_digest,
    decision, reason, detail, state, attempts, created_at, updated_at, preferences_version, link_key, retry_base,
    mode, traceparent, publication_seq, content, event_body
FROM intents ORDER BY rowid;

CREATE TABLE jobs_numbered (
    intent_id     INTEGER PRIMARY KEY,
    tenant        TEXT   NOT NULL,
    run_at        BIGINT NOT NULL,
    locked_until  BIGINT,
    traceparent   TEXT,
    links         TEXT
);
INSERT INTO jobs_numbered (intent_id, tenant, run_at, locked_until, traceparent, links)
SELECT i.id, j.tenant, j.run_at, j.locked_until, j.traceparent, j.links
FROM jobs j JOIN intents_numbered i ON i.key = j.intent_key
ORDER BY i.id;

-- The attempts are their own key's index: small rows, always read by their
-- intent (or through the indexes below).
CREATE TABLE attempts_numbered (
    intent_id            INTEGER NOT NULL,
    n                    BIGINT NOT NULL,
    started_at           BIGINT NOT NULL,
    finished_at          BIGINT,
    outcome              TEXT,
    error_class          TEXT,
    provider_status      BIGINT,
    provider_message_id  TEXT,
    error                TEXT,
    retry_after          BIGINT,
    retry_at             BIGINT,
    provider             TEXT,
    possible_duplicate   BOOLEAN NOT NULL DEFAULT FALSE,
    PRIMARY KEY (intent_id, n)
) WITHOUT ROWID;
INSERT INTO attempts_numbered (intent_id, n, started_at, finished_at, outcome, error_class, provider_status,
    provider_message_id, error, retry_after, retry_at, provider, possible_duplicate)
SELECT i.id, a.n, a.started_at, a.finished_at, a.outcome, a.error_class, a.provider_status,
    a.provider_message_id, a.error, a.retry_after, a.retry_at, a.provider, a.possible_duplicate
FROM attempts a JOIN intents_numbered i ON i.key = a.intent_key
ORDER BY i.id, a.n;

DROP TABLE attempts;
DROP TABLE jobs;
DROP TABLE intents;
ALTER TABLE intents_numbered RENAME TO intents;
ALTER TABLE jobs_numbered RENAME TO jobs;
ALTER TABLE attempts_numbered RENAME TO attempts;

-- Each index as it stood after 0066.
CREATE INDEX intents_by_recipient ON intents (tenant, recipient_id, created_at DESC);
CREATE INDEX intents_by_link ON intents (link_key) WHERE link_key IS NOT NULL;
CREATE INDEX intents_by_entity_recipient ON intents (tenant, entity_type, entity_id, recipient_id, channel, entity_version);
CREATE INDEX intents_by_created ON intents (created_at);
CREATE INDEX intents_dead ON intents (tenant, reason, dead_at, key) WHERE dead_at IS NOT NULL;
CREATE INDEX intents_content_by_age ON intents (created_at)
    WHERE content IS NOT NULL OR event_body IS NOT NULL;
CREATE INDEX jobs_due ON jobs (run_at);
CREATE INDEX attempts_by_provider_message_id ON attempts (provider_message_id)
    WHERE provider_message_id IS NOT NULL;
CREATE INDEX attempts_by_finished ON attempts (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX attempts_with_error ON attempts (finished_at) WHERE error IS NOT NULL;
