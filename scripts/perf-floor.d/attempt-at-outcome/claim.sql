-- Claim, the attempt-at-outcome variant: no attempt row. The intent's `sending`, its attempt
-- count and its `updated_at` would stand for the attempt in flight (its number and start), so
-- a crash mid-call still leaves that evidence; the attempt's row is written once, whole, with
-- its outcome.
BEGIN;
WITH c AS (UPDATE jobs SET locked_until = (1796284800000000 + 30000000)
           WHERE intent_id IN (SELECT intent_id FROM jobs WHERE run_at <= 1796284800000000 AND locked_until IS NULL
                                ORDER BY run_at LIMIT @BATCH@ FOR UPDATE SKIP LOCKED)
           RETURNING intent_id),
     i AS (UPDATE intents SET state = 'sending', attempts = attempts + 1, updated_at = 1796284800000000
           FROM c WHERE id = c.intent_id RETURNING id, key, attempts, content),
     kept AS (INSERT INTO claimed SELECT key, attempts, id FROM i)
SELECT count(i.content) FROM i;
COMMIT;
