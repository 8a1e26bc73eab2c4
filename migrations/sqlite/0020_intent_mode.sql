-- Shadow mode (observe-only): whether an intent is delivered (`live`) or only
-- observed (`shadow`, it ends `shadowed` where it would have been sent). Decided
-- when the intent is planned and kept with it, so switching a route from
-- shadow to live changes only what is planned afterwards. Intents planned
-- before this column existed were live.
ALTER TABLE intents ADD COLUMN mode TEXT NOT NULL DEFAULT 'live';
