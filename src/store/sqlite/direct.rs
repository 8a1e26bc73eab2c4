//! Statements run on SQLite's write connection directly, with rusqlite,
//! rather than through sqlx's connection thread: the hot transactions'
//! ([`super::commits`]). The SQL text is sqlx's, `$n` parameters and all
//! (bound here by name), and the helpers the sqlx writers share
//! (`intents_apply`, the publications) run the same statements.

use crate::intent::State;
use crate::lifecycle::Change;
use crate::store::{IntentRow, StoreError, StoreResult};
use rusqlite::types::ToSql;
use rusqlite::{CachedStatement, Connection, Row};
use std::collections::HashMap;

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::Sqlite(e)
    }
}

/// One statement of sqlx's SQL text, with its `$n` parameters bound to
/// `args[n - 1]`: prepared the first time the connection runs it, and kept
/// (reset, its parameters cleared) for the next time once dropped.
/// Logged at DEBUG (the text as `summary`, a field sqlx logs too), under
/// `herald::sqlite::direct`: `tests/hot_path_plans.rs` explains them too.
pub(super) fn prepare<'c>(db: &'c Connection, sql: &str, args: &[&dyn ToSql]) -> StoreResult<CachedStatement<'c>> {
    tracing::debug!(target: "herald::sqlite::direct", summary = sql, "statement");
    let mut statement = db.prepare_cached(sql)?;
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

/// One statement of `?n` parameters, prepared the first time the connection
/// runs it and kept, for its caller to run once a row with the row's values
/// (`Statement::execute` binds them in order). Logged as [`prepare`] logs.
pub(in crate::store) fn statement<'c>(db: &'c Connection, sql: &str) -> StoreResult<CachedStatement<'c>> {
    tracing::debug!(target: "herald::sqlite::direct", summary = sql, "statement");
    Ok(db.prepare_cached(sql)?)
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

/// [`super::intents_apply`], each statement run directly, the update once a
/// change with its values bound (no JSON to write and parse).
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
    let mut update = statement(db, &super::INTENT_UPDATE)?;
    for c in changes {
        update.execute(rusqlite::params![
            c.key,
            c.to.as_str(),
            c.decision.map(|d| d.as_str()),
            c.reason.is_some(),
            c.reason.flatten().map(|r| r.as_str()),
            c.detail.is_some(),
            c.detail.as_ref().and_then(|d| d.as_deref()),
            c.link_key.is_some(),
            c.link_key.as_ref().and_then(|l| l.as_deref()),
            c.restarts_chain,
            c.at
        ])?;
    }
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

/// An intent's columns, in the order [`intent_row`] reads them.
pub(super) const INTENT_COLUMNS: [&str; 26] = [
    "key",
    "tenant",
    "event_type",
    "entity_type",
    "entity_id",
    "entity_version",
    "occurred_at",
    "channel",
    "recipient_id",
    "destination",
    "locale",
    "template_id",
    "template_revision",
    "event_digest",
    "payload_digest",
    "decision",
    "reason",
    "detail",
    "state",
    "attempts",
    "created_at",
    "updated_at",
    "preferences_version",
    "link_key",
    "retry_base",
    "mode",
];

