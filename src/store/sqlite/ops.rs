//! Running the database on SQLite: the `OpsStore` impl (migrations, schema,
//! readiness, retention, replays, the ops digest), dead-letter replays and
//! the daily digest's bookkeeping.

use super::{SqliteStore, Tx, retention};
use crate::intent::State;
use crate::store::{
    OpsDigestClaim, OpsDigestRow, OpsStore, PruneStep, Replay, ReplayOutcome, ReplayResult, ReplaySelector,
    SchemaState, StoreResult,
};
use async_trait::async_trait;
use sqlx::SqlitePool;
use sqlx::migrate::Migrator;

/// The same intents back on the queue: same key, same frozen content, a
/// fresh retry budget; each replay recorded. A dead letter without its
/// content (never rendered, or pruned since) is refused, not queued.
pub(super) async fn dead_letters_replay(tx: &mut Tx<'_>, r: &Replay) -> StoreResult<Vec<ReplayResult>> {
    let keys: Vec<String> = match &r.selector {
        ReplaySelector::Ids(ids) => ids.clone(),
        // The replayable first, so that dead letters which can never be
        // replayed do not use up the limit call after call.
        ReplaySelector::Reason { reason, since_us } => {
            sqlx::query_scalar(
                "SELECT i.key FROM intents i
             WHERE i.tenant = $1 AND i.dead_at IS NOT NULL AND i.reason = $2 AND i.dead_at >= $3
             ORDER BY CASE WHEN i.content IS NULL AND NOT EXISTS (
                 SELECT 1 FROM payloads p WHERE p.digest = i.payload_digest) THEN 1 ELSE 0 END,
               i.dead_at LIMIT $4",
            )
            .bind(&r.tenant)
            .bind(reason)
            .bind(since_us.unwrap_or(i64::MIN))
            .bind(r.limit)
            .fetch_all(&mut **tx)
            .await?
        }
    };
    let mut out = Vec::with_capacity(keys.len());
    for key in keys {
        let row: Option<(State, Option<String>, Option<String>)> =
            sqlx::query_as("SELECT state, reason, payload_digest FROM intents WHERE tenant = $1 AND key = $2")
                .bind(&r.tenant)
                .bind(&key)
                .fetch_optional(&mut **tx)
                .await?;
        let outcome = match row {
            None => ReplayOutcome::NotFound,
            Some((state, _, _)) if !crate::lifecycle::replay::may_replay(state) => ReplayOutcome::NotDead(state),
            Some((_, reason, None)) => ReplayOutcome::NoContent(reason.unwrap_or_default()),
            Some((_, reason, Some(digest))) if !content_kept(tx, &key, &digest, r.now_us).await? => {
                ReplayOutcome::ContentPruned(reason.unwrap_or_default())
            }
            Some((_, reason, Some(_))) => {
                super::intents_apply(tx, &[crate::lifecycle::replay::replayed(&key, r.now_us)]).await?;
                // The replay request's trace, linked to the one that
                // planned the intent.
                sqlx::query(
                    "INSERT INTO jobs (intent_id, tenant, run_at, traceparent, links)
                     SELECT id, $2, $3, $4, traceparent FROM intents WHERE key = $1
                     ON CONFLICT (intent_id) DO UPDATE SET run_at = excluded.run_at, locked_until = NULL,
                         traceparent = excluded.traceparent, links = excluded.links",
                )
                .bind(&key)
                .bind(&r.tenant)
                .bind(r.now_us)
                .bind(r.traceparent.as_deref())
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

/// Whether the content is still stored: in the intent's row, or as a
/// payload row, which then counts as used now, so that retention (which
/// goes by a payload's latest use) cannot take it from under the replay.
async fn content_kept(tx: &mut Tx<'_>, key: &str, digest: &str, now_us: i64) -> StoreResult<bool> {
    // In the intent's own row (migration 0065), retention keeps it while
    // the intent has changed within its age, and the replay changes it now.
    let in_row: bool = sqlx::query_scalar("SELECT content IS NOT NULL FROM intents WHERE key = $1")
        .bind(key)
        .fetch_one(&mut **tx)
        .await?;
    if in_row {
        return Ok(true);
    }
    // A payload row (an intent written before): it counts as used now.
    let touched = sqlx::query(
        "UPDATE payloads SET created_at = CASE WHEN created_at < $2 THEN $2 ELSE created_at END WHERE digest = $1",
    )
    .bind(digest)
    .bind(now_us)
    .execute(&mut **tx)
    .await?
    .rows_affected();
    Ok(touched > 0)
}

/// Claims the ops digest of `slot`: true for exactly one caller at a
/// time, until it is posted. Returns the window it covers. `now_us` is
/// the clock that judges the lease (each backend says whose).
pub(super) async fn ops_digest_claim(
    pool: &SqlitePool,
    c: &OpsDigestClaim,
    now_us: i64,
) -> StoreResult<Option<(i64, i64)>> {
    let row = sqlx::query_as(
        "INSERT INTO ops_digests (slot, since, until, lease_until) VALUES ($1, $2, $3, $4)
         ON CONFLICT (slot) DO UPDATE SET lease_until = excluded.lease_until
         WHERE ops_digests.posted_at IS NULL AND ops_digests.lease_until <= $5
         RETURNING since, until",
    )
    .bind(&c.slot)
    .bind(c.since_us)
    .bind(c.until_us)
    .bind(now_us.saturating_add(c.lease_us))
    .bind(now_us)
    .fetch_optional(pool)
    .await?;
    Ok(row)
}

pub(super) async fn ops_digest_posted(pool: &SqlitePool, slot: &str, now_us: i64, total: i64) -> StoreResult<()> {
    sqlx::query("UPDATE ops_digests SET posted_at = $2, total = $3 WHERE slot = $1")
        .bind(slot)
        .bind(now_us)
        .bind(total)
        .execute(pool)
        .await?;
    Ok(())
}

/// Where the next daily digest starts: the end of the last one posted.
/// The last daily digest posted (manual posts are not the schedule's).
pub(super) async fn ops_digest_last(pool: &SqlitePool) -> StoreResult<Option<OpsDigestRow>> {
    Ok(sqlx::query_as(
        "SELECT slot, since, until, posted_at, COALESCE(total, 0) AS total FROM ops_digests
         WHERE posted_at IS NOT NULL AND slot NOT LIKE 'manual:%' ORDER BY until DESC LIMIT 1",
    )
    .fetch_optional(pool)
    .await?)
}

pub(super) async fn ops_digest_last_until(pool: &SqlitePool) -> StoreResult<Option<i64>> {
    let v: Option<i64> = sqlx::query_scalar(
        "SELECT MAX(until) FROM ops_digests WHERE posted_at IS NOT NULL AND slot NOT LIKE 'manual:%'",
    )
    .fetch_one(pool)
    .await?;
    Ok(v)
}

static MIGRATOR: Migrator = sqlx::migrate!("migrations/sqlite");

#[async_trait]
impl OpsStore for SqliteStore {
    async fn migrate(&self) -> StoreResult<()> {
        MIGRATOR.run(&self.writer).await?;
        crate::store::backfill::sqlite(&self.writer).await?;
        Ok(())
    }

    async fn schema_state(&self) -> StoreResult<SchemaState> {
        let tables: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'")
                .fetch_one(&self.reader)
                .await?;
        if tables == 0 {
            return Ok(SchemaState::Missing);
        }
        let applied: Vec<(i64, bool)> =
            sqlx::query_as("SELECT version, success FROM _sqlx_migrations ORDER BY version")
                .fetch_all(&self.reader)
                .await?;
        Ok(SchemaState::compare(&MIGRATOR, &applied))
    }

    async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1").execute(&self.reader).await?;
        Ok(())
    }

    async fn retention_batch(&self, step: PruneStep, cutoff_us: i64, batch: i64) -> StoreResult<u64> {
        retention::retention_batch(&self.writer, step, cutoff_us, batch).await
    }

    async fn dead_letters_replay(&self, replay: Replay) -> StoreResult<Vec<ReplayResult>> {
        let mut tx = self.writer.begin().await?;
        let out = dead_letters_replay(&mut tx, &replay).await?;
        tx.commit().await?;
        self.jobs_queued();
        Ok(out)
    }

    async fn ops_digest_claim(&self, claim: OpsDigestClaim) -> StoreResult<Option<(i64, i64)>> {
        // One process: its clock judges the lease (Postgres uses the database's).
        ops_digest_claim(&self.writer, &claim, claim.now_us).await
    }

    async fn ops_digest_posted(&self, slot: &str, now_us: i64, total: i64) -> StoreResult<()> {
        ops_digest_posted(&self.writer, slot, now_us, total).await
    }

    async fn ops_digest_last_until(&self) -> StoreResult<Option<i64>> {
        ops_digest_last_until(&self.reader).await
    }

    async fn ops_digest_last(&self) -> StoreResult<Option<OpsDigestRow>> {
        ops_digest_last(&self.reader).await
    }
}
