//! Reading intents and their attempts.
//! Instantiated per backend by [`super::shared_queries`].

macro_rules! intents_queries {
    ($db:ty, $in_keys:literal, $keys_arg:path, $for_update:literal) => {
        pub async fn intent_get(pool: &Pool<$db>, tenant: &str, key: &str) -> StoreResult<Option<IntentDetail>> {
            let intent: Option<IntentRow> = sqlx::query_as(concat!(
                "SELECT ",
                intent_columns!(),
                " FROM intents i WHERE i.tenant = $1 AND i.key = $2"
            ))
            .bind(tenant)
            .bind(key)
            .fetch_optional(pool)
            .await?;
            let Some(intent) = intent else { return Ok(None) };
            let content: Option<String> = match &intent.payload_digest {
                Some(d) => {
                    sqlx::query_scalar("SELECT body FROM payloads WHERE digest = $1")
                        .bind(d)
                        .fetch_optional(pool)
                        .await?
                }
                None => None,
            };
            let event_body: Option<String> = sqlx::query_scalar("SELECT body FROM payloads WHERE digest = $1")
                .bind(&intent.event_digest)
                .fetch_optional(pool)
                .await?;
            let attempts = sqlx::query_as(concat!(
                "SELECT ",
                attempt_columns!(),
                " FROM attempts WHERE intent_key = $1 ORDER BY n"
            ))
            .bind(key)
            .fetch_all(pool)
            .await?;
            let receipts = receipts_of(pool, std::slice::from_ref(&intent.key)).await?;
            Ok(Some(IntentDetail { intent, content, event_body, attempts, receipts }))
        }

        pub async fn intents_list(pool: &Pool<$db>, f: &IntentFilter) -> StoreResult<Page<IntentRow>> {
            // Every condition is pushed only when given, so each search is
            // one plain statement its index serves (no `$1 IS NULL OR …`).
            let mut q: QueryBuilder<'_, $db> =
                QueryBuilder::new(concat!("SELECT ", intent_columns!(), " FROM intents i WHERE 1 = 1"));
            if let Some(t) = &f.tenant {
                q.push(" AND i.tenant = ").push_bind(t);
            }
            if let Some((kind, id)) = &f.entity {
                q.push(" AND i.entity_type = ").push_bind(kind).push(" AND i.entity_id = ").push_bind(id);
            }
            if let Some(r) = &f.recipient_id {
                q.push(" AND i.recipient_id = ").push_bind(r);
            }
            if let Some(s) = &f.state {
                q.push(" AND i.state = ").push_bind(s);
            }
            if let Some(c) = &f.cursor {
                q.push(" AND (i.created_at < ").push_bind(c.at);
                q.push(" OR (i.created_at = ").push_bind(c.at).push(" AND i.key < ").push_bind(&c.id).push("))");
            }
            q.push(" ORDER BY i.created_at DESC, i.key DESC LIMIT ").push_bind(i64::from(f.limit) + 1);
            let mut items: Vec<IntentRow> = q.build_query_as().fetch_all(pool).await?;
            Ok(page(&mut items, f.limit, |r| Cursor::new(r.created_at, &r.key)))
        }

        /// The tenant an intent belongs to (an `admin` opening it by key).
        pub async fn intent_tenant(pool: &Pool<$db>, key: &str) -> StoreResult<Option<String>> {
            Ok(sqlx::query_scalar("SELECT tenant FROM intents WHERE key = $1").bind(key).fetch_optional(pool).await?)
        }

        /// Finished attempts in [since, until) by outcome, most first: one
        /// tenant's (through their intents) or every tenant's.
        pub async fn attempts_by_outcome(
            pool: &Pool<$db>,
            tenant: Option<&str>,
            since_us: i64,
            until_us: i64,
        ) -> StoreResult<Vec<(String, i64)>> {
            let mut q: QueryBuilder<'_, $db> =
                QueryBuilder::new("SELECT COALESCE(a.outcome, 'unknown') AS outcome, COUNT(*) AS n FROM attempts a");
            if let Some(t) = tenant {
                q.push(" JOIN intents i ON i.key = a.intent_key AND i.tenant = ").push_bind(t);
            }
            q.push(" WHERE a.finished_at IS NOT NULL AND a.finished_at >= ").push_bind(since_us);
            q.push(" AND a.finished_at < ").push_bind(until_us);
            q.push(" GROUP BY 1 ORDER BY 2 DESC, 1");
            Ok(q.build_query_as().fetch_all(pool).await?)
        }

        /// Every attempt of these intents, in order.
        pub async fn attempts_of(pool: &Pool<$db>, keys: &[String]) -> StoreResult<Vec<AttemptRow>> {
            let rows = sqlx::query_as(concat!(
                "SELECT ",
                attempt_columns!(),
                " FROM attempts WHERE intent_key ",
                $in_keys,
                " ORDER BY intent_key, n"
            ))
            .bind($keys_arg(keys))
            .fetch_all(pool)
            .await?;
            Ok(rows)
        }
    };
}
pub(crate) use intents_queries;
