//! The SQLite backend: the embedded default, one file, one Herald process. Every
//! write holds the single connection of the write pool, so writers queue in
//! Herald instead of meeting `SQLITE_BUSY` (the hot transactions hold it as a
//! lock and write on a connection of the writer thread's own, [`commits`]);
//! reads use a separate pool (WAL lets them run alongside), the reads before
//! planning connections of their own ([`reads`]).

use super::batch::Pass;
use super::shared::Step;
use super::sqlite_batch::{SqliteStatements, write_all_new};
use super::*;
use crate::intent::State;
use crate::lifecycle::{self, Change};
use serde_json::json;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};
use std::collections::HashMap;
use std::str::FromStr;
use std::sync::{Arc, LazyLock};
use tokio::sync::Notify;

mod caps;
mod checkpoints;
mod commits;
mod dead_letters;
mod digests;
pub(super) mod direct;
mod directory;
mod inbox;
mod ingest;
mod ingest_tx;
mod ops;
mod publications;
mod queue;
mod reads;
mod receipts;
mod rejected;
mod retention;
mod suppressions;
mod views;
mod writer;

fn keys_arg<T: serde::Serialize>(keys: &[T]) -> String {
    serde_json::to_string(keys).unwrap_or_else(|_| "[]".into())
}

/// A batch as one JSON array, one element per row, for `json_each`.
fn json_rows(rows: impl Iterator<Item = serde_json::Value>) -> String {
    serde_json::Value::Array(rows.collect()).to_string()
}

/// The write transaction every statement of a change runs in.
type Tx<'a> = sqlx::Transaction<'a, sqlx::Sqlite>;

/// Writes these changes (one per intent) and the publication of each that
/// moves its intent to a published state ([`lifecycle::publishes`]): the
/// states before are read first, so a change that leaves the state as it
/// was publishes nothing, as the rule says. Four statements at most, each
/// for the whole batch; with publications off (the `settings` row absent)
/// the read finds nothing and the update is the only one: each statement is
/// a hand-off to the writer's connection thread. [`direct::intents_apply`]
/// runs the same statements without the hand-offs.
async fn intents_apply(tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>, changes: &[Change]) -> StoreResult<()> {
    if changes.is_empty() {
        return Ok(());
    }
    let keys = publishing(changes);
    let before: HashMap<String, State> = if keys.is_empty() {
        Default::default()
    } else {
        sqlx::query_as(INTENTS_BEFORE).bind(keys_arg(&keys)).fetch_all(&mut **tx).await?.into_iter().collect()
    };
    sqlx::query(&INTENTS_UPDATE).bind(changes_json(changes)).execute(&mut **tx).await?;
    publications_write(tx, &published(changes, &before), None).await
}

/// The keys of the changes to a published state: only they need the state they leave.
fn publishing(changes: &[Change]) -> Vec<String> {
    changes.iter().filter(|c| lifecycle::publishes(c.to)).map(|c| c.key.clone()).collect()
}

/// The states before of `$1`'s intents, when publications are on.
const INTENTS_BEFORE: &str = "SELECT key, state FROM intents WHERE key IN (SELECT value FROM json_each($1))
     AND EXISTS (SELECT 1 FROM settings WHERE name = 'publications')";

/// The update of intents by changes, from `rows`, a query of one row a
/// change, of the columns [`changes_json`] and [`direct::intents_apply`] give.
fn intents_update(rows: &str) -> String {
    format!(
        "UPDATE intents SET state = u.state, decision = COALESCE(u.decision, intents.decision),
             reason = CASE WHEN u.set_reason THEN u.reason ELSE intents.reason END,
             detail = CASE WHEN u.set_detail THEN u.detail ELSE intents.detail END,
             link_key = CASE WHEN u.set_link THEN u.link_key ELSE intents.link_key END,
             retry_base = CASE WHEN u.restarts THEN intents.attempts ELSE intents.retry_base END,
             updated_at = u.at
         FROM ({rows}) AS u WHERE intents.key = u.key"
    )
}

/// The changes of `$1` ([`changes_json`]).
static INTENTS_UPDATE: LazyLock<String> = LazyLock::new(|| {
    intents_update(
        "SELECT value->>0 AS key, value->>1 AS state, value->>2 AS decision, value->>3 AS set_reason,
                value->>4 AS reason, value->>5 AS set_detail, value->>6 AS detail, value->>7 AS set_link,
                value->>8 AS link_key, value->>9 AS restarts, value->>10 AS at FROM json_each($1)",
    )
});

