//! The status outbox on SQLite: claiming what waits, marking what the bus
//! acknowledged, measuring the backlog.

use super::{SqliteStore, keys_arg};
use crate::store::{Publication, PublicationBacklog, PublicationClaim, PublicationStore, StoreResult};
use async_trait::async_trait;
use sqlx::SqlitePool;

pub(super) async fn publications_mark(pool: &SqlitePool, msg_ids: &[String], now_us: i64) -> StoreResult<u64> {
    if msg_ids.is_empty() {
        return Ok(0);
    }
    let n = sqlx::query(
        "UPDATE publications SET published_at = $2, leased_until = NULL
         WHERE published_at IS NULL AND msg_id IN (SELECT value FROM json_each($1))",
    )
    .bind(keys_arg(msg_ids))
    .bind(now_us)
    .execute(pool)
    .await?
    .rows_affected();
    Ok(n)
}

pub(super) async fn publications_backlog(pool: &SqlitePool) -> StoreResult<PublicationBacklog> {
    let (unpublished, oldest_at_us): (i64, Option<i64>) =
        sqlx::query_as("SELECT COUNT(*), MIN(at) FROM publications WHERE published_at IS NULL").fetch_one(pool).await?;
    Ok(PublicationBacklog { unpublished, oldest_at_us })
}

#[async_trait]
impl PublicationStore for SqliteStore {
    async fn publications_claim(&self, claim: PublicationClaim) -> StoreResult<Vec<Publication>> {
        // One writer: nothing to skip.
        let rows = sqlx::query_as(
            "UPDATE publications SET leased_until = $1 + $3
             WHERE msg_id IN (SELECT msg_id FROM publications
                              WHERE published_at IS NULL AND (leased_until IS NULL OR leased_until <= $1)
                              ORDER BY at LIMIT $2)
             RETURNING msg_id, tenant, intent_key, entity_type, entity_id, entity_version, channel, recipient_id,
                 state, reason, attempts, at",
        )
        .bind(claim.now_us)
        .bind(i64::from(claim.limit))
        .bind(claim.lease_us)
        .fetch_all(&self.writer)
        .await?;
        Ok(rows)
    }

    async fn publications_mark(&self, msg_ids: &[String], now_us: i64) -> StoreResult<u64> {
        publications_mark(&self.writer, msg_ids, now_us).await
    }

    async fn publications_backlog(&self) -> StoreResult<PublicationBacklog> {
        publications_backlog(&self.reader).await
    }
}
