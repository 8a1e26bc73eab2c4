//! The WAL's checkpoints, copied into the database off the writer's path.
//!
//! Left to itself, SQLite checkpoints on the connection that commits: the
//! commit that takes the WAL past 1,000 pages then copies those pages into
//! the database file and waits for the disk twice more, while every writer
//! waits behind it. On a database of a million notifications each page a
//! commit dirties is a page of its own (a content-derived key lands anywhere
//! in its index), so that came every few commits: 1,697 and 1,327
//! notifications/s against 2,019 and 1,811/s with the copying moved here
//! (2026-12-04, alternating runs on one host; ingest p99 40 → 41 ms and
//! 54 → 53 ms).
//!
//! Here a connection of its own copies what the writer committed, every
//! [`Schedule::every`] while there are writes, with a `PASSIVE` checkpoint,
//! which takes no lock a writer or reader waits for. A checkpoint never
//! reuses the WAL file, though: the log restarts from its start only when a
//! write transaction begins with every page of it copied, which, with the
//! writer always busy, this connection cannot arrange. The writer's own
//! checkpoint does that, at [`Schedule::writer_at`] pages (its
//! `wal_autocheckpoint`); from [`Schedule::eager_from`] pages this
//! checkpoints every [`Schedule::eager_every`], so that the writer's finds
//! almost nothing left to copy. Without this connection (it could not open),
//! the writer's own checkpoints still keep the WAL to its bound.
//!
//! Nothing here weakens `synchronous = FULL`: a checkpoint makes the WAL
//! durable before it copies, and the database file durable before it marks
//! pages copied.

use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{ConnectOptions, Connection, SqliteConnection};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::{oneshot, watch};

/// When the WAL's pages are copied, and when the writer restarts it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Schedule {
    /// How often, while there are writes.
    pub every: Duration,
    /// The WAL's length, in pages, from which it checkpoints more often.
    pub eager_from: i64,
    /// How often, from then on (zero: as soon as one ends, while there are
    /// writes).
    pub eager_every: Duration,
    /// The writer's `wal_autocheckpoint`: the pages at which its own
    /// checkpoint (and with it the WAL's restart) comes.
    pub writer_at: i64,
}

impl Schedule {
    /// 10,000 pages of 4 KiB: a WAL of about 40 MiB while the writer is busy
    /// (more for a few commits when a checkpoint here is under way as the
    /// writer's turn comes: the writer's then skips and a later one restarts).
    pub(super) const DEFAULT: Schedule = Schedule {
        every: Duration::from_millis(50),
        eager_from: 7_500,
        eager_every: Duration::ZERO,
        writer_at: 10_000,
    };
}

/// What the last checkpoint found: the WAL's length and how much of it is
/// in the database, in pages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Checkpointed {
    pub wal_pages: i64,
    pub copied: i64,
}

/// The checkpointing task; it ends when this is dropped.
pub(super) struct Checkpoints {
    _stop: oneshot::Sender<()>,
    #[cfg_attr(not(test), expect(dead_code, reason = "what the tests wait on"))]
    last: watch::Receiver<Checkpointed>,
}

impl Checkpoints {
    /// Opens a connection of its own with `options` and checkpoints on it on
    /// `schedule` while `writes` (bumped by each release of the write
    /// connection) moves, as long as the connection opens. Started once the
    /// store's pools are open: the first connection to a new file switches
    /// it to WAL, and another opening beside it could find it locked.
    pub(super) fn start(options: SqliteConnectOptions, schedule: Schedule, writes: Arc<AtomicU64>) -> Checkpoints {
        let (stop, stopped) = oneshot::channel();
        let (seen, last) = watch::channel(Checkpointed::default());
        tokio::spawn(run(options, schedule, writes, seen, stopped));
        Checkpoints { _stop: stop, last }
    }

    /// What the last checkpoint found.
    #[cfg(test)]
    pub(super) fn last(&self) -> watch::Receiver<Checkpointed> {
        self.last.clone()
    }
}

async fn run(
    options: SqliteConnectOptions,
    schedule: Schedule,
    writes: Arc<AtomicU64>,
    seen: watch::Sender<Checkpointed>,
    mut stopped: oneshot::Receiver<()>,
) {
    let mut conn = match options.connect().await {
        Ok(conn) => conn,
        Err(e) => {
            tracing::warn!(error = %e, "the SQLite checkpointer's connection did not open; the writer checkpoints alone");
            return;
        }
    };
    let mut copied_at = writes.load(Ordering::Relaxed);
    let mut wait = schedule.every;
    loop {
        tokio::select! {
            _ = &mut stopped => break,
            _ = tokio::time::sleep(wait) => {}
        }
        let now = writes.load(Ordering::Relaxed);
        if now == copied_at {
            wait = schedule.every;
            continue;
        }
        copied_at = now;
        match checkpoint(&mut conn).await {
            Ok(Some(found)) => {
                wait = if found.wal_pages >= schedule.eager_from { schedule.eager_every } else { schedule.every };
                metrics::gauge!("herald_sqlite_wal_pages").set(found.wal_pages as f64);
                seen.send_replace(found);
            }
            // Another connection (the writer's own) was checkpointing, or
            // the file is not in WAL mode.
            Ok(None) => {}
            Err(e) => {
                // Not again at once, however long the WAL: the writer's own
                // checkpoint still bounds it.
                wait = schedule.every;
                tracing::warn!(error = %e, "a SQLite checkpoint failed");
            }
        }
    }
    let _ = conn.close().await;
}

