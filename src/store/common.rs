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

/// Column lists, spelled out: `SELECT *` would change shape under a running
/// process when a migration adds a column, and prepared-statement caches
/// (sqlx's and Postgres's) do not survive that.
macro_rules! intent_columns {
    () => {
        "i.key, i.tenant, i.event_type, i.entity_type, i.entity_id, i.entity_version, i.occurred_at, i.channel, \
         i.recipient_id, i.destination, i.locale, i.template_id, i.template_revision, i.event_digest, i.payload_digest, \
         i.decision, i.reason, i.detail, i.state, i.attempts, i.created_at, i.updated_at, i.preferences_version, i.link_key, \
         i.retry_base"
    };
}
pub(crate) use intent_columns;

macro_rules! recipient_columns {
    () => {
        "tenant, id, email, phone, locale, timezone, webhook_url, preferences, preferences_version, updated_at"
    };
}
pub(crate) use recipient_columns;

macro_rules! shared_queries {
    ($db:ty, $in_keys:literal, $keys_arg:path, $for_update:literal) => {
        use crate::store::common::{intent_columns, newer_than_card, recipient_columns};
        use crate::store::rows::*;
        use crate::store::{StoreError, StoreResult};
        use sqlx::{Pool, QueryBuilder, Transaction};
        use std::collections::HashMap;

        type Tx<'a> = Transaction<'a, $db>;

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
                     payload_digest, decision, reason, detail, state, attempts, created_at, updated_at,
                     preferences_version, link_key)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, 0, $20, $20, $21, $22)
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
            .bind(it.preferences_version)
            .bind(it.digest.as_ref().map(|d| d.key.as_str()))
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
                if let Some(d) = &it.digest
                    && !digest_join(tx, ingest, d).await?
                {
                    // The window closed between planning and this transaction:
                    // the member goes out on its own rather than being lost.
                    sqlx::query(
                        "UPDATE intents SET decision = 'send', state = 'queued', link_key = NULL,
                             detail = 'its digest window had already closed; sent on its own' WHERE key = $1",
                    )
                    .bind(&it.key)
                    .execute(&mut **tx)
                    .await?;
                    sqlx::query("INSERT INTO jobs (intent_key, run_at) VALUES ($1, $2)")
                        .bind(&it.key)
                        .bind(ingest.now_us)
                        .execute(&mut **tx)
                        .await?;
                    return Ok(summary("send".into(), None, "queued".into()));
                }
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

        /// Opens the digest window if this member is its first, and says whether
        /// it is still open (the row lock orders this with a closing worker).
        async fn digest_join(tx: &mut Tx<'_>, ingest: &Ingest, d: &NewDigest) -> StoreResult<bool> {
            sqlx::query(
                "INSERT INTO digests (key, tenant, event_type, channel, recipient_id, group_key, destination, locale,
                     window_start, closes_at, state, created_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 'open', $11)
                 ON CONFLICT (key) DO NOTHING",
            )
            .bind(&d.key)
            .bind(&ingest.tenant)
            .bind(&d.event_type)
            .bind(&d.channel)
            .bind(&d.recipient_id)
            .bind(&d.group_key)
            .bind(&d.destination)
            .bind(&d.locale)
            .bind(d.window_start)
            .bind(d.closes_at)
            .bind(ingest.now_us)
            .execute(&mut **tx)
            .await?;
            let state: String = sqlx::query_scalar(concat!("SELECT state FROM digests WHERE key = $1", $for_update))
                .bind(&d.key)
                .fetch_one(&mut **tx)
                .await?;
            Ok(state == "open")
        }

        pub async fn intent_get(pool: &Pool<$db>, tenant: &str, key: &str) -> StoreResult<Option<IntentDetail>> {
            let intent: Option<IntentRow> = sqlx::query_as(concat!("SELECT ", intent_columns!(), " FROM intents i WHERE i.tenant = $1 AND i.key = $2"))
                .bind(tenant)
                .bind(key)
                .fetch_optional(pool)
                .await?;
            let Some(intent) = intent else { return Ok(None) };
            let content: Option<String> = match &intent.payload_digest {
                Some(d) => sqlx::query_scalar("SELECT body FROM payloads WHERE digest = $1").bind(d).fetch_optional(pool).await?,
                None => None,
            };
            let attempts = sqlx::query_as(
                "SELECT intent_key, n, started_at, finished_at, outcome, error_class, provider_status, provider_message_id, error
                 FROM attempts WHERE intent_key = $1 ORDER BY n",
            )
                .bind(key)
                .fetch_all(pool)
                .await?;
            Ok(Some(IntentDetail { intent, content, attempts }))
        }

        pub async fn intents_list(pool: &Pool<$db>, f: &IntentFilter) -> StoreResult<Page<IntentRow>> {
            let mut q: QueryBuilder<'_, $db> = QueryBuilder::new(concat!("SELECT ", intent_columns!(), " FROM intents i WHERE i.tenant = "));
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

        pub async fn digests_due(pool: &Pool<$db>, now_us: i64, limit: u32) -> StoreResult<Vec<DigestRow>> {
            let rows = sqlx::query_as(
                "SELECT key, tenant, event_type, channel, recipient_id, group_key, destination, locale, window_start, closes_at, state, created_at
                 FROM digests WHERE state = 'open' AND closes_at <= $1 ORDER BY closes_at LIMIT $2",
            )
                .bind(now_us)
                .bind(i64::from(limit))
                .fetch_all(pool)
                .await?;
            Ok(rows)
        }

        pub async fn digest_members(pool: &Pool<$db>, key: &str) -> StoreResult<Vec<DigestMember>> {
            let rows = sqlx::query_as(concat!(
                "SELECT ",
                intent_columns!(),
                ", e.body AS event_body, p.body AS content
                 FROM intents i JOIN payloads e ON e.digest = i.event_digest
                 LEFT JOIN payloads p ON p.digest = i.payload_digest
                 WHERE i.link_key = $1 AND i.decision = 'digest' ORDER BY i.created_at, i.key"
            ))
            .bind(key)
            .fetch_all(pool)
            .await?;
            Ok(rows)
        }

        /// Closes a window once: the first closer turns it into the digest
        /// intent and marks its members `digested`; any other finds it closed.
        pub async fn digest_close(tx: &mut Tx<'_>, close: &DigestClose) -> StoreResult<DigestCloseOutcome> {
            let d = &close.digest;
            let won = sqlx::query("UPDATE digests SET state = 'closed' WHERE key = $1 AND state = 'open'")
                .bind(&d.key)
                .execute(&mut **tx)
                .await?
                .rows_affected();
            if won == 0 {
                return Ok(DigestCloseOutcome::AlreadyClosed);
            }
            let members: Vec<String> =
                sqlx::query_scalar("SELECT key FROM intents WHERE link_key = $1 AND decision = 'digest' ORDER BY created_at, key")
                    .bind(&d.key)
                    .fetch_all(&mut **tx)
                    .await?;
            if members != close.member_keys {
                return Ok(DigestCloseOutcome::MembersChanged);
            }
            let ingest = Ingest {
                tenant: d.tenant.clone(),
                identity: String::new(),
                fingerprint: close.event_digest.clone(),
                event_key: String::new(),
                event_type: d.event_type.clone(),
                entity_type: "digest".into(),
                entity_id: d.group_key.clone(),
                entity_version: None,
                occurred_at: close.occurred_at.clone(),
                event_body: close.event_body.clone(),
                intents: Vec::new(),
                now_us: close.now_us,
            };
            payload_put(tx, &ingest.fingerprint, &ingest.event_body, close.now_us).await?;
            intent_insert(tx, &ingest, &close.intent).await?;
            sqlx::query("UPDATE intents SET state = 'digested', updated_at = $2 WHERE link_key = $1 AND decision = 'digest'")
                .bind(&d.key)
                .bind(close.now_us)
                .execute(&mut **tx)
                .await?;
            Ok(DigestCloseOutcome::Closed)
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

        pub async fn dead_letters_list(pool: &Pool<$db>, f: &DeadLetterFilter) -> StoreResult<Page<DeadLetter>> {
            let mut q: QueryBuilder<'_, $db> = QueryBuilder::new(concat!(
                "SELECT ",
                intent_columns!(),
                ", p.body AS content, e.body AS event_body FROM intents i
                 LEFT JOIN payloads p ON p.digest = i.payload_digest
                 LEFT JOIN payloads e ON e.digest = i.event_digest
                 WHERE i.state = 'dead' AND i.tenant = "
            ));
            q.push_bind(&f.tenant);
            if let Some(r) = &f.reason {
                q.push(" AND i.reason = ").push_bind(r);
            }
            if let Some(since) = f.since_us {
                q.push(" AND i.updated_at >= ").push_bind(since);
            }
            if let Some((at, key)) = f.cursor.as_deref().and_then(cursor_decode) {
                q.push(" AND (i.updated_at < ").push_bind(at);
                q.push(" OR (i.updated_at = ").push_bind(at).push(" AND i.key < ").push_bind(key).push("))");
            }
            q.push(" ORDER BY i.updated_at DESC, i.key DESC LIMIT ").push_bind(i64::from(f.limit) + 1);
            let mut items: Vec<DeadLetter> = q.build_query_as().fetch_all(pool).await?;
            Ok(page(&mut items, f.limit, |d| cursor_encode(d.intent.updated_at, &d.intent.key)))
        }

        pub async fn attempts_of(pool: &Pool<$db>, keys: &[String]) -> StoreResult<Vec<AttemptRow>> {
            let rows = sqlx::query_as(concat!(
                "SELECT intent_key, n, started_at, finished_at, outcome, error_class, provider_status, provider_message_id, error
                 FROM attempts WHERE intent_key ",
                $in_keys,
                " ORDER BY intent_key, n"
            ))
            .bind($keys_arg(keys))
            .fetch_all(pool)
            .await?;
            Ok(rows)
        }

        /// Dead letters by reason; `tenant` None counts every tenant (the ops digest).
        pub async fn dead_letters_summary(
            pool: &Pool<$db>,
            tenant: Option<&str>,
            since_us: i64,
            until_us: i64,
        ) -> StoreResult<Vec<(String, i64)>> {
            let rows = sqlx::query_as(
                "SELECT COALESCE(reason, 'unknown'), COUNT(*) FROM intents
                 WHERE state = 'dead' AND ($1 IS NULL OR tenant = $1) AND updated_at >= $2 AND updated_at < $3
                 GROUP BY 1 ORDER BY 2 DESC, 1",
            )
            .bind(tenant)
            .bind(since_us)
            .bind(until_us)
            .fetch_all(pool)
            .await?;
            Ok(rows)
        }

        /// The newest dead letters of one reason, every tenant: the digest's examples.
        pub async fn dead_letters_examples(pool: &Pool<$db>, reason: &str, since_us: i64, until_us: i64, limit: u32) -> StoreResult<Vec<IntentRow>> {
            let rows = sqlx::query_as(concat!(
                "SELECT ",
                intent_columns!(),
                " FROM intents i WHERE i.state = 'dead' AND COALESCE(i.reason, 'unknown') = $1
                  AND i.updated_at >= $2 AND i.updated_at < $3 ORDER BY i.updated_at DESC, i.key DESC LIMIT $4"
            ))
            .bind(reason)
            .bind(since_us)
            .bind(until_us)
            .bind(i64::from(limit))
            .fetch_all(pool)
            .await?;
            Ok(rows)
        }

        /// The same intents back on the queue: same key, same frozen content, a
        /// fresh retry budget; each replay recorded.
        pub async fn dead_letters_replay(tx: &mut Tx<'_>, r: &Replay) -> StoreResult<Vec<ReplayResult>> {
            let keys: Vec<String> = match &r.selector {
                ReplaySelector::Ids(ids) => ids.clone(),
                ReplaySelector::Reason { reason, since_us } => sqlx::query_scalar(
                    "SELECT key FROM intents WHERE tenant = $1 AND state = 'dead' AND reason = $2 AND updated_at >= $3
                     ORDER BY updated_at LIMIT $4",
                )
                .bind(&r.tenant)
                .bind(reason)
                .bind(since_us.unwrap_or(i64::MIN))
                .bind(r.limit)
                .fetch_all(&mut **tx)
                .await?,
            };
            let mut out = Vec::with_capacity(keys.len());
            for key in keys {
                let row: Option<(String, Option<String>, Option<String>)> = sqlx::query_as(concat!(
                    "SELECT state, reason, payload_digest FROM intents WHERE tenant = $1 AND key = $2",
                    $for_update
                ))
                .bind(&r.tenant)
                .bind(&key)
                .fetch_optional(&mut **tx)
                .await?;
                let outcome = match row {
                    None => ReplayOutcome::NotFound,
                    Some((state, _, _)) if state != "dead" => ReplayOutcome::NotDead(state),
                    Some((_, reason, None)) => ReplayOutcome::NoContent(reason.unwrap_or_default()),
                    Some((_, reason, Some(_))) => {
                        sqlx::query(
                            "UPDATE intents SET state = 'queued', reason = NULL, retry_base = attempts, updated_at = $2 WHERE key = $1",
                        )
                        .bind(&key)
                        .bind(r.now_us)
                        .execute(&mut **tx)
                        .await?;
                        sqlx::query(
                            "INSERT INTO jobs (intent_key, run_at) VALUES ($1, $2)
                             ON CONFLICT (intent_key) DO UPDATE SET run_at = excluded.run_at, locked_until = NULL",
                        )
                        .bind(&key)
                        .bind(r.now_us)
                        .execute(&mut **tx)
                        .await?;
                        sqlx::query(
                            "INSERT INTO dead_letter_replays (tenant, intent_key, replayed_at, previous_reason, requested_by)
                             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (intent_key, replayed_at) DO NOTHING",
                        )
                        .bind(&r.tenant)
                        .bind(&key)
                        .bind(r.now_us)
                        .bind(&reason)
                        .bind(&r.requested_by)
                        .execute(&mut **tx)
                        .await?;
                        ReplayOutcome::Queued
                    }
                };
                out.push(ReplayResult { key, outcome });
            }
            Ok(out)
        }

        /// Claims the ops digest of `slot`: true for exactly one caller at a
        /// time, until it is posted. Returns the window it covers.
        pub async fn ops_digest_claim(pool: &Pool<$db>, c: &OpsDigestClaim) -> StoreResult<Option<(i64, i64)>> {
            let row = sqlx::query_as(
                "INSERT INTO ops_digests (slot, since, until, lease_until) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (slot) DO UPDATE SET lease_until = excluded.lease_until
                 WHERE ops_digests.posted_at IS NULL AND ops_digests.lease_until <= $5
                 RETURNING since, until",
            )
            .bind(&c.slot)
            .bind(c.since_us)
            .bind(c.until_us)
            .bind(c.lease_until_us)
            .bind(c.now_us)
            .fetch_optional(pool)
            .await?;
            Ok(row)
        }

        pub async fn ops_digest_posted(pool: &Pool<$db>, slot: &str, now_us: i64, total: i64) -> StoreResult<()> {
            sqlx::query("UPDATE ops_digests SET posted_at = $2, total = $3 WHERE slot = $1")
                .bind(slot)
                .bind(now_us)
                .bind(total)
                .execute(pool)
                .await?;
            Ok(())
        }

        /// Where the next daily digest starts: the end of the last one posted.
        pub async fn ops_digest_last_until(pool: &Pool<$db>) -> StoreResult<Option<i64>> {
            let v: Option<i64> = sqlx::query_scalar("SELECT MAX(until) FROM ops_digests WHERE posted_at IS NOT NULL AND slot NOT LIKE 'manual:%'")
                .fetch_one(pool)
                .await?;
            Ok(v)
        }

        pub async fn queue_stats(pool: &Pool<$db>, now_us: i64) -> StoreResult<QueueStats> {
            let (due, oldest): (i64, Option<i64>) = sqlx::query_as("SELECT COUNT(*), MIN(run_at) FROM jobs WHERE run_at <= $1")
                .bind(now_us)
                .fetch_one(pool)
                .await?;
            let total: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM jobs").fetch_one(pool).await?;
            Ok(QueueStats { due, total, oldest_due_us: oldest })
        }

        /// One batch of one retention step; returns the rows it touched.
        pub async fn retention_batch(pool: &Pool<$db>, step: PruneStep, cutoff_us: i64, batch: i64) -> StoreResult<u64> {
            let mut tx = pool.begin().await?;
            let n = match step {
                PruneStep::AttemptDiagnostics => sqlx::query(
                    "UPDATE attempts SET error = NULL WHERE (intent_key, n) IN (
                         SELECT intent_key, n FROM attempts WHERE error IS NOT NULL AND finished_at < $1 LIMIT $2)",
                )
                .bind(cutoff_us)
                .bind(batch)
                .execute(&mut *tx)
                .await?
                .rows_affected(),
                PruneStep::Payloads => sqlx::query(
                    "DELETE FROM payloads WHERE digest IN (
                         SELECT p.digest FROM payloads p WHERE p.created_at < $1
                           AND NOT EXISTS (SELECT 1 FROM jobs j JOIN intents i ON i.key = j.intent_key
                                           WHERE i.payload_digest = p.digest OR i.event_digest = p.digest)
                         LIMIT $2)",
                )
                .bind(cutoff_us)
                .bind(batch)
                .execute(&mut *tx)
                .await?
                .rows_affected(),
                PruneStep::Intents => {
                    let keys: Vec<String> = sqlx::query_scalar(
                        "SELECT key FROM intents WHERE updated_at < $1 AND state IN ('sent', 'dead', 'suppressed', 'digested') LIMIT $2",
                    )
                    .bind(cutoff_us)
                    .bind(batch)
                    .fetch_all(&mut *tx)
                    .await?;
                    if !keys.is_empty() {
                        for table in [
                            concat!("DELETE FROM attempts WHERE intent_key ", $in_keys),
                            concat!("DELETE FROM inbox_entries WHERE intent_key ", $in_keys),
                            concat!("DELETE FROM jobs WHERE intent_key ", $in_keys),
                        ] {
                            sqlx::query(table).bind($keys_arg(&keys)).execute(&mut *tx).await?;
                        }
                        sqlx::query(concat!("DELETE FROM intents WHERE key ", $in_keys)).bind($keys_arg(&keys)).execute(&mut *tx).await?;
                    }
                    keys.len() as u64
                }
                PruneStep::Requests => sqlx::query(
                    "DELETE FROM requests WHERE (tenant, identity) IN (
                         SELECT tenant, identity FROM requests WHERE created_at < $1 LIMIT $2)",
                )
                .bind(cutoff_us)
                .bind(batch)
                .execute(&mut *tx)
                .await?
                .rows_affected(),
            };
            tx.commit().await?;
            Ok(n)
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
    let stale: Vec<(String, i64)> =
        finished.iter().filter(|f| !applied.contains(&f.key)).map(|f| (f.key.clone(), f.n)).collect();
    FinishReport { applied: finished.len() - stale.len(), stale }
}