/// One change, its columns `?1..?11` in [`changes_json`]'s order.
static INTENT_UPDATE: LazyLock<String> = LazyLock::new(|| {
    intents_update(
        "SELECT ?1 AS key, ?2 AS state, ?3 AS decision, ?4 AS set_reason, ?5 AS reason, ?6 AS set_detail,
                ?7 AS detail, ?8 AS set_link, ?9 AS link_key, ?10 AS restarts, ?11 AS at",
    )
});

fn changes_json(changes: &[Change]) -> String {
    let flag = |set: bool| i64::from(set);
    json_rows(changes.iter().map(|c| {
        json!([
            c.key,
            c.to.as_str(),
            c.decision.map(|d| d.as_str()),
            flag(c.reason.is_some()),
            c.reason.flatten().map(|r| r.as_str()),
            flag(c.detail.is_some()),
            c.detail.as_ref().and_then(|d| d.as_deref()),
            flag(c.link_key.is_some()),
            c.link_key.as_ref().and_then(|l| l.as_deref()),
            flag(c.restarts_chain),
            c.at
        ])
    }))
}

/// The changes that publish, by the states their intents left.
fn published(changes: &[Change], before: &HashMap<String, State>) -> Vec<String> {
    changes
        .iter()
        .filter(|c| before.get(&c.key).is_some_and(|from| c.publishes_from(*from)))
        .map(|c| c.key.clone())
        .collect()
}

/// The publications of these intents as they stand (new ones, inserted in a
/// published state), or with `delivered_at`, of a `delivered` receipt each:
/// each takes the intent's next number. Two statements (SQLite has no
/// data-modifying `WITH`).
pub(super) async fn publications_write(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    keys: &[String],
    delivered_at: Option<i64>,
) -> StoreResult<()> {
    if keys.is_empty() {
        return Ok(());
    }
    sqlx::query(PUBLICATIONS_NUMBER).bind(keys_arg(keys)).execute(&mut **tx).await?;
    sqlx::query(PUBLICATIONS_INSERT).bind(keys_arg(keys)).bind(delivered_at).execute(&mut **tx).await?;
    Ok(())
}

/// `$1`'s intents take their next publication number (publications on).
const PUBLICATIONS_NUMBER: &str = "UPDATE intents SET publication_seq = publication_seq + 1
     WHERE key IN (SELECT value FROM json_each($1)) AND EXISTS (SELECT 1 FROM settings WHERE name = 'publications')";

/// `$1`'s intents published as they stand, or `delivered` at `$2`.
const PUBLICATIONS_INSERT: &str = "INSERT INTO publications (msg_id, tenant, intent_key, entity_type, entity_id,
         entity_version, channel, recipient_id, state, reason, attempts, at)
     SELECT p.key || ':' || p.state || ':' || p.publication_seq, p.tenant, p.key, p.entity_type, p.entity_id,
            p.entity_version, p.channel, p.recipient_id, p.state, p.reason, p.attempts, p.at
     FROM (SELECT key, tenant, entity_type, entity_id, entity_version, channel, recipient_id,
             CASE WHEN $2 IS NULL THEN state ELSE 'delivered' END AS state,
             CASE WHEN $2 IS NULL THEN reason END AS reason, attempts, COALESCE($2, updated_at) AS at,
             publication_seq
      FROM intents WHERE key IN (SELECT value FROM json_each($1))) p WHERE EXISTS (SELECT 1 FROM settings
      WHERE name = 'publications') ON CONFLICT (msg_id) DO NOTHING";

/// Nothing: SQLite's `dead_at` is a generated column (migration 0052).
async fn dead_at_write(_: &mut sqlx::Transaction<'_, sqlx::Sqlite>, _: &str) -> StoreResult<()> {
    Ok(())
}

#[derive(Clone)]
pub struct SqliteStore {
    writer: SqlitePool,
    reader: SqlitePool,
    /// The reads before planning, on connections of their own ([`reads`]).
    reads: Arc<reads::ReadFiles>,
    wake: Arc<Notify>,
    /// Where the hot write transactions run ([`writer`]).
    thread: Arc<writer::WriterThread>,
    /// The hot transactions that run directly, committed together ([`commits`]).
    commits: Arc<commits::Commits>,
    /// The WAL's checkpoints, off the writer's path ([`checkpoints`]):
    /// they stop when the last clone of the store goes.
    #[cfg_attr(not(test), expect(dead_code, reason = "held, not read"))]
    checkpoints: Arc<checkpoints::Checkpoints>,
}

