//! Content records for events accepted before they existed (migration 0006),
//! filled in right after the migrations, outside the ingest transaction.
//! Migration 0008 lists the event keys that have intents but no record; here
//! each one's content digest is derived from its stored event body — read back
//! through the same parser ingest uses and digested by the same function — and
//! the list emptied. A listed event whose body is gone (retention) or no longer
//! reads as an event is dropped from the list unrecorded: its intents still
//! hold it to one notification per recipient, only a change of its data is not
//! caught. Once the list is empty this costs one query per start.

use super::StoreResult;
use crate::event::{Tenant, parse_event};
use sqlx::FromRow;

/// Rows read per transaction.
const BATCH: i64 = 500;

/// One listed event key, with the body of its earliest intent still stored.
#[derive(Debug, FromRow)]
struct Pending {
    event_key: String,
    tenant: String,
    event_type: String,
    entity_type: String,
    entity_id: String,
    occurred_at: String,
    created_at: i64,
    body: Option<String>,
}

const NEXT: &str =
    "SELECT b.event_key, b.tenant, b.event_type, b.entity_type, b.entity_id, b.occurred_at, b.created_at,
        (SELECT COALESCE(i.event_body, p.body) FROM intents i LEFT JOIN payloads p ON p.digest = i.event_digest
         WHERE i.tenant = b.tenant AND i.entity_type = b.entity_type AND i.entity_id = b.entity_id
           AND i.event_type = b.event_type AND i.occurred_at = b.occurred_at
           AND COALESCE(i.event_body, p.body) IS NOT NULL
         ORDER BY i.created_at, i.key LIMIT 1) AS body
    FROM events_backfill b ORDER BY b.event_key LIMIT $1";

const RECORD: &str = "INSERT INTO events (event_key, tenant, event_type, entity_type, entity_id, occurred_at, content_digest, created_at)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
    ON CONFLICT (event_key) DO NOTHING";

const DONE: &str = "DELETE FROM events_backfill WHERE event_key = $1";

/// The content digest ingest would have recorded for this event, if its body
/// still reads as the event listed.
fn content_digest(p: &Pending) -> Option<String> {
    let body: serde_json::Value = serde_json::from_str(p.body.as_deref()?).ok()?;
    let event = parse_event(&body).ok()?;
    (event.event_key(&Tenant::new(p.tenant.clone())) == p.event_key).then(|| event.content_digest())
}

/// Records what can be derived for every listed event key; returns how
/// many records were written. The same as [`postgres`], on SQLite.
pub async fn sqlite(pool: &sqlx::SqlitePool) -> StoreResult<u64> {
    let mut recorded = 0;
    loop {
        let pending: Vec<Pending> = sqlx::query_as(NEXT).bind(BATCH).fetch_all(pool).await?;
        if pending.is_empty() {
            return Ok(recorded);
        }
        let mut tx = pool.begin().await?;
        for p in &pending {
            if let Some(digest) = content_digest(p) {
                recorded += sqlx::query(RECORD)
                    .bind(&p.event_key)
                    .bind(&p.tenant)
                    .bind(&p.event_type)
                    .bind(&p.entity_type)
                    .bind(&p.entity_id)
                    .bind(&p.occurred_at)
                    .bind(digest)
                    .bind(p.created_at)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
            } else {
                tracing::warn!(
                    event_key = %p.event_key,
                    "no content record for an event accepted before 0006: its body is no longer stored"
                );
            }
            sqlx::query(DONE).bind(&p.event_key).execute(&mut *tx).await?;
        }
        tx.commit().await?;
    }
}

/// Records what can be derived for every listed event key; returns how
/// many records were written. The same as [`sqlite`], on Postgres.
pub async fn postgres(pool: &sqlx::PgPool) -> StoreResult<u64> {
    let mut recorded = 0;
    loop {
        let pending: Vec<Pending> = sqlx::query_as(NEXT).bind(BATCH).fetch_all(pool).await?;
        if pending.is_empty() {
            return Ok(recorded);
        }
        let mut tx = pool.begin().await?;
        for p in &pending {
            if let Some(digest) = content_digest(p) {
                recorded += sqlx::query(RECORD)
                    .bind(&p.event_key)
                    .bind(&p.tenant)
                    .bind(&p.event_type)
                    .bind(&p.entity_type)
                    .bind(&p.entity_id)
                    .bind(&p.occurred_at)
                    .bind(digest)
                    .bind(p.created_at)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
            } else {
                tracing::warn!(
                    event_key = %p.event_key,
                    "no content record for an event accepted before 0006: its body is no longer stored"
                );
            }
            sqlx::query(DONE).bind(&p.event_key).execute(&mut *tx).await?;
        }
        tx.commit().await?;
    }
}
