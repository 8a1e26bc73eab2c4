//! The directory on Postgres: recipients and their kept preference versions,
//! the suppression list and the deployment-wide settings. What a new request
//! reads of them is gathered over many requests into one statement.

use super::{PostgresStore, suppressions};
use crate::event::Channel;
use crate::intent::Reason;
use crate::store::{
    Cursor, DirectoryRead, DirectoryRows, DirectoryStore, Page, PreferencesVersion, RecipientPut, RecipientRow,
    StoreError, StoreResult, SuppressionRow, gathered_or_each_alone,
};
use async_trait::async_trait;
use sqlx::PgPool;
use std::collections::HashMap;

pub(super) async fn recipients_get(pool: &PgPool, tenant: &str, ids: &[String]) -> StoreResult<Vec<RecipientRow>> {
    let rows = sqlx::query_as(
        "SELECT tenant, id, email, phone, locale, timezone, webhook_url, preferences, preferences_version,
             updated_at FROM recipients WHERE tenant = $2 AND id = ANY($1)",
    )
    .bind(ids)
    .bind(tenant)
    .fetch_all(pool)
    .await?;
    Ok(rows)
}

/// Replaces the entry; `preferences_version` moves only when the
/// preferences change, so a version names one set of preferences, and
/// every version is kept.
pub(super) async fn recipient_put(pool: &PgPool, put: &RecipientPut) -> StoreResult<RecipientRow> {
    let mut tx = pool.begin().await?;
    let row: RecipientRow = sqlx::query_as(
        "INSERT INTO recipients (tenant, id, email, phone, locale, timezone, webhook_url, preferences,
             preferences_version, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 1, $9)
         ON CONFLICT (tenant, id) DO UPDATE SET
             email = excluded.email, phone = excluded.phone, locale = excluded.locale,
             timezone = excluded.timezone, webhook_url = excluded.webhook_url,
             preferences = excluded.preferences,
             preferences_version = CASE WHEN recipients.preferences = excluded.preferences
                 THEN recipients.preferences_version ELSE recipients.preferences_version + 1 END,
             updated_at = excluded.updated_at
         RETURNING tenant, id, email, phone, locale, timezone, webhook_url, preferences, preferences_version,
             updated_at",
    )
    .bind(&put.tenant)
    .bind(&put.id)
    .bind(&put.email)
    .bind(&put.phone)
    .bind(&put.locale)
    .bind(&put.timezone)
    .bind(&put.webhook_url)
    .bind(&put.preferences)
    .bind(put.now_us)
    .fetch_one(&mut *tx)
    .await?;
    sqlx::query(
        "INSERT INTO recipient_preferences (tenant, recipient_id, version, preferences, created_at)
         VALUES ($1, $2, $3, $4, $5) ON CONFLICT (tenant, recipient_id, version) DO NOTHING",
    )
    .bind(&row.tenant)
    .bind(&row.id)
    .bind(row.preferences_version)
    .bind(&row.preferences)
    .bind(put.now_us)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(row)
}

pub(super) async fn recipient_preferences_get(
    pool: &PgPool,
    tenant: &str,
    id: &str,
    version: i64,
) -> StoreResult<Option<PreferencesVersion>> {
    let row = sqlx::query_as(
        "SELECT version, preferences, created_at FROM recipient_preferences
         WHERE tenant = $1 AND recipient_id = $2 AND version = $3",
    )
    .bind(tenant)
    .bind(id)
    .bind(version)
    .fetch_optional(pool)
    .await?;
    Ok(row)
}

