-- Retention clears the error text of attempts older than its cutoff
-- (src/store/sqlite/retention.rs, `PruneStep::AttemptDiagnostics`): with only
-- `attempts_by_finished` to read, each pass walked every old attempt whose
-- text was already cleared before it found one to clear. On a database of a
-- million notifications one pass held the one writer for 1.8 s, and every
-- request waited behind it (ingest p99 0.9 s). Only attempts that carry an
-- error have an entry here: a delivered attempt, the common case, writes none.
CREATE INDEX IF NOT EXISTS attempts_with_error ON attempts (finished_at) WHERE error IS NOT NULL;
