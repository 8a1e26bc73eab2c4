//! Reads what the invariants need from Herald's database: plain, read-only
//! SQL over the tables, on Postgres or SQLite. Only this file knows Herald's
//! schema; the rest of the suite knows its binary, config and HTTP API.

use crate::checker::Snapshot;
use sqlx::{FromRow, postgres::PgRow, sqlite::SqliteRow};

pub enum Db {
    Postgres(sqlx::PgPool),
    Sqlite(sqlx::SqlitePool),
}

impl Db {
    pub async fn connect(url: &str) -> anyhow::Result<Db> {
        if url.starts_with("postgres") {
            let pool = sqlx::postgres::PgPoolOptions::new().max_connections(2).connect(url).await?;
            Ok(Db::Postgres(pool))
        } else {
            let options: sqlx::sqlite::SqliteConnectOptions = url.parse()?;
            let pool =
                sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect_with(options.read_only(true)).await?;
            Ok(Db::Sqlite(pool))
        }
    }

    async fn rows<T>(&self, sql: &str) -> anyhow::Result<Vec<T>>
    where
        T: for<'r> FromRow<'r, PgRow> + for<'r> FromRow<'r, SqliteRow> + Send + Unpin,
    {
        Ok(match self {
            Db::Postgres(p) => sqlx::query_as(sql).fetch_all(p).await?,
            Db::Sqlite(p) => sqlx::query_as(sql).fetch_all(p).await?,
        })
    }

    async fn strings(&self, sql: &str) -> anyhow::Result<Vec<String>> {
        Ok(match self {
            Db::Postgres(p) => sqlx::query_scalar(sql).fetch_all(p).await?,
            Db::Sqlite(p) => sqlx::query_scalar(sql).fetch_all(p).await?,
        })
    }

    /// How many intents are not final yet, and how many jobs and open digest windows are left.
    pub async fn pending(&self) -> anyhow::Result<i64> {
        let sql = "SELECT (SELECT COUNT(*) FROM intents WHERE state IN ('queued', 'sending', 'unknown'))
                        + (SELECT COUNT(*) FROM jobs) + (SELECT COUNT(*) FROM digests WHERE state = 'open')";
        Ok(match self {
            Db::Postgres(p) => sqlx::query_scalar(sql).fetch_one(p).await?,
            Db::Sqlite(p) => sqlx::query_scalar(sql).fetch_one(p).await?,
        })
    }

    /// The database's clock in µs (Postgres judges leases by it; SQLite by
    /// its one process's clock, which is this machine's).
    async fn now_us(&self) -> anyhow::Result<i64> {
        Ok(match self {
            Db::Postgres(p) => {
                sqlx::query_scalar("SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::BIGINT")
                    .fetch_one(p)
                    .await?
            }
            Db::Sqlite(_) => jiff::Timestamp::now().as_microsecond(),
        })
    }

    pub async fn snapshot(&self) -> anyhow::Result<Snapshot> {
        Ok(Snapshot {
            now_us: self.now_us().await?,
            intents: self
                .rows(
                    "SELECT key, tenant, event_type, entity_type, entity_id, entity_version, occurred_at, channel,
                            recipient_id, decision, reason, state, attempts, link_key FROM intents",
                )
                .await?,
            // A job or an attempt names its intent by number; one whose
            // intent is gone shows as `#` and that number, which no intent's
            // key is, so the checker still sees it as an orphan.
            attempts: self
                .rows(
                    "SELECT COALESCE(i.key, '#' || a.intent_id) AS intent_key, a.n, a.outcome
                     FROM attempts a LEFT JOIN intents i ON i.id = a.intent_id",
                )
                .await?,
            jobs: self
                .rows(
                    "SELECT COALESCE(i.key, '#' || j.intent_id) AS intent_key, j.locked_until
                     FROM jobs j LEFT JOIN intents i ON i.id = j.intent_id",
                )
                .await?,
            requests: self.rows("SELECT identity, response FROM requests").await?,
            digest_keys: self.strings("SELECT key FROM digests").await?,
        })
    }

    pub async fn close(self) {
        match self {
            Db::Postgres(p) => p.close().await,
            Db::Sqlite(p) => p.close().await,
        }
    }
}
