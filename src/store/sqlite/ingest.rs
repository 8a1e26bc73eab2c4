//! The ingest path on SQLite: request lookups, the group-committed ingest
//! (its transaction is [`SqliteStore::ingest_tx`]), and the ingest tally.

use super::{SqliteStore, keys_arg};
use crate::store::{
    Ingest, IngestOutcome, IngestStore, IntentStatus, RequestLookup, RequestSeen, StoreError, StoreResult, TallyRow,
    gathered_or_each_alone, ingest_batch_or_alone,
};
use async_trait::async_trait;
use sqlx::{SqliteConnection, SqlitePool};

/// The request records of one tenant (`$2`) among a list of identities (`$1`,
/// a JSON array), read before planning: SQLite's `IN` list searches the
/// primary key once per identity. (Postgres needs its statement written
/// otherwise: [`crate::store::REQUESTS_OF_TENANT`].)
const REQUESTS_OF_TENANT: &str = "SELECT identity, fingerprint, response FROM requests
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
pub(super) async fn requests_seen(
    conn: &mut SqliteConnection,
    lookups: &[RequestLookup],
) -> StoreResult<Vec<StoreResult<Option<RequestSeen>>>> {
    use std::collections::{BTreeSet, HashMap};
    let mut identities: HashMap<&str, BTreeSet<String>> = HashMap::new();
    for l in lookups {
        identities.entry(&l.tenant).or_default().insert(l.identity.clone());
    }
    let mut seen: Vec<StoreResult<Option<RequestSeen>>> = lookups.iter().map(|_| Ok(None)).collect();
    for (tenant, identities) in identities {
        let identities: Vec<String> = identities.into_iter().collect();
        // A probe of the primary key per identity, never a scan of
        // the tenant's rows (see [`REQUESTS_OF_TENANT`]).
        let rows: Vec<(String, String, Option<String>)> =
            sqlx::query_as(REQUESTS_OF_TENANT).bind(keys_arg(&identities)).bind(tenant).fetch_all(&mut *conn).await?;
        let records: HashMap<String, (String, Option<String>)> =
            rows.into_iter().map(|(identity, stored, response)| (identity, (stored, response))).collect();
        // A replay answers with its intents as they are now, each
        // intent read once however many replays name it.
        let mut keys = BTreeSet::new();
        for (l, seen) in lookups.iter().zip(&mut seen).filter(|(l, _)| l.tenant == tenant) {
            let Some((stored, response)) = records.get(&l.identity) else { continue };
            *seen = RequestSeen::of_record(&l.fingerprint, stored, response.as_deref());
            if let Ok(Some(RequestSeen::Replay(response))) = seen {
                keys.extend(response.intent_keys());
            }
        }
        if keys.is_empty() {
            continue;
        }
        let now = intents_status(&mut *conn, tenant, &keys.into_iter().collect::<Vec<_>>()).await?;
        for (_, seen) in lookups.iter().zip(&mut seen).filter(|(l, _)| l.tenant == tenant) {
            if let Ok(Some(RequestSeen::Replay(response))) = seen {
                response.refresh(&now);
            }
        }
    }
    Ok(seen)
}

/// The content digest an event key was accepted with, if it was.
pub(super) async fn event_digest(conn: &mut SqliteConnection, event_key: &str) -> StoreResult<Option<String>> {
    Ok(sqlx::query_scalar("SELECT content_digest FROM events WHERE event_key = $1")
        .bind(event_key)
        .fetch_optional(conn)
        .await?)
}

/// The decision, reason and state of these intents as they are now.
/// Read by key, the tenant only a filter on what the keys find:
/// `tenant || ''` is no column an index can search by, so no planner
/// can answer through a `(tenant, …)` index and read the whole
/// tenant (SQLite without statistics did, and a replay slowed as the
/// tenant grew; `tests/hot_path_plans.rs`).
pub(super) async fn intents_status(
    conn: &mut SqliteConnection,
    tenant: &str,
    keys: &[String],
) -> StoreResult<Vec<IntentStatus>> {
    let rows = sqlx::query_as(
        "SELECT key, decision, reason, state, mode FROM intents WHERE tenant || '' = $2
         AND key IN (SELECT value FROM json_each($1))",
    )
    .bind(keys_arg(keys))
    .bind(tenant)
    .fetch_all(conn)
    .await?;
    Ok(rows)
}

#[async_trait]
impl IngestStore for SqliteStore {
    async fn request_find(&self, tenant: &str, identity: &str, fingerprint: &str) -> StoreResult<Option<RequestSeen>> {
        let mut conn = self.reader.acquire().await?;
        request_seen(&mut conn, tenant, identity, fingerprint).await
    }

    async fn requests_find(&self, lookups: &[RequestLookup]) -> Vec<StoreResult<Option<RequestSeen>>> {
        let gathered = match self.reader.acquire().await {
            Ok(mut conn) => requests_seen(&mut conn, lookups).await,
            Err(e) => Err(e.into()),
        };
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
