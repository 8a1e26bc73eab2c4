//! The Postgres backend: many Herald processes on one database. Jobs are claimed
//! with `FOR UPDATE SKIP LOCKED`; a batch of outcomes is written with `UNNEST`,
//! so a batch costs a handful of statements, not a handful per job.

use super::batch::{self, AllNew, Pass};
use super::postgres_batch::PgStatements;
use super::*;
use crate::lifecycle::{self, Change};
use sqlx::postgres::{PgListener, PgPool, PgPoolOptions};
use std::sync::Arc;
use tokio::sync::{Notify, mpsc};

mod caps;
mod dead_letters;
mod digests;
mod directory;
mod inbox;
mod ingest;
mod ingest_tx;
mod ops;
mod publications;
mod queue;
mod receipts;
mod rejected;
mod retention;
mod suppressions;
mod views;

const CHANNEL: &str = "herald_jobs";

/// The `random_page_cost` Herald's sessions plan with where nobody has set
/// one (the server, the database or the role): that of a working set in
/// memory.
pub const RANDOM_PAGE_COST: &str = "1.1";

/// The request records of one tenant (`$2`) among a list of identities
/// (`$1`), read before planning: one probe of the primary key per identity
/// at any table size.
///
/// Postgres keeps a statement's generic plan, and one made while `requests`
/// was small matched `tenant = $2 AND identity = ANY($1)` by a bitmap scan of
/// the tenant's rows, filtered: 9,900 rows removed per lookup at 10,000
/// requests (auto_explain, the ingest benchmark), where a join from the
/// identities hashed the same scan. Each identity is probed through a
/// `LATERAL … LIMIT 1` instead, planned as one primary-key probe per identity
/// from an empty table on (a plan, not a promise: a test on Postgres checks
/// it).
pub const REQUESTS_OF_TENANT: &str =
    "SELECT r.identity, r.fingerprint, r.response FROM UNNEST($1::text[]) AS u(identity)
     CROSS JOIN LATERAL (SELECT identity, fingerprint, response FROM requests
                         WHERE tenant = $2 AND identity = u.identity LIMIT 1) r";

/// The write transaction every statement of a change runs in.
type Tx<'a> = sqlx::Transaction<'a, sqlx::Postgres>;

