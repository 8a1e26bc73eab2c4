# Outcome, the linked variant: base's outcome, the attempt, the intent and the job each found by
# the intent's number.
1c\
-- Outcome, the linked variant: the attempt finished, the intent to `sent`, the job deleted,\
-- each found by the intent's number.
s/'SM' || substr(a.intent_key, 1, 30)/'SM' || substr(c.k, 1, 30)/
s/WHERE a.intent_key = c.k AND a.n = c.n AND a.finished_at IS NULL RETURNING a.intent_key)/WHERE a.intent_id = c.id AND a.n = c.n AND a.finished_at IS NULL RETURNING a.intent_id)/
s/FROM a WHERE key = a.intent_key)/FROM a WHERE id = a.intent_id)/
s/WHERE j.intent_key = a.intent_key)/WHERE j.intent_id = a.intent_id)/
