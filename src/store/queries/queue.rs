//! The queue: claiming under a lease, rescuing, superseded versions, depth.
//! Instantiated per backend by [`super::shared_queries`].

macro_rules! queue_queries {
    ($db:ty, $in_keys:literal, $keys_arg:path, $for_update:literal) => {
        /// After the backend has leased `keys`: rescue unfinished attempts as
        /// `unknown`, retire intents that have no try left, start the next
        /// attempt of the rest and return them with their content.
        pub async fn claim_keys(tx: &mut Tx<'_>, keys: &[String], claim: &Claim) -> StoreResult<Vec<ClaimedJob>> {
            let (now_us, max_attempts) = (claim.now_us, claim.max_attempts);
            let rescued: Vec<String> = sqlx::query_scalar(concat!(
                "UPDATE attempts SET finished_at = $2, outcome = 'unknown', error_class = 'lease_expired',
                     error = 'the worker''s lease expired before it reported an outcome'
                 WHERE finished_at IS NULL AND intent_key ",
                $in_keys,
                " RETURNING intent_key"
            ))
            .bind($keys_arg(keys))
            .bind(now_us)
            .fetch_all(&mut **tx)
            .await?;
            // A rescued job whose try was its last is dead, not tried once more:
            // the policy's `attempts` bounds provider calls (per replay).
            let exhausted: Vec<String> = if rescued.is_empty() {
                Vec::new()
            } else {
                sqlx::query_scalar(concat!(
                    "UPDATE intents SET state = 'dead', reason = 'retries_exhausted', updated_at = $2
                     WHERE attempts - retry_base >= $3 AND key ",
                    $in_keys,
                    " RETURNING key"
                ))
                .bind($keys_arg(&rescued))
                .bind(now_us)
                .bind(max_attempts)
                .fetch_all(&mut **tx)
                .await?
            };
            let keys: Vec<String> = if exhausted.is_empty() {
                keys.to_vec()
            } else {
                sqlx::query(concat!("DELETE FROM jobs WHERE intent_key ", $in_keys))
                    .bind($keys_arg(&exhausted))
                    .execute(&mut **tx)
                    .await?;
                keys.iter().filter(|k| !exhausted.contains(k)).cloned().collect()
            };
            let keys = skip_superseded(tx, keys, claim).await?;
            if keys.is_empty() {
                return Ok(Vec::new());
            }
            sqlx::query(concat!(
                "UPDATE intents SET attempts = attempts + 1, state = 'sending', updated_at = $2 WHERE key ",
                $in_keys
            ))
            .bind($keys_arg(&keys))
            .bind(now_us)
            .execute(&mut **tx)
            .await?;
            sqlx::query(concat!(
                "INSERT INTO attempts (intent_key, n, started_at) SELECT key, attempts, $2 FROM intents WHERE key ",
                $in_keys
            ))
            .bind($keys_arg(&keys))
            .bind(now_us)
            .execute(&mut **tx)
            .await?;
            let jobs = sqlx::query_as(concat!(
                "SELECT ",
                intent_columns!(),
                ", p.body AS content FROM intents i LEFT JOIN payloads p ON p.digest = i.payload_digest WHERE i.key ",
                $in_keys
            ))
            .bind($keys_arg(&keys))
            .fetch_all(&mut **tx)
            .await?;
            Ok(jobs)
        }

        /// Rule 4, per route: a pending intent whose entity already has a newer
        /// version queued, held or sent to the same recipient on the same
        /// channel is suppressed as `superseded`, linked to that newer intent.
        async fn skip_superseded(tx: &mut Tx<'_>, keys: Vec<String>, claim: &Claim) -> StoreResult<Vec<String>> {
            if claim.supersede_types.is_empty() {
                return Ok(keys);
            }
            let candidates: Vec<(String, String)> = sqlx::query_as(concat!(
                "SELECT key, event_type FROM intents WHERE entity_version IS NOT NULL AND key ",
                $in_keys
            ))
            .bind($keys_arg(&keys))
            .fetch_all(&mut **tx)
            .await?;
            let mut superseded = Vec::new();
            for (key, event_type) in candidates {
                if !claim.supersede_types.contains(&event_type) {
                    continue;
                }
                let newer: Option<String> = sqlx::query_scalar(
                    "SELECT n.key FROM intents i JOIN intents n
                         ON n.tenant = i.tenant AND n.entity_type = i.entity_type AND n.entity_id = i.entity_id
                        AND n.recipient_id = i.recipient_id AND n.channel = i.channel AND n.entity_version > i.entity_version
                     WHERE i.key = $1 AND n.state IN ('queued', 'held', 'sending', 'sent', 'unknown')
                     ORDER BY n.entity_version DESC LIMIT 1",
                )
                .bind(&key)
                .fetch_optional(&mut **tx)
                .await?;
                let Some(newer) = newer else { continue };
                sqlx::query(
                    "UPDATE intents SET decision = 'suppress', state = 'suppressed', reason = 'superseded',
                         link_key = $2, updated_at = $3 WHERE key = $1",
                )
                .bind(&key)
                .bind(&newer)
                .bind(claim.now_us)
                .execute(&mut **tx)
                .await?;
                superseded.push(key);
            }
            if superseded.is_empty() {
                return Ok(keys);
            }
            sqlx::query(concat!("DELETE FROM jobs WHERE intent_key ", $in_keys))
                .bind($keys_arg(&superseded))
                .execute(&mut **tx)
                .await?;
            Ok(keys.into_iter().filter(|k| !superseded.contains(k)).collect())
        }

        pub async fn queue_stats(pool: &Pool<$db>, now_us: i64) -> StoreResult<QueueStats> {
            let (due, oldest): (i64, Option<i64>) = sqlx::query_as("SELECT COUNT(*), MIN(run_at) FROM jobs WHERE run_at <= $1")
                .bind(now_us)
                .fetch_one(pool)
                .await?;
            let total: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM jobs").fetch_one(pool).await?;
            Ok(QueueStats { due, total, oldest_due_us: oldest })
        }

    };
}
pub(crate) use queue_queries;