/// The directory and suppression entries of many requests in one
/// statement, each request answered with the rows it asked for.
pub(super) async fn directories(pool: &PgPool, reads: &[DirectoryRead]) -> StoreResult<Vec<DirectoryRows>> {
    // The two kinds of row in columns of the same types.
    type Row = (
        bool,
        String,
        String,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
        Option<String>,
        i64,
        Option<i64>,
        Option<String>,
    );
    let pairs = |of: fn(&DirectoryRead) -> &[String]| -> (Vec<&str>, Vec<&str>) {
        let unique: std::collections::BTreeSet<(&str, &str)> =
            reads.iter().flat_map(|r| of(r).iter().map(move |v| (r.tenant.as_str(), v.as_str()))).collect();
        unique.into_iter().unzip()
    };
    let (id_tenants, ids) = pairs(|r| &r.ids);
    let (hash_tenants, hashes) = pairs(|r| &r.hashes);
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT TRUE, r.tenant, r.id, r.email, r.phone, r.locale, r.timezone, r.webhook_url, r.preferences,
                r.updated_at, r.preferences_version, NULL
         FROM UNNEST($1::text[], $2::text[]) AS u(tenant, id)
         JOIN recipients r ON r.tenant = u.tenant AND r.id = u.id
         UNION ALL
         SELECT FALSE, s.tenant, s.address_hash, s.channel, s.masked, s.domain, s.reason, s.source_intent,
                s.detail, s.created_at, NULL, s.id
         FROM UNNEST($3::text[], $4::text[]) AS u(tenant, address_hash)
         JOIN suppressions s ON s.tenant = u.tenant AND s.address_hash = u.address_hash",
    )
    .bind(id_tenants)
    .bind(ids)
    .bind(hash_tenants)
    .bind(hashes)
    .fetch_all(pool)
    .await?;
    // By tenant, then by id or address hash.
    let mut recipients: HashMap<String, HashMap<String, RecipientRow>> = HashMap::new();
    let mut suppressions: HashMap<String, HashMap<String, SuppressionRow>> = HashMap::new();
    let missing = |what: &str| StoreError::Corrupt(format!("a {what} row without a value that cannot be null"));
    for (recipient, tenant, id, c3, c4, c5, c6, c7, c8, at, version, entry_id) in rows {
        if recipient {
            let row = RecipientRow {
                tenant,
                id,
                email: c3,
                phone: c4,
                locale: c5,
                timezone: c6,
                webhook_url: c7,
                preferences: c8.ok_or_else(|| missing("recipients"))?,
                preferences_version: version.ok_or_else(|| missing("recipients"))?,
                updated_at: at,
            };
            recipients.entry(row.tenant.clone()).or_default().insert(row.id.clone(), row);
        } else {
            let required = |v: Option<String>| v.ok_or_else(|| missing("suppressions"));
            // Read as text beside the recipients' columns, so parsed here
            // rather than by the column's decoder.
            let channel = required(c3)?;
            let channel = Channel::parse(&channel)
                .ok_or_else(|| StoreError::Corrupt(format!("{channel:?} is not a suppression's channel")))?;
            let reason = required(c6)?;
            let reason = Reason::parse(&reason)
                .ok_or_else(|| StoreError::Corrupt(format!("{reason:?} is not a suppression's reason")))?;
            let row = SuppressionRow {
                tenant,
                id: entry_id,
                address_hash: id,
                channel,
                masked: required(c4)?,
                domain: c5,
                reason,
                source_intent: required(c7)?,
                detail: c8,
                created_at: at,
            };
            suppressions.entry(row.tenant.clone()).or_default().insert(row.address_hash.clone(), row);
        }
    }
    // Each request gets its own tenant's rows, once each however often it
    // named them.
    fn own<R: Clone>(rows: &HashMap<String, HashMap<String, R>>, tenant: &str, values: &[String]) -> Vec<R> {
        let Some(rows) = rows.get(tenant) else { return Vec::new() };
        let unique: std::collections::BTreeSet<&String> = values.iter().collect();
        unique.into_iter().filter_map(|v| rows.get(v).cloned()).collect()
    }
    Ok(reads.iter().map(|r| (own(&recipients, &r.tenant, &r.ids), own(&suppressions, &r.tenant, &r.hashes))).collect())
}

