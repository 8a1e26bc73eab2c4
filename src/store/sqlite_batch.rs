//! SQLite's statements of a set-wise ingest batch ([`super::batch`]): the
//! batch's rows as one JSON array parameter, read by `json_each`, one object
//! per row. Every statement through sqlx is a hand-off to its one writer's
//! thread and back, so what counts is how many there are, not what each
//! carries. The all-new guess ([`write_all_new`]) runs on the writer's own
//! connection instead, where a statement costs no hand-off: a prepared
//! statement a row, no JSON.
//!
//! (An `INSERT … SELECT` with an upsert clause needs a `WHERE` in its
//! `SELECT`, or SQLite reads the `ON` of `ON CONFLICT` as a join's.)

use super::batch::{AllNew, Answer, Job, Payload, Statements};
use super::*;
use serde::Serialize;
use sqlx::{Sqlite, Transaction};
use std::sync::LazyLock;

/// A JSON array of these rows.
fn rows<T: Serialize>(rows: impl IntoIterator<Item = T>) -> StoreResult<String> {
    let rows: Vec<T> = rows.into_iter().collect();
    serde_json::to_string(&rows).map_err(|e| StoreError::Corrupt(e.to_string()))
}

/// The columns an event's record and each of its intents repeat.
#[derive(Serialize)]
struct Event<'a> {
    tenant: &'a str,
    event_type: &'a str,
    entity_type: &'a str,
    entity_id: &'a str,
    occurred_at: &'a str,
}

impl<'a> Event<'a> {
    fn of(r: &'a Ingest) -> Event<'a> {
        Event {
            tenant: &r.tenant,
            event_type: &r.event_type,
            entity_type: &r.entity_type,
            entity_id: &r.entity_id,
            occurred_at: &r.occurred_at,
        }
    }
}

pub struct SqliteStatements;

impl Statements for SqliteStatements {
    type Db = Sqlite;

    /// Not read: the pipeline looked every record up just before it planned,
    /// and a record written since (a concurrent duplicate) is found by the
    /// request records' insert ([`super::batch::Pass::Raced`]), at the cost of
    /// rerunning the batch; a request whose event is in conflict is left to
    /// the savepoint path, which reads its record.
    async fn seen(&self, _: &mut Transaction<'_, Sqlite>, _: &[Ingest]) -> StoreResult<Option<Vec<(String, String)>>> {
        Ok(None)
    }

    async fn insert_events(&self, tx: &mut Transaction<'_, Sqlite>, events: &[&Ingest]) -> StoreResult<Vec<String>> {
        static SQL: LazyLock<String> = LazyLock::new(|| {
            format!("{} WHERE true ON CONFLICT (event_key) DO NOTHING RETURNING event_key", EVENTS_INSERT)
        });
        Ok(sqlx::query_scalar(&SQL).bind(events_json(events)?).fetch_all(&mut **tx).await?)
    }

    async fn touch_events(
        &self,
        tx: &mut Transaction<'_, Sqlite>,
        keys: &[&str],
        now_us: i64,
    ) -> StoreResult<Vec<(String, String)>> {
        Ok(sqlx::query_as(
            "UPDATE events SET created_at = MAX(created_at, $2) WHERE event_key IN (SELECT value FROM json_each($1))
             RETURNING event_key, content_digest",
        )
        .bind(rows(keys)?)
        .bind(now_us)
        .fetch_all(&mut **tx)
        .await?)
    }

    async fn put_payloads(&self, tx: &mut Transaction<'_, Sqlite>, payloads: &[Payload<'_>]) -> StoreResult<()> {
        sqlx::query(PAYLOADS_PUT).bind(rows(payloads)?).execute(&mut **tx).await?;
        Ok(())
    }

    async fn insert_intents(
        &self,
        tx: &mut Transaction<'_, Sqlite>,
        intents: &[(&Ingest, &NewIntent)],
    ) -> StoreResult<Vec<String>> {
        static SQL: LazyLock<String> =
            LazyLock::new(|| format!("{} WHERE true ON CONFLICT (key) DO NOTHING RETURNING key", INTENTS_INSERT));
        let created: Vec<String> = sqlx::query_scalar(&SQL).bind(intents_json(intents)?).fetch_all(&mut **tx).await?;
        // Those created in a published state are published (SQLite has no
        // data-modifying `WITH` to do it in the insert).
        let published: Vec<String> = intents
            .iter()
            .filter(|(_, i)| crate::lifecycle::publishes(i.state) && created.contains(&i.key))
            .map(|(_, i)| i.key.clone())
            .collect();
        super::sqlite::publications_write(tx, &published, None).await?;
        Ok(created)
    }

    async fn intents_status(&self, tx: &mut Transaction<'_, Sqlite>, keys: &[&str]) -> StoreResult<Vec<IntentStatus>> {
        Ok(sqlx::query_as(
            "SELECT key, decision, reason, state, mode FROM intents WHERE key IN (SELECT value FROM json_each($1))",
        )
        .bind(rows(keys)?)
        .fetch_all(&mut **tx)
        .await?)
    }

