//! The queries both backends run with the same SQL. They are written once, as
//! a macro instantiated for each database type, because sqlx's generic
//! executor bounds would otherwise bury every query under trait clauses. What
//! differs between the databases is passed in: how a list of keys is matched
//! (`= ANY($1)` with an array on Postgres, `IN (SELECT value FROM json_each($1))`
//! with a JSON array on SQLite) and how that list is bound.
//!
//! The backend-specific parts (claiming with `SKIP LOCKED`, batch writes with
//! `UNNEST`, the SQLite writer connection) stay in `postgres.rs` / `sqlite.rs`.

use super::rows::*;
use crate::intent::State;

/// Is the delivered version newer than the card's? Versionless entities order
/// by `occurred_at`.
macro_rules! newer_than_card {
    () => {
        "(COALESCE(excluded.version, -1) > COALESCE(inbox_cards.version, -1) \
          OR (COALESCE(excluded.version, -1) = COALESCE(inbox_cards.version, -1) \
              AND excluded.occurred_at > inbox_cards.occurred_at))"
    };
}
pub(crate) use newer_than_card;

macro_rules! shared_queries {
    ($db:ty, $in_keys:literal, $keys_arg:path) => {
        use crate::store::common::newer_than_card;
        use crate::store::rows::*;
        use crate::store::{StoreError, StoreResult};
        use sqlx::{Pool, QueryBuilder, Transaction};
        use std::collections::HashMap;

        type Tx<'a> = Transaction<'a, $db>;

        pub async fn recipients_get(pool: &Pool<$db>, tenant: &str, ids: &[String]) -> StoreResult<Vec<RecipientRow>> {
            let rows = sqlx::query_as(concat!("SELECT * FROM recipients WHERE tenant = $2 AND id ", $in_keys))
                .bind($keys_arg(ids))
                .bind(tenant)
                .fetch_all(pool)
                .await?;
            Ok(rows)
        }

        /// Replaces the entry; `preferences_version` moves only when the
        /// preferences change, so a version names one set of preferences.
        pub async fn recipient_put(pool: &Pool<$db>, put: &RecipientPut) -> StoreResult<RecipientRow> {
            let row = sqlx::query_as(
                "INSERT INTO recipients (tenant, id, email, phone, locale, timezone, webhook_url, preferences, preferences_version, updated_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 1, $9)
                 ON CONFLICT (tenant, id) DO UPDATE SET
                     email = excluded.email, phone = excluded.phone, locale = excluded.locale,
                     timezone = excluded.timezone, webhook_url = excluded.webhook_url,
                     preferences = excluded.preferences,
                     preferences_version = CASE WHEN recipients.preferences = excluded.preferences
                         THEN recipients.preferences_version ELSE recipients.preferences_version + 1 END,
                     updated_at = excluded.updated_at
                 RETURNING *",
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
            .fetch_one(pool)
            .await?;
            Ok(row)
        }

        /// The body of `events_ingest`, inside the caller's transaction.
        pub async fn ingest(tx: &mut Tx<'_>, ingest: &Ingest) -> StoreResult<IngestOutcome> {
            let claimed = sqlx::query(
                "INSERT INTO requests (tenant, identity, fingerprint, created_at) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (tenant, identity) DO NOTHING",
            )
            .bind(&ingest.tenant)
            .bind(&ingest.identity)
            .bind(&ingest.fingerprint)
            .bind(ingest.now_us)
            .execute(&mut **tx)
            .await?
            .rows_affected();
            if claimed == 0 {
                // Another request with this identity committed first (on Postgres
                // the INSERT above waited for it): replay it or refuse.
                let (fingerprint, response): (String, Option<String>) =
                    sqlx::query_as("SELECT fingerprint, response FROM requests WHERE tenant = $1 AND identity = $2")
                        .bind(&ingest.tenant)
                        .bind(&ingest.identity)
                        .fetch_one(&mut **tx)
                        .await?;
                if fingerprint != ingest.fingerprint {
                    return Ok(IngestOutcome::Mismatch);
                }
                let text = response.ok_or_else(|| StoreError::Corrupt("request record without a response".into()))?;
                let mut response: IngestResponse =
                    serde_json::from_str(&text).map_err(|e| StoreError::Corrupt(format!("stored response: {e}")))?;
                response.replayed = true;
                return Ok(IngestOutcome::Replayed { response });
            }

            payload_put(tx, &ingest.fingerprint, &ingest.event_body, ingest.now_us).await?;
            // A fixed order keeps two transactions writing the same intents from
            // deadlocking each other.
            let mut ordered: Vec<&NewIntent> = ingest.intents.iter().collect();
            ordered.sort_by(|a, b| a.key.cmp(&b.key));
            let mut summaries: HashMap<&str, IntentSummary> = HashMap::new();
            let mut any_created = false;
            for it in ordered {
                let summary = intent_insert(tx, ingest, it).await?;
                any_created |= summary.created;
                summaries.insert(it.key.as_str(), summary);
            }
            let intents = ingest.intents.iter().filter_map(|it| summaries.remove(it.key.as_str())).collect();
            let response = IngestResponse { event_key: ingest.event_key.clone(), replayed: false, intents };
            let text = serde_json::to_string(&response).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            sqlx::query("UPDATE requests SET status = $3, response = $4 WHERE tenant = $1 AND identity = $2")
                .bind(&ingest.tenant)
                .bind(&ingest.identity)
                .bind(if any_created { 202_i64 } else { 200_i64 })
                .bind(text)
                .execute(&mut **tx)
                .await?;
            Ok(IngestOutcome::Accepted { response, any_created })
        }

        async fn payload_put(tx: &mut Tx<'_>, digest: &str, body: &str, now_us: i64) -> StoreResult<()> {
            sqlx::query("INSERT INTO payloads (digest, body, created_at) VALUES ($1, $2, $3) ON CONFLICT (digest) DO NOTHING")
                .bind(digest)
                .bind(body)
                .bind(now_us)
                .execute(&mut **tx)
                .await?;
            Ok(())
        }

        async fn intent_insert(tx: &mut Tx<'_>, ingest: &Ingest, it: &NewIntent) -> StoreResult<IntentSummary> {
            if let Some((digest, body)) = &it.payload {
                payload_put(tx, digest, body, ingest.now_us).await?;
            }
            let created = sqlx::query(
                "INSERT INTO intents (key, tenant, event_type, entity_type, entity_id, entity_version, occurred_at,
                     channel, recipient_id, destination, locale, template_id, template_revision, event_digest,
                     payload_digest, decision, reason, detail, state, attempts, created_at, updated_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, 0, $20, $20)
                 ON CONFLICT (key) DO NOTHING",
            )
            .bind(&it.key)
            .bind(&ingest.tenant)
            .bind(&ingest.event_type)
            .bind(&ingest.entity_type)
            .bind(&ingest.entity_id)
            .bind(ingest.entity_version)
            .bind(&ingest.occurred_at)
            .bind(&it.channel)
            .bind(&it.recipient_id)
            .bind(&it.destination)
            .bind(&it.locale)
            .bind(&it.template_id)
            .bind(&it.template_revision)
            .bind(&ingest.fingerprint)
            .bind(it.payload.as_ref().map(|(d, _)| d.as_str()))
            .bind(&it.decision)
            .bind(&it.reason)
            .bind(&it.detail)
            .bind(&it.state)
            .bind(ingest.now_us)
            .execute(&mut **tx)
            .await?
            .rows_affected()
                == 1;
            let summary = |decision: String, reason: Option<String>, state: String| IntentSummary {
                id: it.key.clone(),
                key: it.key.clone(),
                channel: it.channel.clone(),
                recipient_id: it.recipient_id.clone(),
                decision,
                reason,
                state,
                created,
            };
            if created {
                if let Some(run_at) = it.run_at {
                    sqlx::query("INSERT INTO jobs (intent_key, run_at) VALUES ($1, $2)")
                        .bind(&it.key)
                        .bind(run_at)
                        .execute(&mut **tx)
                        .await?;
                }
                return Ok(summary(it.decision.clone(), it.reason.clone(), it.state.clone()));
            }
            // The same event arrived under another request identity: report the
            // intent as it stands.
            let (decision, reason, state): (String, Option<String>, String) =
                sqlx::query_as("SELECT decision, reason, state FROM intents WHERE key = $1")
                    .bind(&it.key)
                    .fetch_one(&mut **tx)
                    .await?;
            Ok(summary(decision, reason, state))
        }

        pub async fn intent_get(pool: &Pool<$db>, tenant: &str, key: &str) -> StoreResult<Option<IntentDetail>> {
            let intent: Option<IntentRow> = sqlx::query_as("SELECT i.* FROM intents i WHERE i.tenant = $1 AND i.key = $2")
                .bind(tenant)
                .bind(key)
                .fetch_optional(pool)
                .await?;
            let Some(intent) = intent else { return Ok(None) };
            let content: Option<String> = match &intent.payload_digest {
                Some(d) => sqlx::query_scalar("SELECT body FROM payloads WHERE digest = $1").bind(d).fetch_optional(pool).await?,
                None => None,
            };
            let attempts = sqlx::query_as("SELECT * FROM attempts WHERE intent_key = $1 ORDER BY n")
                .bind(key)
                .fetch_all(pool)
                .await?;
            Ok(Some(IntentDetail { intent, content, attempts }))
        }

        pub async fn intents_list(pool: &Pool<$db>, f: &IntentFilter) -> StoreResult<Page<IntentRow>> {
            let mut q: QueryBuilder<'_, $db> = QueryBuilder::new("SELECT i.* FROM intents i WHERE i.tenant = ");
            q.push_bind(&f.tenant);
            if let Some((kind, id)) = &f.entity {
                q.push(" AND i.entity_type = ").push_bind(kind).push(" AND i.entity_id = ").push_bind(id);
            }
            if let Some(r) = &f.recipient_id {
                q.push(" AND i.recipient_id = ").push_bind(r);
            }
            if let Some(s) = &f.state {
                q.push(" AND i.state = ").push_bind(s);
            }
            if let Some((at, key)) = f.cursor.as_deref().and_then(cursor_decode) {
                q.push(" AND (i.created_at < ").push_bind(at);
                q.push(" OR (i.created_at = ").push_bind(at).push(" AND i.key < ").push_bind(key).push("))");
            }
            q.push(" ORDER BY i.created_at DESC, i.key DESC LIMIT ").push_bind(i64::from(f.limit) + 1);
            let mut items: Vec<IntentRow> = q.build_query_as().fetch_all(pool).await?;
            Ok(page(&mut items, f.limit, |r| cursor_encode(r.created_at, &r.key)))
        }

        /// After the backend has leased `keys`: rescue unfinished attempts as
        /// `unknown`, retire intents that have no try left, start the next
        /// attempt of the rest and return them with their content.
        pub async fn claim_keys(tx: &mut Tx<'_>, keys: &[String], now_us: i64, max_attempts: i64) -> StoreResult<Vec<ClaimedJob>> {
            sqlx::query(concat!(
                "UPDATE attempts SET finished_at = $2, outcome = 'unknown', error_class = 'lease_expired',
                     error = 'the worker''s lease expired before it reported an outcome'
                 WHERE finished_at IS NULL AND intent_key ",
                $in_keys
            ))
            .bind($keys_arg(keys))
            .bind(now_us)
            .execute(&mut **tx)
            .await?;
            // Only a worker that died during the last try leaves such a job.
            let exhausted: Vec<String> = sqlx::query_scalar(concat!(
                "UPDATE intents SET state = 'dead', reason = 'retries_exhausted', updated_at = $2
                 WHERE attempts >= $3 AND key ",
                $in_keys,
                " RETURNING key"
            ))
            .bind($keys_arg(keys))
            .bind(now_us)
            .bind(max_attempts)
            .fetch_all(&mut **tx)
            .await?;
            let keys: Vec<String> = if exhausted.is_empty() {
                keys.to_vec()
            } else {
                sqlx::query(concat!("DELETE FROM jobs WHERE intent_key ", $in_keys))
                    .bind($keys_arg(&exhausted))
                    .execute(&mut **tx)
                    .await?;
                keys.iter().filter(|k| !exhausted.contains(k)).cloned().collect()
            };
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
                "SELECT i.*, p.body AS content FROM intents i LEFT JOIN payloads p ON p.digest = i.payload_digest WHERE i.key ",
                $in_keys
            ))
            .bind($keys_arg(&keys))
            .fetch_all(&mut **tx)
            .await?;
            Ok(jobs)
        }

        pub async fn inbox_deliver(tx: &mut Tx<'_>, d: &InboxDelivery) -> StoreResult<()> {
            let card_id = inbox_card_id(&d.tenant, &d.recipient_id, &d.entity_type, &d.entity_id);
            let first = sqlx::query("INSERT INTO inbox_entries (intent_key, card_id) VALUES ($1, $2) ON CONFLICT (intent_key) DO NOTHING")
                .bind(&d.intent_key)
                .bind(&card_id)
                .execute(&mut **tx)
                .await?
                .rows_affected();
            if first == 0 {
                return Ok(()); // this intent is in the inbox already
            }
            sqlx::query(concat!(
                "INSERT INTO inbox_cards (card_id, tenant, recipient_id, entity_type, entity_id, version, occurred_at,
                     intent_key, payload_digest, collapsed, read_at, updated_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 0, NULL, $10)
                 ON CONFLICT (card_id) DO UPDATE SET
                     collapsed = inbox_cards.collapsed + 1,
                     version = CASE WHEN ", newer_than_card!(), " THEN excluded.version ELSE inbox_cards.version END,
                     occurred_at = CASE WHEN ", newer_than_card!(), " THEN excluded.occurred_at ELSE inbox_cards.occurred_at END,
                     intent_key = CASE WHEN ", newer_than_card!(), " THEN excluded.intent_key ELSE inbox_cards.intent_key END,
                     payload_digest = CASE WHEN ", newer_than_card!(), " THEN excluded.payload_digest ELSE inbox_cards.payload_digest END,
                     read_at = CASE WHEN ", newer_than_card!(), " THEN NULL ELSE inbox_cards.read_at END,
                     updated_at = CASE WHEN ", newer_than_card!(), " THEN excluded.updated_at ELSE inbox_cards.updated_at END"
            ))
            .bind(&card_id)
            .bind(&d.tenant)
            .bind(&d.recipient_id)
            .bind(&d.entity_type)
            .bind(&d.entity_id)
            .bind(d.version)
            .bind(&d.occurred_at)
            .bind(&d.intent_key)
            .bind(&d.payload_digest)
            .bind(d.now_us)
            .execute(&mut **tx)
            .await?;
            Ok(())
        }

        pub async fn inbox_list(
            pool: &Pool<$db>,
            tenant: &str,
            recipient_id: &str,
            cursor: Option<&str>,
            limit: u32,
        ) -> StoreResult<Page<InboxCard>> {
            let (at, id) = cursor.and_then(cursor_decode).unwrap_or((i64::MAX, String::new()));
            let mut items: Vec<InboxCard> = sqlx::query_as(
                "SELECT c.card_id, c.entity_type, c.entity_id, c.version, c.intent_key, c.collapsed, c.read_at,
                        c.updated_at, p.body AS content
                 FROM inbox_cards c LEFT JOIN payloads p ON p.digest = c.payload_digest
                 WHERE c.tenant = $1 AND c.recipient_id = $2
                   AND (c.updated_at < $3 OR (c.updated_at = $3 AND c.card_id < $4))
                 ORDER BY c.updated_at DESC, c.card_id DESC LIMIT $5",
            )
            .bind(tenant)
            .bind(recipient_id)
            .bind(at)
            .bind(id)
            .bind(i64::from(limit) + 1)
            .fetch_all(pool)
            .await?;
            Ok(page(&mut items, limit, |c| cursor_encode(c.updated_at, &c.card_id)))
        }

        pub async fn inbox_mark_read(pool: &Pool<$db>, tenant: &str, recipient_id: &str, card_id: &str, now_us: i64) -> StoreResult<bool> {
            let n = sqlx::query(
                "UPDATE inbox_cards SET read_at = COALESCE(read_at, $4) WHERE tenant = $1 AND recipient_id = $2 AND card_id = $3",
            )
            .bind(tenant)
            .bind(recipient_id)
            .bind(card_id)
            .bind(now_us)
            .execute(pool)
            .await?
            .rows_affected();
            Ok(n > 0)
        }

        /// Trims a `limit + 1` fetch to `limit` and says where the next page starts.
        fn page<T>(items: &mut Vec<T>, limit: u32, cursor: impl Fn(&T) -> String) -> Page<T> {
            let more = items.len() > limit as usize;
            items.truncate(limit as usize);
            let next = if more { items.last().map(cursor) } else { None };
            Page { items: std::mem::take(items), next }
        }
    };
}
pub(crate) use shared_queries;

/// The state, reason and job action an outcome leads to.
pub fn transition_columns(t: &Transition) -> (State, Option<&'static str>, Option<i64>) {
    match t {
        Transition::Sent => (State::Sent, None, None),
        Transition::Retry { run_at_us, state } => (*state, None, Some(*run_at_us)),
        Transition::Dead { reason } => (State::Dead, Some(reason.as_str()), None),
    }
}

/// Which outcomes were applied, and which were stale.
pub fn report(finished: &[FinishedAttempt], applied: &[String]) -> FinishReport {
    let stale: Vec<(String, i64)> = finished
        .iter()
        .filter(|f| !applied.contains(&f.key))
        .map(|f| (f.key.clone(), f.n))
        .collect();
    FinishReport {
        applied: finished.len() - stale.len(),
        stale,
    }
}
