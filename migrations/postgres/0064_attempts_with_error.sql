-- Retention clears the error text of attempts older than its cutoff
-- (src/store/postgres/retention.rs, `PruneStep::AttemptDiagnostics`): with only
-- `attempts_by_finished` to read, each pass walked every old attempt whose
-- text was already cleared before it found one to clear, a cost that grew with
-- the history (on a database of a million notifications, Postgres's CPU a
-- notification was a quarter higher under load). Only attempts that carry an
-- error have an entry here: a delivered attempt, the common case, writes none.
CREATE INDEX IF NOT EXISTS attempts_with_error ON attempts (finished_at) WHERE error IS NOT NULL;