    /// The jobs; the worker is woken in-process once the transaction commits.
    async fn queue_jobs(&self, tx: &mut Transaction<'_, Sqlite>, jobs: &[Job<'_>]) -> StoreResult<()> {
        sqlx::query(JOBS_INSERT).bind(rows(jobs)?).execute(&mut **tx).await?;
        Ok(())
    }

    async fn record_requests(&self, tx: &mut Transaction<'_, Sqlite>, answers: &[Answer<'_>]) -> StoreResult<u64> {
        static SQL: LazyLock<String> =
            LazyLock::new(|| format!("{} WHERE true ON CONFLICT (tenant, identity) DO NOTHING", REQUESTS_INSERT));
        Ok(sqlx::query(&SQL).bind(answers_json(answers)?).execute(&mut **tx).await?.rows_affected())
    }
}

/// The batch's rows of each table as one JSON array (the `$n` of its insert).
fn events_json(events: &[&Ingest]) -> StoreResult<String> {
    #[derive(Serialize)]
    struct Row<'a> {
        key: &'a str,
        #[serde(flatten)]
        event: Event<'a>,
        digest: &'a str,
        at: i64,
    }
    rows(events.iter().map(|r| Row { key: &r.event_key, event: Event::of(r), digest: &r.content_digest, at: r.now_us }))
}

fn intents_json(intents: &[(&Ingest, &NewIntent)]) -> StoreResult<String> {
    #[derive(Serialize)]
    struct Row<'a> {
        key: &'a str,
        #[serde(flatten)]
        event: Event<'a>,
        entity_version: Option<i64>,
        channel: &'a str,
        recipient_id: &'a str,
        destination: Option<&'a str>,
        locale: Option<&'a str>,
        template_id: &'a str,
        template_revision: Option<&'a str>,
        event_digest: &'a str,
        payload_digest: Option<&'a str>,
        content: Option<&'a str>,
        event_body: Option<&'a str>,
        decision: &'a str,
        reason: Option<&'a str>,
        detail: Option<&'a str>,
        state: &'a str,
        at: i64,
        preferences_version: Option<i64>,
        mode: &'a str,
        traceparent: Option<&'a str>,
    }
    rows(intents.iter().map(|(r, i)| Row {
        key: &i.key,
        event: Event::of(r),
        entity_version: r.entity_version,
        channel: i.channel.as_str(),
        recipient_id: &i.recipient_id,
        destination: i.destination.as_deref(),
        locale: i.locale.as_deref(),
        template_id: &i.template_id,
        template_revision: i.template_revision.as_deref(),
        event_digest: &r.fingerprint,
        payload_digest: i.payload.as_ref().map(|(d, _)| d.as_str()),
        content: i.payload.as_ref().map(|(_, c)| c.as_str()),
        event_body: r.inline_body(),
        decision: i.decision.as_str(),
        reason: i.reason.map(crate::intent::Reason::as_str),
        detail: i.detail.as_deref(),
        state: i.state.as_str(),
        at: r.now_us,
        preferences_version: i.preferences_version,
        mode: i.mode.as_str(),
        traceparent: r.traceparent.as_deref(),
    }))
}

fn answers_json(answers: &[Answer<'_>]) -> StoreResult<String> {
    #[derive(Serialize)]
    struct Row<'a> {
        tenant: &'a str,
        identity: &'a str,
        fingerprint: &'a str,
        at: i64,
        status: i64,
        response: &'a str,
    }
    rows(answers.iter().map(|a| Row {
        tenant: &a.request.tenant,
        identity: &a.request.identity,
        fingerprint: &a.request.fingerprint,
        at: a.request.now_us,
        status: a.status,
        response: &a.response,
    }))
}

/// Each table's insert of the rows in the JSON array `$1`, to which a
/// statement adds its conflict clause (an upsert clause needs the `WHERE`
/// noted at the top of this file).
const EVENTS_INSERT: &str = "INSERT INTO events (event_key, tenant, event_type, entity_type, entity_id, occurred_at,
             content_digest, created_at)
         SELECT value->>'key', value->>'tenant', value->>'event_type', value->>'entity_type', value->>'entity_id',
                value->>'occurred_at', value->>'digest', value->>'at'
         FROM json_each($1)";

const PAYLOADS_PUT: &str = "INSERT INTO payloads (digest, body, created_at)
         SELECT value->>'digest', value->>'body', value->>'at' FROM json_each($1) WHERE true
         ON CONFLICT (digest) DO UPDATE SET created_at = excluded.created_at
         WHERE payloads.created_at < excluded.created_at";

