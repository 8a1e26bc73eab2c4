-- Claim: the job leased from the due queue under SKIP LOCKED, the intent to `sending`, the
-- attempt row; the sent text read.
BEGIN;
WITH c AS (UPDATE jobs SET locked_until = (1796284800000000 + 30000000)
           WHERE intent_key IN (SELECT intent_key FROM jobs WHERE run_at <= 1796284800000000 AND locked_until IS NULL
                                ORDER BY run_at LIMIT @BATCH@ FOR UPDATE SKIP LOCKED)
           RETURNING intent_key),
     i AS (UPDATE intents SET state = 'sending', attempts = attempts + 1, updated_at = 1796284800000000
           FROM c WHERE key = c.intent_key RETURNING key, attempts, content),
     a AS (INSERT INTO attempts (intent_key, n, started_at) SELECT key, attempts, 1796284800000000 FROM i),
     kept AS (INSERT INTO claimed SELECT key, attempts FROM i)
SELECT count(i.content) FROM i;
COMMIT;
