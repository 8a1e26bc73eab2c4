//! The hot write transactions (an all-new ingest batch, a claim, a batch of
//! outcomes), committed together. Two costs made SQLite's one write
//! connection the bottleneck under load, both measured at about 2,400
//! notifications/s with the connection held about 90 % of the time:
//!
//! - sqlx's SQLite driver runs every statement on the connection's own
//!   thread, two thread switches a statement, each a wait for a core on a
//!   busy host. Here the statements run with rusqlite ([`super::direct`]),
//!   synchronously, on the writer's own thread ([`super::writer`]), on a
//!   connection of its own that lives as long as the loop, so each statement
//!   is prepared once and kept ([`Connection::prepare_cached`]). sqlx's pool
//!   still has the one write connection the other writers use: a
//!   transaction here holds it, unused, as the lock that keeps them out,
//!   so writers still queue in Herald rather than meet `SQLITE_BUSY`.
//! - Every commit waits for the disk (`synchronous = FULL`: an accepted
//!   event survives a power cut): about 0.8 ms of the 1.8 ms a transaction
//!   held the connection. Here the units of work that are waiting when the
//!   connection comes free go in one transaction and share one commit: a
//!   unit's failure or rollback undoes its own writes only (each unit after
//!   the first runs in a savepoint; undoing the first is undoing the
//!   transaction, which begins again), and no unit is answered before the
//!   commit that makes its writes durable (a failed commit fails every unit
//!   that wrote).

use super::writer::WriterThread;
use crate::store::{StoreError, StoreResult};
use rusqlite::{Connection, OpenFlags};
use sqlx::SqlitePool;
use std::path::PathBuf;
use tokio::sync::{mpsc, oneshot};

/// How a unit of work ends, with what it returns.
pub(super) enum End<T> {
    /// Its writes stand, once the group's commit has made them durable.
    Commit(T),
    /// Its writes are undone; its answer stands whatever the commit does.
    Rollback(T),
}

/// The most units one transaction takes.
const MAX_UNITS: usize = 32;

/// Takes units of work to the writer's thread, where those waiting together
/// are committed together.
pub(super) struct Commits {
    queue: mpsc::UnboundedSender<Box<dyn Unit>>,
}

impl Commits {
    /// Starts the loop on the writer's thread; it ends when this is dropped.
    /// `pool` is the store's write pool, of one connection; `file` is where
    /// the loop's own connection opens.
    pub(super) fn start(thread: &WriterThread, pool: SqlitePool, file: WriteFile) -> Commits {
        let (queue, waiting) = mpsc::unbounded_channel();
        thread.spawn(commit_loop(pool, file, waiting));
        Commits { queue }
    }

    /// Runs `work` in a savepoint of the next transaction and answers once
    /// that transaction has committed (or with the error that ended it).
    /// A caller that stops waiting before its unit runs leaves it unrun.
    pub(super) async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Connection) -> StoreResult<End<T>> + Send + 'static,
    ) -> StoreResult<T> {
        let (answer, answered) = oneshot::channel();
        self.queue.send(Box::new(Work { work, answer })).map_err(|_| StoreError::Unanswered("SQLite writer"))?;
        answered.await.map_err(|_| StoreError::Unanswered("SQLite writer"))?
    }
}

/// What to tell a unit's caller once the commit is known: `None` when its
/// transaction committed, else why not.
type Settle = Box<dyn FnOnce(Option<&StoreError>) + Send>;

trait Unit: Send {
    /// Its caller stopped waiting.
    fn abandoned(&self) -> bool;
    /// Runs it in the open transaction: in a savepoint of its own, or, when
    /// the transaction holds no other unit's writes yet (`first`), with
    /// none, its failure or rollback undoing the transaction and beginning
    /// it again.
    fn run(self: Box<Self>, db: &Connection, first: bool) -> (Settle, Ran);
    /// Answers it, unrun.
    fn refuse(self: Box<Self>, why: StoreError);
}

struct Work<T, F> {
    work: F,
    answer: oneshot::Sender<StoreResult<T>>,
}

