-- Outcome: the attempt finished, the intent to `sent`, the job deleted.
WITH a AS (UPDATE attempts a SET finished_at = (1796284800000000 + 1000), outcome = 'accepted', provider_status = 200,
                                 provider_message_id = 'SM' || substr(a.intent_key, 1, 30), provider = 'http'
           FROM claimed c WHERE a.intent_key = c.k AND a.n = c.n AND a.finished_at IS NULL RETURNING a.intent_key),
     i AS (UPDATE intents SET state = 'sent', updated_at = (1796284800000000 + 1000) FROM a WHERE key = a.intent_key),
     d AS (DELETE FROM jobs j USING a WHERE j.intent_key = a.intent_key)
SELECT count(*) FROM a;
