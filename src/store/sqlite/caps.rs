//! The frequency cap's statements on SQLite (see [`crate::store::caps`]).

use crate::store::StoreResult;
use crate::store::caps::{CapStatements, Recipient, counted_sql};
use sqlx::{Sqlite, Transaction};

pub(super) struct SqliteCaps;

impl CapStatements for SqliteCaps {
    type Db = Sqlite;

    /// Nothing to take: a transaction that caps began with `BEGIN
    /// IMMEDIATE`, and holds the database's one write lock until it ends,
    /// against this process's other writers and every other process's.
    async fn lock(&self, _: &mut Transaction<'_, Sqlite>, _: &[Recipient<'_>]) -> StoreResult<()> {
        Ok(())
    }

    async fn recent(
        &self,
        tx: &mut Transaction<'_, Sqlite>,
        who: &Recipient<'_>,
        since_us: i64,
        keys: &[&str],
    ) -> StoreResult<i64> {
        let keys = serde_json::to_string(keys).map_err(|e| crate::store::StoreError::Corrupt(e.to_string()))?;
        Ok(sqlx::query_scalar(concat!(
            "SELECT count(*) FROM intents
             WHERE tenant = ?1 AND recipient_id = ?2 AND created_at > ?3 AND channel = ?4
               AND key NOT IN (SELECT value FROM json_each(?5)) AND ",
            counted_sql!()
        ))
        .bind(who.tenant)
        .bind(who.recipient_id)
        .bind(since_us)
        .bind(who.channel.as_str())
        .bind(keys)
        .fetch_one(&mut **tx)
        .await?)
    }
}