impl<T, F> Unit for Work<T, F>
where
    T: Send + 'static,
    F: FnOnce(&Connection) -> StoreResult<End<T>> + Send + 'static,
{
    fn abandoned(&self) -> bool {
        self.answer.is_closed()
    }

    fn run(self: Box<Self>, db: &Connection, first: bool) -> (Settle, Ran) {
        let Work { work, answer } = *self;
        let (done, ran) = if first { in_transaction(db, work) } else { in_savepoint(db, work) };
        let settle = Box::new(move |failed: Option<&StoreError>| {
            let answered = match (done, failed) {
                (Ok(End::Commit(_)), Some(why)) => Err(StoreError::Shared(format!("not committed: {why}"))),
                (Ok(End::Commit(out) | End::Rollback(out)), _) => Ok(out),
                (Err(e), _) => Err(e),
            };
            let _ = answer.send(answered);
        });
        (settle, ran)
    }

    fn refuse(self: Box<Self>, why: StoreError) {
        let _ = self.answer.send(Err(why));
    }
}

/// What running a unit left in the transaction.
#[derive(Clone, Copy, PartialEq)]
enum Ran {
    /// Its writes, to be committed.
    Wrote,
    /// Nothing of its own: it failed or rolled back, and its writes were undone.
    Undone,
    /// Its writes could not be undone, or kept: nothing in the transaction
    /// may be committed.
    Broken,
}

/// What a unit returned, and what it left in the transaction.
type Done<T> = (StoreResult<End<T>>, Ran);

fn in_savepoint<T>(db: &Connection, work: impl FnOnce(&Connection) -> StoreResult<End<T>>) -> Done<T> {
    if let Err(e) = db.execute_batch("SAVEPOINT unit") {
        return (Err(e.into()), Ran::Broken);
    }
    let done = work(db);
    let (end, ran) = match &done {
        Ok(End::Commit(_)) => ("RELEASE unit", Ran::Wrote),
        _ => ("ROLLBACK TO unit; RELEASE unit", Ran::Undone),
    };
    match db.execute_batch(end) {
        Ok(()) => (done, ran),
        Err(e) => (Err(e.into()), Ran::Broken),
    }
}

/// The first unit of a transaction needs no savepoint: undoing it is
/// undoing the transaction, which then begins again for the units after
/// it. A savepoint is not free: SQLite copies every page a unit changes
/// inside one to its sub-journal first, an eighth of the writer's time on
/// its thread (`perf`, 2026-12-05) when every unit had one.
fn in_transaction<T>(db: &Connection, work: impl FnOnce(&Connection) -> StoreResult<End<T>>) -> Done<T> {
    let done = work(db);
    if matches!(done, Ok(End::Commit(_))) {
        return (done, Ran::Wrote);
    }
    // SQLite may have rolled it back itself (a full disk, an I/O error).
    let undone = if db.is_autocommit() { Ok(()) } else { db.execute_batch("ROLLBACK") };
    match undone.and_then(|()| db.execute_batch("BEGIN")) {
        Ok(()) => (done, Ran::Undone),
        Err(e) => (Err(e.into()), Ran::Broken),
    }
}

/// The database the loop writes to, and what its connection is set to: what
/// the store sets on its pools' connections (sqlx's defaults among them:
/// foreign keys are checked), and one more. `temp_store = MEMORY`: SQLite
/// copies each page a savepoint's unit, or a statement that writes many
/// rows, changes to a sub-journal first (so that it can be undone alone),
/// and past 64 KiB that journal is a file in `/var/tmp`: a `pwrite` a page,
/// a tenth of the writer thread's time (`perf`, 2026-12-05). Held in memory
/// it is a copy, as large as the pages one of these transactions changes
/// (at most [`MAX_UNITS`] units') and gone at its end.
pub(super) struct WriteFile {
    pub path: PathBuf,
    pub busy_timeout: std::time::Duration,
    /// The pages at which a commit checkpoints ([`super::checkpoints::Schedule::writer_at`]).
    pub wal_autocheckpoint: i64,
}

/// Enough for every statement the hot transactions run, with room.
const STATEMENTS_KEPT: usize = 64;

impl WriteFile {
    /// Opens the file (the pools made it; this does not create one) for
    /// writing, with every pragma set before the first statement.
    fn open(&self) -> rusqlite::Result<Connection> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let db = Connection::open_with_flags(&self.path, flags)?;
        db.busy_timeout(self.busy_timeout)?;
        // temp_store: see [`WriteFile`].
        db.execute_batch(&format!(
            "PRAGMA foreign_keys = ON; PRAGMA synchronous = FULL; PRAGMA wal_autocheckpoint = {}; \
             PRAGMA temp_store = MEMORY;",
            self.wal_autocheckpoint
        ))?;
        db.set_prepared_statement_cache_capacity(STATEMENTS_KEPT);
        Ok(db)
    }
}