pub(super) async fn setting_get(pool: &PgPool, name: &str) -> StoreResult<Option<String>> {
    Ok(sqlx::query_scalar("SELECT value FROM settings WHERE name = $1").bind(name).fetch_optional(pool).await?)
}

pub(super) async fn setting_remove(pool: &PgPool, name: &str) -> StoreResult<bool> {
    let n = sqlx::query("DELETE FROM settings WHERE name = $1").bind(name).execute(pool).await?.rows_affected();
    Ok(n > 0)
}

/// The value stored under `name`, storing `value` first when there is
/// none: every process on the database settles on the first one written.
pub(super) async fn setting_get_or_insert(pool: &PgPool, name: &str, value: &str, now_us: i64) -> StoreResult<String> {
    sqlx::query("INSERT INTO settings (name, value, created_at) VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING")
        .bind(name)
        .bind(value)
        .bind(now_us)
        .execute(pool)
        .await?;
    Ok(sqlx::query_scalar("SELECT value FROM settings WHERE name = $1").bind(name).fetch_one(pool).await?)
}

#[async_trait]
impl DirectoryStore for PostgresStore {
    async fn recipients_get(&self, tenant: &str, ids: &[String]) -> StoreResult<Vec<RecipientRow>> {
        recipients_get(&self.pool, tenant, ids).await
    }

    async fn recipient_put(&self, put: RecipientPut) -> StoreResult<RecipientRow> {
        recipient_put(&self.pool, &put).await
    }

    async fn recipient_preferences_get(
        &self,
        tenant: &str,
        id: &str,
        version: i64,
    ) -> StoreResult<Option<PreferencesVersion>> {
        recipient_preferences_get(&self.pool, tenant, id, version).await
    }

    async fn recipients_and_suppressions(
        &self,
        tenant: &str,
        ids: &[String],
        hashes: &[String],
    ) -> StoreResult<DirectoryRows> {
        let read = DirectoryRead { tenant: tenant.to_string(), ids: ids.to_vec(), hashes: hashes.to_vec() };
        let mut out = directories(&self.pool, std::slice::from_ref(&read)).await?;
        out.pop().ok_or_else(|| StoreError::Corrupt("a directory read of one answered nothing".into()))
    }

    async fn directories_read(&self, reads: &[DirectoryRead]) -> Vec<StoreResult<DirectoryRows>> {
        let gathered = directories(&self.pool, reads).await.map(|rows| rows.into_iter().map(Ok).collect());
        gathered_or_each_alone("directory read", reads, gathered, |r| {
            self.recipients_and_suppressions(&r.tenant, &r.ids, &r.hashes)
        })
        .await
    }

    async fn suppressions_match(&self, tenant: &str, hashes: &[String]) -> StoreResult<Vec<SuppressionRow>> {
        suppressions::suppressions_match(&self.pool, tenant, hashes).await
    }

    async fn suppressions_list(
        &self,
        tenant: &str,
        cursor: Option<&Cursor>,
        limit: u32,
    ) -> StoreResult<Page<SuppressionRow>> {
        suppressions::suppressions_list(&self.pool, tenant, cursor, limit).await
    }

    async fn suppression_remove(&self, tenant: &str, id: &str) -> StoreResult<bool> {
        suppressions::suppression_remove(&self.pool, tenant, id).await
    }

    async fn suppressions_rekey(
        &self,
        key: &crate::recipient::keyed::SuppressionKey,
    ) -> StoreResult<crate::recipient::keyed::RekeyReport> {
        suppressions::suppressions_rekey(&self.pool, key).await
    }

    async fn setting_get_or_insert(&self, name: &str, value: &str) -> StoreResult<String> {
        setting_get_or_insert(&self.pool, name, value, crate::clock::micros(jiff::Timestamp::now())).await
    }

    async fn setting_get(&self, name: &str) -> StoreResult<Option<String>> {
        setting_get(&self.pool, name).await
    }

    async fn setting_remove(&self, name: &str) -> StoreResult<bool> {
        setting_remove(&self.pool, name).await
    }
}
