-- The body of the request that created an intent (the canonical event with
-- its audience, `event_digest`'s preimage) lives in the intent's own row
-- when that request planned exactly one intent, the common case of a single
-- notification, instead of a payload row keyed by its hash: on a filled
-- database that row's key put each event on an index page no other row of
-- its commit touched, as the rendered message's did before 0065. A request
-- that planned several intents (a broadcast) still stores its body once, as
-- a payload row: inlining it would store an audience of N recipients N times.
-- An intent written before this migration finds its body by `event_digest`.
--
-- Retention clears `event_body` with `content`, at the `payloads` age
-- (`PruneStep::Contents`); the index it walks now holds every intent that
-- still carries either.
ALTER TABLE intents ADD COLUMN IF NOT EXISTS event_body TEXT;
DROP INDEX IF EXISTS intents_content_by_age;
CREATE INDEX IF NOT EXISTS intents_content_by_age ON intents (created_at)
    WHERE content IS NOT NULL OR event_body IS NOT NULL;
