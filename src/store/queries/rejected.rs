//! Bus messages that could not become an event (`rejected_messages`).
//! Instantiated per backend by [`super::shared_queries`].

macro_rules! rejected_queries {
    ($db:ty, $in_keys:literal, $keys_arg:path, $for_update:literal) => {
        /// Records it once: the same message recorded again changes nothing.
        /// True when this call recorded it.
        pub async fn rejected_record(pool: &Pool<$db>, r: &RejectedMessage) -> StoreResult<bool> {
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
        pub async fn rejected_list(
            pool: &Pool<$db>,
            tenant: Option<&str>,
            cursor: Option<&Cursor>,
            limit: u32,
        ) -> StoreResult<Page<RejectedMessage>> {
            let mut q: QueryBuilder<'_, $db> = QueryBuilder::new(concat!(
                "SELECT ",
                crate::store::queries::rejected_columns!(),
                " FROM rejected_messages WHERE 1 = 1"
            ));
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

        /// (code, count) of bus messages rejected in [since, until), most
        /// first; every tenant when `tenant` is None.
        pub async fn rejected_summary(
            pool: &Pool<$db>,
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

        pub async fn rejected_get(pool: &Pool<$db>, tenant: &str, id: &str) -> StoreResult<Option<RejectedMessage>> {
            let row = sqlx::query_as(concat!(
                "SELECT ",
                crate::store::queries::rejected_columns!(),
                " FROM rejected_messages WHERE tenant = $1 AND id = $2"
            ))
            .bind(tenant)
            .bind(id)
            .fetch_optional(pool)
            .await?;
            Ok(row)
        }
    };
}
pub(crate) use rejected_queries;
