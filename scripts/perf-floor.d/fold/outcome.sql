-- Outcome, the fold variant: the attempt finished, the intent to `sent` and out of the queue.
WITH a AS (UPDATE attempts a SET finished_at = (1796284800000000 + 1000), outcome = 'accepted', provider_status = 200,
                                 provider_message_id = 'SM' || substr(c.k, 1, 30), provider = 'http'
           FROM claimed c WHERE a.intent_id = c.id AND a.n = c.n AND a.finished_at IS NULL RETURNING a.intent_id)
UPDATE intents SET state = 'sent', updated_at = (1796284800000000 + 1000), run_at = NULL, locked_until = NULL
FROM a WHERE id = a.intent_id;
