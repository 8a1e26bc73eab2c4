//! The queries not yet written out per backend (ingest, queue, digests,
//! receipts and suppressions, ops): written once, as a macro instantiated for
//! each database type; the rest are plain functions in `sqlite/` and
//! `postgres/`, a file per role, and these will follow. What
//! differs between the databases is passed in: how a list of keys is matched
//! (`= ANY($1)` with an array on Postgres, `IN (SELECT value FROM json_each($1))`
//! with a JSON array on SQLite), how that list is bound, and where a key list
//! meets a composite key, the whole statement.
//!
//! That statement is the request records of one tenant among a list of
//! identities, read before planning. Postgres keeps a statement's generic
//! plan, and one made while `requests` was small matched `tenant = $2 AND
//! identity = ANY($1)` by a bitmap scan of the tenant's rows, filtered: 9,900
//! rows removed per lookup at 10,000 requests (auto_explain, the ingest
//! benchmark), where a join from the identities hashed the same scan. On
//! Postgres each identity is probed through a `LATERAL … LIMIT 1`, planned as
//! one primary-key probe per identity from an empty table on (a plan, not a
//! promise: a test on Postgres checks it); SQLite's `IN` list searches the
//! primary key once per identity.
//!
//! The backend-specific parts (claiming with `SKIP LOCKED`, batch writes with
//! `UNNEST`, the SQLite writer connection) stay in `postgres/` / `sqlite/`.
//!
//! The column lists below stay macros, not constants: the statements that use
//! them are built with `concat!`, which takes only literals.

pub(crate) mod digests;
pub(crate) mod ingest;
pub(crate) mod ops;
pub(crate) mod queue;
pub(crate) mod receipts;

use super::rows::*;
use crate::intent::State;
use std::collections::HashSet;
use std::sync::LazyLock;

/// Is the delivered version newer than the card's? Versionless entities order
/// by `occurred_at`.
macro_rules! newer_than_card {
    () => {
        "(COALESCE(excluded.version, -1) > COALESCE(inbox_cards.version, -1) \
          OR (COALESCE(excluded.version, -1) = COALESCE(inbox_cards.version, -1) \
              AND excluded.occurred_at > inbox_cards.occurred_at))"
    };
}
pub(crate) use newer_than_card;

/// Column lists, spelled out: `SELECT *` would change shape under a running
/// process when a migration adds a column, and prepared-statement caches
/// (sqlx's and Postgres's) do not survive that.
macro_rules! intent_columns {
    () => {
        "i.key, i.tenant, i.event_type, i.entity_type, i.entity_id, i.entity_version, i.occurred_at, i.channel, \
         i.recipient_id, i.destination, i.locale, i.template_id, i.template_revision, i.event_digest, i.payload_digest, \
         i.decision, i.reason, i.detail, i.state, i.attempts, i.created_at, i.updated_at, i.preferences_version, i.link_key, \
         i.retry_base, i.mode"
    };
}
pub(crate) use intent_columns;

macro_rules! attempt_columns {
    () => {
        "intent_key, n, started_at, finished_at, outcome, error_class, provider_status, provider_message_id, error, \
         retry_after, retry_at, provider, possible_duplicate"
    };
}
pub(crate) use attempt_columns;

macro_rules! recipient_columns {
    () => {
        "tenant, id, email, phone, locale, timezone, webhook_url, preferences, preferences_version, updated_at"
    };
}
pub(crate) use recipient_columns;

macro_rules! rejected_columns {
    () => {
        "id, tenant, stream, consumer, subject, stream_seq, deliveries, status, code, message, body, created_at"
    };
}
pub(crate) use rejected_columns;

macro_rules! shared_queries {
    (
        $db:ty,
        $in_keys:literal,
        $requests_of:expr,
        $keys_arg:path,
        $for_update:literal,
        $json_rows:literal $(,)?
    ) => {
        use crate::intent::{Decision, OutcomeClass, Reason, State};
        use crate::lifecycle::Change;
        use crate::store::queries::{intent_columns, page};
        use crate::store::rows::*;
        use crate::store::rows_receipts::*;
        use crate::store::{StoreError, StoreResult};
        use sqlx::{Pool, QueryBuilder, Transaction};
        use std::collections::HashMap;

        type Tx<'a> = Transaction<'a, $db>;

        crate::store::queries::ingest::ingest_queries!($db, $in_keys, $requests_of, $keys_arg, $for_update);
        crate::store::queries::queue::queue_queries!($db, $in_keys, $keys_arg, $for_update, $json_rows);
        crate::store::queries::digests::digests_queries!($db, $in_keys, $keys_arg, $for_update);
        crate::store::queries::ops::ops_queries!($db, $in_keys, $keys_arg, $for_update);
        crate::store::queries::receipts::receipts_queries!($db, $in_keys, $keys_arg, $for_update);
    };
}
pub(crate) use shared_queries;

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
