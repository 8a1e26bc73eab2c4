-- The trace that planned an intent: the W3C traceparent of the request (or
-- of the digest closing) whose transaction created it, kept with the intent
-- because its job is gone once it is sent or dead. Work queued later by
-- something else - a dead letter replayed, a digest of its members - links
-- its spans to this trace. NULL for intents planned before this column.
ALTER TABLE intents ADD COLUMN traceparent TEXT;
-- The traces a job's attempts link to, as space-separated W3C traceparents
-- (a bounded number): the original request of a replayed dead letter, the
-- members' requests of a digest. NULL for a job its own request queued.
ALTER TABLE jobs ADD COLUMN links TEXT;
