//! Dead letters on SQLite, as the API, the console and the ops digest read
//! them.

use super::keys_arg;
use crate::store::shared::page;
use crate::store::{Cursor, DeadLetter, DeadLetterFilter, DeadLetterGroup, IntentRow, Page, StoreResult};
use sqlx::{QueryBuilder, Sqlite, SqlitePool};

pub(super) async fn dead_letters_list(pool: &SqlitePool, f: &DeadLetterFilter) -> StoreResult<Page<DeadLetter>> {
    let mut q: QueryBuilder<'_, Sqlite> = QueryBuilder::new(
        "SELECT i.key, i.tenant, i.event_type, i.entity_type, i.entity_id, i.entity_version, i.occurred_at,
             i.channel, i.recipient_id, i.destination, i.locale, i.template_id, i.template_revision, i.event_digest,
             i.payload_digest, i.decision, i.reason, i.detail, i.state, i.attempts, i.created_at, i.updated_at,
             i.preferences_version, i.link_key, i.retry_base, i.mode, COALESCE(i.content, (SELECT p.body FROM payloads p WHERE p.digest = i.payload_digest)) AS content,
             COALESCE(i.event_body, (SELECT e.body FROM payloads e WHERE e.digest = i.event_digest)) AS event_body
         FROM intents i
         WHERE i.dead_at IS NOT NULL",
    );
    if let Some(tenant) = &f.tenant {
        q.push(" AND i.tenant = ").push_bind(tenant);
    }
    if let Some(r) = &f.reason {
        q.push(" AND i.reason = ").push_bind(r);
    }
    if let Some(since) = f.since_us {
        q.push(" AND i.dead_at >= ").push_bind(since);
    }
    if let Some(c) = &f.cursor {
        q.push(" AND (i.dead_at < ").push_bind(c.at);
        q.push(" OR (i.dead_at = ").push_bind(c.at).push(" AND i.key < ").push_bind(&c.id).push("))");
    }
    q.push(" ORDER BY i.dead_at DESC, i.key DESC LIMIT ").push_bind(i64::from(f.limit) + 1);
    let mut items: Vec<DeadLetter> = q.build_query_as().fetch_all(pool).await?;
    // A dead letter's `dead_at` is its `updated_at`.
    Ok(page(&mut items, f.limit, |d| Cursor::new(d.intent.updated_at, &d.intent.key)))
}

/// Dead letters by reason; `tenant` None counts every tenant (the ops digest).
pub(super) async fn dead_letters_summary(
    pool: &SqlitePool,
    tenant: Option<&str>,
    since_us: i64,
    until_us: i64,
) -> StoreResult<Vec<(String, i64)>> {
    let rows = sqlx::query_as(
        "SELECT COALESCE(reason, 'unknown'), COUNT(*) FROM intents
         WHERE dead_at IS NOT NULL AND ($1 IS NULL OR tenant = $1) AND dead_at >= $2 AND dead_at < $3
         GROUP BY 1 ORDER BY 2 DESC, 1",
    )
    .bind(tenant)
    .bind(since_us)
    .bind(until_us)
    .fetch_all(pool)
    .await?;
    Ok(rows)
}

/// One tenant's dead letters by reason, with the oldest's time: the
/// console's groups (the `intents_dead` index answers it).
/// Dead letters by tenant and reason: one tenant's, or every tenant's.
pub(super) async fn dead_letters_groups(pool: &SqlitePool, tenant: Option<&str>) -> StoreResult<Vec<DeadLetterGroup>> {
    let mut q: QueryBuilder<'_, Sqlite> = QueryBuilder::new(
        "SELECT tenant, COALESCE(reason, 'unknown') AS reason, COUNT(*) AS count, MIN(dead_at) AS oldest_at
         FROM intents WHERE dead_at IS NOT NULL",
    );
    if let Some(t) = tenant {
        q.push(" AND tenant = ").push_bind(t);
    }
    q.push(" GROUP BY 1, 2 ORDER BY 3 DESC, 1, 2");
    Ok(q.build_query_as().fetch_all(pool).await?)
}

