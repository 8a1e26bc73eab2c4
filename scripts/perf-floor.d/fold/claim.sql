-- Claim, the fold variant: the intent leased from the due queue under SKIP LOCKED and moved
-- to `sending` in the same update, the attempt row; the sent text read.
BEGIN;
WITH i AS (UPDATE intents SET locked_until = (1796284800000000 + 30000000), state = 'sending',
                              attempts = attempts + 1, updated_at = 1796284800000000
           WHERE key IN (SELECT key FROM intents WHERE run_at <= 1796284800000000 AND locked_until IS NULL
                         ORDER BY run_at LIMIT @BATCH@ FOR UPDATE SKIP LOCKED)
           RETURNING id, key, attempts, content),
     a AS (INSERT INTO attempts (intent_id, n, started_at) SELECT id, attempts, 1796284800000000 FROM i),
     kept AS (INSERT INTO claimed SELECT key, attempts, id FROM i)
SELECT count(i.content) FROM i;
COMMIT;

