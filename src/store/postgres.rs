//! The Postgres backend: many Herald processes on one database. Jobs are claimed
//! with `FOR UPDATE SKIP LOCKED`; a batch of outcomes is written with `UNNEST`,
//! so a batch costs a handful of statements, not a handful per job.

use super::postgres_batch::Pass;
use super::queries::{applied_set, report, transition_columns};
use super::*;
use sqlx::postgres::{PgListener, PgPool, PgPoolOptions};
use std::sync::Arc;
use tokio::sync::Notify;

const CHANNEL: &str = "herald_jobs";

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("migrations/postgres");

fn keys_arg(keys: &[String]) -> Vec<String> {
    keys.to_vec()
}

mod q {
    super::super::queries::shared_queries!(
        sqlx::Postgres,
        "= ANY($1)",
        super::keys_arg,
        " FOR UPDATE",
        "jsonb_array_elements($1::jsonb)"
    );
}

pub struct PostgresStore {
    pool: PgPool,
    wake: Arc<Notify>,
}

impl PostgresStore {
    /// One transaction for a batch of requests: set-wise when the batch fits
    /// (see [`super::postgres_batch`]), else — and for what the set-wise pass
    /// leaves undecided — request by request in savepoints. Listeners learn
    /// of new jobs when it commits.
    async fn ingest_tx(&self, batch: &[Ingest]) -> StoreResult<Vec<StoreResult<IngestOutcome>>> {
        let mut tx = self.pool.begin().await?;
        let outcomes = match super::postgres_batch::fits(batch) {
            true => match super::postgres_batch::write(&mut tx, batch).await? {
                Pass::Decided(decided) => {
                    let left: Vec<&Ingest> =
                        (decided.iter().zip(batch)).filter(|(o, _)| o.is_none()).map(|(_, r)| r).collect();
                    let mut rest = q::ingest_batch(&mut tx, left).await?.into_iter();
                    decided
                        .into_iter()
                        .map(|o| {
                            o.map(Ok)
                                .or_else(|| rest.next())
                                .unwrap_or_else(|| Err(StoreError::Corrupt("an ingest batch lost a request".into())))
                        })
                        .collect()
                }
                Pass::Raced => {
                    tx.rollback().await?;
                    tx = self.pool.begin().await?;
                    q::ingest_batch(&mut tx, batch).await?
                }
            },
            false => q::ingest_batch(&mut tx, batch).await?,
        };
        let queued = outcomes.iter().any(|o| matches!(o, Ok(IngestOutcome::Accepted { any_created: true, .. })));
        if queued {
            // Delivered to listeners when the transaction commits.
            sqlx::query("SELECT pg_notify($1, '')").bind(CHANNEL).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        if queued {
            self.wake.notify_one();
        }
        Ok(outcomes)
    }

    pub async fn connect(url: &str) -> StoreResult<PostgresStore> {
        PostgresStore::connect_with(url, StoreOptions::default()).await
    }

    pub async fn connect_with(url: &str, options: StoreOptions) -> StoreResult<PostgresStore> {
        let mut pool = PgPoolOptions::new().max_connections(24).acquire_timeout(Duration::from_secs(10));
        if options.publications {
            // The publication triggers (migration 0041) write only for a
            // session that says so.
            pool = pool.after_connect(|conn, _| {
                Box::pin(async move {
                    sqlx::query("SET herald.publish = 'on'").execute(conn).await?;
                    Ok(())
                })
            });
        }
        let pool = pool.connect(url).await?;
        let wake = Arc::new(Notify::new());
        // Other processes' new jobs wake this one through LISTEN; polling stays
        // the fallback if the listener's connection drops.
        match PgListener::connect_with(&pool).await {
            Ok(mut listener) => {
                if let Err(e) = listener.listen(CHANNEL).await {
                    tracing::warn!(error = %e, "LISTEN failed; workers will poll");
                } else {
                    let wake = wake.clone();
                    tokio::spawn(async move {
                        // try_recv reconnects after a lost connection (returning None once).
                        while let Ok(_notification) = listener.try_recv().await {
                            wake.notify_one();
                        }
                    });
                }
            }
            Err(e) => tracing::warn!(error = %e, "LISTEN unavailable; workers will poll"),
        }
        Ok(PostgresStore { pool, wake })
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

super::delegate::store_impl!(PostgresStore, reader = pool, writer = pool, {
    async fn migrate(&self) -> StoreResult<()> {
        MIGRATOR.run(&self.pool).await?;
        super::backfill::postgres(&self.pool).await?;
        Ok(())
    }

    async fn schema_state(&self) -> StoreResult<SchemaState> {
        let exists: bool =
            sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL").fetch_one(&self.pool).await?;
        if !exists {
            return Ok(SchemaState::Missing);
        }
        let applied: Vec<(i64, bool)> =
            sqlx::query_as("SELECT version, success FROM _sqlx_migrations ORDER BY version")
                .fetch_all(&self.pool)
                .await?;
        Ok(SchemaState::compare(&MIGRATOR, &applied))
    }

    async fn ping(&self) -> StoreResult<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn jobs_claim(&self, claim: Claim) -> StoreResult<Vec<ClaimedJob>> {
        let mut tx = self.pool.begin().await?;
        // Due by the claimer's clock (what the tests and the schedules drive),
        // leased by the database's: one clock for every process, so a process
        // whose clock runs ahead cannot see another's lease as expired, nor
        // one whose clock lags hold a lease longer than asked.
        let keys: Vec<String> = sqlx::query_scalar(
            "WITH due AS (
                     SELECT intent_key FROM jobs
                     WHERE run_at <= $1
                       AND (locked_until IS NULL OR locked_until <= (EXTRACT(EPOCH FROM now()) * 1000000)::bigint)
                     ORDER BY run_at LIMIT $2
                     FOR UPDATE SKIP LOCKED)
                 UPDATE jobs SET locked_until = (EXTRACT(EPOCH FROM now()) * 1000000)::bigint + $3 FROM due
                 WHERE jobs.intent_key = due.intent_key
                 RETURNING jobs.intent_key",
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

    async fn publications_claim(&self, claim: PublicationClaim) -> StoreResult<Vec<Publication>> {
        // Leased by the database's clock, as jobs are.
        let rows = sqlx::query_as(concat!(
            "WITH due AS (
                     SELECT msg_id AS due_id FROM publications
                     WHERE published_at IS NULL
                       AND (leased_until IS NULL OR leased_until <= (EXTRACT(EPOCH FROM now()) * 1000000)::bigint)
                     ORDER BY at LIMIT $1
                     FOR UPDATE SKIP LOCKED)
                 UPDATE publications SET leased_until = (EXTRACT(EPOCH FROM now()) * 1000000)::bigint + $2
                 FROM due WHERE publications.msg_id = due.due_id
                 RETURNING ",
            super::publications::publication_columns!()
        ))
        .bind(i64::from(claim.limit))
        .bind(claim.lease_us)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows)
    }

    async fn ops_digest_claim(&self, claim: OpsDigestClaim) -> StoreResult<Option<(i64, i64)>> {
        // Leased by the database's clock, as jobs are: a process whose clock
        // runs ahead must not see another's digest lease as expired and post
        // the same digest twice.
        let db_now: i64 =
            sqlx::query_scalar("SELECT (EXTRACT(EPOCH FROM now()) * 1000000)::bigint").fetch_one(&self.pool).await?;
        q::ops_digest_claim(&self.pool, &claim, db_now).await
    }

    async fn attempts_finish(&self, finished: &[FinishedAttempt]) -> StoreResult<FinishReport> {
        if finished.is_empty() {
            return Ok(FinishReport::default());
        }
        let mut tx = self.pool.begin().await?;
        let applied: Vec<(String, i64)> = sqlx::query_as(
                "UPDATE attempts a SET finished_at = u.finished_at, outcome = u.outcome, error_class = u.error_class,
                        provider_status = u.provider_status, provider_message_id = u.provider_message_id, error = u.error,
                        retry_after = u.retry_after, retry_at = u.retry_at, provider = u.provider,
                        possible_duplicate = u.possible_duplicate
                 FROM UNNEST($1::text[], $2::bigint[], $3::bigint[], $4::text[], $5::text[], $6::bigint[], $7::text[], $8::text[],
                             $9::bigint[], $10::bigint[], $11::text[], $12::boolean[])
                      AS u(k, n, finished_at, outcome, error_class, provider_status, provider_message_id, error, retry_after, retry_at,
                           provider, possible_duplicate)
                 WHERE a.intent_key = u.k AND a.n = u.n AND a.finished_at IS NULL
                 RETURNING a.intent_key, a.n",
            )
            .bind(finished.iter().map(|f| f.key.clone()).collect::<Vec<_>>())
            .bind(finished.iter().map(|f| f.n).collect::<Vec<_>>())
            .bind(finished.iter().map(|f| f.finished_at_us).collect::<Vec<_>>())
            .bind(finished.iter().map(|f| f.outcome.as_str()).collect::<Vec<_>>())
            .bind(finished.iter().map(|f| f.error_class.map(|r| r.as_str())).collect::<Vec<_>>())
            .bind(finished.iter().map(|f| f.provider_status).collect::<Vec<_>>())
            .bind(finished.iter().map(|f| f.provider_message_id.clone()).collect::<Vec<_>>())
            .bind(finished.iter().map(|f| f.error.clone()).collect::<Vec<_>>())
            .bind(finished.iter().map(|f| f.retry_after_us).collect::<Vec<_>>())
            .bind(finished.iter().map(|f| transition_columns(&f.transition).2).collect::<Vec<_>>())
            .bind(finished.iter().map(|f| f.provider.clone()).collect::<Vec<_>>())
            .bind(finished.iter().map(|f| f.possible_duplicate).collect::<Vec<_>>())
            .fetch_all(&mut *tx)
            .await?;

        let (mut keys, mut states, mut reasons, mut at) = (vec![], vec![], vec![], vec![]);
        let (mut done, mut retry_keys, mut retry_at) = (vec![], vec![], vec![]);
        // By (key, n): a stale outcome for an attempt that was rescued must not
        // ride along with the new attempt's outcome for the same intent.
        let applied_now = applied_set(&applied);
        for f in finished.iter().filter(|f| applied_now.contains(&(f.key.as_str(), f.n))) {
            let (state, reason, run_at) = transition_columns(&f.transition);
            keys.push(f.key.clone());
            states.push(state.as_str());
            reasons.push(reason);
            at.push(f.finished_at_us);
            match run_at {
                Some(t) => {
                    retry_keys.push(f.key.clone());
                    retry_at.push(t);
                }
                None => done.push(f.key.clone()),
            }
        }
        sqlx::query(
            "UPDATE intents i SET state = u.state, reason = u.reason, updated_at = u.at
                 FROM UNNEST($1::text[], $2::text[], $3::text[], $4::bigint[]) AS u(k, state, reason, at)
                 WHERE i.key = u.k",
        )
        .bind(&keys)
        .bind(&states)
        .bind(&reasons)
        .bind(&at)
        .execute(&mut *tx)
        .await?;
        sqlx::query("DELETE FROM jobs WHERE intent_key = ANY($1)").bind(&done).execute(&mut *tx).await?;
        sqlx::query(
            "UPDATE jobs j SET run_at = u.run_at, locked_until = NULL
                 FROM UNNEST($1::text[], $2::bigint[]) AS u(k, run_at) WHERE j.intent_key = u.k",
        )
        .bind(&retry_keys)
        .bind(&retry_at)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(report(finished, &applied))
    }
});