/// The one write connection is where every writer queues: how long each
/// use holds it is `herald_sqlite_writer_hold_seconds` (its sum's rate is
/// the share of the time the writer is busy). Each release also tells the
/// checkpointer there may be pages to copy.
fn held_time(pool: SqlitePoolOptions, writes: Arc<std::sync::atomic::AtomicU64>) -> SqlitePoolOptions {
    let since = Arc::new(std::sync::Mutex::new(None::<std::time::Instant>));
    let acquired = since.clone();
    pool.before_acquire(move |_, _| {
        *acquired.lock().unwrap_or_else(|e| e.into_inner()) = Some(std::time::Instant::now());
        Box::pin(async { Ok(true) })
    })
    .after_release(move |_, _| {
        writes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Some(at) = since.lock().unwrap_or_else(|e| e.into_inner()).take() {
            metrics::histogram!("herald_sqlite_writer_hold_seconds").record(at.elapsed().as_secs_f64());
        }
        Box::pin(async { Ok(true) })
    })
}

/// How long a connection waits for another process's write lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// A SQLite URL's file part and its options (`key=value`, none empty).
fn url_parts(url: &str) -> (&str, impl Iterator<Item = &str>) {
    let rest = url.trim_start_matches("sqlite://").trim_start_matches("sqlite:");
    let (db, query) = rest.split_once('?').unwrap_or((rest, ""));
    (db, query.split('&').filter(|pair| !pair.is_empty()))
}

/// Whether `url` names an in-memory database (`:memory:`, or `mode=memory`).
fn in_memory(url: &str) -> bool {
    let (db, mut options) = url_parts(url);
    db == ":memory:" || options.any(|pair| pair == "mode=memory")
}

/// Refuses the URL's options that would open the file differently on
/// sqlx's connections than on the writer's and the reads' own, which open
/// it by its path, read-write, with SQLite's default VFS
/// ([`commits::WriteFile`], [`reads::ReadFiles`]): two VFSes may not lock
/// it the same way, and an `immutable` or read-only reader would not see
/// the writer's commits. Only `mode=rw` and `mode=rwc` (both read-write; the
/// file is made when missing either way) are taken.
fn url_options(url: &str) -> StoreResult<()> {
    match url_parts(url).1.find(|pair| *pair != "mode=rw" && *pair != "mode=rwc") {
        None => Ok(()),
        Some(pair) => Err(StoreError::Schema(format!(
            "database_url: the option `{pair}` is not taken on SQLite: Herald opens the file read-write, with \
             SQLite's default VFS and settings of its own, on connections that do not read the URL's options; \
             remove it"
        ))),
    }
}

impl SqliteStore {
    /// Opens the file, creating it (in WAL mode) when it is not there.
    pub async fn connect(url: &str) -> StoreResult<SqliteStore> {
        SqliteStore::connect_with(url, checkpoints::Schedule::DEFAULT).await
    }

    async fn connect_with(url: &str, schedule: checkpoints::Schedule) -> StoreResult<SqliteStore> {
        if in_memory(url) {
            return Err(StoreError::Schema(format!(
                "database_url: {url} is an in-memory database, gone (with every record of what was sent) when \
                 Herald stops, and one that a second connection cannot write; name a file"
            )));
        }
        url_options(url)?;
        let options = SqliteConnectOptions::from_str(url)?.create_if_missing(true).journal_mode(SqliteJournalMode::Wal);
        SqliteStore::open(options, schedule).await
    }

    /// Opens the file only if it exists, and changes nothing in it on the way
    /// (its journal mode stays what it is).
    pub async fn open_existing(url: &str) -> StoreResult<SqliteStore> {
        url_options(url)?;
        let options = SqliteConnectOptions::from_str(url)?.create_if_missing(false);
        let file = options.get_filename();
        if !file.exists() {
            return Err(StoreError::Missing(file.display().to_string()));
        }
        SqliteStore::open(options, checkpoints::Schedule::DEFAULT).await
    }

