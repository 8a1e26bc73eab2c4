//! Whole transactions in one hand-off. sqlx's SQLite driver runs every
//! statement on its connection's own thread: each is sent there and its
//! answer sent back, two thread switches a statement. The one write
//! connection is held for the whole of a transaction, so under load those
//! switches (each a wait for a core on a busy host) are what every other
//! writer queues behind: measured at 2,377 notifications/s, the connection
//! was held 92 % of the time, 2.1 ms a transaction, with its thread at 40 %
//! of a core.
//!
//! The hot transactions (a claim, a batch of outcomes) therefore take the
//! connection's handle from sqlx's thread once (`lock_handle`, which parks
//! that thread until the handle is given back) and run every statement
//! with rusqlite, synchronously, on the writer's own thread
//! ([`super::writer`]), where blocking holds up nothing but writers that
//! would wait for the connection anyway. The statements are the same SQL
//! text as the sqlx ones (`$n` parameters are bound by name).

use crate::intent::State;
use crate::lifecycle::Change;
use crate::store::{IntentRow, StoreError, StoreResult};
use rusqlite::types::ToSql;
use rusqlite::{Connection, Row, Statement};
use sqlx::SqlitePool;
use std::collections::HashMap;

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::Sqlite(e)
    }
}

/// How a transaction ends, with what it returns.
pub(super) enum End<T> {
    Commit(T),
    Rollback(T),
}

/// Runs `work` in one transaction on the pool's connection, on the calling
/// thread. Whatever happens, the connection goes back to sqlx outside any
/// transaction: an error (or a failed commit) rolls it back.
pub(super) async fn transaction<T>(
    pool: &SqlitePool,
    work: impl FnOnce(&Connection) -> StoreResult<End<T>>,
) -> StoreResult<T> {
    let mut conn = pool.acquire().await?;
    let mut handle = conn.lock_handle().await?;
    // SAFETY: while `handle` lives, sqlx's thread makes no call on this
    // connection or its statements; the `Connection` made here does not
    // close the handle when dropped, and it (with every statement it
    // prepared) is dropped before `handle` is.
    let db = unsafe { Connection::from_handle(handle.as_raw_handle().as_ptr()) }?;
    let result = run(&db, work);
    if !db.is_autocommit() {
        let _ = db.execute_batch("ROLLBACK");
    }
    drop(db);
    drop(handle);
    result
}

fn run<T>(db: &Connection, work: impl FnOnce(&Connection) -> StoreResult<End<T>>) -> StoreResult<T> {
    db.execute_batch("BEGIN")?;
    match work(db)? {
        End::Commit(out) => {
            db.execute_batch("COMMIT")?;
            Ok(out)
        }
        End::Rollback(out) => {
            db.execute_batch("ROLLBACK")?;
            Ok(out)
        }
    }
}

/// One statement of sqlx's SQL text, prepared with its `$n` parameters bound
/// to `args[n - 1]`.
pub(super) fn prepare<'c>(db: &'c Connection, sql: &str, args: &[&dyn ToSql]) -> StoreResult<Statement<'c>> {
    let mut statement = db.prepare(sql)?;
    for index in 1..=statement.parameter_count() {
        let n = statement
            .parameter_name(index)
            .and_then(|name| name.strip_prefix('$'))
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|n| (1..=args.len()).contains(n))
            .ok_or_else(|| {
                StoreError::Corrupt(format!("a statement's parameter {index} is not one of $1..${}", args.len()))
            })?;
        statement.raw_bind_parameter(index, args[n - 1])?;
    }
    Ok(statement)
}

/// Runs one statement; the rows it changed.
pub(super) fn execute(db: &Connection, sql: &str, args: &[&dyn ToSql]) -> StoreResult<usize> {
    Ok(prepare(db, sql, args)?.raw_execute()?)
}

/// Runs one statement and maps each row it returns.
pub(super) fn query<T>(
    db: &Connection,
    sql: &str,
    args: &[&dyn ToSql],
    mut row: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> StoreResult<Vec<T>> {
    let mut statement = prepare(db, sql, args)?;
    let mut rows = statement.raw_query();
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        out.push(row(r)?);
    }
    Ok(out)
}

/// [`super::intents_apply`], each statement run directly.
pub(super) fn intents_apply(db: &Connection, changes: &[Change]) -> StoreResult<()> {
    if changes.is_empty() {
        return Ok(());
    }
    let keys = super::publishing(changes);
    let before: HashMap<String, State> = if keys.is_empty() {
        HashMap::new()
    } else {
        query(db, super::INTENTS_BEFORE, &[&super::keys_arg(&keys)], |r| Ok((r.get(0)?, r.get(1)?)))?
            .into_iter()
            .collect()
    };
    execute(db, super::INTENTS_UPDATE, &[&super::changes_json(changes)])?;
    publications_write(db, &super::published(changes, &before), None)
}