async fn commit_loop(pool: SqlitePool, file: WriteFile, mut waiting: mpsc::UnboundedReceiver<Box<dyn Unit>>) {
    let mut db = None;
    while let Some(first) = waiting.recv().await {
        commit(&pool, &file, &mut db, first, &mut waiting).await;
    }
}

/// One transaction for `first` and the units that queued behind it while the
/// pool's write connection was being taken, on the loop's own connection
/// (opened now if it is not yet open). Whatever happens, that connection is
/// left outside any transaction, and the pool's is given back.
async fn commit(
    pool: &SqlitePool,
    file: &WriteFile,
    db: &mut Option<Connection>,
    first: Box<dyn Unit>,
    waiting: &mut mpsc::UnboundedReceiver<Box<dyn Unit>>,
) {
    let mut units = vec![first];
    // Held, never used: no other writer of this process runs while it is.
    let turn = match pool.acquire().await {
        Ok(conn) => conn,
        Err(e) => return refuse_all(units, e.into()),
    };
    while units.len() < MAX_UNITS
        && let Ok(unit) = waiting.try_recv()
    {
        units.push(unit);
    }
    units.retain(|u| !u.abandoned());
    if units.is_empty() {
        return;
    }
    let db = match db {
        Some(db) => db,
        None => match file.open() {
            Ok(opened) => db.insert(opened),
            Err(e) => return refuse_all(units, e.into()),
        },
    };
    let (settles, failed) = group(db, units);
    if !db.is_autocommit() {
        let _ = db.execute_batch("ROLLBACK");
    }
    drop(turn);
    for settle in settles {
        settle(failed.as_ref());
    }
}

/// Runs the units in one transaction and commits it; what to tell each, and
/// why nothing was committed if it was not.
fn group(db: &Connection, units: Vec<Box<dyn Unit>>) -> (Vec<Settle>, Option<StoreError>) {
    if let Err(e) = db.execute_batch("BEGIN") {
        refuse_all(units, e.into());
        return (Vec::new(), None);
    }
    let mut settles = Vec::with_capacity(units.len());
    let mut units = units.into_iter();
    let mut lost = None;
    // Whether the transaction holds no unit's writes yet.
    let mut first = true;
    for unit in units.by_ref() {
        let (settle, ran) = unit.run(db, first);
        settles.push(settle);
        first &= ran == Ran::Undone;
        if ran == Ran::Broken {
            lost = Some(StoreError::Shared("a unit's writes could not be undone".into()));
            break;
        }
        // An error SQLite answers by rolling back the whole transaction
        // (a full disk, an I/O error) took every unit's writes with it; the
        // rest must not run outside a transaction.
        if db.is_autocommit() {
            lost = Some(StoreError::Shared("SQLite rolled the transaction back".into()));
            break;
        }
    }
    if let Some(why) = &lost {
        refuse_all(units.collect(), StoreError::Shared(why.to_string()));
    }
    let failed = lost.or_else(|| db.execute_batch("COMMIT").err().map(StoreError::from));
    (settles, failed)
}

