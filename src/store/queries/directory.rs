//! Directory entries and their kept preference versions.
//! Instantiated per backend by [`super::shared_queries`].

macro_rules! directory_queries {
    ($db:ty, $in_keys:literal, $keys_arg:path, $for_update:literal) => {
        pub async fn recipients_get(pool: &Pool<$db>, tenant: &str, ids: &[String]) -> StoreResult<Vec<RecipientRow>> {
            let rows = sqlx::query_as(concat!("SELECT ", recipient_columns!(), " FROM recipients WHERE tenant = $2 AND id ", $in_keys))
                .bind($keys_arg(ids))
                .bind(tenant)
                .fetch_all(pool)
                .await?;
            Ok(rows)
        }

        /// Replaces the entry; `preferences_version` moves only when the
        /// preferences change, so a version names one set of preferences, and
        /// every version is kept.
        pub async fn recipient_put(pool: &Pool<$db>, put: &RecipientPut) -> StoreResult<RecipientRow> {
            let mut tx = pool.begin().await?;
            let row: RecipientRow = sqlx::query_as(
                "INSERT INTO recipients (tenant, id, email, phone, locale, timezone, webhook_url, preferences, preferences_version, updated_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 1, $9)
                 ON CONFLICT (tenant, id) DO UPDATE SET
                     email = excluded.email, phone = excluded.phone, locale = excluded.locale,
                     timezone = excluded.timezone, webhook_url = excluded.webhook_url,
                     preferences = excluded.preferences,
                     preferences_version = CASE WHEN recipients.preferences = excluded.preferences
                         THEN recipients.preferences_version ELSE recipients.preferences_version + 1 END,
                     updated_at = excluded.updated_at
                 RETURNING tenant, id, email, phone, locale, timezone, webhook_url, preferences, preferences_version, updated_at",
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

        pub async fn recipient_preferences_get(
            pool: &Pool<$db>,
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

    };
}
pub(crate) use directory_queries;
