-- Candidate: the time indexes only retention reads, as BRIN. Rows arrive in time order, so
-- a block range's summary is as good as an entry per row for "older than the cut-off",
-- and an insert into a range not yet summarised writes nothing to the index.
DROP INDEX requests_by_age;
CREATE INDEX requests_by_age ON requests USING brin (created_at);
DROP INDEX events_by_age;
CREATE INDEX events_by_age ON events USING brin (created_at);
DROP INDEX payloads_by_age;
CREATE INDEX payloads_by_age ON payloads USING brin (created_at);
DROP INDEX attempts_by_finished;
CREATE INDEX attempts_by_finished ON attempts USING brin (finished_at);
