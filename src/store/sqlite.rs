//! The SQLite backend: the embedded default, one file, one Herald process. Every
//! write goes through a single connection, so writers queue in Herald instead of
//! meeting `SQLITE_BUSY`; reads use a separate pool (WAL lets them run alongside).

use super::common::{report, transition_columns};
use super::*;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};
use std::str::FromStr;
use std::sync::Arc;
use tokio::sync::Notify;

fn keys_arg(keys: &[String]) -> String {
    serde_json::to_string(keys).unwrap_or_else(|_| "[]".into())
}

mod q {
    super::super::common::shared_queries!(sqlx::Sqlite, "IN (SELECT value FROM json_each($1))", super::keys_arg, "");
}

pub struct SqliteStore {
    writer: SqlitePool,
    reader: SqlitePool,
    wake: Arc<Notify>,
}

impl SqliteStore {
    pub async fn connect(url: &str) -> StoreResult<SqliteStore> {
        let options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(10));
        let writer = SqlitePoolOptions::new().max_connections(1).connect_with(options.clone()).await?;
        let reader = SqlitePoolOptions::new().max_connections(4).connect_with(options).await?;
        Ok(SqliteStore { writer, reader, wake: Arc::new(Notify::new()) })
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn migrate(&self) -> StoreResult<()> {
        sqlx::migrate!("migrations/sqlite").run(&self.writer).await?;
        Ok(())
    }

