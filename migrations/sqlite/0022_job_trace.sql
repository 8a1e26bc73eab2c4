-- The trace a job continues: the W3C traceparent of the span that queued it
-- (the ingest request's), so the worker's attempt spans join that trace in
-- whichever process claims the job, on every retry. NULL for jobs queued by
-- no request (a digest closing, a dead letter replayed).
ALTER TABLE jobs ADD COLUMN traceparent TEXT;
