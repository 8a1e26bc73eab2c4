//! The ingest path on SQLite: request lookups, the group-committed ingest
//! (its transaction is [`SqliteStore::ingest_tx`]), and the ingest tally.

use super::{SqliteStore, keys_arg, reads};
use crate::store::{
    Ingest, IngestOutcome, IngestStore, IntentStatus, RequestLookup, RequestSeen, StoreError, StoreResult, TallyRow,
    gathered_or_each_alone, ingest_batch_or_alone,
};
use async_trait::async_trait;
use sqlx::{SqliteConnection, SqlitePool};
use std::collections::{BTreeSet, HashMap};

/// The request records of one tenant (`$2`) among a list of identities (`$1`,
/// a JSON array), read before planning: SQLite's `IN` list searches the
/// primary key once per identity. (Postgres needs its statement written
/// otherwise: [`crate::store::REQUESTS_OF_TENANT`].)
pub(super) const REQUESTS_OF_TENANT: &str = "SELECT identity, fingerprint, response FROM requests
         WHERE tenant = $2 AND identity IN (SELECT value FROM json_each($1))";

/// Adds to the tally, a statement per row (a batch holds one row per tenant,
/// minute and kind, so a handful a second at most).
pub(super) async fn ingest_tally_add(pool: &SqlitePool, rows: &[TallyRow]) -> StoreResult<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut tx = pool.begin().await?;
    for r in rows {
        sqlx::query(
            "INSERT INTO ingest_tally (tenant, minute, kind, n) VALUES ($1, $2, $3, $4)
             ON CONFLICT (tenant, minute, kind) DO UPDATE SET n = ingest_tally.n + excluded.n",
        )
        .bind(&r.tenant)
        .bind(r.minute_us)
        .bind(r.kind.as_str())
        .bind(r.n)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(())
}

/// [`requests_seen`] of one identity.
pub(super) async fn request_seen(
    conn: &mut SqliteConnection,
    tenant: &str,
    identity: &str,
    fingerprint: &str,
) -> StoreResult<Option<RequestSeen>> {
    let lookup = RequestLookup { tenant: tenant.into(), identity: identity.into(), fingerprint: fingerprint.into() };
    requests_seen(conn, std::slice::from_ref(&lookup)).await?.pop().unwrap_or(Ok(None))
}

/// The stored answers for request identities, answered in order: a
/// replay when the fingerprint matches (its intents as they are now),
/// else a mismatch; a record without a response (not yet answered)
/// counts as unseen. Per tenant one statement reads the records and
/// one the replays' intents. An identity asked for many times (a
/// duplicate storm's concurrent requests) is read once; a record whose
/// stored answer cannot be read fails only the lookups that name it.
/// Run inside a write transaction, which must see its own writes; the
/// reads before planning run [`super::reads::requests_seen`], the same
/// steps on a read connection of their own.
pub(super) async fn requests_seen(
    conn: &mut SqliteConnection,
    lookups: &[RequestLookup],
) -> StoreResult<Vec<StoreResult<Option<RequestSeen>>>> {
    let mut seen = Seen::unseen(lookups);
    for (tenant, identities) in Seen::by_tenant(lookups) {
        let rows =
            sqlx::query_as(REQUESTS_OF_TENANT).bind(keys_arg(&identities)).bind(tenant).fetch_all(&mut *conn).await?;
        let keys = seen.answer(tenant, rows);
        if keys.is_empty() {
            continue;
        }
        let now = intents_status(&mut *conn, tenant, &keys).await?;
        seen.refresh(tenant, &now);
    }
    Ok(seen.answers)
}

/// The steps of [`requests_seen`] between its reads, for either connection.
pub(super) struct Seen<'a> {
    lookups: &'a [RequestLookup],
    pub(super) answers: Vec<StoreResult<Option<RequestSeen>>>,
}