    async fn open(options: SqliteConnectOptions, schedule: checkpoints::Schedule) -> StoreResult<SqliteStore> {
        let options = options.synchronous(SqliteSynchronous::Full).busy_timeout(BUSY_TIMEOUT);
        // A connection to a file cannot be lost under its pool: no ping
        // before each use (each is a hand-off to the connection's thread).
        let writes = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let writer = held_time(SqlitePoolOptions::new().max_connections(1).test_before_acquire(false), writes.clone())
            .connect_with(options.clone().pragma("wal_autocheckpoint", schedule.writer_at.to_string()))
            .await?;
        let reader = SqlitePoolOptions::new()
            .max_connections(4)
            .test_before_acquire(false)
            .connect_with(options.clone())
            .await?;
        let checkpoints = Arc::new(checkpoints::Checkpoints::start(options.clone(), schedule, writes));
        let thread = writer::WriterThread::start()?;
        let file = commits::WriteFile {
            // The pools made the file: its full name holds whatever the
            // process's directory becomes.
            path: std::fs::canonicalize(options.get_filename()).unwrap_or_else(|_| options.get_filename().to_owned()),
            busy_timeout: BUSY_TIMEOUT,
            wal_autocheckpoint: schedule.writer_at,
        };
        let reads = Arc::new(reads::ReadFiles::new(file.path.clone(), BUSY_TIMEOUT));
        let commits = Arc::new(commits::Commits::start(&thread, writer.clone(), file));
        Ok(SqliteStore {
            writer,
            reader,
            reads,
            wake: Arc::new(Notify::new()),
            thread: Arc::new(thread),
            commits,
            checkpoints,
        })
    }
}

impl SqliteStore {
    /// One transaction on the writer for a batch of requests. A batch that
    /// fits (see [`super::batch`]) with no capped intent — a request alone
    /// too, every request under light load — first goes to the commit loop
    /// on the guess that all of it is new ([`SqliteStore::ingest_all_new`]):
    /// row by row on the writer's own connection, each statement prepared
    /// once, sharing its commit with whatever else is waiting. What that
    /// guess does not write goes set-wise when it fits, else — and for what
    /// the set-wise pass leaves undecided — request by request in
    /// savepoints (a request alone without one: the transaction is its
    /// own). None reads the request records first: the pipeline read them
    /// just before planning, and a record there after all (a concurrent
    /// duplicate) is found when the request's own is written, and this
    /// one's rows go.
    ///
    /// A batch with a capped intent begins `IMMEDIATE`, taking the database's
    /// write lock before its caps are counted ([`super::caps`]): a deferred
    /// transaction would count, and only then wait for a writer in another
    /// process that is about to add to that count.
    async fn ingest_tx(&self, planned: &[Ingest]) -> StoreResult<Vec<StoreResult<IngestOutcome>>> {
        if !super::caps::any(planned)
            && super::batch::fits(planned)
            && let Some(outcomes) = self.ingest_all_new(planned).await?
        {
            return Ok(outcomes);
        }
        let mut tx = self.ingest_begin(planned).await?;
        let batch = super::caps::decide(&caps::SqliteCaps, &mut tx, planned).await?;
        let outcomes = match &*batch {
            [only] => match ingest_tx::ingest_one(&mut tx, only, false).await? {
                Step::Done(outcome) => vec![Ok(outcome)],
                Step::Raced => {
                    // Its identity was recorded first: that record stands.
                    tx.rollback().await?;
                    let mut tx = self.writer.begin().await?;
                    return Ok(vec![ingest_tx::decided_elsewhere(&mut tx, only).await]);
                }
            },
            batch if super::batch::fits(batch) => match super::batch::write(&SqliteStatements, &mut tx, batch).await? {
                Pass::Decided(decided) => {
                    let rest =
                        ingest_tx::ingest_batch(&mut tx, super::batch::undecided(&decided, batch), false).await?;
                    super::batch::merge(decided, rest)
                }
                Pass::Raced => {
                    // An identity was recorded first: that record stands, this
                    // transaction's rows go, and each request reads its record
                    // before it writes (its caps decided again).
                    tx.rollback().await?;
                    tx = self.ingest_begin(planned).await?;
                    let batch = super::caps::decide(&caps::SqliteCaps, &mut tx, planned).await?;
                    ingest_tx::ingest_batch(&mut tx, batch.iter(), true).await?
                }
            },
            batch => ingest_tx::ingest_batch(&mut tx, batch, false).await?,
        };
        tx.commit().await?;
        if outcomes.iter().any(|o| matches!(o, Ok(IngestOutcome::Accepted { any_created: true, .. }))) {
            self.jobs_queued();
        }
        Ok(outcomes)
    }