/// An intent's row from a row whose first columns are [`INTENT_COLUMNS`], in
/// that order: read by position, since a column read by name is looked up by
/// comparing the name with each column's (2 % of the writer's thread, in the
/// claims' reads).
pub(super) fn intent_row(r: &Row<'_>) -> rusqlite::Result<IntentRow> {
    Ok(IntentRow {
        key: r.get(0)?,
        tenant: r.get(1)?,
        event_type: r.get(2)?,
        entity_type: r.get(3)?,
        entity_id: r.get(4)?,
        entity_version: r.get(5)?,
        occurred_at: r.get(6)?,
        channel: r.get(7)?,
        recipient_id: r.get(8)?,
        destination: r.get(9)?,
        locale: r.get(10)?,
        template_id: r.get(11)?,
        template_revision: r.get(12)?,
        event_digest: r.get(13)?,
        payload_digest: r.get(14)?,
        decision: r.get(15)?,
        reason: r.get(16)?,
        detail: r.get(17)?,
        state: r.get(18)?,
        attempts: r.get(19)?,
        created_at: r.get(20)?,
        updated_at: r.get(21)?,
        preferences_version: r.get(22)?,
        link_key: r.get(23)?,
        retry_base: r.get(24)?,
        mode: r.get(25)?,
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

    fn db() -> Connection {
        let db = Connection::open_in_memory().unwrap();
        db.execute_batch("CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER)").unwrap();
        db
    }

    #[test]
    fn parameters_bind_by_their_number_whatever_their_order() {
        let db = db();
        execute(&db, "INSERT INTO t (v, k) VALUES ($2, $1), ($2 + 1, $1 || 'b')", &[&"a", &7_i64]).unwrap();
        let v = query(&db, "SELECT v FROM t WHERE k = $2", &[&0_i64, &"ab"], |r| r.get::<_, i64>(0)).unwrap();
        assert_eq!(v, vec![8]);
    }

    #[test]
    fn a_unique_violation_is_told_from_other_errors() {
        let db = db();
        execute(&db, "INSERT INTO t VALUES ($1, 1)", &[&"a"]).unwrap();
        let again = execute(&db, "INSERT INTO t VALUES ($1, 2)", &[&"a"]);
        assert!(again.as_ref().is_err_and(is_unique_violation), "{again:?}");
        let other = execute(&db, "INSERT INTO nowhere VALUES ($1)", &[&"a"]);
        assert!(other.as_ref().is_err_and(|e| !is_unique_violation(e)), "{other:?}");
    }

    /// Each field of [`intent_row`] is read from the column [`INTENT_COLUMNS`]
    /// names: each text column holds its own name, each number its place.
    #[test]
    fn an_intents_fields_are_read_from_the_columns_their_names_say() {
        let db = Connection::open_in_memory().unwrap();
        let value = |(n, c): (usize, &&str)| match *c {
            "channel" => "'sms'".to_string(),
            "decision" => "'send'".to_string(),
            "state" => "'queued'".to_string(),
            "mode" => "'shadow'".to_string(),
            "entity_version" | "attempts" | "created_at" | "updated_at" | "preferences_version" | "retry_base" => {
                n.to_string()
            }
            c => format!("'{c}'"),
        };
        let columns: Vec<String> =
            INTENT_COLUMNS.iter().enumerate().map(|(n, c)| format!("{} AS {}", value((n, c)), c)).collect();
        let sql = format!("SELECT {}", columns.join(", "));
        let row = query(&db, &sql, &[], intent_row).unwrap().remove(0);
        let texts = [
            (Some(row.key.as_str()), "key"),
            (Some(&row.tenant), "tenant"),
            (Some(&row.event_type), "event_type"),
            (Some(&row.entity_type), "entity_type"),
            (Some(&row.entity_id), "entity_id"),
            (Some(&row.occurred_at), "occurred_at"),
            (Some(&row.recipient_id), "recipient_id"),
            (Some(&row.template_id), "template_id"),
            (Some(&row.event_digest), "event_digest"),
            (row.destination.as_deref(), "destination"),
            (row.locale.as_deref(), "locale"),
            (row.template_revision.as_deref(), "template_revision"),
            (row.payload_digest.as_deref(), "payload_digest"),
            (row.reason.as_deref(), "reason"),
            (row.detail.as_deref(), "detail"),
            (row.link_key.as_deref(), "link_key"),
        ];
        for (read, column) in texts {
            assert_eq!(read, Some(column));
        }
        let place = |c: &str| INTENT_COLUMNS.iter().position(|x| *x == c).unwrap() as i64;
        assert_eq!(row.entity_version, Some(place("entity_version")));
        assert_eq!(row.attempts, place("attempts"));
        assert_eq!(row.created_at, place("created_at"));
        assert_eq!(row.updated_at, place("updated_at"));
        assert_eq!(row.preferences_version, Some(place("preferences_version")));
        assert_eq!(row.retry_base, place("retry_base"));
        assert_eq!(row.channel.as_str(), "sms");
        assert_eq!((row.decision.as_str(), row.state.as_str(), row.mode.as_str()), ("send", "queued", "shadow"));
    }

    #[test]
    fn a_parameter_the_arguments_do_not_have_is_refused() {
        let refused = execute(&db(), "SELECT $2", &[&1_i64]);
        assert!(matches!(refused, Err(StoreError::Corrupt(_))), "{refused:?}");
    }
}