/// [`super::publications_write`], each statement run directly.
pub(super) fn publications_write(db: &Connection, keys: &[String], delivered_at: Option<i64>) -> StoreResult<()> {
    if keys.is_empty() {
        return Ok(());
    }
    let keys = super::keys_arg(keys);
    execute(db, super::PUBLICATIONS_NUMBER, &[&keys])?;
    execute(db, super::PUBLICATIONS_INSERT, &[&keys, &delivered_at])?;
    Ok(())
}

/// An intent's row, its columns by name (as sqlx's `FromRow` reads them).
pub(super) fn intent_row(r: &Row<'_>) -> rusqlite::Result<IntentRow> {
    Ok(IntentRow {
        key: r.get("key")?,
        tenant: r.get("tenant")?,
        event_type: r.get("event_type")?,
        entity_type: r.get("entity_type")?,
        entity_id: r.get("entity_id")?,
        entity_version: r.get("entity_version")?,
        occurred_at: r.get("occurred_at")?,
        channel: r.get("channel")?,
        recipient_id: r.get("recipient_id")?,
        destination: r.get("destination")?,
        locale: r.get("locale")?,
        template_id: r.get("template_id")?,
        template_revision: r.get("template_revision")?,
        event_digest: r.get("event_digest")?,
        payload_digest: r.get("payload_digest")?,
        decision: r.get("decision")?,
        reason: r.get("reason")?,
        detail: r.get("detail")?,
        state: r.get("state")?,
        attempts: r.get("attempts")?,
        created_at: r.get("created_at")?,
        updated_at: r.get("updated_at")?,
        preferences_version: r.get("preferences_version")?,
        link_key: r.get("link_key")?,
        retry_base: r.get("retry_base")?,
        mode: r.get("mode")?,
    })
}

/// Whether the error is a unique constraint's.
pub(super) fn is_unique_violation(e: &StoreError) -> bool {
    matches!(
        e,
        StoreError::Sqlite(rusqlite::Error::SqliteFailure(f, _))
            if f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
                || f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::sqlite::SqlitePoolOptions;

    async fn pool() -> SqlitePool {
        let pool = SqlitePoolOptions::new().max_connections(1).connect("sqlite::memory:").await.unwrap();
        sqlx::query("CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER)").execute(&pool).await.unwrap();
        pool
    }

    async fn rows(pool: &SqlitePool) -> Vec<(String, i64)> {
        sqlx::query_as("SELECT k, v FROM t ORDER BY k").fetch_all(pool).await.unwrap()
    }

    #[tokio::test]
    async fn parameters_bind_by_their_number_whatever_their_order() {
        let pool = pool().await;
        let n = transaction(&pool, |db| {
            execute(db, "INSERT INTO t (v, k) VALUES ($2, $1), ($2 + 1, $1 || 'b')", &[&"a", &7_i64])?;
            Ok(End::Commit(query(db, "SELECT v FROM t WHERE k = $2", &[&0_i64, &"ab"], |r| r.get::<_, i64>(0))?))
        })
        .await
        .unwrap();
        assert_eq!(n, vec![8]);
        assert_eq!(rows(&pool).await, vec![("a".into(), 7), ("ab".into(), 8)]);
    }

    #[tokio::test]
    async fn an_error_or_a_rollback_leaves_nothing_and_the_connection_usable() {
        let pool = pool().await;
        let failed = transaction(&pool, |db| {
            execute(db, "INSERT INTO t VALUES ($1, 1)", &[&"a"])?;
            execute(db, "INSERT INTO t VALUES ($1, 2)", &[&"a"])?;
            Ok(End::Commit(()))
        })
        .await;
        assert!(failed.as_ref().is_err_and(is_unique_violation), "{failed:?}");
        transaction(&pool, |db| {
            execute(db, "INSERT INTO t VALUES ($1, 1)", &[&"b"])?;
            Ok(End::Rollback(()))
        })
        .await
        .unwrap();
        assert!(rows(&pool).await.is_empty());
        // sqlx's own statements and transactions still run on it.
        let mut tx = pool.begin().await.unwrap();
        sqlx::query("INSERT INTO t VALUES ('c', 3)").execute(&mut *tx).await.unwrap();
        tx.commit().await.unwrap();
        assert_eq!(rows(&pool).await, vec![("c".into(), 3)]);
    }

    #[tokio::test]
    async fn a_parameter_the_arguments_do_not_have_is_refused() {
        let pool = pool().await;
        let refused = transaction(&pool, |db| Ok(End::Commit(execute(db, "SELECT $2", &[&1_i64])?))).await;
        assert!(matches!(refused, Err(StoreError::Corrupt(_))), "{refused:?}");
    }
}
