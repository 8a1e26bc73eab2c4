//! The frequency cap's statements on Postgres (see [`crate::store::caps`]).

use crate::store::StoreResult;
use crate::store::caps::{CapStatements, Recipient, counted_sql};
use sqlx::{Postgres, Transaction};

pub(super) struct PgCaps;

impl CapStatements for PgCaps {
    type Db = Postgres;

    /// An advisory lock per recipient and channel, held to the end of the
    /// transaction. The caller gives them in one global order, so two
    /// transactions that cap the same recipients cannot wait on each other
    /// in a cycle; two names that hash alike only share a lock.
    async fn lock(&self, tx: &mut Transaction<'_, Postgres>, recipients: &[Recipient<'_>]) -> StoreResult<()> {
        for who in recipients {
            sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
                .bind(who.lock_name())
                .execute(&mut **tx)
                .await?;
        }
        Ok(())
    }

    /// By `intents_by_recipient` (tenant, recipient, created_at): the
    /// recipient's intents of the period, whatever their channel.
    async fn recent(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        who: &Recipient<'_>,
        since_us: i64,
        keys: &[&str],
    ) -> StoreResult<i64> {
        Ok(sqlx::query_scalar(concat!(
            "SELECT count(*) FROM intents
             WHERE tenant = $1 AND recipient_id = $2 AND created_at > $3 AND channel = $4 AND key <> ALL($5) AND ",
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
