//! Dialect-free Rust both backends' queries share: the ingest savepoint
//! loop's [`Step`], paging, the final states as retention's SQL list, and
//! the report of a batch of recorded outcomes. The SQL itself is written out
//! per backend, in `sqlite/` and `postgres/`.

use super::rows::*;
use crate::intent::State;
use std::collections::HashSet;
use std::sync::LazyLock;

/// How one request's statements ended, before its savepoint (or, for a
/// request alone on SQLite, its transaction) ends.
pub enum Step {
    Done(IngestOutcome),
    /// Another transaction recorded this request identity first.
    Raced,
}

/// Trims a `limit + 1` fetch to `limit` and says where the next page starts.
pub(crate) fn page<T>(items: &mut Vec<T>, limit: u32, cursor: impl Fn(&T) -> Cursor) -> Page<T> {
    let more = items.len() > limit as usize;
    items.truncate(limit as usize);
    let next = if more { items.last().map(cursor) } else { None };
    Page { items: std::mem::take(items), next }
}

/// The final states ([`State::is_final`]) as the SQL list retention
/// matches: `'sent', 'dead', …`, written from the rule, so the rule has one
/// place.
pub fn final_states() -> &'static str {
    static LIST: LazyLock<String> =
        LazyLock::new(|| State::finals().map(|s| format!("'{}'", s.as_str())).collect::<Vec<_>>().join(", "));
    &LIST
}

/// Which outcomes were applied, and which were stale.
pub fn report(finished: &[FinishedAttempt], applied: &[(String, i64)]) -> FinishReport {
    let applied = applied_set(applied);
    let stale: Vec<(String, i64)> =
        finished.iter().filter(|f| !applied.contains(&(f.key.as_str(), f.n))).map(|f| (f.key.clone(), f.n)).collect();
    FinishReport { applied: finished.len() - stale.len(), stale }
}

/// The (key, n) pairs a recording applied, for lookups by outcome.
pub fn applied_set(applied: &[(String, i64)]) -> HashSet<(&str, i64)> {
    applied.iter().map(|(k, n)| (k.as_str(), *n)).collect()
}

/// One batch of retention's `contents` step (`$1` the cutoff, `$2` the
/// batch): an intent's rendered message and the event body in its row go
/// at the payloads' age, counted from the intent's last change (a replay is
/// one), once nothing pending or visible still needs them: no job of its own
/// and no inbox card showing it. Held digest members are covered by age, as
/// payloads are. The outer conditions are checked again on the row itself,
/// so that on Postgres an intent a replay changed meanwhile is left alone.
/// Both sides name the predicate of `intents_content_by_age` as written, so
/// each backend walks that partial index.
pub const CONTENTS_PRUNE: &str = "UPDATE intents SET content = NULL, event_body = NULL
     WHERE created_at < $1 AND updated_at < $1 AND (content IS NOT NULL OR event_body IS NOT NULL) AND key IN (
         SELECT i.key FROM intents i
         WHERE i.created_at < $1 AND (i.content IS NOT NULL OR i.event_body IS NOT NULL) AND i.updated_at < $1
           AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.intent_id = i.id)
           AND NOT EXISTS (SELECT 1 FROM inbox_cards c WHERE c.intent_key = i.key)
         LIMIT $2)";

/// An intent's job, named by the intent's number (`$1` its key, `$2` the
/// tenant, `$3` when it is due, `$4` the trace it carries): the same
/// statement on both backends, for the paths that queue one intent at a time.
pub const JOB_INSERT: &str = "INSERT INTO jobs (intent_id, tenant, run_at, traceparent)
     SELECT id, $2, $3, $4 FROM intents WHERE key = $1";

/// The key of the intent whose attempt a provider's message id names (`$1`),
/// its latest attempt's where several do: the same statement on both
/// backends, for a receipt that names the provider's id rather than the key.
pub const INTENT_OF_PROVIDER_MESSAGE_ID: &str = "SELECT i.key FROM attempts a JOIN intents i ON i.id = a.intent_id
     WHERE a.provider_message_id = $1 ORDER BY a.n DESC LIMIT 1";

/// An intent's rendered message and the body of the request that created it
/// (`$1` its key), each in its row where it was written there: the message
/// since migration 0065, the body since 0066 when that request planned only
/// this intent. Otherwise each is the payload row of its digest (a
/// broadcast's body, stored once for all its intents, and anything written
/// before those migrations). The lists (dead letters, digest members) read
/// both the same way.
pub const MESSAGE_AND_BODY_OF_INTENT: &str =
    "SELECT COALESCE(i.content, (SELECT p.body FROM payloads p WHERE p.digest = i.payload_digest)),
            COALESCE(i.event_body, (SELECT e.body FROM payloads e WHERE e.digest = i.event_digest))
     FROM intents i WHERE i.key = $1";

/// An intent's replays from the dead letters, oldest first: the same
/// statement on both backends (`$1`, the intent's key).
pub const REPLAYS_OF_INTENT: &str = "SELECT replayed_at, previous_reason, requested_by FROM dead_letter_replays
     WHERE intent_key = $1 ORDER BY replayed_at";
