-- The shadow report counts what was planned and posted in a time range (the
-- console's health page asks for the last hour, `herald shadow report` for
-- any range): by time, not by a scan of every intent or of the whole ingest
-- tally when the report is every tenant's (docs/console/query-plans.md).
CREATE INDEX intents_by_created ON intents (created_at);
CREATE INDEX ingest_tally_by_minute ON ingest_tally (minute);