/// The next attempt of each of these intents: its count goes up, it is
/// `sending`, and its attempt row is written — one statement.
async fn start_attempts(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    keys: &[String],
    now_us: i64,
) -> StoreResult<()> {
    sqlx::query(
        "WITH started AS (
             UPDATE intents SET attempts = attempts + 1, state = $3, updated_at = $2, dead_at = NULL WHERE key = ANY($1)
             RETURNING id, attempts)
         INSERT INTO attempts (intent_id, n, started_at) SELECT id, attempts, $2 FROM started",
    )
    .bind(keys)
    .bind(now_us)
    .bind(crate::intent::State::Sending.as_str())
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Writes these changes (one per intent) and the publication of each that
/// moves its intent to a published state ([`lifecycle::publishes`]), in one
/// statement: each intent's state before the change is read under its row
/// lock, so a change that leaves the state as it was publishes nothing, as
/// the rule says. A dead letter's `dead_at` (migration 0052) is its
/// `updated_at`, and NULL for any other state.
async fn intents_apply(tx: &mut sqlx::Transaction<'_, sqlx::Postgres>, changes: &[Change]) -> StoreResult<()> {
    if changes.is_empty() {
        return Ok(());
    }
    let col = |f: fn(&Change) -> Option<&str>| changes.iter().map(f).collect::<Vec<_>>();
    let set = |f: fn(&Change) -> bool| changes.iter().map(f).collect::<Vec<_>>();
    sqlx::query(
        "WITH u AS (
             SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::boolean[], $5::text[], $6::boolean[],
                                  $7::text[], $8::boolean[], $9::text[], $10::boolean[], $11::bigint[], $12::boolean[])
                  AS u(key, state, decision, set_reason, reason, set_detail, detail, set_link, link_key, restarts,
                       at, publishes)),
         old AS (SELECT i.key, i.state FROM intents i JOIN u ON i.key = u.key FOR UPDATE OF i),
         d AS (SELECT u.*, (u.publishes AND u.state IS DISTINCT FROM old.state
                            AND EXISTS (SELECT 1 FROM settings WHERE name = 'publications')) AS bump
               FROM u JOIN old ON old.key = u.key),
         c AS (
             UPDATE intents i SET state = d.state, decision = COALESCE(d.decision, i.decision),
                    reason = CASE WHEN d.set_reason THEN d.reason ELSE i.reason END,
                    detail = CASE WHEN d.set_detail THEN d.detail ELSE i.detail END,
                    link_key = CASE WHEN d.set_link THEN d.link_key ELSE i.link_key END,
                    retry_base = CASE WHEN d.restarts THEN i.attempts ELSE i.retry_base END,
                    updated_at = d.at, dead_at = CASE WHEN d.state = 'dead' THEN d.at END,
                    publication_seq = i.publication_seq + CASE WHEN d.bump THEN 1 ELSE 0 END
             FROM d WHERE i.key = d.key
             RETURNING i.key, i.tenant, i.entity_type, i.entity_id, i.entity_version, i.channel, i.recipient_id,
                       i.state, i.reason, i.attempts, i.updated_at AS at, i.publication_seq, d.bump)
         INSERT INTO publications (msg_id, tenant, intent_key, entity_type, entity_id, entity_version, channel,
                                   recipient_id, state, reason, attempts, at)
         SELECT p.key || ':' || p.state || ':' || p.publication_seq, p.tenant, p.key, p.entity_type, p.entity_id,
                p.entity_version, p.channel, p.recipient_id, p.state, p.reason, p.attempts, p.at
         FROM c p WHERE p.bump ON CONFLICT (msg_id) DO NOTHING",
    )
    .bind(col(|c| Some(c.key.as_str())))
    .bind(col(|c| Some(c.to.as_str())))
    .bind(col(|c| c.decision.map(|d| d.as_str())))
    .bind(set(|c| c.reason.is_some()))
    .bind(col(|c| c.reason.flatten().map(|r| r.as_str())))
    .bind(set(|c| c.detail.is_some()))
    .bind(col(|c| c.detail.as_ref().and_then(|d| d.as_deref())))
    .bind(set(|c| c.link_key.is_some()))
    .bind(col(|c| c.link_key.as_ref().and_then(|l| l.as_deref())))
    .bind(set(|c| c.restarts_chain))
    .bind(changes.iter().map(|c| c.at).collect::<Vec<_>>())
    .bind(set(|c| lifecycle::publishes(c.to)))
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// The publications of these intents as they stand (new ones, inserted in a
/// published state), or with `delivered_at`, of a `delivered` receipt each:
/// each takes the intent's next number. One statement.
async fn publications_write(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    keys: &[String],
    delivered_at: Option<i64>,
) -> StoreResult<()> {
    if keys.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "WITH n AS (
             UPDATE intents SET publication_seq = publication_seq + 1
             WHERE key = ANY($1) AND EXISTS (SELECT 1 FROM settings WHERE name = 'publications')
             RETURNING key, tenant, entity_type, entity_id, entity_version, channel, recipient_id,
                       CASE WHEN $2::bigint IS NULL THEN state ELSE 'delivered' END AS state,
                       CASE WHEN $2::bigint IS NULL THEN reason END AS reason, attempts,
                       COALESCE($2::bigint, updated_at) AS at, publication_seq)
         INSERT INTO publications (msg_id, tenant, intent_key, entity_type, entity_id, entity_version, channel,
                                   recipient_id, state, reason, attempts, at)
         SELECT p.key || ':' || p.state || ':' || p.publication_seq, p.tenant, p.key, p.entity_type, p.entity_id,
                p.entity_version, p.channel, p.recipient_id, p.state, p.reason, p.attempts, p.at
         FROM n p WHERE true ON CONFLICT (msg_id) DO NOTHING",
    )
    .bind(keys)
    .bind(delivered_at)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// A dead letter's `dead_at`, for intents inserted dead (at planning): the
