//! The reads a new request makes before it is planned (its request record,
//! and the directory and suppression entries of its recipients), on
//! connections of their own, run where they are asked. Through sqlx's read
//! pool each statement was a hand-off to the connection's thread and back:
//! under the perf kit's load (2026-12-06, `perf record` of Herald on
//! SQLite) those threads took a fifth of the process's samples, a fifth of
//! that in waking and parking, and a request made three such trips before
//! it was planned. A read here takes a connection kept idle (or opens one),
//! runs its statements, each prepared once and kept, on the thread of the
//! task that asked, and puts the connection back.
//!
//! A read holds its thread for as long as its statements run: a probe of a
//! primary key or of an index a key, tens of microseconds from the page
//! cache. It does not wait there for a lock: in WAL mode a reader does not
//! wait for the writer, and in the rare moments it would (another connection
//! recovering the WAL, or holding the file exclusively) SQLite answers
//! `SQLITE_BUSY` at once, and the read is run again on a thread of Tokio's
//! blocking pool, waiting as long as the store's busy timeout, as a read
//! through sqlx would, while the server's threads go on. No more reads wait
//! so at once than connections are kept: a lock held for long would
//! otherwise take a blocking thread and a connection for every read that
//! met it (the blocking pool also resolves providers' host names). A read
//! that finds that many waiting waits its turn, as long as the busy timeout
//! at most, and then answers that the file is locked. The connections can
//! write nothing (`query_only`).

use super::direct;
use super::ingest::{INTENTS_STATUS, REQUESTS_OF_TENANT, Seen};
use super::keys_arg;
use crate::store::{
    DirectoryRows, IntentStatus, RecipientRow, RequestLookup, RequestSeen, StoreError, StoreResult, SuppressionRow,
};
use rusqlite::{Connection, OpenFlags, Row};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Semaphore;

/// The fewest connections kept idle between reads. [`ReadFiles::new`] keeps
/// more on a larger machine: as many as threads read at once (the server's
/// runtime has one a core), and two more.
const KEPT_AT_LEAST: usize = 4;
/// Statements each connection keeps prepared (there are five).
const STATEMENTS_KEPT: usize = 16;

/// The file the reads open, and the connections they keep.
pub(super) struct ReadFiles {
    path: PathBuf,
    /// How long a read run again off the server's threads waits for a lock.
    busy_timeout: Duration,
    idle: Mutex<Vec<Connection>>,
    /// How many connections are kept idle.
    keep: usize,
    /// A permit for each read that may wait for a lock at once (`keep`).
    waiting: Arc<Semaphore>,
}

impl ReadFiles {
    pub(super) fn new(path: PathBuf, busy_timeout: Duration) -> ReadFiles {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let keep = KEPT_AT_LEAST.max(threads + 2);
        ReadFiles { path, busy_timeout, idle: Mutex::new(Vec::new()), keep, waiting: Arc::new(Semaphore::new(keep)) }
    }

    /// A connection for the reads: it can write nothing, and [`Self::on`]
    /// sets how long it waits for a lock before each read.
    fn open(&self) -> rusqlite::Result<Connection> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let db = Connection::open_with_flags(&self.path, flags)?;
        db.execute_batch("PRAGMA query_only = ON;")?;
        db.set_prepared_statement_cache_capacity(STATEMENTS_KEPT);
        Ok(db)
    }

    /// Runs `read` where it is asked, or, if a lock stood in its way, again
    /// on a thread of the blocking pool, where it may wait ([`ReadFiles`]).
    pub(super) async fn read<T, F>(self: &Arc<Self>, read: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: Fn(&Connection) -> StoreResult<T> + Send + 'static,
    {
        let busy = match self.on(Duration::ZERO, &read) {
            Err(e) if is_busy(&e) => e,
            answered => return answered,
        };
        let turn = tokio::time::timeout(self.busy_timeout, self.waiting.clone().acquire_owned()).await;
        let Ok(Ok(permit)) = turn else { return Err(busy) };
        let reads = self.clone();
        let waited = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            reads.on(reads.busy_timeout, &read)
        });
        waited.await.unwrap_or_else(|_| Err(StoreError::Unanswered("SQLite read")))
    }

    /// Runs `read` on a kept connection (or a new one) that waits up to
    /// `wait` for a lock, and keeps the connection for the next read unless
    /// `read` left a transaction open (none of the reads opens one) or
    /// enough are kept.
    fn on<T>(&self, wait: Duration, read: impl FnOnce(&Connection) -> StoreResult<T>) -> StoreResult<T> {
        let kept = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let db = match kept {
            Some(db) => db,
            None => self.open()?,
        };
        let out = (|| {
            db.busy_timeout(wait)?;
            read(&db)
        })();
        if db.is_autocommit() {
            let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
            if idle.len() < self.keep {
                idle.push(db);
            }
        }
        out
    }
}

