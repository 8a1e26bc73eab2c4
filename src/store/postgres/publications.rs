//! The status outbox on Postgres: claiming what waits, marking what the bus
//! acknowledged, measuring the backlog.

use super::PostgresStore;
use crate::store::{Publication, PublicationBacklog, PublicationClaim, PublicationStore, StoreResult};
use async_trait::async_trait;
use sqlx::PgPool;

pub(super) async fn publications_mark(pool: &PgPool, msg_ids: &[String], now_us: i64) -> StoreResult<u64> {
    if msg_ids.is_empty() {
        return Ok(0);
    }
    let n = sqlx::query(
        "UPDATE publications SET published_at = $2, leased_until = NULL
         WHERE published_at IS NULL AND msg_id = ANY($1)",
    )
    .bind(msg_ids)
    .bind(now_us)
    .execute(pool)
    .await?
    .rows_affected();
    Ok(n)
}

pub(super) async fn publications_backlog(pool: &PgPool) -> StoreResult<PublicationBacklog> {
    let (unpublished, oldest_at_us): (i64, Option<i64>) =
        sqlx::query_as("SELECT COUNT(*), MIN(at) FROM publications WHERE published_at IS NULL").fetch_one(pool).await?;
    Ok(PublicationBacklog { unpublished, oldest_at_us })
}

#[async_trait]
impl PublicationStore for PostgresStore {
    async fn publications_claim(&self, claim: PublicationClaim) -> StoreResult<Vec<Publication>> {
        // Leased by the database's clock, as jobs are.
        let rows = sqlx::query_as(
            "WITH due AS (
                 SELECT msg_id AS due_id FROM publications
                 WHERE published_at IS NULL
                   AND (leased_until IS NULL OR leased_until <= (EXTRACT(EPOCH FROM now()) * 1000000)::bigint)
                 ORDER BY at LIMIT $1
                 FOR UPDATE SKIP LOCKED)
             UPDATE publications SET leased_until = (EXTRACT(EPOCH FROM now()) * 1000000)::bigint + $2
             FROM due WHERE publications.msg_id = due.due_id
             RETURNING msg_id, tenant, intent_key, entity_type, entity_id, entity_version, channel, recipient_id,
                 state, reason, attempts, at",
        )
        .bind(i64::from(claim.limit))
        .bind(claim.lease_us)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows)
    }

    async fn publications_mark(&self, msg_ids: &[String], now_us: i64) -> StoreResult<u64> {
        publications_mark(&self.pool, msg_ids, now_us).await
    }

    async fn publications_backlog(&self) -> StoreResult<PublicationBacklog> {
        publications_backlog(&self.pool).await
    }
}
