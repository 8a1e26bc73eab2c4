-- Herald's core schema on Postgres. Times are microseconds since the Unix epoch
-- (BIGINT), the same as on SQLite, so both backends share their row types.

-- One row per request identity (Idempotency-Key, or the event key): the authority
-- on replays. The stored response is what a replay returns.
CREATE TABLE requests (
    tenant       TEXT   NOT NULL,
    identity     TEXT   NOT NULL,
    fingerprint  TEXT   NOT NULL,
    status       BIGINT NOT NULL DEFAULT 0,
    response     TEXT,
    created_at   BIGINT NOT NULL,
    PRIMARY KEY (tenant, identity)
);
CREATE INDEX requests_by_age ON requests (created_at);

-- Events and rendered content, stored once, addressed by their SHA-256.
CREATE TABLE payloads (
    digest      TEXT   PRIMARY KEY,
    body        TEXT   NOT NULL,
    created_at  BIGINT NOT NULL
);

-- One immutable intent per (event, channel, recipient). The key is derived from
-- the event (DESIGN §3) and is the primary key: nothing here relies on a
-- sequence, so the table can be distributed on it.
CREATE TABLE intents (
    key                TEXT   PRIMARY KEY,
    tenant             TEXT   NOT NULL,
    event_type         TEXT   NOT NULL,
    entity_type        TEXT   NOT NULL,
    entity_id          TEXT   NOT NULL,
    entity_version     BIGINT,
    occurred_at        TEXT   NOT NULL,
    channel            TEXT   NOT NULL,
    recipient_id       TEXT   NOT NULL,
    destination        TEXT,
    locale             TEXT,
    template_id        TEXT   NOT NULL,
    template_revision  TEXT,
    event_digest       TEXT   NOT NULL,
    payload_digest     TEXT,
    decision           TEXT   NOT NULL,
    reason             TEXT,
    detail             TEXT,
    state              TEXT   NOT NULL,
    attempts           BIGINT NOT NULL DEFAULT 0,
    created_at         BIGINT NOT NULL,
    updated_at         BIGINT NOT NULL
);
CREATE INDEX intents_by_entity ON intents (tenant, entity_type, entity_id, created_at DESC);
CREATE INDEX intents_by_recipient ON intents (tenant, recipient_id, created_at DESC);
CREATE INDEX intents_dead ON intents (tenant, reason, updated_at) WHERE state = 'dead';

-- The queue: a row per intent that still has to be tried. Claimed under a lease.
CREATE TABLE jobs (
    intent_key    TEXT   PRIMARY KEY,
    run_at        BIGINT NOT NULL,
    locked_until  BIGINT
);
CREATE INDEX jobs_due ON jobs (run_at);

-- The attempt ledger: compact, no copies of the content.
CREATE TABLE attempts (
    intent_key           TEXT   NOT NULL,
    n                    BIGINT NOT NULL,
    started_at           BIGINT NOT NULL,
    finished_at          BIGINT,
    outcome              TEXT,
    error_class          TEXT,
    provider_status      BIGINT,
    provider_message_id  TEXT,
    error                TEXT,
    PRIMARY KEY (intent_key, n)
);

-- The recipient directory.
CREATE TABLE recipients (
    tenant               TEXT   NOT NULL,
    id                   TEXT   NOT NULL,
    email                TEXT,
    phone                TEXT,
    locale               TEXT,
    timezone             TEXT,
    webhook_url          TEXT,
    preferences          TEXT   NOT NULL DEFAULT '{}',
    preferences_version  BIGINT NOT NULL DEFAULT 0,
    updated_at           BIGINT NOT NULL,
    PRIMARY KEY (tenant, id)
);

-- The in-app inbox: one card per (tenant, recipient, entity) at its highest
-- version; inbox_entries makes delivering the same intent twice a no-op.
CREATE TABLE inbox_cards (
    card_id         TEXT   PRIMARY KEY,
    tenant          TEXT   NOT NULL,
    recipient_id    TEXT   NOT NULL,
    entity_type     TEXT   NOT NULL,
    entity_id       TEXT   NOT NULL,
    version         BIGINT,
    occurred_at     TEXT   NOT NULL,
    intent_key      TEXT   NOT NULL,
    payload_digest  TEXT   NOT NULL,
    collapsed       BIGINT NOT NULL DEFAULT 0,
    read_at         BIGINT,
    updated_at      BIGINT NOT NULL
);
CREATE INDEX inbox_by_recipient ON inbox_cards (tenant, recipient_id, updated_at DESC);

CREATE TABLE inbox_entries (
    intent_key  TEXT PRIMARY KEY,
    card_id     TEXT NOT NULL
);
