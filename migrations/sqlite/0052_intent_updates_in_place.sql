-- The same indexes as Postgres's (0052 there says why they moved: Postgres
-- can then change an intent's state in place). SQLite has no such updates,
-- but one schema keeps one set of queries, and each index dropped here is
-- one less entry written per intent.
--
-- * dead letters: `dead_at` is the intent's `updated_at` while it is a dead
--   letter and NULL otherwise; here a virtual generated column, computed
--   when read and when its index is written;
-- * a tenant's queue: a job carries its intent's tenant;
-- * retention: final intents by `created_at`.

ALTER TABLE intents ADD COLUMN dead_at INTEGER
    GENERATED ALWAYS AS (CASE WHEN state = 'dead' THEN updated_at END) VIRTUAL;

DROP INDEX intents_dead;
CREATE INDEX intents_dead ON intents (tenant, reason, dead_at, key) WHERE dead_at IS NOT NULL;
DROP INDEX intents_pending;
DROP INDEX intents_by_age;

-- SQLite adds a NOT NULL column only with a default, and none is right for a
-- tenant: the table is rebuilt. No job outlives its intent (retention deletes
-- only final intents, which have none); one that did would have nothing to
-- send, and is not kept.
CREATE TABLE jobs_with_tenant (
    intent_key    TEXT   PRIMARY KEY,
    tenant        TEXT   NOT NULL,
    run_at        BIGINT NOT NULL,
    locked_until  BIGINT,
    traceparent   TEXT,
    links         TEXT
);
INSERT INTO jobs_with_tenant (intent_key, tenant, run_at, locked_until, traceparent, links)
SELECT j.intent_key, i.tenant, j.run_at, j.locked_until, j.traceparent, j.links
FROM jobs j JOIN intents i ON i.key = j.intent_key;
DROP TABLE jobs;
ALTER TABLE jobs_with_tenant RENAME TO jobs;
CREATE INDEX jobs_due ON jobs (run_at);
CREATE INDEX jobs_by_tenant ON jobs (tenant, run_at);
