//! Bus messages that could not become an event (`rejected_messages`), on Postgres.

use super::PostgresStore;
use crate::store::shared::page;
use crate::store::{Cursor, Page, RejectedMessage, RejectedStore, StoreResult};
use async_trait::async_trait;
use sqlx::{PgPool, Postgres, QueryBuilder};

/// Records it once: the same message recorded again changes nothing. True
/// when this call recorded it.
pub(super) async fn rejected_record(pool: &PgPool, r: &RejectedMessage) -> StoreResult<bool> {
    let n = sqlx::query(
        "INSERT INTO rejected_messages (id, tenant, stream, consumer, subject, stream_seq, deliveries,
             status, code, message, body, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
         ON CONFLICT (id) DO NOTHING",
    )
    .bind(&r.id)
    .bind(&r.tenant)
    .bind(&r.stream)
    .bind(&r.consumer)
    .bind(&r.subject)
    .bind(r.stream_seq)
    .bind(r.deliveries)
    .bind(r.status)
    .bind(&r.code)
    .bind(&r.message)
    .bind(&r.body)
    .bind(r.created_at)
    .execute(pool)
    .await?
    .rows_affected();
    Ok(n > 0)
}

/// One tenant's rejected messages (every tenant's for None), newest first.
pub(super) async fn rejected_list(
    pool: &PgPool,
    tenant: Option<&str>,
    cursor: Option<&Cursor>,
    limit: u32,
) -> StoreResult<Page<RejectedMessage>> {
    let mut q: QueryBuilder<'_, Postgres> = QueryBuilder::new(
        "SELECT id, tenant, stream, consumer, subject, stream_seq, deliveries, status, code, message, body,
             created_at FROM rejected_messages WHERE 1 = 1",
    );
    if let Some(t) = tenant {
        q.push(" AND tenant = ").push_bind(t);
    }
    if let Some(c) = cursor {
        q.push(" AND (created_at < ").push_bind(c.at);
        q.push(" OR (created_at = ").push_bind(c.at).push(" AND id < ").push_bind(&c.id).push("))");
    }
    q.push(" ORDER BY created_at DESC, id DESC LIMIT ").push_bind(i64::from(limit) + 1);
    let mut items: Vec<RejectedMessage> = q.build_query_as().fetch_all(pool).await?;
    Ok(page(&mut items, limit, |r| Cursor::new(r.created_at, &r.id)))
}

/// (code, count) of bus messages rejected in [since, until), most first;
/// every tenant when `tenant` is None.
pub(super) async fn rejected_summary(
    pool: &PgPool,
    tenant: Option<&str>,
    since_us: i64,
    until_us: i64,
) -> StoreResult<Vec<(String, i64)>> {
    let rows = sqlx::query_as(
        "SELECT code, COUNT(*) FROM rejected_messages
         WHERE ($1 IS NULL OR tenant = $1) AND created_at >= $2 AND created_at < $3
         GROUP BY code ORDER BY 2 DESC, 1",
    )
    .bind(tenant)
    .bind(since_us)
    .bind(until_us)
    .fetch_all(pool)
    .await?;
    Ok(rows)
}

pub(super) async fn rejected_get(pool: &PgPool, tenant: &str, id: &str) -> StoreResult<Option<RejectedMessage>> {
    let row = sqlx::query_as(
        "SELECT id, tenant, stream, consumer, subject, stream_seq, deliveries, status, code, message, body,
             created_at FROM rejected_messages WHERE tenant = $1 AND id = $2",
    )
    .bind(tenant)
    .bind(id)
    .fetch_optional(pool)
    .await?;
    Ok(row)
}

#[async_trait]
impl RejectedStore for PostgresStore {
    async fn rejected_record(&self, rejected: RejectedMessage) -> StoreResult<bool> {
        rejected_record(&self.pool, &rejected).await
    }

    async fn rejected_list(
        &self,
        tenant: Option<&str>,
        cursor: Option<&Cursor>,
        limit: u32,
    ) -> StoreResult<Page<RejectedMessage>> {
        rejected_list(&self.pool, tenant, cursor, limit).await
    }

    async fn rejected_get(&self, tenant: &str, id: &str) -> StoreResult<Option<RejectedMessage>> {
        rejected_get(&self.pool, tenant, id).await
    }

    async fn rejected_summary(
        &self,
        tenant: Option<&str>,
        since_us: i64,
        until_us: i64,
    ) -> StoreResult<Vec<(String, i64)>> {
        rejected_summary(&self.pool, tenant, since_us, until_us).await
    }
}