/// The newest `per_group` dead letters of every (tenant, reason)
/// group: ranked from the `intents_dead` index alone, then read by
/// key. (Two statements: joined in one, Postgres cannot foresee how
/// few rows the ranking keeps and reads the whole table.) One
/// tenant's, or every tenant's for None.
pub(super) async fn dead_letters_newest(
    pool: &SqlitePool,
    tenant: Option<&str>,
    per_group: u32,
) -> StoreResult<Vec<IntentRow>> {
    let mut q: QueryBuilder<'_, Sqlite> = QueryBuilder::new(
        "SELECT key FROM (
             SELECT key, ROW_NUMBER() OVER (PARTITION BY tenant, reason ORDER BY dead_at DESC, key DESC) AS n
             FROM intents WHERE dead_at IS NOT NULL",
    );
    if let Some(t) = tenant {
        q.push(" AND tenant = ").push_bind(t);
    }
    q.push(") ranked WHERE n <= ").push_bind(i64::from(per_group));
    let keys: Vec<String> = q.build_query_scalar().fetch_all(pool).await?;
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let rows = sqlx::query_as(
        "SELECT i.key, i.tenant, i.event_type, i.entity_type, i.entity_id, i.entity_version, i.occurred_at,
             i.channel, i.recipient_id, i.destination, i.locale, i.template_id, i.template_revision, i.event_digest,
             i.payload_digest, i.decision, i.reason, i.detail, i.state, i.attempts, i.created_at, i.updated_at,
             i.preferences_version, i.link_key, i.retry_base, i.mode FROM intents i
         WHERE i.key IN (SELECT value FROM json_each($1)) ORDER BY i.tenant, COALESCE(i.reason, 'unknown'),
             i.dead_at DESC, i.key DESC",
    )
    .bind(keys_arg(&keys))
    .fetch_all(pool)
    .await?;
    Ok(rows)
}

/// The newest dead letters of one reason, every tenant: the digest's examples.
pub(super) async fn dead_letters_examples(
    pool: &SqlitePool,
    tenant: Option<&str>,
    reason: &str,
    since_us: i64,
    until_us: i64,
    limit: u32,
) -> StoreResult<Vec<IntentRow>> {
    // Each condition as its index reads it: `reason = $1` (not
    // COALESCE, which no index serves) and the tenant only when
    // given, so the newest `limit` come straight off `intents_dead`
    // whatever the number of dead letters.
    let mut q: QueryBuilder<'_, Sqlite> = QueryBuilder::new(
        "SELECT i.key, i.tenant, i.event_type, i.entity_type, i.entity_id, i.entity_version, i.occurred_at,
             i.channel, i.recipient_id, i.destination, i.locale, i.template_id, i.template_revision, i.event_digest,
             i.payload_digest, i.decision, i.reason, i.detail, i.state, i.attempts, i.created_at, i.updated_at,
             i.preferences_version, i.link_key, i.retry_base, i.mode FROM intents i WHERE i.dead_at IS NOT NULL",
    );
    if let Some(t) = tenant {
        q.push(" AND i.tenant = ").push_bind(t);
    }
    if reason == "unknown" {
        // The group a dead letter without a reason is counted in.
        q.push(" AND (i.reason IS NULL OR i.reason = 'unknown')");
    } else {
        q.push(" AND i.reason = ").push_bind(reason);
    }
    q.push(" AND i.dead_at >= ").push_bind(since_us);
    q.push(" AND i.dead_at < ").push_bind(until_us);
    q.push(" ORDER BY i.dead_at DESC, i.key DESC LIMIT ").push_bind(i64::from(limit));
    Ok(q.build_query_as().fetch_all(pool).await?)
}
