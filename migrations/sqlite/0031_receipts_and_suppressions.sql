-- Delivery receipts: what a provider said became of a message after it
-- accepted it, one row per distinct receipt (the id is derived from the
-- receipt, so the same callback twice is one row). Append-only, beside the
-- attempts; `applied` says whether it moved the intent's delivery status.
CREATE TABLE receipts (
    id                   TEXT    PRIMARY KEY,
    intent_key           TEXT    NOT NULL,
    source               TEXT    NOT NULL,
    provider_message_id  TEXT,
    status               TEXT    NOT NULL,
    provider_status      TEXT    NOT NULL,
    reason               TEXT,
    received_at          BIGINT  NOT NULL,
    applied              BOOLEAN NOT NULL
);
CREATE INDEX receipts_by_intent ON receipts (intent_key, received_at);

-- A receipt may name its message by the id the provider gave at send time.
CREATE INDEX attempts_by_provider_message_id ON attempts (provider_message_id)
    WHERE provider_message_id IS NOT NULL;

-- The suppression list: per tenant, an address (hashed) that bounced or
-- complained, with the intent whose receipt put it there.
CREATE TABLE suppressions (
    tenant         TEXT   NOT NULL,
    address_hash   TEXT   NOT NULL,
    channel        TEXT   NOT NULL,
    masked         TEXT   NOT NULL,
    domain         TEXT,
    reason         TEXT   NOT NULL,
    source_intent  TEXT   NOT NULL,
    detail         TEXT,
    created_at     BIGINT NOT NULL,
    PRIMARY KEY (tenant, address_hash)
);
CREATE INDEX suppressions_by_age ON suppressions (created_at);