fn refuse_all(units: Vec<Box<dyn Unit>>, why: StoreError) {
    let text = why.to_string();
    let mut why = Some(why);
    for unit in units {
        unit.refuse(why.take().unwrap_or_else(|| StoreError::Shared(text.clone())));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sqlite::direct::{self, execute};
    use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
    use std::future::Future;

    /// A write pool of one connection on a new file in `dir`, and where the
    /// loop's own connection opens.
    async fn pool(dir: &tempfile::TempDir) -> (SqlitePool, WriteFile) {
        let path = dir.path().join("herald.db");
        let options =
            SqliteConnectOptions::new().filename(&path).create_if_missing(true).journal_mode(SqliteJournalMode::Wal);
        let pool = SqlitePoolOptions::new().max_connections(1).connect_with(options).await.unwrap();
        sqlx::query(
            "CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER);
             CREATE TABLE parent (k TEXT PRIMARY KEY);
             CREATE TABLE child (k TEXT REFERENCES parent (k) DEFERRABLE INITIALLY DEFERRED)",
        )
        .execute(&pool)
        .await
        .unwrap();
        let file = WriteFile { path, busy_timeout: std::time::Duration::from_secs(10), wal_autocheckpoint: 500 };
        (pool, file)
    }

    /// A file, its pool, the writer's thread and the commit loop on it.
    async fn started() -> (tempfile::TempDir, SqlitePool, WriterThread, Commits) {
        let dir = tempfile::tempdir().unwrap();
        let (pool, file) = pool(&dir).await;
        let thread = WriterThread::start().unwrap();
        let commits = Commits::start(&thread, pool.clone(), file);
        (dir, pool, thread, commits)
    }

    /// A unit that runs one statement and commits, answering `out`.
    fn writes<T: Send + 'static>(sql: &'static str, out: T) -> TestUnit<T> {
        runs(vec![sql], End::Commit, out)
    }

    /// A unit that runs `sqls` in turn (failing with the first that fails),
    /// then ends as `end` says, answering `out`.
    fn runs<T: Send + 'static>(sqls: Vec<&'static str>, end: fn(T) -> End<T>, out: T) -> TestUnit<T> {
        Box::new(move |db: &Connection| {
            for sql in sqls {
                execute(db, sql, &[])?;
            }
            Ok(end(out))
        })
    }

    async fn rows(pool: &SqlitePool) -> Vec<(String, i64)> {
        sqlx::query_as("SELECT k, v FROM t ORDER BY k").fetch_all(pool).await.unwrap()
    }

    fn insert(k: &'static str, v: i64) -> impl FnOnce(&Connection) -> StoreResult<End<()>> + Send + 'static {
        move |db| {
            execute(db, "INSERT INTO t VALUES ($1, $2)", &[&k, &v])?;
            Ok(End::Commit(()))
        }
    }

    type TestUnit<T> = Box<dyn FnOnce(&Connection) -> StoreResult<End<T>> + Send>;

    /// Units queued while the connection is held by someone else, so that
    /// they wait together.
    async fn together<T: Send + 'static>(
        pool: &SqlitePool,
        commits: &Commits,
        units: Vec<TestUnit<T>>,
    ) -> Vec<StoreResult<T>> {
        let held = pool.acquire().await.unwrap();
        let mut answers: Vec<_> = units.into_iter().map(|u| Box::pin(commits.run(u))).collect();
        // Polled once, each has queued its unit.
        std::future::poll_fn(|cx| {
            for answer in &mut answers {
                assert!(answer.as_mut().poll(cx).is_pending(), "answered while the connection was held");
            }
            std::task::Poll::Ready(())
        })
        .await;
        drop(held);
        let mut out = Vec::new();
        for answer in answers {
            out.push(answer.await);
        }
        out
    }

    #[tokio::test]
    async fn units_waiting_together_share_one_transaction() {
        let (_dir, pool, _thread, commits) = started().await;
        // A child whose parent comes in the next unit: committed alone, the
        // first would fail its deferred foreign key.
        let answers = together(
            &pool,
            &commits,
            vec![writes("INSERT INTO child VALUES ('p')", ()), writes("INSERT INTO parent VALUES ('p')", ())],
        )
        .await;
        assert!(answers.iter().all(Result::is_ok), "{answers:?}");
        let children: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM child").fetch_one(&pool).await.unwrap();
        assert_eq!(children, 1);
    }

    #[tokio::test]
    async fn a_unit_that_fails_or_rolls_back_undoes_only_its_own_writes() {
        let (_dir, pool, _thread, commits) = started().await;
        let answers = together(
            &pool,
            &commits,
            vec![
                Box::new(insert("a", 1)),
                runs(vec!["INSERT INTO t VALUES ('b', 2)", "INSERT INTO t VALUES ('a', 3)"], End::Commit, ()),
                runs(vec!["INSERT INTO t VALUES ('c', 4)"], End::Rollback, ()),
                Box::new(insert("d", 5)),
            ],
        )
        .await;
        assert!(answers[0].is_ok() && answers[2].is_ok() && answers[3].is_ok(), "{answers:?}");
        assert!(answers[1].as_ref().is_err_and(direct::is_unique_violation), "{:?}", answers[1]);
        assert_eq!(rows(&pool).await, vec![("a".into(), 1), ("d".into(), 5)]);
        // The pool's connection is free again, and the loop's own is outside
        // any transaction: sqlx's writers are not kept waiting.
        sqlx::query("INSERT INTO t VALUES ('e', 6)").execute(&pool).await.unwrap();
    }

    #[tokio::test]
    async fn the_first_unit_undone_takes_none_of_the_others_writes_with_it() {
        // The first unit of a transaction runs without a savepoint: its
        // failure or rollback undoes the transaction and begins it again.
        let (_dir, pool, _thread, commits) = started().await;
        let answers = together(
            &pool,
            &commits,
            vec![
                runs(vec!["INSERT INTO t VALUES ('a', 1)", "INSERT INTO t VALUES ('a', 2)"], End::Commit, 1),
                // First again, once the one before it is undone.
                runs(vec!["INSERT INTO t VALUES ('b', 3)"], End::Rollback, 2),
                writes("INSERT INTO t VALUES ('c', 4)", 3),
                runs(vec!["INSERT INTO t VALUES ('d', 5)"], End::Rollback, 4),
                writes("INSERT INTO t VALUES ('e', 6)", 5),
            ],
        )
        .await;
        assert!(answers[0].as_ref().is_err_and(direct::is_unique_violation), "{:?}", answers[0]);
        let rest: Vec<i32> = answers[1..].iter().map(|a| *a.as_ref().unwrap()).collect();
        assert_eq!(rest, vec![2, 3, 4, 5]);
        assert_eq!(rows(&pool).await, vec![("c".into(), 4), ("e".into(), 6)]);
    }

    #[tokio::test]
    async fn a_failed_commit_fails_every_unit_that_wrote_and_keeps_a_rollbacks_answer() {
        let (_dir, pool, _thread, commits) = started().await;
        let answers = together(
            &pool,
            &commits,
            vec![
                writes("INSERT INTO t VALUES ('a', 1)", 1),
                // A deferred foreign key: the statement passes, the commit does not.
                writes("INSERT INTO child VALUES ('orphan')", 2),
                Box::new(|_: &Connection| Ok(End::Rollback(3))),
            ],
        )
        .await;
        assert!(matches!(&answers[0], Err(StoreError::Shared(m)) if m.contains("FOREIGN KEY")), "{answers:?}");
        assert!(answers[1].is_err(), "{answers:?}");
        assert_eq!(answers[2].as_ref().ok(), Some(&3));
        assert!(rows(&pool).await.is_empty());
        let children: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM child").fetch_one(&pool).await.unwrap();
        assert_eq!(children, 0);
        commits.run(insert("b", 2)).await.unwrap();
        assert_eq!(rows(&pool).await, vec![("b".into(), 2)]);
    }

    #[tokio::test]
    async fn a_unit_whose_caller_stopped_waiting_is_not_run() {
        let (_dir, pool, _thread, commits) = started().await;
        let held = pool.acquire().await.unwrap();
        let mut abandoned = Box::pin(commits.run(insert("a", 1)));
        // Queued, then given up on.
        std::future::poll_fn(|cx| {
            assert!(abandoned.as_mut().poll(cx).is_pending(), "answered while the connection was held");
            std::task::Poll::Ready(())
        })
        .await;
        drop(abandoned);
        drop(held);
        commits.run(insert("b", 2)).await.unwrap();
        assert_eq!(rows(&pool).await, vec![("b".into(), 2)]);
    }

    /// The loop's connection outlives a transaction (what keeps its prepared
    /// statements), and has the store's settings.
    #[tokio::test]
    async fn the_loops_own_connection_lasts_and_is_set_as_the_stores() {
        let (_dir, _pool, _thread, commits) = started().await;
        // A temporary table is its connection's alone.
        commits
            .run(|db: &Connection| {
                execute(db, "CREATE TEMP TABLE seen (n INTEGER)", &[])?;
                execute(db, "INSERT INTO seen VALUES (1)", &[])?;
                Ok(End::Commit(()))
            })
            .await
            .unwrap();
        let settings = commits
            .run(|db: &Connection| {
                let one = |sql: &str| direct::query(db, sql, &[], |r| r.get::<_, i64>(0));
                let seen = one("SELECT n FROM seen")?;
                let set = [
                    one("PRAGMA foreign_keys")?,
                    one("PRAGMA synchronous")?,
                    one("PRAGMA wal_autocheckpoint")?,
                    one("PRAGMA busy_timeout")?,
                    one("PRAGMA temp_store")?,
                ];
                Ok(End::Commit((seen, set.map(|v| v[0]))))
            })
            .await
            .unwrap();
        // synchronous FULL is 2, temp_store MEMORY is 2.
        assert_eq!(settings, (vec![1], [1, 2, 500, 10_000, 2]));
    }
}
