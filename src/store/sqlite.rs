//! The SQLite backend: the embedded default, one file, one Herald process. Every
//! write goes through a single connection, so writers queue in Herald instead of
//! meeting `SQLITE_BUSY`; reads use a separate pool (WAL lets them run alongside).

use super::queries::{report, transition_columns};
use super::*;
use sqlx::migrate::Migrator;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};
use std::str::FromStr;
use std::sync::Arc;
use tokio::sync::Notify;

fn keys_arg(keys: &[String]) -> String {
    serde_json::to_string(keys).unwrap_or_else(|_| "[]".into())
}

mod q {
    super::super::queries::shared_queries!(sqlx::Sqlite, "IN (SELECT value FROM json_each($1))", super::keys_arg, "");
}

pub struct SqliteStore {
    writer: SqlitePool,
    reader: SqlitePool,
    wake: Arc<Notify>,
}

impl SqliteStore {
    /// Opens the file, creating it (in WAL mode) when it is not there.
    pub async fn connect(url: &str) -> StoreResult<SqliteStore> {
        let options = SqliteConnectOptions::from_str(url)?.create_if_missing(true).journal_mode(SqliteJournalMode::Wal);
        SqliteStore::open(options).await
    }

    /// Opens the file only if it exists, and changes nothing in it on the way
    /// (its journal mode stays what it is).
    pub async fn open_existing(url: &str) -> StoreResult<SqliteStore> {
        let options = SqliteConnectOptions::from_str(url)?.create_if_missing(false);
        let file = options.get_filename();
        if !file.exists() {
            return Err(StoreError::Missing(file.display().to_string()));
        }
        SqliteStore::open(options).await
    }

    async fn open(options: SqliteConnectOptions) -> StoreResult<SqliteStore> {
        let options = options.synchronous(SqliteSynchronous::Full).busy_timeout(Duration::from_secs(10));
        let writer = SqlitePoolOptions::new().max_connections(1).connect_with(options.clone()).await?;
        let reader = SqlitePoolOptions::new().max_connections(4).connect_with(options).await?;
        Ok(SqliteStore { writer, reader, wake: Arc::new(Notify::new()) })
    }
}

impl SqliteStore {
    /// One transaction on the writer for a batch of requests.
    async fn ingest_tx(&self, batch: &[Ingest]) -> StoreResult<Vec<StoreResult<IngestOutcome>>> {
        let mut tx = self.writer.begin().await?;
        let outcomes = q::ingest_batch(&mut tx, batch).await?;
        tx.commit().await?;
        if outcomes.iter().any(|o| matches!(o, Ok(IngestOutcome::Accepted { any_created: true, .. }))) {
            self.wake.notify_one();
        }
        Ok(outcomes)
    }
}

static MIGRATOR: Migrator = sqlx::migrate!("migrations/sqlite");

super::delegate::store_impl!(SqliteStore, reader = reader, writer = writer, {
    async fn migrate(&self) -> StoreResult<()> {
        MIGRATOR.run(&self.writer).await?;
        super::backfill::sqlite(&self.writer).await?;
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

    async fn jobs_claim(&self, claim: Claim) -> StoreResult<Vec<ClaimedJob>> {
        let mut tx = self.writer.begin().await?;
        // One process: its clock judges the leases (Postgres uses the database's).
        let keys: Vec<String> = sqlx::query_scalar(
            "UPDATE jobs SET locked_until = $1 + $3 WHERE intent_key IN (
                     SELECT intent_key FROM jobs
                     WHERE run_at <= $1 AND (locked_until IS NULL OR locked_until <= $1)
                     ORDER BY run_at LIMIT $2)
                 RETURNING intent_key",
        )
        .bind(claim.now_us)
        .bind(i64::from(claim.limit))
        .bind(claim.lease_us)
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

    async fn ops_digest_claim(&self, claim: OpsDigestClaim) -> StoreResult<Option<(i64, i64)>> {
        // One process: its clock judges the lease (Postgres uses the database's).
        q::ops_digest_claim(&self.writer, &claim, claim.now_us).await
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
                         provider_message_id = $7, error = $8, retry_after = $9, retry_at = $10,
                         provider = $11, possible_duplicate = $12
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
            .bind(f.retry_after_us)
            .bind(transition_columns(&f.transition).2)
            .bind(&f.provider)
            .bind(f.possible_duplicate)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if n == 0 {
                continue;
            }
            applied.push((f.key.clone(), f.n));
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
});
