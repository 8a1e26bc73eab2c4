//! The limit: Herald's ingest rows written straight through sqlx into Herald's
//! own schema (its migrations, so the same indexes), with nothing else — no
//! HTTP, no parsing, no planning, no rendering. One event per transaction is
//! what today's ingest can at best approach; [`BATCH`] events per transaction
//! (`UNNEST` on Postgres, multi-row `VALUES` on SQLite) is the ceiling a group
//! commit can reach for.
//!
//! On SQLite every client shares one connection, as Herald's writer does:
//! SQLite has one writer at a time, and a pool of connections waiting on its
//! lock would only be slower. The pools skip sqlx's ping before each acquire:
//! the limit is the driver at its fastest.

use super::shape::{ENTITY_TYPE, EVENT_TYPE, EventRows, TENANT};
use super::stats::Latencies;
use sqlx::postgres::PgPoolOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Database, Encode, Executor, IntoArguments, PgPool, Pool, QueryBuilder, Sqlite, SqlitePool, Type};
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Events per transaction in the batched shape.
pub const BATCH: usize = 50;

#[derive(Clone)]
pub enum Target {
    Postgres(PgPool),
    Sqlite(SqlitePool),
}

impl Target {
    /// A pool on a database Herald's migrations have already set up.
    pub async fn connect(url: &str, connections: usize) -> anyhow::Result<Target> {
        if url.starts_with("postgres") {
            let pool = PgPoolOptions::new()
                .test_before_acquire(false)
                .max_connections(connections as u32)
                .min_connections(connections as u32)
                .connect(url)
                .await?;
            // Open every connection before the clock starts.
            drop(open_all(connections, &pool).await?);
            Ok(Target::Postgres(pool))
        } else {
            // Herald's own SQLite settings: WAL, and an fsync per commit.
            let options = SqliteConnectOptions::from_str(url)?
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Full)
                .busy_timeout(Duration::from_secs(10));
            let pool =
                SqlitePoolOptions::new().test_before_acquire(false).max_connections(1).connect_with(options).await?;
            Ok(Target::Sqlite(pool))
        }
    }

    pub async fn close(self) {
        match self {
            Target::Postgres(p) => p.close().await,
            Target::Sqlite(p) => p.close().await,
        }
    }
}

async fn open_all(n: usize, pool: &PgPool) -> anyhow::Result<Vec<sqlx::pool::PoolConnection<sqlx::Postgres>>> {
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        held.push(pool.acquire().await?);
    }
    Ok(held)
}

/// What one limit run measured.
pub struct Measured {
    pub elapsed: Duration,
    /// One per transaction, from `BEGIN` (waiting for a connection included) to `COMMIT`.
    pub latencies: Latencies,
}

/// Writes every event in `rows` from `connections` concurrent clients,
/// `per_tx` events per transaction.
pub async fn run(
    target: &Target,
    rows: Arc<Vec<EventRows>>,
    connections: usize,
    per_tx: usize,
) -> anyhow::Result<Measured> {
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut clients = tokio::task::JoinSet::new();
    for _ in 0..connections {
        let (target, rows, next) = (target.clone(), rows.clone(), next.clone());
        clients.spawn(async move {
            let mut latencies = Latencies::default();
            loop {
                let from = next.fetch_add(per_tx, Ordering::Relaxed);
                if from >= rows.len() {
                    return anyhow::Ok(latencies);
                }
                let batch = &rows[from..(from + per_tx).min(rows.len())];
                let now = jiff::Timestamp::now().as_microsecond();
                let t = Instant::now();
                match (&target, per_tx) {
                    (Target::Postgres(pool), 1) => write_one(pool, &batch[0], now).await?,
                    (Target::Sqlite(pool), 1) => write_one(pool, &batch[0], now).await?,
                    (Target::Postgres(pool), _) => write_batch_pg(pool, batch, now).await?,
                    (Target::Sqlite(pool), _) => write_batch_sqlite(pool, batch, now).await?,
                }
                latencies.push(t.elapsed());
            }
        });
    }
    let mut latencies = Latencies::default();
    while let Some(done) = clients.join_next().await {
        latencies.merge(done??);
    }
    Ok(Measured { elapsed: started.elapsed(), latencies })
}

const INSERT_REQUEST: &str = "INSERT INTO requests (tenant, identity, fingerprint, status, response, created_at)
     VALUES ($1, $2, $3, 202, $4, $5) ON CONFLICT (tenant, identity) DO NOTHING";
const INSERT_EVENT: &str = "INSERT INTO events (event_key, tenant, event_type, entity_type, entity_id, occurred_at,
         content_digest, created_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (event_key) DO NOTHING";