/// time it became one, its `updated_at`.
async fn dead_at_write(tx: &mut sqlx::Transaction<'_, sqlx::Postgres>, key: &str) -> StoreResult<()> {
    sqlx::query("UPDATE intents SET dead_at = updated_at WHERE key = $1").bind(key).execute(&mut **tx).await?;
    Ok(())
}

pub struct PostgresStore {
    pool: PgPool,
    wake: Arc<Notify>,
    /// Asks [`announce`] to tell other processes of new jobs; full when it
    /// has been asked already and not yet done it.
    announce: mpsc::Sender<()>,
}

/// How often at most a process tells the others of new jobs: the first
/// commit's at once, those within this time after it by one notification
/// at its end.
const ANNOUNCE_WINDOW: Duration = Duration::from_millis(10);

/// Tells the workers of other processes that new jobs are due, each time it is
/// asked (`asked`), with `pg_notify` in a statement of its own after the jobs'
/// commit, and at most once per [`ANNOUNCE_WINDOW`]: what it is asked while it
/// waits is one notification at the window's end. Ends when the store is gone.
///
/// The notification was the ingest transaction's own, but a transaction that
/// notifies holds a lock every notifying transaction takes until its commit
/// is flushed, so the ingest writers' commits went one at a time, and every
/// batch woke this process's own listener for nothing. The statement commits
/// without waiting for its flush (`synchronous_commit` off for it alone): a
/// notification is not kept across a crash whatever the setting, and the
/// jobs it announces were flushed before it was asked.
async fn announce(pool: PgPool, token: String, mut asked: mpsc::Receiver<()>) {
    while asked.recv().await.is_some() {
        let sent = sqlx::query("SELECT set_config('synchronous_commit', 'off', true), pg_notify($1, $2)")
            .bind(CHANNEL)
            .bind(&token)
            .execute(&pool)
            .await;
        if let Err(e) = sent {
            // Their workers poll; the next commit asks again.
            tracing::warn!(error = %e, "telling other processes of new jobs failed; their workers will poll");
        }
        tokio::time::sleep(ANNOUNCE_WINDOW).await;
    }
}

/// The payload of a store's notifications, which no other store (in this
/// process or another) sends, so that its own listener ignores them: its
/// workers were woken in-process at the commit, and the echo would wake them
/// again for a claim that finds nothing. The process id, when the store
/// started and a count of stores in this process.
fn wake_token() -> String {
    static STORES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let started = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let n = STORES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{}.{}.{n}", std::process::id(), started.as_nanos())
}

impl PostgresStore {
    /// A batch of requests: when it fits (see [`super::batch`]), first as one
    /// statement on the guess that all of it is new; else, or when the guess
    /// was wrong, as [`PostgresStore::ingest_decided`] decides it.
    ///
    /// A batch with a capped intent takes neither shortcut: its caps are
    /// decided in the transaction that writes it ([`super::caps`]).
    async fn ingest_tx(&self, batch: &[Ingest]) -> StoreResult<Vec<StoreResult<IngestOutcome>>> {
        if !super::caps::any(batch)
            && batch::fits(batch)
            && let Some(outcomes) = self.ingest_all_new(batch).await?
        {
            return Ok(outcomes);
        }
        self.ingest_decided(batch).await
    }

    /// A batch that fits, as one statement on the guess that every row is
    /// new, committed on its own; None, with nothing kept, when the database
    /// found any of them there already.
    async fn ingest_all_new(&self, batch: &[Ingest]) -> StoreResult<Option<Vec<StoreResult<IngestOutcome>>>> {
        let rows = AllNew::of(batch)?;
        if !PgStatements.insert_all_new(&self.pool, &rows).await? {
            return Ok(None);
        }
        if !rows.jobs.is_empty() {
            self.jobs_queued();
        }
        Ok(Some(rows.outcomes.into_iter().map(Ok).collect()))
    }