/// Whether SQLite answered that a lock is held elsewhere.
fn is_busy(e: &StoreError) -> bool {
    matches!(
        e,
        StoreError::Sqlite(rusqlite::Error::SqliteFailure(f, _))
            if matches!(f.code, rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// [`super::ingest::requests_seen`], its statements run here.
pub(super) fn requests_seen(
    db: &Connection,
    lookups: &[RequestLookup],
) -> StoreResult<Vec<StoreResult<Option<RequestSeen>>>> {
    let mut seen = Seen::unseen(lookups);
    for (tenant, identities) in Seen::by_tenant(lookups) {
        let rows = direct::query(db, REQUESTS_OF_TENANT, &[&keys_arg(&identities), &tenant], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })?;
        let keys = seen.answer(tenant, rows);
        if keys.is_empty() {
            continue;
        }
        let now = direct::query(db, INTENTS_STATUS, &[&keys_arg(&keys), &tenant], intent_status)?;
        seen.refresh(tenant, &now);
    }
    Ok(seen.answers)
}

/// The tenant's directory entries among `ids`.
pub(super) const RECIPIENTS_OF_TENANT: &str = "SELECT tenant, id, email, phone, locale, timezone, webhook_url,
         preferences, preferences_version, updated_at
     FROM recipients WHERE tenant = $2 AND id IN (SELECT value FROM json_each($1))";

/// The tenant's suppression entries among the address lookups `hashes`.
pub(super) const SUPPRESSIONS_MATCHING: &str = "SELECT tenant, id, address_hash, channel, masked, domain, reason,
         source_intent, detail, created_at
     FROM suppressions WHERE tenant = $2 AND address_hash IN (SELECT value FROM json_each($1))";

/// The directory entries of `ids` and the suppression entries among
/// `hashes`, on one connection.
pub(super) fn directory(
    db: &Connection,
    tenant: &str,
    ids: &[String],
    hashes: &[String],
) -> StoreResult<DirectoryRows> {
    let recipients = match ids.is_empty() {
        true => Vec::new(),
        false => direct::query(db, RECIPIENTS_OF_TENANT, &[&keys_arg(ids), &tenant], recipient)?,
    };
    Ok((recipients, suppressions_matching(db, tenant, hashes)?))
}

/// [`SUPPRESSIONS_MATCHING`].
pub(super) fn suppressions_matching(
    db: &Connection,
    tenant: &str,
    hashes: &[String],
) -> StoreResult<Vec<SuppressionRow>> {
    match hashes.is_empty() {
        true => Ok(Vec::new()),
        false => direct::query(db, SUPPRESSIONS_MATCHING, &[&keys_arg(hashes), &tenant], suppression),
    }
}

/// The columns of [`INTENTS_STATUS`], by position.
fn intent_status(r: &Row<'_>) -> rusqlite::Result<IntentStatus> {
    Ok(IntentStatus { key: r.get(0)?, decision: r.get(1)?, reason: r.get(2)?, state: r.get(3)?, mode: r.get(4)? })
}

/// The columns of [`RECIPIENTS_OF_TENANT`], by position.
fn recipient(r: &Row<'_>) -> rusqlite::Result<RecipientRow> {
    Ok(RecipientRow {
        tenant: r.get(0)?,
        id: r.get(1)?,
        email: r.get(2)?,
        phone: r.get(3)?,
        locale: r.get(4)?,
        timezone: r.get(5)?,
        webhook_url: r.get(6)?,
        preferences: r.get(7)?,
        preferences_version: r.get(8)?,
        updated_at: r.get(9)?,
    })
}

/// The columns of [`SUPPRESSIONS_MATCHING`], by position.
fn suppression(r: &Row<'_>) -> rusqlite::Result<SuppressionRow> {
    Ok(SuppressionRow {
        tenant: r.get(0)?,
        id: r.get(1)?,
        address_hash: r.get(2)?,
        channel: r.get(3)?,
        masked: r.get(4)?,
        domain: r.get(5)?,
        reason: r.get(6)?,
        source_intent: r.get(7)?,
        detail: r.get(8)?,
        created_at: r.get(9)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A WAL file in `dir` holding one row, written by a connection that
    /// stays open (as the store's writer does), and the reads on it.
    fn file(dir: &tempfile::TempDir) -> (Connection, Arc<ReadFiles>) {
        let path = dir.path().join("herald.db");
        let writer = Connection::open(&path).unwrap();
        writer
            .execute_batch(
                "PRAGMA journal_mode = WAL; CREATE TABLE t (k TEXT PRIMARY KEY); INSERT INTO t VALUES ('a');",
            )
            .unwrap();
        (writer, Arc::new(ReadFiles::new(path, Duration::from_secs(10))))
    }

    fn idle(reads: &ReadFiles) -> usize {
        reads.idle.lock().unwrap().len()
    }

    fn keys(db: &Connection) -> StoreResult<Vec<String>> {
        direct::query(db, "SELECT k FROM t ORDER BY k", &[], |r| r.get(0))
    }

    #[tokio::test]
    async fn a_read_sees_what_was_committed_and_its_connection_is_kept_for_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let (writer, reads) = file(&dir);
        assert_eq!(reads.read(keys).await.unwrap(), ["a"]);
        assert_eq!(idle(&reads), 1);
        writer.execute("INSERT INTO t VALUES ('b')", []).unwrap();
        // The kept connection, not a new one, and it sees the new row.
        let counted = reads.clone();
        let (seen, idle_then) = reads.read(move |db| Ok((keys(db)?, idle(&counted)))).await.unwrap();
        assert_eq!((seen, idle_then), (vec!["a".to_string(), "b".to_string()], 0));
        assert_eq!(idle(&reads), 1);
    }

    #[test]
    fn reads_at_once_open_a_connection_each_and_keep_no_more_than_enough() {
        let dir = tempfile::tempdir().unwrap();
        let (_writer, reads) = file(&dir);
        fn nested(reads: &ReadFiles, depth: usize) -> StoreResult<()> {
            reads.on(Duration::ZERO, |db| {
                keys(db)?;
                if depth > 1 { nested(reads, depth - 1) } else { Ok(()) }
            })
        }
        nested(&reads, reads.keep + 2).unwrap();
        assert_eq!(idle(&reads), reads.keep);
    }

    #[tokio::test]
    async fn a_read_connection_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (_writer, reads) = file(&dir);
        let refused = reads.read(|db| direct::execute(db, "INSERT INTO t VALUES ('c')", &[])).await;
        assert!(matches!(&refused, Err(StoreError::Sqlite(e)) if e.to_string().contains("readonly")), "{refused:?}");
        assert_eq!(reads.read(keys).await.unwrap(), ["a"]);
    }

    #[test]
    fn a_connection_left_in_a_transaction_is_not_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (_writer, reads) = file(&dir);
        reads.on(Duration::ZERO, |db| Ok(db.execute_batch("BEGIN; SELECT * FROM t;")?)).unwrap();
        assert_eq!(idle(&reads), 0);
    }

    #[tokio::test]
    async fn a_file_that_cannot_be_opened_fails_the_read_and_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let reads = Arc::new(ReadFiles::new(dir.path().join("missing").join("herald.db"), Duration::from_secs(1)));
        assert!(matches!(reads.read(keys).await, Err(StoreError::Sqlite(_))));
        assert_eq!(idle(&reads), 0);
    }

    /// A read that meets a lock waits for it off the asking thread: on a
    /// runtime of one thread, other work goes on while it waits, and it
    /// answers once the lock is gone.
    #[tokio::test(flavor = "current_thread")]
    async fn a_read_that_meets_a_lock_waits_for_it_elsewhere_and_then_answers() {
        let dir = tempfile::tempdir().unwrap();
        let (writer, reads) = file(&dir);
        // Held until dropped: no other connection may read the file.
        writer.execute_batch("PRAGMA locking_mode = EXCLUSIVE; INSERT INTO t VALUES ('b');").unwrap();
        let mut waiting = tokio::spawn({
            let reads = reads.clone();
            async move { reads.read(keys).await }
        });
        // The runtime's one thread is free: this runs while the read waits.
        tokio::select! {
            answered = &mut waiting => panic!("answered through an exclusive lock: {answered:?}"),
            _ = tokio::task::yield_now() => {}
        }
        let lock = tokio::time::timeout(Duration::from_millis(50), &mut waiting).await;
        assert!(lock.is_err(), "the read waits for the lock: {lock:?}");
        drop(writer);
        assert_eq!(waiting.await.unwrap().unwrap(), ["a", "b"]);
        // The connection that waited is kept, and answers at once again.
        assert_eq!(idle(&reads), 1);
        assert_eq!(reads.on(Duration::ZERO, keys).unwrap(), ["a", "b"]);
    }

    /// Reads that meet a lock held longer than the busy timeout answer that
    /// the file is locked, each within about two timeouts (its turn to wait,
    /// then its wait), no more of them waiting at once than connections are
    /// kept, and none keeps more connections than that.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reads_that_meet_a_lock_held_too_long_answer_locked_and_wait_few_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let (writer, _) = file(&dir);
        let reads = Arc::new(ReadFiles::new(dir.path().join("herald.db"), Duration::from_millis(200)));
        writer.execute_batch("PRAGMA locking_mode = EXCLUSIVE; INSERT INTO t VALUES ('b');").unwrap();
        let asked: Vec<_> = (0..reads.keep * 3)
            .map(|_| {
                let reads = reads.clone();
                tokio::spawn(async move { reads.read(keys).await })
            })
            .collect();
        // Once the first reads have met the lock, every permit to wait is taken.
        let watched = reads.clone();
        let all_waiting = async move {
            while watched.waiting.available_permits() > 0 {
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(Duration::from_secs(5), all_waiting).await.expect("reads wait for the lock");
        for asked in asked {
            let answered = tokio::time::timeout(Duration::from_secs(5), asked).await.expect("answered").unwrap();
            assert!(matches!(&answered, Err(e) if is_busy(e)), "{answered:?}");
        }
        assert_eq!(reads.waiting.available_permits(), reads.keep);
        assert!(idle(&reads) <= reads.keep);
        drop(writer);
        assert_eq!(reads.read(keys).await.unwrap(), ["a", "b"]);
    }
}