    async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1").execute(&self.reader).await?;
        Ok(())
    }

    async fn recipients_get(&self, tenant: &str, ids: &[String]) -> StoreResult<Vec<RecipientRow>> {
        q::recipients_get(&self.reader, tenant, ids).await
    }

    async fn recipient_put(&self, put: RecipientPut) -> StoreResult<RecipientRow> {
        q::recipient_put(&self.writer, &put).await
    }

    async fn recipient_preferences_get(
        &self,
        tenant: &str,
        id: &str,
        version: i64,
    ) -> StoreResult<Option<PreferencesVersion>> {
        q::recipient_preferences_get(&self.reader, tenant, id, version).await
    }

    async fn digests_due(&self, now_us: i64, limit: u32) -> StoreResult<Vec<DigestRow>> {
        q::digests_due(&self.reader, now_us, limit).await
    }

    async fn digest_members(&self, key: &str) -> StoreResult<Vec<DigestMember>> {
        q::digest_members(&self.reader, key).await
    }

    async fn digest_close(&self, close: DigestClose) -> StoreResult<DigestCloseOutcome> {
        let mut tx = self.writer.begin().await?;
        let outcome = q::digest_close(&mut tx, &close).await?;
        if outcome == DigestCloseOutcome::Closed {
            tx.commit().await?;
            self.wake.notify_one();
        } else {
            tx.rollback().await?;
        }
        Ok(outcome)
    }

    async fn events_ingest(&self, ingest: Ingest) -> StoreResult<IngestOutcome> {
        let mut tx = self.writer.begin().await?;
        let outcome = q::ingest(&mut tx, &ingest).await?;
        tx.commit().await?;
        if matches!(&outcome, IngestOutcome::Accepted { any_created: true, .. }) {
            self.wake.notify_one();
        }
        Ok(outcome)
    }

    async fn intent_get(&self, tenant: &str, key: &str) -> StoreResult<Option<IntentDetail>> {
        q::intent_get(&self.reader, tenant, key).await
    }

    async fn intents_list(&self, filter: IntentFilter) -> StoreResult<Page<IntentRow>> {
        q::intents_list(&self.reader, &filter).await
    }

    async fn jobs_claim(&self, claim: Claim) -> StoreResult<Vec<ClaimedJob>> {
        let mut tx = self.writer.begin().await?;
        let keys: Vec<String> = sqlx::query_scalar(
            "UPDATE jobs SET locked_until = $3 WHERE intent_key IN (
                 SELECT intent_key FROM jobs
                 WHERE run_at <= $1 AND (locked_until IS NULL OR locked_until <= $1)
                 ORDER BY run_at LIMIT $2)
             RETURNING intent_key",
        )
        .bind(claim.now_us)
        .bind(i64::from(claim.limit))
        .bind(claim.lease_until_us)
        .fetch_all(&mut *tx)
        .await?;
        if keys.is_empty() {
            tx.rollback().await?;
            return Ok(Vec::new());
        }
        let jobs = q::claim_keys(&mut tx, &keys, &claim).await?;
        tx.commit().await?;
        Ok(jobs)
    }

    async fn attempts_finish(&self, finished: &[FinishedAttempt]) -> StoreResult<FinishReport> {
        if finished.is_empty() {
            return Ok(FinishReport::default());
        }
        // One transaction for the batch; statements per row are cheap in-process.
        let mut tx = self.writer.begin().await?;
        let mut applied = Vec::new();
        for f in finished {
            let n = sqlx::query(
                "UPDATE attempts SET finished_at = $3, outcome = $4, error_class = $5, provider_status = $6,
                     provider_message_id = $7, error = $8
                 WHERE intent_key = $1 AND n = $2 AND finished_at IS NULL",
            )
            .bind(&f.key)
            .bind(f.n)
            .bind(f.finished_at_us)
            .bind(f.outcome.as_str())
            .bind(f.error_class.map(|r| r.as_str()))
            .bind(f.provider_status)
            .bind(&f.provider_message_id)
            .bind(&f.error)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if n == 0 {
                continue;
            }
            applied.push(f.key.clone());
            let (state, reason, run_at) = transition_columns(&f.transition);
            sqlx::query("UPDATE intents SET state = $2, reason = $3, updated_at = $4 WHERE key = $1")
                .bind(&f.key)
                .bind(state.as_str())
                .bind(reason)
                .bind(f.finished_at_us)
                .execute(&mut *tx)
                .await?;
            match run_at {
                Some(t) => sqlx::query("UPDATE jobs SET run_at = $2, locked_until = NULL WHERE intent_key = $1")
                    .bind(&f.key)
                    .bind(t),
                None => sqlx::query("DELETE FROM jobs WHERE intent_key = $1").bind(&f.key),
            }
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(report(finished, &applied))
    }

    async fn inbox_deliver(&self, delivery: InboxDelivery) -> StoreResult<()> {
        let mut tx = self.writer.begin().await?;
        q::inbox_deliver(&mut tx, &delivery).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn inbox_list(
        &self,
        tenant: &str,
        recipient_id: &str,
        cursor: Option<&str>,
        limit: u32,
    ) -> StoreResult<Page<InboxCard>> {
        q::inbox_list(&self.reader, tenant, recipient_id, cursor, limit).await
    }

    async fn inbox_mark_read(&self, tenant: &str, recipient_id: &str, card_id: &str, now_us: i64) -> StoreResult<bool> {
        q::inbox_mark_read(&self.writer, tenant, recipient_id, card_id, now_us).await
    }

    async fn dead_letters_list(&self, filter: DeadLetterFilter) -> StoreResult<Page<DeadLetter>> {
        q::dead_letters_list(&self.reader, &filter).await
    }

    async fn attempts_of(&self, keys: &[String]) -> StoreResult<Vec<AttemptRow>> {
        q::attempts_of(&self.reader, keys).await
    }

    async fn dead_letters_summary(
        &self,
        tenant: Option<&str>,
        since_us: i64,
        until_us: i64,
    ) -> StoreResult<Vec<(String, i64)>> {
        q::dead_letters_summary(&self.reader, tenant, since_us, until_us).await
    }

    async fn dead_letters_examples(
        &self,
        reason: &str,
        since_us: i64,
        until_us: i64,
        limit: u32,
    ) -> StoreResult<Vec<IntentRow>> {
        q::dead_letters_examples(&self.reader, reason, since_us, until_us, limit).await
    }

    async fn dead_letters_replay(&self, replay: Replay) -> StoreResult<Vec<ReplayResult>> {
        let mut tx = self.writer.begin().await?;
        let out = q::dead_letters_replay(&mut tx, &replay).await?;
        tx.commit().await?;
        self.wake.notify_one();
        Ok(out)
    }

    async fn ops_digest_claim(&self, claim: OpsDigestClaim) -> StoreResult<Option<(i64, i64)>> {
        q::ops_digest_claim(&self.writer, &claim).await
    }

    async fn ops_digest_posted(&self, slot: &str, now_us: i64, total: i64) -> StoreResult<()> {
        q::ops_digest_posted(&self.writer, slot, now_us, total).await
    }

    async fn ops_digest_last_until(&self) -> StoreResult<Option<i64>> {
        q::ops_digest_last_until(&self.reader).await
    }

    async fn queue_stats(&self, now_us: i64) -> StoreResult<QueueStats> {
        q::queue_stats(&self.reader, now_us).await
    }

    async fn retention_batch(&self, step: PruneStep, cutoff_us: i64, batch: i64) -> StoreResult<u64> {
        q::retention_batch(&self.writer, step, cutoff_us, batch).await
    }

    async fn wait_for_work(&self, timeout: Duration) {
        let _ = tokio::time::timeout(timeout, self.wake.notified()).await;
    }
}