    /// A batch that fits, written in one unit of the commit loop
    /// ([`commits`]) on the guess that every row is new; None, with the
    /// unit's writes undone, when any row was there already. The unit owns a
    /// copy of the batch (a unit outlives its caller's borrow), and plans
    /// its rows where it runs, on the writer's thread, where this future
    /// runs too.
    async fn ingest_all_new(&self, batch: &[Ingest]) -> StoreResult<Option<Vec<StoreResult<IngestOutcome>>>> {
        let batch = batch.to_vec();
        let written = (self.commits)
            .run(move |db| {
                let rows = super::batch::AllNew::of(&batch)?;
                match write_all_new(db, &rows) {
                    Ok(()) => {}
                    Err(e) if direct::is_unique_violation(&e) => return Ok(commits::End::Rollback(None)),
                    Err(e) => return Err(e),
                }
                // Intents created in a published state are published, as the set-wise pass does.
                let published: Vec<String> = (rows.intents.iter())
                    .filter(|(_, i)| lifecycle::publishes(i.state))
                    .map(|(_, i)| i.key.clone())
                    .collect();
                direct::publications_write(db, &published, None)?;
                Ok(commits::End::Commit(Some((rows.outcomes, !rows.jobs.is_empty()))))
            })
            .await?;
        let Some((outcomes, queued)) = written else {
            return Ok(None);
        };
        if queued {
            self.jobs_queued();
        }
        Ok(Some(outcomes.into_iter().map(Ok).collect()))
    }

    /// The writer's transaction for an ingest batch: `IMMEDIATE` when it caps.
    async fn ingest_begin(&self, batch: &[Ingest]) -> StoreResult<sqlx::Transaction<'static, sqlx::Sqlite>> {
        Ok(match super::caps::any(batch) {
            true => self.writer.begin_with("BEGIN IMMEDIATE").await?,
            false => self.writer.begin().await?,
        })
    }

    /// After a commit that queued jobs: the workers are woken (one process,
    /// so no one else to tell).
    fn jobs_queued(&self) {
        self.wake.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An in-memory database would lose every record when Herald stops, and
    /// the writer's own connection could not reach it: refused by name.
    #[tokio::test]
    async fn an_in_memory_database_is_refused() {
        for url in ["sqlite::memory:", "sqlite://:memory:", "sqlite://herald.db?mode=memory&cache=shared"] {
            let refused = SqliteStore::connect(url).await.err().map(|e| e.to_string()).unwrap_or_default();
            assert!(refused.starts_with("database_url: ") && refused.contains("in-memory"), "{url}: {refused}");
        }
        assert!(!in_memory("sqlite://memory.db") && !in_memory("sqlite:///var/lib/herald/herald.db?mode=rwc"));
    }

    /// An option the writer's and the reads' own connections would not
    /// follow is refused by name, before any file is made; a read-write
    /// mode is taken.
    #[tokio::test]
    async fn a_url_option_the_own_connections_would_not_follow_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("herald.db");
        for option in ["vfs=unix-dotfile", "immutable=true", "mode=ro", "cache=shared", "mode=rwc&vfs=unix-none"] {
            let url = format!("sqlite://{}?{option}", file.display());
            let refused = SqliteStore::connect(&url).await.err().map(|e| e.to_string()).unwrap_or_default();
            let named = option.rsplit('&').next().unwrap();
            assert!(refused.starts_with("database_url: the option `") && refused.contains(named), "{url}: {refused}");
            assert!(!file.exists(), "{url}: a file was made");
            let refused = SqliteStore::open_existing(&url).await.err().map(|e| e.to_string()).unwrap_or_default();
            assert!(refused.contains(named), "open_existing {url}: {refused}");
        }
        for option in ["mode=rwc", "mode=rw", ""] {
            let url = format!("sqlite://{}?{option}", file.display());
            SqliteStore::connect(&url).await.unwrap_or_else(|e| panic!("{url}: {e}"));
        }
        assert!(file.exists());
    }
}
