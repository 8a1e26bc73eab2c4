-- Outcome: the attempt finished, the intent to `sent`, the job deleted, each found by the
-- intent's number.
WITH a AS (UPDATE attempts a SET finished_at = (1796284800000000 + 1000), outcome = 'accepted', provider_status = 200,
                                 provider_message_id = 'SM' || substr(c.k, 1, 30), provider = 'http'
           FROM claimed c WHERE a.intent_id = c.id AND a.n = c.n AND a.finished_at IS NULL RETURNING a.intent_id),
     i AS (UPDATE intents SET state = 'sent', updated_at = (1796284800000000 + 1000) FROM a WHERE id = a.intent_id),
     d AS (DELETE FROM jobs j USING a WHERE j.intent_id = a.intent_id)
SELECT count(*) FROM a;
