-- scripts/perf-floor's pgbench script: this header, then a variant's ingest, claim and
-- outcome: @BATCH@ notifications' whole life, set-wise, in the three transactions Herald commits for them, on Herald's tables.
-- Sizes as Herald writes them: 32-hex intent keys, 64-hex digests, a ~95-character request
-- identity, a 337-character stored answer, a 400-character event body, a 160-character SMS.
-- `claimed` (a temporary table, not logged) carries the claimed keys from the claim to the
-- outcome, as the worker's memory does (with the intent's number, as the store reads it).
SET client_min_messages = warning;
CREATE TEMP TABLE IF NOT EXISTS claimed (k text, n bigint, id bigint);
TRUNCATE claimed;