const INSERT_INTENT: &str = "INSERT INTO intents (key, tenant, event_type, entity_type, entity_id, entity_version,
         occurred_at, channel, recipient_id, destination, locale, template_id, template_revision, event_digest,
         payload_digest, content, event_body, decision, reason, detail, state, attempts, created_at, updated_at,
         preferences_version, link_key)
     VALUES ($1, $2, $3, $4, $5, 1, $6, 'sms', $7, $8, 'en', 'po_approved', '1', $9, $10, $11, $12, 'send', NULL, NULL,
         'queued', 0, $13, $13, NULL, NULL)
     ON CONFLICT (key) DO NOTHING";
const INSERT_JOB: &str = "INSERT INTO jobs (intent_id, tenant, run_at) SELECT id, $2, $3 FROM intents WHERE key = $1";
const OCCURRED_AT_UTC: &str = "2026-11-29T04:30:00.000000000Z";

/// One event, one transaction: the request record with its response, the
/// event record, the intent (its rendered text and the event body in its row,
/// as Herald writes a request that planned one intent since migration 0066)
/// and its job — four statements, the same on both databases.
async fn write_one<DB>(pool: &Pool<DB>, r: &EventRows, now: i64) -> sqlx::Result<()>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
{
    let mut tx = pool.begin().await?;
    sqlx::query(INSERT_REQUEST)
        .bind(TENANT)
        .bind(r.identity.as_str())
        .bind(r.fingerprint.as_str())
        .bind(r.response.as_str())
        .bind(now)
        .execute(&mut *tx)
        .await?;
    sqlx::query(INSERT_EVENT)
        .bind(r.event_key.as_str())
        .bind(TENANT)
        .bind(EVENT_TYPE)
        .bind(ENTITY_TYPE)
        .bind(r.entity_id.as_str())
        .bind(OCCURRED_AT_UTC)
        .bind(r.fingerprint.as_str())
        .bind(now)
        .execute(&mut *tx)
        .await?;
    sqlx::query(INSERT_INTENT)
        .bind(r.intent_key.as_str())
        .bind(TENANT)
        .bind(EVENT_TYPE)
        .bind(ENTITY_TYPE)
        .bind(r.entity_id.as_str())
        .bind(OCCURRED_AT_UTC)
        .bind(r.recipient_id.as_str())
        .bind(r.destination.as_str())
        .bind(r.fingerprint.as_str())
        .bind(r.content_digest.as_str())
        .bind(r.content.as_str())
        .bind(r.event_body.as_str())
        .bind(now)
        .execute(&mut *tx)
        .await?;
    sqlx::query(INSERT_JOB).bind(r.intent_key.as_str()).bind(TENANT).bind(now).execute(&mut *tx).await?;
    tx.commit().await
}

fn column<'a>(rows: &'a [EventRows], f: impl Fn(&'a EventRows) -> &'a str) -> Vec<&'a str> {
    rows.iter().map(f).collect()
}

/// Many events, one transaction, a statement per table (`INSERT … SELECT FROM UNNEST`).
async fn write_batch_pg(pool: &PgPool, rows: &[EventRows], now: i64) -> sqlx::Result<()> {
    let mut tx = pool.begin().await?;
    sqlx::query(
        "INSERT INTO requests (tenant, identity, fingerprint, status, response, created_at)
         SELECT $1, u.identity, u.fingerprint, 202, u.response, $5
         FROM UNNEST($2::text[], $3::text[], $4::text[]) AS u(identity, fingerprint, response)
         ON CONFLICT (tenant, identity) DO NOTHING",
    )
    .bind(TENANT)
    .bind(column(rows, |r| &r.identity))
    .bind(column(rows, |r| &r.fingerprint))
    .bind(column(rows, |r| &r.response))
    .bind(now)
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "INSERT INTO events (event_key, tenant, event_type, entity_type, entity_id, occurred_at, content_digest, created_at)
         SELECT u.event_key, $1, $2, $3, u.entity_id, $4, u.content_digest, $5
         FROM UNNEST($6::text[], $7::text[], $8::text[]) AS u(event_key, entity_id, content_digest)
         ON CONFLICT (event_key) DO NOTHING",
    )
    .bind(TENANT)
    .bind(EVENT_TYPE)
    .bind(ENTITY_TYPE)
    .bind(OCCURRED_AT_UTC)
    .bind(now)
    .bind(column(rows, |r| &r.event_key))
    .bind(column(rows, |r| &r.entity_id))
    .bind(column(rows, |r| &r.fingerprint))
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "INSERT INTO intents (key, tenant, event_type, entity_type, entity_id, entity_version,
             occurred_at, channel, recipient_id, destination, locale, template_id, template_revision, event_digest,
             payload_digest, content, event_body, decision, reason, detail, state, attempts, created_at, updated_at,
             preferences_version, link_key)
         SELECT u.key, $1, $2, $3, u.entity_id, 1, $4, 'sms', u.recipient_id, u.destination, 'en', 'po_approved', '1',
             u.event_digest, u.payload_digest, u.content, u.event_body, 'send', NULL, NULL, 'queued', 0, $5, $5, NULL, NULL
         FROM UNNEST($6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::text[])
             AS u(key, entity_id, recipient_id, destination, event_digest, payload_digest, content, event_body)
         ON CONFLICT (key) DO NOTHING",
    )
    .bind(TENANT)
    .bind(EVENT_TYPE)
    .bind(ENTITY_TYPE)
    .bind(OCCURRED_AT_UTC)
    .bind(now)
    .bind(column(rows, |r| &r.intent_key))
    .bind(column(rows, |r| &r.entity_id))
    .bind(column(rows, |r| &r.recipient_id))
    .bind(column(rows, |r| &r.destination))
    .bind(column(rows, |r| &r.fingerprint))
    .bind(column(rows, |r| &r.content_digest))
    .bind(column(rows, |r| &r.content))
    .bind(column(rows, |r| &r.event_body))
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "INSERT INTO jobs (intent_id, tenant, run_at)
         SELECT i.id, $2, $3 FROM UNNEST($1::text[]) AS u(k) JOIN intents i ON i.key = u.k",
    )
    .bind(column(rows, |r| &r.intent_key))
    .bind(TENANT)
    .bind(now)
    .execute(&mut *tx)
    .await?;
    tx.commit().await
}

