//! The directory on SQLite: recipients and their kept preference versions,
//! the suppression list and the deployment-wide settings.

use super::{SqliteStore, reads, suppressions};
use crate::store::{
    Cursor, DirectoryRows, DirectoryStore, Page, PreferencesVersion, RecipientPut, RecipientRow, StoreResult,
    SuppressionRow,
};
use async_trait::async_trait;
use sqlx::SqlitePool;

/// Replaces the entry; `preferences_version` moves only when the
/// preferences change, so a version names one set of preferences, and
/// every version is kept.
pub(super) async fn recipient_put(pool: &SqlitePool, put: &RecipientPut) -> StoreResult<RecipientRow> {
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
    pool: &SqlitePool,
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

pub(super) async fn setting_get(pool: &SqlitePool, name: &str) -> StoreResult<Option<String>> {
    Ok(sqlx::query_scalar("SELECT value FROM settings WHERE name = $1").bind(name).fetch_optional(pool).await?)
}

pub(super) async fn setting_remove(pool: &SqlitePool, name: &str) -> StoreResult<bool> {
    let n = sqlx::query("DELETE FROM settings WHERE name = $1").bind(name).execute(pool).await?.rows_affected();
    Ok(n > 0)
}

/// The value stored under `name`, storing `value` first when there is
/// none: every process on the database settles on the first one written.
pub(super) async fn setting_get_or_insert(
    pool: &SqlitePool,
    name: &str,
    value: &str,
    now_us: i64,
) -> StoreResult<String> {
    sqlx::query("INSERT INTO settings (name, value, created_at) VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING")
        .bind(name)
        .bind(value)
        .bind(now_us)
        .execute(pool)
        .await?;
    Ok(sqlx::query_scalar("SELECT value FROM settings WHERE name = $1").bind(name).fetch_one(pool).await?)
}

#[async_trait]
impl DirectoryStore for SqliteStore {
    async fn recipients_get(&self, tenant: &str, ids: &[String]) -> StoreResult<Vec<RecipientRow>> {
        let (tenant, ids) = (tenant.to_string(), ids.to_vec());
        Ok(self.reads.read(move |db| reads::directory(db, &tenant, &ids, &[])).await?.0)
    }

    async fn recipient_put(&self, put: RecipientPut) -> StoreResult<RecipientRow> {
        recipient_put(&self.writer, &put).await
    }

    async fn recipient_preferences_get(
        &self,
        tenant: &str,
        id: &str,
        version: i64,
    ) -> StoreResult<Option<PreferencesVersion>> {
        recipient_preferences_get(&self.reader, tenant, id, version).await
    }

    async fn suppressions_match(&self, tenant: &str, hashes: &[String]) -> StoreResult<Vec<SuppressionRow>> {
        let (tenant, hashes) = (tenant.to_string(), hashes.to_vec());
        self.reads.read(move |db| reads::suppressions_matching(db, &tenant, &hashes)).await
    }

    /// Both reads on one connection of the reads' own ([`reads`]).
    async fn recipients_and_suppressions(
        &self,
        tenant: &str,
        ids: &[String],
        hashes: &[String],
    ) -> StoreResult<DirectoryRows> {
        let (tenant, ids, hashes) = (tenant.to_string(), ids.to_vec(), hashes.to_vec());
        self.reads.read(move |db| reads::directory(db, &tenant, &ids, &hashes)).await
    }

    async fn suppressions_list(
        &self,
        tenant: &str,
        cursor: Option<&Cursor>,
        limit: u32,
    ) -> StoreResult<Page<SuppressionRow>> {
        suppressions::suppressions_list(&self.reader, tenant, cursor, limit).await
    }

    async fn suppression_remove(&self, tenant: &str, id: &str) -> StoreResult<bool> {
        suppressions::suppression_remove(&self.writer, tenant, id).await
    }

    async fn suppressions_rekey(
        &self,
        key: &crate::recipient::keyed::SuppressionKey,
    ) -> StoreResult<crate::recipient::keyed::RekeyReport> {
        suppressions::suppressions_rekey(&self.writer, key).await
    }

    async fn setting_get_or_insert(&self, name: &str, value: &str) -> StoreResult<String> {
        setting_get_or_insert(&self.writer, name, value, crate::clock::micros(jiff::Timestamp::now())).await
    }

    async fn setting_get(&self, name: &str) -> StoreResult<Option<String>> {
        setting_get(&self.writer, name).await
    }

    async fn setting_remove(&self, name: &str) -> StoreResult<bool> {
        setting_remove(&self.writer, name).await
    }
}
