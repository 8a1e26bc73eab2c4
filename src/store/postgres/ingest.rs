//! The ingest path on Postgres: request lookups, the group-committed ingest
//! (its transaction is [`PostgresStore::ingest_tx`]), and the ingest tally.

use super::{PostgresStore, q};
use crate::store::{
    Ingest, IngestOutcome, IngestStore, IntentStatus, RequestLookup, RequestSeen, StoreResult, TallyRow,
    gathered_or_each_alone, ingest_batch_or_alone,
};
use async_trait::async_trait;
use sqlx::PgPool;

/// Adds to the tally, a statement per row (a batch holds one row per tenant,
/// minute and kind, so a handful a second at most).
pub(super) async fn ingest_tally_add(pool: &PgPool, rows: &[TallyRow]) -> StoreResult<()> {
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

#[async_trait]
impl IngestStore for PostgresStore {
    async fn request_find(&self, tenant: &str, identity: &str, fingerprint: &str) -> StoreResult<Option<RequestSeen>> {
        let mut conn = self.pool.acquire().await?;
        q::request_seen(&mut conn, tenant, identity, fingerprint).await
    }

    async fn requests_find(&self, lookups: &[RequestLookup]) -> Vec<StoreResult<Option<RequestSeen>>> {
        let gathered = match self.pool.acquire().await {
            Ok(mut conn) => q::requests_seen(&mut conn, lookups).await,
            Err(e) => Err(e.into()),
        };
        gathered_or_each_alone("request lookup", lookups, gathered, |l| {
            self.request_find(&l.tenant, &l.identity, &l.fingerprint)
        })
        .await
    }

    async fn events_ingest_batch(&self, batch: Vec<Ingest>) -> Vec<StoreResult<IngestOutcome>> {
        ingest_batch_or_alone(&batch, |b| self.ingest_tx(b)).await
    }

    async fn event_digest(&self, event_key: &str) -> StoreResult<Option<String>> {
        let mut conn = self.pool.acquire().await?;
        q::event_digest(&mut conn, event_key).await
    }

    async fn intents_status(&self, tenant: &str, keys: &[String]) -> StoreResult<Vec<IntentStatus>> {
        let mut conn = self.pool.acquire().await?;
        q::intents_status(&mut conn, tenant, keys).await
    }

    async fn ingest_tally_add(&self, rows: &[TallyRow]) -> StoreResult<()> {
        ingest_tally_add(&self.pool, rows).await
    }
}