/// One `PASSIVE` checkpoint: None when another was under way, or when there
/// is no WAL (SQLite answers -1 for its length).
async fn checkpoint(conn: &mut SqliteConnection) -> sqlx::Result<Option<Checkpointed>> {
    let (busy, wal_pages, copied): (i64, i64, i64) =
        sqlx::query_as("PRAGMA wal_checkpoint(PASSIVE)").fetch_one(conn).await?;
    Ok((busy == 0 && wal_pages >= 0).then_some(Checkpointed { wal_pages, copied }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sqlite::SqliteStore;
    use std::str::FromStr;

    /// A store on a file whose checkpoints come on `schedule`.
    async fn store(dir: &tempfile::TempDir, schedule: Schedule) -> SqliteStore {
        let url = format!("sqlite://{}", dir.path().join("herald.db").display());
        let store = SqliteStore::connect_with(&url, schedule).await.unwrap();
        sqlx::query("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT)").execute(&store.writer).await.unwrap();
        store
    }

    async fn write(store: &SqliteStore, from: i64, rows: i64) {
        for k in from..from + rows {
            sqlx::query("INSERT INTO t (k, v) VALUES ($1, $2)")
                .bind(k)
                .bind("x".repeat(3000))
                .execute(&store.writer)
                .await
                .unwrap();
        }
    }

    fn wal_bytes(dir: &tempfile::TempDir) -> u64 {
        std::fs::metadata(dir.path().join("herald.db-wal")).map(|m| m.len()).unwrap_or(0)
    }

    /// What the writer commits is copied into the database by the
    /// checkpointer's connection, with no checkpoint of the writer's own
    /// (its bound is far off).
    #[tokio::test]
    async fn the_writers_pages_are_copied_off_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let schedule = Schedule { every: Duration::from_millis(10), ..Schedule::DEFAULT };
        let store = store(&dir, schedule).await;
        let (auto,): (i64,) = sqlx::query_as("PRAGMA wal_autocheckpoint").fetch_one(&store.writer).await.unwrap();
        assert_eq!(auto, Schedule::DEFAULT.writer_at);
        write(&store, 0, 20).await;
        let mut last = store.checkpoints.last();
        let found = tokio::time::timeout(Duration::from_secs(10), last.wait_for(|c| c.copied >= 20))
            .await
            .expect("a checkpoint within 10 s")
            .unwrap()
            .to_owned();
        assert_eq!(found.copied, found.wal_pages, "every page committed is copied: {found:?}");
    }

    /// Past `eager_from` pages it checkpoints often enough that the writer's
    /// own checkpoint, at `writer_at`, restarts the WAL: the file stops
    /// growing however much is written.
    #[tokio::test]
    async fn the_wal_restarts_at_the_writers_bound() {
        let dir = tempfile::tempdir().unwrap();
        let schedule = Schedule {
            every: Duration::from_millis(5),
            eager_from: 30,
            eager_every: Duration::from_millis(1),
            writer_at: 40,
        };
        let store = store(&dir, schedule).await;
        let mut last = store.checkpoints.last();
        let mut longest = 0;
        for round in 0..20 {
            write(&store, round * 10, 10).await;
            longest = longest.max(last.borrow_and_update().wal_pages);
        }
        // Two 4 KiB pages a row (one overflow page): 400 pages were written
        // in all. With a restart at 40 pages the WAL holds about 40 of them
        // on an idle machine, but a checkpoint of this connection's still
        // under way when the writer's turn comes makes the writer's skip it
        // and the restart waits for a later commit (CI once saw 82 pages).
        // Under half of what was written still says the WAL was restarted,
        // not grown, however slow the disk.
        assert!(longest < 200, "the WAL grew to {longest} pages");
        let bytes = wal_bytes(&dir);
        assert!(bytes < 200 * 4120, "the WAL file grew to {bytes} bytes");
        let (rows,): (i64,) = sqlx::query_as("SELECT count(*) FROM t").fetch_one(&store.reader).await.unwrap();
        assert_eq!(rows, 200);
    }

    /// A checkpointer whose connection cannot open ends, saying so, and
    /// leaves the store to the writer's own checkpoints.
    #[tokio::test]
    async fn a_checkpointer_that_cannot_connect_ends() {
        let dir = tempfile::tempdir().unwrap();
        let options =
            SqliteConnectOptions::new().filename(dir.path().join("absent/herald.db")).create_if_missing(false);
        let checkpoints = Checkpoints::start(options, Schedule::DEFAULT, Arc::new(AtomicU64::new(1)));
        let mut last = checkpoints.last();
        let ended =
            tokio::time::timeout(Duration::from_secs(10), last.changed()).await.expect("the task ends within 10 s");
        assert!(ended.is_err(), "it ended without a checkpoint");
    }

    /// A file in rollback-journal mode (`herald` opens an existing file as
    /// it is) has no WAL: nothing is reported, nothing fails.
    #[tokio::test]
    async fn a_file_without_a_wal_reports_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("herald.db").display());
        let options = SqliteConnectOptions::from_str(&url).unwrap().create_if_missing(true);
        let mut conn = options.connect().await.unwrap();
        sqlx::query("PRAGMA journal_mode = DELETE").execute(&mut conn).await.unwrap();
        assert_eq!(checkpoint(&mut conn).await.unwrap(), None);
    }
}
