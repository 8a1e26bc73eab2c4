//! Retention on Postgres: one small batch of one step, in its own short
//! transaction (`crate::ops::retention` drives the steps and their cutoffs).

use crate::store::{PruneStep, StoreResult};
use sqlx::PgPool;

/// One batch of one retention step; returns the rows it touched.
pub(super) async fn retention_batch(pool: &PgPool, step: PruneStep, cutoff_us: i64, batch: i64) -> StoreResult<u64> {
    let mut tx = pool.begin().await?;
    let n = match step {
        PruneStep::AttemptDiagnostics => sqlx::query(
            "UPDATE attempts SET error = NULL WHERE (intent_id, n) IN (
                 SELECT intent_id, n FROM attempts WHERE error IS NOT NULL AND finished_at < $1 LIMIT $2)",
        )
        .bind(cutoff_us)
        .bind(batch)
        .execute(&mut *tx)
        .await?
        .rows_affected(),
        PruneStep::Contents => sqlx::query(crate::store::shared::CONTENTS_PRUNE)
            .bind(cutoff_us)
            .bind(batch)
            .execute(&mut *tx)
            .await?
            .rows_affected(),
        // A payload goes once nothing pending or visible still needs it:
        // no queued job's intent (content or event) and no inbox card.
        // Held digest members are covered by age: their payloads were
        // written (or reused) within the window, and config keeps
        // payloads longer than any digest window.
        PruneStep::Payloads => sqlx::query(
            "DELETE FROM payloads WHERE created_at < $1 AND digest IN (
                 SELECT p.digest FROM payloads p
                 WHERE p.created_at < $1
                   AND p.digest NOT IN (
                       SELECT i.payload_digest FROM jobs j JOIN intents i ON i.id = j.intent_id
                       WHERE i.payload_digest IS NOT NULL
                       UNION ALL
                       SELECT i.event_digest FROM jobs j JOIN intents i ON i.id = j.intent_id)
                   AND NOT EXISTS (SELECT 1 FROM inbox_cards c WHERE c.payload_digest = p.digest)
                 LIMIT $2)",
        )
        .bind(cutoff_us)
        .bind(batch)
        .execute(&mut *tx)
        .await?
        .rows_affected(),
        PruneStep::Intents => {
            // Only an intent in a final state goes (`State::is_final`).
            let finals = crate::store::shared::final_states();
            let candidates: Vec<String> = sqlx::query_scalar(&format!(
                "SELECT key FROM intents
                 WHERE created_at < $1 AND updated_at < $1 AND state IN ({finals})
                 LIMIT $2"
            ))
            .bind(cutoff_us)
            .bind(batch)
            .fetch_all(&mut *tx)
            .await?;
            // The state is checked again as the rows are deleted: an
            // intent replayed in between is pending again and stays.
            let gone: Vec<(i64, String)> = if candidates.is_empty() {
                Vec::new()
            } else {
                sqlx::query_as(&format!(
                    "DELETE FROM intents WHERE updated_at < $2 AND state IN ({finals}) AND key = ANY($1)
                     RETURNING id, key"
                ))
                .bind(&candidates)
                .bind(cutoff_us)
                .fetch_all(&mut *tx)
                .await?
            };
            if !gone.is_empty() {
                let (ids, keys): (Vec<i64>, Vec<String>) = gone.into_iter().unzip();
                sqlx::query("DELETE FROM attempts WHERE intent_id = ANY($1)").bind(&ids).execute(&mut *tx).await?;
                for table in [
                    "DELETE FROM inbox_entries WHERE intent_key = ANY($1)",
                    "DELETE FROM receipts WHERE intent_key = ANY($1)",
                ] {
                    sqlx::query(table).bind(&keys).execute(&mut *tx).await?;
                }
            }
            candidates.len() as u64
        }
        // An event's content record stays while any of its intents
        // does: a later post with other data is still a conflict.
        PruneStep::Events => sqlx::query(
            // The outer age test is re-checked on a row an ingest
            // touched meanwhile (Postgres), so a record that has just
            // been reused is kept.
            "DELETE FROM events WHERE created_at < $1 AND event_key IN (
                 SELECT e.event_key FROM events e
                 WHERE e.created_at < $1
                   AND NOT EXISTS (
                       SELECT 1 FROM intents i
                       WHERE i.tenant = e.tenant AND i.entity_type = e.entity_type AND i.entity_id = e.entity_id
                         AND i.event_type = e.event_type AND i.occurred_at = e.occurred_at)
                 LIMIT $2)",
        )
        .bind(cutoff_us)
        .bind(batch)
        .execute(&mut *tx)
        .await?
        .rows_affected(),
        PruneStep::Requests => sqlx::query(
            "DELETE FROM requests WHERE (tenant, identity) IN (
                 SELECT tenant, identity FROM requests WHERE created_at < $1 LIMIT $2)",
        )
        .bind(cutoff_us)
        .bind(batch)
        .execute(&mut *tx)
        .await?
        .rows_affected(),
        // A closed window is only needed while a member planned inside
        // it may still arrive (it is then sent on its own): long past
        // its close, and once its digest intent is gone, it goes. An
        // open window has members waiting, whatever its age.
        PruneStep::Digests => sqlx::query(
            "DELETE FROM digests WHERE state = 'closed' AND closes_at < $1 AND key IN (
                 SELECT d.key FROM digests d
                 WHERE d.state = 'closed' AND d.closes_at < $1
                   AND NOT EXISTS (SELECT 1 FROM intents i WHERE i.key = d.key)
                 LIMIT $2)",
        )
        .bind(cutoff_us)
        .bind(batch)
        .execute(&mut *tx)
        .await?
        .rows_affected(),
        // A card is open while any in-app intent about its entity for
        // its recipient is left (queued, sent, or folded into it).
        // The outer conditions are checked again as rows are deleted,
        // so a card a delivery has just moved forward stays.
        PruneStep::InboxCards => sqlx::query(
            "DELETE FROM inbox_cards WHERE updated_at < $1 AND card_id IN (
                 SELECT c.card_id FROM inbox_cards c
                 WHERE c.updated_at < $1
                   AND NOT EXISTS (SELECT 1 FROM intents i WHERE i.key = c.intent_key)
                   AND NOT EXISTS (SELECT 1 FROM intents i
                       WHERE i.tenant = c.tenant AND i.entity_type = c.entity_type AND i.entity_id = c.entity_id
                         AND i.recipient_id = c.recipient_id AND i.channel = 'in_app')
                 LIMIT $2)",
        )
        .bind(cutoff_us)
        .bind(batch)
        .execute(&mut *tx)
        .await?
        .rows_affected(),
        PruneStep::DeadLetterReplays => sqlx::query(
            "DELETE FROM dead_letter_replays WHERE (intent_key, replayed_at) IN (
                 SELECT r.intent_key, r.replayed_at FROM dead_letter_replays r
                 WHERE r.replayed_at < $1 OR NOT EXISTS (SELECT 1 FROM intents i WHERE i.key = r.intent_key)
                 LIMIT $2)",
        )
        .bind(cutoff_us)
        .bind(batch)
        .execute(&mut *tx)
        .await?
        .rows_affected(),
        // A version's age counts from when a newer one replaced it (a
        // planner may have read it just before), so the current version
        // never qualifies; nor does one an intent was decided by.
        PruneStep::PreferenceVersions => sqlx::query(
            "DELETE FROM recipient_preferences WHERE (tenant, recipient_id, version) IN (
                 SELECT p.tenant, p.recipient_id, p.version FROM recipient_preferences p
                 WHERE p.created_at < $1
                   AND EXISTS (SELECT 1 FROM recipient_preferences n
                       WHERE n.tenant = p.tenant AND n.recipient_id = p.recipient_id
                         AND n.version > p.version AND n.created_at < $1)
                   AND NOT EXISTS (SELECT 1 FROM recipients r
                       WHERE r.tenant = p.tenant AND r.id = p.recipient_id AND r.preferences_version = p.version)
                   AND NOT EXISTS (SELECT 1 FROM intents i
                       WHERE i.tenant = p.tenant AND i.recipient_id = p.recipient_id
                         AND i.preferences_version = p.version)
                 LIMIT $2)",
        )
        .bind(cutoff_us)
        .bind(batch)
        .execute(&mut *tx)
        .await?
        .rows_affected(),
        PruneStep::RejectedBodies => sqlx::query(
            "UPDATE rejected_messages SET body = NULL WHERE id IN (
                 SELECT id FROM rejected_messages WHERE body IS NOT NULL AND created_at < $1 LIMIT $2)",
        )
        .bind(cutoff_us)
        .bind(batch)
        .execute(&mut *tx)
        .await?
        .rows_affected(),
        PruneStep::Publications => sqlx::query(
            "DELETE FROM publications WHERE msg_id IN (
                 SELECT msg_id FROM publications WHERE published_at IS NOT NULL AND published_at < $1 LIMIT $2)",
        )
        .bind(cutoff_us)
        .bind(batch)
        .execute(&mut *tx)
        .await?
        .rows_affected(),
        PruneStep::RejectedMessages => sqlx::query(
            "DELETE FROM rejected_messages WHERE id IN (
                 SELECT id FROM rejected_messages WHERE created_at < $1 LIMIT $2)",
        )
        .bind(cutoff_us)
        .bind(batch)
        .execute(&mut *tx)
        .await?
        .rows_affected(),
        PruneStep::IngestTally => sqlx::query(
            "DELETE FROM ingest_tally WHERE (tenant, minute, kind) IN (
                 SELECT tenant, minute, kind FROM ingest_tally WHERE minute < $1 LIMIT $2)",
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
