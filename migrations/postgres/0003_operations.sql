-- Operations: dead-letter replays, the daily ops digest, retention.

-- `attempts` at the last replay: a replayed dead letter gets a fresh retry budget.
ALTER TABLE intents ADD COLUMN retry_base BIGINT NOT NULL DEFAULT 0;
-- Retention walks final intents by age.
CREATE INDEX intents_by_age ON intents (updated_at);
CREATE INDEX payloads_by_age ON payloads (created_at);

-- Every replay of a dead letter, and who asked for it.
CREATE TABLE dead_letter_replays (
    tenant           TEXT   NOT NULL,
    intent_key       TEXT   NOT NULL,
    replayed_at      BIGINT NOT NULL,
    previous_reason  TEXT,
    requested_by     TEXT,
    PRIMARY KEY (intent_key, replayed_at)
);

-- One row per daily ops digest (slot = the local date it is for). The lease
-- lets exactly one of many processes post it; posted_at says it went out.
CREATE TABLE ops_digests (
    slot         TEXT   PRIMARY KEY,
    since        BIGINT NOT NULL,
    until        BIGINT NOT NULL,
    lease_until  BIGINT NOT NULL,
    posted_at    BIGINT,
    total        BIGINT
);
