-- Outcome, the attempt-at-outcome variant: the attempt's row written whole, the intent to
-- `sent`, the job deleted. An outcome is reported at least once, and a rescue may have
-- written the same attempt's row first: the conflict on the attempt's key is where a repeat
-- or a stale outcome would change nothing (a row written unfinished, by a build that wrote
-- it at the claim, is finished).
WITH a AS (INSERT INTO attempts (intent_id, n, started_at, finished_at, outcome, provider_status, provider_message_id, provider)
           SELECT c.id, c.n, 1796284800000000, (1796284800000000 + 1000), 'accepted', 200, 'SM' || substr(c.k, 1, 30), 'http'
           FROM claimed c
           ON CONFLICT (intent_id, n) DO UPDATE SET finished_at = excluded.finished_at, outcome = excluded.outcome,
               provider_status = excluded.provider_status, provider_message_id = excluded.provider_message_id,
               provider = excluded.provider WHERE attempts.finished_at IS NULL
           RETURNING intent_id),
     i AS (UPDATE intents SET state = 'sent', updated_at = (1796284800000000 + 1000) FROM a WHERE id = a.intent_id),
     d AS (DELETE FROM jobs j USING a WHERE j.intent_id = a.intent_id)
SELECT count(*) FROM a;
