//! Digest windows: finding the due ones, their members, closing them once.
//! Instantiated per backend by [`super::shared_queries`].

macro_rules! digests_queries {
    ($db:ty, $in_keys:literal, $keys_arg:path, $for_update:literal) => {
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
                ", e.body AS event_body, p.body AS content, i.traceparent
                 FROM intents i LEFT JOIN payloads e ON e.digest = i.event_digest
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
                content_digest: String::new(),
                event_type: d.event_type.clone(),
                entity_type: "digest".into(),
                entity_id: d.group_key.clone(),
                entity_version: None,
                occurred_at: close.occurred_at.clone(),
                event_body: close.event_body.clone(),
                intents: Vec::new(),
                now_us: close.now_us,
                traceparent: close.traceparent.clone(),
            };
            payload_put(tx, &ingest.fingerprint, &ingest.event_body, close.now_us).await?;
            if let Some((digest, body)) = &close.intent.payload {
                payload_put(tx, digest, body, close.now_us).await?;
            }
            intent_insert(tx, &ingest, &close.intent).await?;
            if close.links.is_some() {
                sqlx::query("UPDATE jobs SET links = $2 WHERE intent_key = $1")
                    .bind(&close.intent.key)
                    .bind(&close.links)
                    .execute(&mut **tx)
                    .await?;
            }
            if close.intent.payload.is_none() {
                // The digest could not be rendered: rather than strand its
                // members, each goes out on its own with the content it froze.
                // One planned in shadow ends `shadowed` here, where live
                // would queue it: no job, so nothing counts it again.
                if !close.shadow_members.is_empty() {
                    sqlx::query(concat!(
                        "UPDATE intents SET decision = 'send', state = 'shadowed', updated_at = $2,
                             detail = 'its digest could not be rendered; planned in shadow mode, it ends shadowed on its own'
                         WHERE decision = 'digest' AND link_key = $3 AND key ",
                        $in_keys
                    ))
                    .bind($keys_arg(&close.shadow_members))
                    .bind(close.now_us)
                    .bind(&d.key)
                    .execute(&mut **tx)
                    .await?;
                }
                let members: Vec<String> = sqlx::query_scalar(
                    "UPDATE intents SET decision = 'send', state = 'queued', updated_at = $2,
                         detail = 'its digest could not be rendered; sent on its own'
                     WHERE link_key = $1 AND decision = 'digest' RETURNING key",
                )
                .bind(&d.key)
                .bind(close.now_us)
                .fetch_all(&mut **tx)
                .await?;
                // Each continues the trace of the request that planned it.
                for key in members {
                    sqlx::query(
                        "INSERT INTO jobs (intent_key, tenant, run_at, traceparent)
                         SELECT key, tenant, $2, traceparent FROM intents WHERE key = $1
                         ON CONFLICT (intent_key) DO NOTHING",
                    )
                    .bind(&key)
                    .bind(close.now_us)
                    .execute(&mut **tx)
                    .await?;
                }
                return Ok(DigestCloseOutcome::Closed);
            }
            // A member planned in shadow is `digested` as well — a live
            // Herald would have batched it — though the digest went live
            // without it; its detail says so.
            if !close.shadow_members.is_empty() {
                sqlx::query(concat!(
                    "UPDATE intents SET detail = 'planned in shadow mode, left out of the live digest, which carries only the members planned live'
                     WHERE decision = 'digest' AND link_key = $2 AND key ",
                    $in_keys
                ))
                .bind($keys_arg(&close.shadow_members))
                .bind(&d.key)
                .execute(&mut **tx)
                .await?;
            }
            sqlx::query(
                "UPDATE intents SET state = 'digested', updated_at = $2
                 WHERE link_key = $1 AND decision = 'digest'",
            )
                .bind(&d.key)
                .bind(close.now_us)
                .execute(&mut **tx)
                .await?;
            Ok(DigestCloseOutcome::Closed)
        }
    };
}
pub(crate) use digests_queries;