impl<'a> Seen<'a> {
    pub(super) fn unseen(lookups: &'a [RequestLookup]) -> Seen<'a> {
        Seen { lookups, answers: lookups.iter().map(|_| Ok(None)).collect() }
    }

    /// The identities asked for, by tenant, each once and in order.
    pub(super) fn by_tenant(lookups: &[RequestLookup]) -> Vec<(&str, Vec<String>)> {
        let mut identities: HashMap<&str, BTreeSet<&str>> = HashMap::new();
        for l in lookups {
            identities.entry(&l.tenant).or_default().insert(&l.identity);
        }
        (identities.into_iter()).map(|(tenant, ids)| (tenant, ids.into_iter().map(str::to_string).collect())).collect()
    }

    /// Answers the tenant's lookups from its records (identity,
    /// fingerprint, response); the keys of the intents its replays name,
    /// each once, to be read as they are now.
    pub(super) fn answer(&mut self, tenant: &str, rows: Vec<(String, String, Option<String>)>) -> Vec<String> {
        let records: HashMap<String, (String, Option<String>)> =
            rows.into_iter().map(|(identity, stored, response)| (identity, (stored, response))).collect();
        let mut keys = BTreeSet::new();
        for (l, seen) in self.lookups.iter().zip(&mut self.answers).filter(|(l, _)| l.tenant == tenant) {
            let Some((stored, response)) = records.get(&l.identity) else { continue };
            *seen = RequestSeen::of_record(&l.fingerprint, stored, response.as_deref());
            if let Ok(Some(RequestSeen::Replay(response))) = seen {
                keys.extend(response.intent_keys());
            }
        }
        keys.into_iter().collect()
    }

    /// The tenant's replays, their intents as `now` has them.
    pub(super) fn refresh(&mut self, tenant: &str, now: &[IntentStatus]) {
        for (_, seen) in self.lookups.iter().zip(&mut self.answers).filter(|(l, _)| l.tenant == tenant) {
            if let Ok(Some(RequestSeen::Replay(response))) = seen {
                response.refresh(now);
            }
        }
    }
}

/// The content digest an event key was accepted with, if it was.
pub(super) async fn event_digest(conn: &mut SqliteConnection, event_key: &str) -> StoreResult<Option<String>> {
    Ok(sqlx::query_scalar("SELECT content_digest FROM events WHERE event_key = $1")
        .bind(event_key)
        .fetch_optional(conn)
        .await?)
}

/// The decision, reason, state and mode of these intents (`$1`, a JSON
/// array of keys) of one tenant (`$2`) as they are now. Read by key, the
/// tenant only a filter on what the keys find: `tenant || ''` is no
/// column an index can search by, so no planner can answer through a
/// `(tenant, …)` index and read the whole tenant (SQLite without
/// statistics did, and a replay slowed as the tenant grew;
/// `tests/hot_path_plans.rs`).
pub(super) const INTENTS_STATUS: &str = "SELECT key, decision, reason, state, mode FROM intents
         WHERE tenant || '' = $2 AND key IN (SELECT value FROM json_each($1))";

/// [`INTENTS_STATUS`].
pub(super) async fn intents_status(
    conn: &mut SqliteConnection,
    tenant: &str,
    keys: &[String],
) -> StoreResult<Vec<IntentStatus>> {
    let rows = sqlx::query_as(INTENTS_STATUS).bind(keys_arg(keys)).bind(tenant).fetch_all(conn).await?;
    Ok(rows)
}

#[async_trait]
impl IngestStore for SqliteStore {
    async fn request_find(&self, tenant: &str, identity: &str, fingerprint: &str) -> StoreResult<Option<RequestSeen>> {
        let lookup =
            RequestLookup { tenant: tenant.into(), identity: identity.into(), fingerprint: fingerprint.into() };
        let found = self.reads.read(move |db| reads::requests_seen(db, std::slice::from_ref(&lookup))).await?;
        found.into_iter().next().unwrap_or(Ok(None))
    }

    async fn requests_find(&self, lookups: &[RequestLookup]) -> Vec<StoreResult<Option<RequestSeen>>> {
        let asked = lookups.to_vec();
        let gathered = self.reads.read(move |db| reads::requests_seen(db, &asked)).await;
        gathered_or_each_alone("request lookup", lookups, gathered, |l| {
            self.request_find(&l.tenant, &l.identity, &l.fingerprint)
        })
        .await
    }

    async fn events_ingest_batch(&self, batch: Vec<Ingest>) -> Vec<StoreResult<IngestOutcome>> {
        let (store, n) = (self.clone(), batch.len());
        let written =
            self.thread.run(async move { Ok(ingest_batch_or_alone(&batch, |b| store.ingest_tx(b)).await) }).await;
        written.unwrap_or_else(|_| (0..n).map(|_| Err(StoreError::Unanswered("SQLite writer"))).collect())
    }

    async fn event_digest(&self, event_key: &str) -> StoreResult<Option<String>> {
        let mut conn = self.reader.acquire().await?;
        event_digest(&mut conn, event_key).await
    }

    async fn intents_status(&self, tenant: &str, keys: &[String]) -> StoreResult<Vec<IntentStatus>> {
        let mut conn = self.reader.acquire().await?;
        intents_status(&mut conn, tenant, keys).await
    }

    async fn ingest_tally_add(&self, rows: &[TallyRow]) -> StoreResult<()> {
        ingest_tally_add(&self.writer, rows).await
    }
}