/// Many events, one transaction, a multi-row `VALUES` statement per table.
async fn write_batch_sqlite(pool: &SqlitePool, rows: &[EventRows], now: i64) -> sqlx::Result<()> {
    let mut tx = pool.begin().await?;
    let mut q = QueryBuilder::<Sqlite>::new(
        "INSERT INTO requests (tenant, identity, fingerprint, status, response, created_at) ",
    );
    q.push_values(rows, |mut b, r| {
        b.push_bind(TENANT)
            .push_bind(&r.identity)
            .push_bind(&r.fingerprint)
            .push("202")
            .push_bind(&r.response)
            .push_bind(now);
    });
    q.push(" ON CONFLICT (tenant, identity) DO NOTHING");
    q.build().execute(&mut *tx).await?;

    let mut q = QueryBuilder::<Sqlite>::new(
        "INSERT INTO events (event_key, tenant, event_type, entity_type, entity_id, occurred_at, content_digest, created_at) ",
    );
    q.push_values(rows, |mut b, r| {
        b.push_bind(&r.event_key)
            .push_bind(TENANT)
            .push_bind(EVENT_TYPE)
            .push_bind(ENTITY_TYPE)
            .push_bind(&r.entity_id)
            .push_bind(OCCURRED_AT_UTC)
            .push_bind(&r.fingerprint)
            .push_bind(now);
    });
    q.push(" ON CONFLICT (event_key) DO NOTHING");
    q.build().execute(&mut *tx).await?;

    let mut q = QueryBuilder::<Sqlite>::new(
        "INSERT INTO intents (key, tenant, event_type, entity_type, entity_id, entity_version,
             occurred_at, channel, recipient_id, destination, locale, template_id, template_revision, event_digest,
             payload_digest, content, event_body, decision, reason, detail, state, attempts, created_at, updated_at,
             preferences_version, link_key) ",
    );
    q.push_values(rows, |mut b, r| {
        b.push_bind(&r.intent_key)
            .push_bind(TENANT)
            .push_bind(EVENT_TYPE)
            .push_bind(ENTITY_TYPE)
            .push_bind(&r.entity_id)
            .push("1")
            .push_bind(OCCURRED_AT_UTC)
            .push("'sms'")
            .push_bind(&r.recipient_id)
            .push_bind(&r.destination)
            .push("'en', 'po_approved', '1'")
            .push_bind(&r.fingerprint)
            .push_bind(&r.content_digest)
            .push_bind(&r.content)
            .push_bind(&r.event_body)
            .push("'send', NULL, NULL, 'queued', 0")
            .push_bind(now)
            .push_bind(now)
            .push("NULL, NULL");
    });
    q.push(" ON CONFLICT (key) DO NOTHING");
    q.build().execute(&mut *tx).await?;

    let mut q = QueryBuilder::<Sqlite>::new("INSERT INTO jobs (intent_id, tenant, run_at) SELECT id, ");
    q.push_bind(TENANT).push(", ").push_bind(now).push(" FROM intents WHERE key IN (");
    let mut keys = q.separated(", ");
    for r in rows {
        keys.push_bind(&r.intent_key);
    }
    q.push(")");
    q.build().execute(&mut *tx).await?;
    tx.commit().await
}
