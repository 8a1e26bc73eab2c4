-- Claim: the job leased from the due queue under SKIP LOCKED, the intent to `sending` found
-- by its number, the attempt row under that number; the sent text read.
BEGIN;
WITH c AS (UPDATE jobs SET locked_until = (1796284800000000 + 30000000)
           WHERE intent_id IN (SELECT intent_id FROM jobs WHERE run_at <= 1796284800000000 AND locked_until IS NULL
                                ORDER BY run_at LIMIT @BATCH@ FOR UPDATE SKIP LOCKED)
           RETURNING intent_id),
     i AS (UPDATE intents SET state = 'sending', attempts = attempts + 1, updated_at = 1796284800000000
           FROM c WHERE id = c.intent_id RETURNING id, key, attempts, content),
     a AS (INSERT INTO attempts (intent_id, n, started_at) SELECT id, attempts, 1796284800000000 FROM i),
     kept AS (INSERT INTO claimed SELECT key, attempts, id FROM i)
SELECT count(i.content) FROM i;
COMMIT;
