-- A job and an attempt name their intent by a number the intent is given as
-- it is inserted, `intents.id`, rather than by its key. The key is a hash
-- (DESIGN rule 1), so each new job and each new attempt put an entry on a
-- leaf of its own of the key's index; a number that grows with each intent
-- lands at the index's end (docs/performance.md, "Jobs and attempts named by
-- the intent's number").
--
-- The key stays the intent's identity and primary key: still what every
-- read, answer and publication names. The number is never shown and never
-- leaves the database; an identity column never hands out a number twice.
--
-- Adding an identity column rewrites the intents' table, under a lock that
-- stops ingest while it runs. The jobs and the attempts are rebuilt rather
-- than updated in place, so that they do not come out of the migration at
-- twice their size. A job or an attempt whose intent is gone names nothing
-- and is not kept (retention deletes an intent's attempts with it, and no
-- job outlives its intent).

ALTER TABLE intents ADD COLUMN id BIGINT GENERATED ALWAYS AS IDENTITY;
CREATE UNIQUE INDEX intents_by_id ON intents (id);

CREATE TABLE jobs_numbered (
    intent_id     BIGINT PRIMARY KEY,
    tenant        TEXT   NOT NULL,
    run_at        BIGINT NOT NULL,
    locked_until  BIGINT,
    traceparent   TEXT,
    links         TEXT
);
INSERT INTO jobs_numbered (intent_id, tenant, run_at, locked_until, traceparent, links)
SELECT i.id, j.tenant, j.run_at, j.locked_until, j.traceparent, j.links
FROM jobs j JOIN intents i ON i.key = j.intent_key;

CREATE TABLE attempts_numbered (
    intent_id            BIGINT NOT NULL,
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
);
INSERT INTO attempts_numbered (intent_id, n, started_at, finished_at, outcome, error_class, provider_status,
    provider_message_id, error, retry_after, retry_at, provider, possible_duplicate)
SELECT i.id, a.n, a.started_at, a.finished_at, a.outcome, a.error_class, a.provider_status,
    a.provider_message_id, a.error, a.retry_after, a.retry_at, a.provider, a.possible_duplicate
FROM attempts a JOIN intents i ON i.key = a.intent_key
ORDER BY i.id, a.n;

DROP TABLE jobs;
DROP TABLE attempts;
ALTER TABLE jobs_numbered RENAME TO jobs;
ALTER TABLE jobs RENAME CONSTRAINT jobs_numbered_pkey TO jobs_pkey;
ALTER TABLE attempts_numbered RENAME TO attempts;
ALTER TABLE attempts RENAME CONSTRAINT attempts_numbered_pkey TO attempts_pkey;

-- Each index as it stood after 0066.
CREATE INDEX jobs_due ON jobs (run_at);
CREATE INDEX attempts_by_provider_message_id ON attempts (provider_message_id)
    WHERE provider_message_id IS NOT NULL;
CREATE INDEX attempts_by_finished ON attempts (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX attempts_with_error ON attempts (finished_at) WHERE error IS NOT NULL;
