# Claim, the linked variant: base's claim, the job leased and the intent found by the intent's
# number, the attempt row under that number.
1,2c\
-- Claim, the linked variant: the job leased, the intent to `sending` found by its number, the\
-- attempt row under that number; the sent text read.
s/intent_key IN (SELECT intent_key FROM jobs/intent_id IN (SELECT intent_id FROM jobs/
s/RETURNING intent_key)/RETURNING intent_id)/
s/FROM c WHERE key = c.intent_key RETURNING key, attempts, content)/FROM c WHERE id = c.intent_id RETURNING id, key, attempts, content)/
s/INSERT INTO attempts (intent_key, n, started_at) SELECT key, attempts/INSERT INTO attempts (intent_id, n, started_at) SELECT id, attempts/
s/INSERT INTO claimed SELECT key, attempts FROM i)/INSERT INTO claimed SELECT key, attempts, id FROM i)/
