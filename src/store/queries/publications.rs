//! The status outbox's shared queries: marking what the bus acknowledged and
//! measuring what waits. Claiming differs per backend (SKIP LOCKED on
//! Postgres) and lives with each. Instantiated per backend by
//! [`super::shared_queries`].

macro_rules! publications_queries {
    ($db:ty, $in_keys:literal, $keys_arg:path) => {
        pub async fn publications_mark(pool: &Pool<$db>, msg_ids: &[String], now_us: i64) -> StoreResult<u64> {
            if msg_ids.is_empty() {
                return Ok(0);
            }
            let n = sqlx::query(concat!(
                "UPDATE publications SET published_at = $2, leased_until = NULL
                 WHERE published_at IS NULL AND msg_id ",
                $in_keys
            ))
            .bind($keys_arg(msg_ids))
            .bind(now_us)
            .execute(pool)
            .await?
            .rows_affected();
            Ok(n)
        }

        pub async fn publications_backlog(pool: &Pool<$db>) -> StoreResult<crate::store::PublicationBacklog> {
            let (unpublished, oldest_at_us): (i64, Option<i64>) =
                sqlx::query_as("SELECT COUNT(*), MIN(at) FROM publications WHERE published_at IS NULL")
                    .fetch_one(pool)
                    .await?;
            Ok(crate::store::PublicationBacklog { unpublished, oldest_at_us })
        }
    };
}
pub(crate) use publications_queries;
