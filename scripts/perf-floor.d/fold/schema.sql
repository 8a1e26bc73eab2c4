-- Candidate: the job folded into the intent. The queue is a partial index on the intent's
-- due time, which an intent leaves when its outcome clears it; the lease is a column no
-- index holds, so a claim's update may stay HOT.
ALTER TABLE intents ADD COLUMN run_at BIGINT, ADD COLUMN locked_until BIGINT;
CREATE INDEX intents_due ON intents (run_at) WHERE run_at IS NOT NULL;
