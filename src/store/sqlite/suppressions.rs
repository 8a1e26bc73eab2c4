//! The suppression list on SQLite: listing, removing, rekeying entries, and
//! the bounces the ops digest counts (matching is a read before planning,
//! [`super::reads`]).

use crate::store::shared::page;
use crate::store::{Cursor, Page, StoreResult, SuppressionRow};
use sqlx::{QueryBuilder, Sqlite, SqlitePool};

/// Newest first.
pub(super) async fn suppressions_list(
    pool: &SqlitePool,
    tenant: &str,
    cursor: Option<&Cursor>,
    limit: u32,
) -> StoreResult<Page<SuppressionRow>> {
    let mut q: QueryBuilder<'_, Sqlite> = QueryBuilder::new(
        "SELECT tenant, id, address_hash, channel, masked, domain, reason, source_intent, detail, created_at
         FROM suppressions WHERE tenant = ",
    );
    q.push_bind(tenant);
    if let Some(c) = cursor {
        q.push(" AND (created_at < ").push_bind(c.at);
        q.push(" OR (created_at = ").push_bind(c.at).push(" AND source_intent < ").push_bind(&c.id).push("))");
    }
    q.push(" ORDER BY created_at DESC, source_intent DESC LIMIT ").push_bind(i64::from(limit) + 1);
    let mut items: Vec<SuppressionRow> = q.build_query_as().fetch_all(pool).await?;
    // The cursor names the source intent, never the address's lookup.
    Ok(page(&mut items, limit, |r| Cursor::new(r.created_at, &r.source_intent)))
}

/// Removes the tenant's entry of this id; false when there is none.
pub(super) async fn suppression_remove(pool: &SqlitePool, tenant: &str, id: &str) -> StoreResult<bool> {
    let n = sqlx::query("DELETE FROM suppressions WHERE tenant = $1 AND id = $2")
        .bind(tenant)
        .bind(id)
        .execute(pool)
        .await?
        .rows_affected();
    Ok(n > 0)
}

/// An entry of the old, unkeyed scheme: tenant, old hash, channel, source
/// intent, id (if named yet), and that intent's destination (if kept).
type Unkeyed = (String, String, String, String, Option<String>, Option<String>);

/// Rekeys the entries the old unkeyed hash wrote, from the destination
/// of the intent that put each there (checked against the old hash),
/// and names every entry that has no id yet. An entry whose intent is
/// gone keeps its old hash; one whose address is already listed under
/// the key is a duplicate, and goes.
pub(super) async fn suppressions_rekey(
    pool: &SqlitePool,
    key: &crate::recipient::keyed::SuppressionKey,
) -> StoreResult<crate::recipient::keyed::RekeyReport> {
    let unkeyed: Vec<Unkeyed> = sqlx::query_as(
        "SELECT s.tenant, s.address_hash, s.channel, s.source_intent, s.id, i.destination
         FROM suppressions s LEFT JOIN intents i ON i.key = s.source_intent
         WHERE NOT s.keyed",
    )
    .fetch_all(pool)
    .await?;
    let mut report = crate::recipient::keyed::RekeyReport::default();
    for (tenant, old, channel, source_intent, id, destination) in unkeyed {
        let id = id.unwrap_or_else(|| crate::recipient::keyed::entry_id(&tenant, &source_intent));
        let kind = crate::recipient::keyed::kind_of(&channel);
        let address = match (kind, destination) {
            (Some(kind), Some(d)) if crate::recipient::keyed::legacy_hash(&tenant, kind, &d) == old => Some((kind, d)),
            _ => None,
        };
        let mut tx = pool.begin().await?;
        match address {
            Some((kind, d)) => {
                let lookup = key.lookup(&tenant, kind, &d);
                let taken: i64 =
                    sqlx::query_scalar("SELECT COUNT(*) FROM suppressions WHERE tenant = $1 AND address_hash = $2")
                        .bind(&tenant)
                        .bind(&lookup)
                        .fetch_one(&mut *tx)
                        .await?;
                if taken == 0 {
                    sqlx::query(
                        "UPDATE suppressions SET address_hash = $3, id = $4, keyed = TRUE
                         WHERE tenant = $1 AND address_hash = $2",
                    )
                    .bind(&tenant)
                    .bind(&old)
                    .bind(&lookup)
                    .bind(&id)
                    .execute(&mut *tx)
                    .await?;
                } else {
                    sqlx::query("DELETE FROM suppressions WHERE tenant = $1 AND address_hash = $2")
                        .bind(&tenant)
                        .bind(&old)
                        .execute(&mut *tx)
                        .await?;
                }
                report.rekeyed += 1;
            }
            None => {
                sqlx::query("UPDATE suppressions SET id = $3 WHERE tenant = $1 AND address_hash = $2 AND id IS NULL")
                    .bind(&tenant)
                    .bind(&old)
                    .bind(&id)
                    .execute(&mut *tx)
                    .await?;
                report.left += 1;
            }
        }
        tx.commit().await?;
    }
    // Intents the planner suppressed before the keyed list named
    // their entry by its unkeyed hash in `detail`: named by id
    // instead, once (the views do the same for any left).
    let done = "suppression.details_named";
    let named: Option<String> =
        sqlx::query_scalar("SELECT value FROM settings WHERE name = $1").bind(done).fetch_optional(pool).await?;
    if named.is_none() {
        let old: Vec<(String, String, String)> = sqlx::query_as(
            "SELECT key, tenant, detail FROM intents
             WHERE reason IN ('address_bounced', 'address_complained') AND detail LIKE '%(entry %'",
        )
        .fetch_all(pool)
        .await?;
        for (key, tenant, detail) in old {
            let renamed = crate::recipient::keyed::named_detail(&tenant, &detail);
            if renamed != detail {
                sqlx::query("UPDATE intents SET detail = $2 WHERE key = $1")
                    .bind(&key)
                    .bind(renamed.as_ref())
                    .execute(pool)
                    .await?;
            }
        }
        sqlx::query(
            "INSERT INTO settings (name, value, created_at) VALUES ($1, 'yes', $2) ON CONFLICT (name) DO NOTHING",
        )
        .bind(done)
        .bind(crate::clock::micros(jiff::Timestamp::now()))
        .execute(pool)
        .await?;
    }
    Ok(report)
}

/// New bounces in [since, until) by recipient domain (emails), most first;
/// every tenant when `tenant` is None.
pub(super) async fn bounces_by_domain(
    pool: &SqlitePool,
    tenant: Option<&str>,
    since_us: i64,
    until_us: i64,
) -> StoreResult<Vec<(String, i64)>> {
    let rows = sqlx::query_as(
        "SELECT COALESCE(domain, '(sms)') AS d, COUNT(*) AS n FROM suppressions
         WHERE reason = 'address_bounced' AND created_at >= $1 AND created_at < $2
           AND ($3 IS NULL OR tenant = $3)
         GROUP BY d ORDER BY n DESC, d",
    )
    .bind(since_us)
    .bind(until_us)
    .bind(tenant)
    .fetch_all(pool)
    .await?;
    Ok(rows)
}
