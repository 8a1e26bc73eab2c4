//! Digest windows on Postgres: finding the due ones, their members, closing
//! them once.

use super::Tx;
use super::ingest_tx::intent_insert;
use crate::intent::State;
use crate::store::{DigestClose, DigestCloseOutcome, DigestMember, DigestRow, Ingest, StoreResult};
use sqlx::PgPool;

pub(super) async fn digests_due(pool: &PgPool, now_us: i64, limit: u32) -> StoreResult<Vec<DigestRow>> {
    let rows = sqlx::query_as(
        "SELECT key, tenant, event_type, channel, recipient_id, group_key, destination, locale, window_start,
             closes_at, state, created_at
         FROM digests WHERE state = 'open' AND closes_at <= $1 ORDER BY closes_at LIMIT $2",
    )
    .bind(now_us)
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await?;
    Ok(rows)
}

pub(super) async fn digest_members(pool: &PgPool, key: &str) -> StoreResult<Vec<DigestMember>> {
    let rows = sqlx::query_as(
        "SELECT i.key, i.tenant, i.event_type, i.entity_type, i.entity_id, i.entity_version, i.occurred_at,
             i.channel, i.recipient_id, i.destination, i.locale, i.template_id, i.template_revision, i.event_digest,
             i.payload_digest, i.decision, i.reason, i.detail, i.state, i.attempts, i.created_at, i.updated_at,
             i.preferences_version, i.link_key, i.retry_base, i.mode,
             COALESCE(i.event_body, (SELECT e.body FROM payloads e WHERE e.digest = i.event_digest)) AS event_body,
             COALESCE(i.content, (SELECT p.body FROM payloads p WHERE p.digest = i.payload_digest)) AS content,
             i.traceparent
         FROM intents i
         WHERE i.link_key = $1 AND i.decision = 'digest' ORDER BY i.created_at, i.key",
    )
    .bind(key)
    .fetch_all(pool)
    .await?;
    Ok(rows)
}

/// Closes a window once: the first closer turns it into the digest
/// intent and marks its members `digested`; any other finds it closed.
pub(super) async fn digest_close(tx: &mut Tx<'_>, close: &DigestClose) -> StoreResult<DigestCloseOutcome> {
    let d = &close.digest;
    let won = sqlx::query("UPDATE digests SET state = 'closed' WHERE key = $1 AND state = 'open'")
        .bind(&d.key)
        .execute(&mut **tx)
        .await?
        .rows_affected();
    if won == 0 {
        return Ok(DigestCloseOutcome::AlreadyClosed);
    }
    let members: Vec<String> = sqlx::query_scalar(
        "SELECT key FROM intents WHERE link_key = $1 AND decision = 'digest' ORDER BY created_at, key",
    )
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
        // The digest's one intent: its body, the members' rendered texts,
        // goes in its row (`Ingest::inline_body`).
        intents: vec![close.intent.clone()],
        now_us: close.now_us,
        traceparent: close.traceparent.clone(),
    };
    intent_insert(tx, &ingest, &close.intent).await?;
    if close.links.is_some() {
        sqlx::query("UPDATE jobs SET links = $2 WHERE intent_id = (SELECT id FROM intents WHERE key = $1)")
            .bind(&close.intent.key)
            .bind(&close.links)
            .execute(&mut **tx)
            .await?;
    }
    // How each member ends is `lifecycle::digest`'s.
    let rendered = close.intent.payload.is_some();
    let changes = crate::lifecycle::digest::closed(&members, &close.shadow_members, rendered, close.now_us);
    super::intents_apply(tx, &changes).await?;
    // A member that goes out on its own continues the trace of the
    // request that planned it.
    for c in changes.iter().filter(|c| c.to == State::Queued) {
        sqlx::query(
            "INSERT INTO jobs (intent_id, tenant, run_at, traceparent)
             SELECT id, tenant, $2, traceparent FROM intents WHERE key = $1
             ON CONFLICT (intent_id) DO NOTHING",
        )
        .bind(&c.key)
        .bind(close.now_us)
        .execute(&mut **tx)
        .await?;
    }
    Ok(DigestCloseOutcome::Closed)
}