const INTENTS_INSERT: &str = "INSERT INTO intents (key, tenant, event_type, entity_type, entity_id, entity_version,
             occurred_at, channel, recipient_id, destination, locale, template_id, template_revision, event_digest,
             payload_digest, content, event_body, decision, reason, detail, state, attempts, created_at,
             updated_at, preferences_version, link_key, mode, traceparent)
         SELECT value->>'key', value->>'tenant', value->>'event_type', value->>'entity_type', value->>'entity_id',
                value->>'entity_version', value->>'occurred_at', value->>'channel', value->>'recipient_id',
                value->>'destination', value->>'locale', value->>'template_id', value->>'template_revision',
                value->>'event_digest', value->>'payload_digest', value->>'content', value->>'event_body',
                value->>'decision', value->>'reason',
                value->>'detail', value->>'state', 0, value->>'at', value->>'at', value->>'preferences_version',
                NULL, value->>'mode', value->>'traceparent'
         FROM json_each($1)";

const JOBS_INSERT: &str = "INSERT INTO jobs (intent_id, tenant, run_at, traceparent)
         SELECT i.id, value->>'tenant', value->>'run_at', value->>'traceparent'
         FROM json_each($1) JOIN intents i ON i.key = value->>'key'";

const REQUESTS_INSERT: &str = "INSERT INTO requests (tenant, identity, fingerprint, created_at, status, response)
         SELECT value->>'tenant', value->>'identity', value->>'fingerprint', value->>'at', value->>'status',
                value->>'response'
         FROM json_each($1)";

/// A batch guessed all new ([`AllNew`]), written on the writer's own
/// connection (`sqlite::direct`): five inserts, each prepared once and run
/// once a row with the row's values bound. The events, intents and request
/// records have no conflict clause, so that a row already there fails its
/// insert with a unique violation, on which the caller rolls its unit back
/// and decides the batch the long way.
///
/// Row by row rather than the set-wise pass's one JSON array a table: on the
/// writer's own connection a statement costs no hand-off, and a row bound as
/// it is is not escaped into JSON, parsed by SQLite and read back one
/// `->>` a column.
pub fn write_all_new(db: &rusqlite::Connection, all: &AllNew<'_>) -> StoreResult<()> {
    use super::sqlite::direct::statement;
    use rusqlite::params;
    let mut events = statement(db, EVENT_INSERT)?;
    for r in &all.events {
        events.execute(params![
            r.event_key,
            r.tenant,
            r.event_type,
            r.entity_type,
            r.entity_id,
            r.occurred_at,
            r.content_digest,
            r.now_us
        ])?;
    }
    let mut payloads = statement(db, PAYLOAD_PUT)?;
    for p in &all.payloads {
        payloads.execute(params![p.digest, p.body, p.at])?;
    }
    let mut intents = statement(db, INTENT_INSERT)?;
    for (r, i) in &all.intents {
        intents.execute(params![
            i.key,
            r.tenant,
            r.event_type,
            r.entity_type,
            r.entity_id,
            r.entity_version,
            r.occurred_at,
            i.channel.as_str(),
            i.recipient_id,
            i.destination,
            i.locale,
            i.template_id,
            i.template_revision,
            r.fingerprint,
            i.payload.as_ref().map(|(d, _)| d),
            i.payload.as_ref().map(|(_, c)| c),
            r.inline_body(),
            i.decision.as_str(),
            i.reason.map(crate::intent::Reason::as_str),
            i.detail,
            i.state.as_str(),
            r.now_us,
            i.preferences_version,
            i.mode.as_str(),
            r.traceparent
        ])?;
    }
    let mut jobs = statement(db, JOB_INSERT)?;
    for j in &all.jobs {
        jobs.execute(params![j.key, j.tenant, j.run_at, j.traceparent])?;
    }
    let mut requests = statement(db, REQUEST_INSERT)?;
    for a in &all.answers {
        let r = a.request;
        requests.execute(params![r.tenant, r.identity, r.fingerprint, r.now_us, a.status, a.response])?;
    }
    Ok(())
}

/// One row of each table of [`write_all_new`], its values as `?1..?n`.
const EVENT_INSERT: &str = "INSERT INTO events (event_key, tenant, event_type, entity_type, entity_id, occurred_at,
         content_digest, created_at)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";

const PAYLOAD_PUT: &str = "INSERT INTO payloads (digest, body, created_at) VALUES (?1, ?2, ?3)
     ON CONFLICT (digest) DO UPDATE SET created_at = excluded.created_at
     WHERE payloads.created_at < excluded.created_at";

const INTENT_INSERT: &str = "INSERT INTO intents (key, tenant, event_type, entity_type, entity_id, entity_version,
         occurred_at, channel, recipient_id, destination, locale, template_id, template_revision, event_digest,
         payload_digest, content, event_body, decision, reason, detail, state, attempts, created_at, updated_at,
         preferences_version, link_key, mode, traceparent)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, 0, ?22,
             ?22, ?23, NULL, ?24, ?25)";

const JOB_INSERT: &str = "INSERT INTO jobs (intent_id, tenant, run_at, traceparent)
     SELECT id, ?2, ?3, ?4 FROM intents WHERE key = ?1";

const REQUEST_INSERT: &str = "INSERT INTO requests (tenant, identity, fingerprint, created_at, status, response)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6)";