    /// After a commit that queued jobs (an ingest, a dead-letter replay, a
    /// digest closed): this process's workers are woken at once, other
    /// processes' by [`announce`].
    fn jobs_queued(&self) {
        self.wake.notify_one();
        // Full: a notification is already due, and covers these jobs too.
        let _ = self.announce.try_send(());
    }

    /// One transaction for a batch of requests, each decided as it would be
    /// alone: set-wise when the batch fits, else — and for what the set-wise
    /// pass leaves undecided — request by request in savepoints. Its caps
    /// first, and again in the transaction that replaces it.
    async fn ingest_decided(&self, planned: &[Ingest]) -> StoreResult<Vec<StoreResult<IngestOutcome>>> {
        let mut tx = self.pool.begin().await?;
        let batch = super::caps::decide(&caps::PgCaps, &mut tx, planned).await?;
        let outcomes = match batch::fits(&batch) {
            true => match batch::write(&PgStatements, &mut tx, &batch).await? {
                Pass::Decided(decided) => {
                    let rest = ingest_tx::ingest_batch(&mut tx, batch::undecided(&decided, &batch), true).await?;
                    batch::merge(decided, rest)
                }
                Pass::Raced => {
                    tx.rollback().await?;
                    tx = self.pool.begin().await?;
                    let batch = super::caps::decide(&caps::PgCaps, &mut tx, planned).await?;
                    ingest_tx::ingest_batch(&mut tx, batch.iter(), true).await?
                }
            },
            false => ingest_tx::ingest_batch(&mut tx, batch.iter(), true).await?,
        };
        tx.commit().await?;
        if outcomes.iter().any(|o| matches!(o, Ok(IngestOutcome::Accepted { any_created: true, .. }))) {
            self.jobs_queued();
        }
        Ok(outcomes)
    }

    pub async fn connect(url: &str) -> StoreResult<PostgresStore> {
        let pool = PgPoolOptions::new().max_connections(24).acquire_timeout(Duration::from_secs(10)).after_connect(
            move |conn, _| {
                Box::pin(async move {
                    // Herald's statements find rows by key, and the rows they
                    // touch are the recent ones, in memory. At the default
                    // random_page_cost (4, a cost model for disks that seek)
                    // the planner prefers a sequential scan of any table up to
                    // thousands of pages, and a prepared statement's generic
                    // plan, made while the tables are small, keeps doing so
                    // as they grow: measured, a quarter of Postgres's CPU in
                    // scans by 20,000 notifications (docs/performance.md).
                    // Only Postgres's built-in default is replaced: a value set
                    // for the server, the database or the role is kept.
                    sqlx::query(
                        "SELECT set_config('random_page_cost', $1, false)
                         FROM pg_settings WHERE name = 'random_page_cost' AND source = 'default'",
                    )
                    .bind(RANDOM_PAGE_COST)
                    .execute(conn)
                    .await?;
                    Ok(())
                })
            },
        );
        let pool = pool.connect(url).await?;
        let wake = Arc::new(Notify::new());
        let wake_token = wake_token();
        // Other processes' new jobs wake this one through LISTEN; polling stays
        // the fallback if the listener's connection drops.
        match PgListener::connect_with(&pool).await {
            Ok(mut listener) => {
                if let Err(e) = listener.listen(CHANNEL).await {
                    tracing::warn!(error = %e, "LISTEN failed; workers will poll");
                } else {
                    let (wake, own) = (wake.clone(), wake_token.clone());
                    tokio::spawn(async move {
                        // try_recv reconnects after a lost connection (returning None once).
                        while let Ok(notification) = listener.try_recv().await {
                            if notification.is_none_or(|n| n.payload() != own) {
                                wake.notify_one();
                            }
                        }
                    });
                }
            }
            Err(e) => tracing::warn!(error = %e, "LISTEN unavailable; workers will poll"),
        }
        let (announce_to, asked) = mpsc::channel(1);
        tokio::spawn(announce(pool.clone(), wake_token, asked));
        Ok(PostgresStore { pool, wake, announce: announce_to })
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}
