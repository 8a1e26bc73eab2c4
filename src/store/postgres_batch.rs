//! Postgres's statements of a set-wise ingest batch ([`super::batch`]): each
//! column an array parameter, read by `UNNEST`.
//!
//! Each table's insert is written once, its parameters numbered from where it
//! starts, so that the same text serves twice: alone, as a statement of the
//! set-wise pass; and with the others, as the one statement that writes a
//! batch all of which is new ([`AllNew`]) — one round trip where the pass
//! takes six, and each is a receive, a plan lookup, an executor's start and
//! end and a reply for the backend (docs/performance.md).

use super::batch::{AllNew, Answer, Job, Payload, Statements};
use super::*;
use crate::lifecycle;
use sqlx::error::BoxDynError;
use sqlx::postgres::PgArguments;
use sqlx::postgres::PgPool;
use sqlx::{Arguments, Postgres, Transaction};
use std::sync::LazyLock;

pub struct PgStatements;

/// One table's insert of a batch's rows, each column an array parameter: its
/// columns' types in the order they are bound, and its text given the
/// `UNNEST` of those parameters.
struct Insert {
    types: &'static [&'static str],
    text: fn(&str) -> String,
    /// What the insert does with a row that is there already.
    on_conflict: &'static str,
}

impl Insert {
    /// The insert with its parameters numbered from `$first`.
    fn at(&self, first: usize) -> String {
        format!("{} {}", self.new_at(first), self.on_conflict)
    }

    /// The same without its `ON CONFLICT`: a row there already fails the
    /// statement with a unique violation.
    fn new_at(&self, first: usize) -> String {
        let arrays: Vec<String> =
            self.types.iter().enumerate().map(|(n, t)| format!("${}::{t}[]", first + n)).collect();
        (self.text)(&format!("UNNEST({})", arrays.join(", ")))
    }
}

const EVENTS: Insert = Insert {
    types: &["text", "text", "text", "text", "text", "text", "text", "bigint"],
    text: |rows| {
        format!(
            "INSERT INTO events (event_key, tenant, event_type, entity_type, entity_id, occurred_at, content_digest, created_at)
             SELECT * FROM {rows}"
        )
    },
    on_conflict: "ON CONFLICT (event_key) DO NOTHING",
};

fn bind_events(args: &mut PgArguments, events: &[&Ingest]) -> Result<(), BoxDynError> {
    let col = |f: fn(&Ingest) -> &str| events.iter().map(|r| f(r)).collect::<Vec<&str>>();
    args.add(col(|r| &r.event_key))?;
    args.add(col(|r| &r.tenant))?;
    args.add(col(|r| &r.event_type))?;
    args.add(col(|r| &r.entity_type))?;
    args.add(col(|r| &r.entity_id))?;
    args.add(col(|r| &r.occurred_at))?;
    args.add(col(|r| &r.content_digest))?;
    args.add(events.iter().map(|r| r.now_us).collect::<Vec<_>>())
}

const PAYLOADS: Insert = Insert {
    types: &["text", "text", "bigint"],
    text: |rows| {
        format!(
            "INSERT INTO payloads (digest, body, created_at)
             SELECT * FROM {rows}"
        )
    },
    on_conflict: "ON CONFLICT (digest) DO UPDATE SET created_at = excluded.created_at
                  WHERE payloads.created_at < excluded.created_at",
};

fn bind_payloads(args: &mut PgArguments, payloads: &[Payload<'_>]) -> Result<(), BoxDynError> {
    args.add(payloads.iter().map(|p| p.digest).collect::<Vec<_>>())?;
    args.add(payloads.iter().map(|p| p.body).collect::<Vec<_>>())?;
    args.add(payloads.iter().map(|p| p.at).collect::<Vec<_>>())
}

const INTENTS: Insert = Insert {
    types: &[
        "text", "text", "text", "text", "text", "bigint", "text", "text", "text", "text", "text", "text", "text",
        "text", "text", "text", "text", "text", "text", "text", "text", "bigint", "bigint", "text", "text", "boolean",
    ],
    text: |rows| {
        format!(
            "INSERT INTO intents (key, tenant, event_type, entity_type, entity_id, entity_version, occurred_at,
                 channel, recipient_id, destination, locale, template_id, template_revision, event_digest,
                 payload_digest, content, event_body, decision, reason, detail, state, attempts, created_at,
                 updated_at, preferences_version, link_key, mode, traceparent, publication_seq, dead_at)
             SELECT k, t, et, ent, eid, ev, oa, ch, rid, dst, loc, tid, trev, edg, pdg, cnt, ebd, dec, rsn, det, st, 0, ca, ca, pv,
                    NULL, md, tp,
                    CASE WHEN pb AND EXISTS (SELECT 1 FROM settings WHERE name = 'publications') THEN 1 ELSE 0 END,
                    CASE WHEN st = 'dead' THEN ca END
             FROM {rows}
                  AS u(k, t, et, ent, eid, ev, oa, ch, rid, dst, loc, tid, trev, edg, pdg, cnt, ebd, dec, rsn, det, st, ca, pv, md, tp, pb)"
        )
    },
    on_conflict: "ON CONFLICT (key) DO NOTHING",
};

fn bind_intents(args: &mut PgArguments, rows: &[(&Ingest, &NewIntent)]) -> Result<(), BoxDynError> {
    let text =
        |f: for<'a> fn(&'a Ingest, &'a NewIntent) -> &'a str| rows.iter().map(|(r, i)| f(r, i)).collect::<Vec<&str>>();
    let opt = |f: for<'a> fn(&'a Ingest, &'a NewIntent) -> Option<&'a str>| {
        rows.iter().map(|(r, i)| f(r, i)).collect::<Vec<Option<&str>>>()
    };
    args.add(text(|_, i| &i.key))?;
    args.add(text(|r, _| &r.tenant))?;
    args.add(text(|r, _| &r.event_type))?;
    args.add(text(|r, _| &r.entity_type))?;
    args.add(text(|r, _| &r.entity_id))?;
    args.add(rows.iter().map(|(r, _)| r.entity_version).collect::<Vec<_>>())?;
    args.add(text(|r, _| &r.occurred_at))?;
    args.add(text(|_, i| i.channel.as_str()))?;
    args.add(text(|_, i| &i.recipient_id))?;
    args.add(opt(|_, i| i.destination.as_deref()))?;
    args.add(opt(|_, i| i.locale.as_deref()))?;
    args.add(text(|_, i| &i.template_id))?;
    args.add(opt(|_, i| i.template_revision.as_deref()))?;
    args.add(text(|r, _| &r.fingerprint))?;
    args.add(opt(|_, i| i.payload.as_ref().map(|(d, _)| d.as_str())))?;
    args.add(opt(|_, i| i.payload.as_ref().map(|(_, c)| c.as_str())))?;
    args.add(opt(|r, _| r.inline_body()))?;
    args.add(text(|_, i| i.decision.as_str()))?;
    args.add(opt(|_, i| i.reason.map(crate::intent::Reason::as_str)))?;
    args.add(opt(|_, i| i.detail.as_deref()))?;
    args.add(text(|_, i| i.state.as_str()))?;
    args.add(rows.iter().map(|(r, _)| r.now_us).collect::<Vec<_>>())?;
    args.add(rows.iter().map(|(_, i)| i.preferences_version).collect::<Vec<_>>())?;
    args.add(text(|_, i| i.mode.as_str()))?;
    args.add(opt(|r, _| r.traceparent.as_deref()))?;
    args.add(rows.iter().map(|(_, i)| lifecycle::publishes(i.state)).collect::<Vec<_>>())
}

/// What the intents' insert returns for [`PUBLISH_INSERTED`] (the columns of
/// the publication insert's source, `p`) and for [`JOBS`] (each intent's
/// number).
const INSERTED: &str =
    "RETURNING id, key, tenant, entity_type, entity_id, entity_version, channel, recipient_id, state,
                                  reason, attempts, updated_at AS at, publication_seq";

/// The publications of the intents just inserted (`i`) in a published state:
/// those the insert numbered, because the deployment publishes.
const PUBLISH_INSERTED: &str = "INSERT INTO publications (msg_id, tenant, intent_key, entity_type, entity_id,
                                                          entity_version, channel, recipient_id, state, reason,
                                                          attempts, at)
    SELECT p.key || ':' || p.state || ':' || p.publication_seq, p.tenant, p.key, p.entity_type, p.entity_id,
           p.entity_version, p.channel, p.recipient_id, p.state, p.reason, p.attempts, p.at
    FROM i p WHERE p.publication_seq > 0 ON CONFLICT (msg_id) DO NOTHING";

/// A job is queued only for an intent just created, which has none: the
/// set-wise pass's `ON CONFLICT` only guards that, and the statement of a
/// batch guessed all new goes without it, as its other inserts do. The job
/// names its intent by number, read from `i` by key: in the statement of a
/// batch guessed all new, what the intents' insert returned (no part of one
/// statement sees another's rows in the table); in the set-wise pass, which
/// queues its jobs in a statement after the intents', the table
/// ([`QUEUE_JOBS`]).
const JOBS: Insert = Insert {
    types: &["text", "text", "bigint", "text"],
    text: |rows| {
        format!(
            "INSERT INTO jobs (intent_id, tenant, run_at, traceparent)
             SELECT i.id, u.t, u.r, u.tp FROM {rows} AS u(k, t, r, tp) JOIN i ON i.key = u.k"
        )
    },
    on_conflict: "ON CONFLICT (intent_id) DO NOTHING",
};

fn bind_jobs(args: &mut PgArguments, jobs: &[Job<'_>]) -> Result<(), BoxDynError> {
    args.add(jobs.iter().map(|j| j.key).collect::<Vec<_>>())?;
    args.add(jobs.iter().map(|j| j.tenant).collect::<Vec<_>>())?;
    args.add(jobs.iter().map(|j| j.run_at).collect::<Vec<_>>())?;
    args.add(jobs.iter().map(|j| j.traceparent).collect::<Vec<_>>())
}

const REQUESTS: Insert = Insert {
    types: &["text", "text", "text", "bigint", "bigint", "text"],
    text: |rows| {
        format!(
            "INSERT INTO requests (tenant, identity, fingerprint, created_at, status, response)
             SELECT * FROM {rows}"
        )
    },
    on_conflict: "ON CONFLICT (tenant, identity) DO NOTHING",
};

fn bind_requests(args: &mut PgArguments, answers: &[Answer<'_>]) -> Result<(), BoxDynError> {
    args.add(answers.iter().map(|a| a.request.tenant.as_str()).collect::<Vec<_>>())?;
    args.add(answers.iter().map(|a| a.request.identity.as_str()).collect::<Vec<_>>())?;
    args.add(answers.iter().map(|a| a.request.fingerprint.as_str()).collect::<Vec<_>>())?;
    args.add(answers.iter().map(|a| a.request.now_us).collect::<Vec<_>>())?;
    args.add(answers.iter().map(|a| a.status).collect::<Vec<_>>())?;
    args.add(answers.iter().map(|a| a.response.as_str()).collect::<Vec<_>>())
}

/// Each statement's arguments, bound by `bind`.
fn arguments(bind: impl FnOnce(&mut PgArguments) -> Result<(), BoxDynError>) -> StoreResult<PgArguments> {
    let mut args = PgArguments::default();
    bind(&mut args).map_err(|e| StoreError::Database(sqlx::Error::Encode(e)))?;
    Ok(args)
}

static INSERT_EVENTS: LazyLock<String> = LazyLock::new(|| format!("{} RETURNING event_key", EVENTS.at(1)));
static PUT_PAYLOADS: LazyLock<String> = LazyLock::new(|| PAYLOADS.at(1));
static INSERT_INTENTS: LazyLock<String> = LazyLock::new(|| {
    format!("WITH i AS ({} {INSERTED}), published AS ({PUBLISH_INSERTED}) SELECT key FROM i", INTENTS.at(1))
});
static QUEUE_JOBS: LazyLock<String> =
    LazyLock::new(|| format!("WITH i AS (SELECT id, key FROM intents) {}", JOBS.at(1)));
static RECORD_REQUESTS: LazyLock<String> = LazyLock::new(|| REQUESTS.at(1));

/// Every row of a batch guessed all new, in one statement that commits on its
/// own. The events, intents, jobs and request records are inserted without an
/// `ON CONFLICT`: a row there already fails the statement with a unique
/// violation, Postgres aborts it, and nothing of it is kept. (Each insert
/// with an `ON CONFLICT` is a speculative one: a probe of the unique index
/// before it, and a WAL record confirming it after; docs/performance.md.) The
/// payloads keep theirs: one may well be there, shared by other events. With
/// `jobs`, the jobs too; a batch that queues nothing leaves the jobs table
/// alone.
///
/// The inserts see one snapshot and none reads another's rows, so the order
/// they run in changes no row written; it does change the order in which the
/// statement meets another transaction's rows, and that order must be the
/// set-wise pass's and the row-by-row path's — events, payloads, intents,
/// jobs, request records — or two transactions writing one event can each
/// hold a row the other waits for. Left to itself Postgres ran the request
/// records' insert, the main statement, first and the inserts of the `WITH`
/// after it; its deadlock reports showed this statement holding a request
/// record and waiting for an intent that a row-by-row transaction held,
/// itself waiting at that record. So each insert reads nothing until the one
/// before it has written all its rows ([`after`]) — the jobs too, though
/// their join reads the intents' rows anyway, since a join may stop reading
/// one side early — and the request records come last. (In one process two
/// writers never take one event at once, `crate::ingest::group`; this order
/// is what keeps two processes from deadlocking.)
fn all_new(jobs: bool) -> String {
    let payloads = 1 + EVENTS.types.len();
    let intents = payloads + PAYLOADS.types.len();
    let (queue, requests, last) = match jobs {
        true => {
            let first = intents + INTENTS.types.len();
            (format!(", j AS ({} {} RETURNING 1)", JOBS.new_at(first), after("i")), first + JOBS.types.len(), "j")
        }
        false => (String::new(), intents + INTENTS.types.len(), "i"),
    };
    format!(
        "WITH e AS ({} RETURNING 1), p AS ({} {} {} RETURNING 1), i AS ({} {} {INSERTED}),
              published AS ({PUBLISH_INSERTED}){queue}
         {} {}",
        EVENTS.new_at(1),
        PAYLOADS.new_at(payloads),
        after("e"),
        PAYLOADS.on_conflict,
        INTENTS.new_at(intents),
        after("p"),
        REQUESTS.new_at(requests),
        after(last),
    )
}

/// The condition that holds an insert's source back until the `WITH` query
/// `before` has written all its rows: a count of them, which Postgres takes
/// once, before the insert's first row (an `InitPlan`), and which is never
/// negative.
fn after(before: &str) -> String {
    format!("WHERE (SELECT count(*) FROM {before}) >= 0")
}

static INSERT_ALL_NEW: LazyLock<String> = LazyLock::new(|| all_new(true));
static INSERT_ALL_NEW_UNQUEUED: LazyLock<String> = LazyLock::new(|| all_new(false));

impl PgStatements {
    /// Writes a batch guessed all new in one statement, committed on its own;
    /// whether the guess held. When it did not, Postgres aborted the
    /// statement and nothing of it was kept.
    pub async fn insert_all_new(&self, pool: &PgPool, rows: &AllNew<'_>) -> StoreResult<bool> {
        let queues = !rows.jobs.is_empty();
        let args = arguments(|args| {
            bind_events(args, &rows.events)?;
            bind_payloads(args, &rows.payloads)?;
            bind_intents(args, &rows.intents)?;
            if queues {
                bind_jobs(args, &rows.jobs)?;
            }
            bind_requests(args, &rows.answers)
        })?;
        let statement = if queues { &INSERT_ALL_NEW } else { &INSERT_ALL_NEW_UNQUEUED };
        match sqlx::query_with(statement.as_str(), args).execute(pool).await {
            Ok(_) => Ok(true),
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}

impl Statements for PgStatements {
    type Db = Postgres;

    async fn seen(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        batch: &[Ingest],
    ) -> StoreResult<Option<Vec<(String, String)>>> {
        Ok(Some(
            sqlx::query_as(
                "SELECT r.tenant, r.identity FROM requests r
             JOIN UNNEST($1::text[], $2::text[]) AS u(t, i) ON r.tenant = u.t AND r.identity = u.i",
            )
            .bind(batch.iter().map(|r| r.tenant.as_str()).collect::<Vec<_>>())
            .bind(batch.iter().map(|r| r.identity.as_str()).collect::<Vec<_>>())
            .fetch_all(&mut **tx)
            .await?,
        ))
    }

    async fn insert_events(&self, tx: &mut Transaction<'_, Postgres>, events: &[&Ingest]) -> StoreResult<Vec<String>> {
        let args = arguments(|args| bind_events(args, events))?;
        Ok(sqlx::query_scalar_with(INSERT_EVENTS.as_str(), args).fetch_all(&mut **tx).await?)
    }

    async fn touch_events(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        keys: &[&str],
        now_us: i64,
    ) -> StoreResult<Vec<(String, String)>> {
        Ok(sqlx::query_as(
            "UPDATE events SET created_at = GREATEST(created_at, $2) WHERE event_key = ANY($1)
             RETURNING event_key, content_digest",
        )
        .bind(keys)
        .bind(now_us)
        .fetch_all(&mut **tx)
        .await?)
    }

    async fn put_payloads(&self, tx: &mut Transaction<'_, Postgres>, payloads: &[Payload<'_>]) -> StoreResult<()> {
        let args = arguments(|args| bind_payloads(args, payloads))?;
        sqlx::query_with(PUT_PAYLOADS.as_str(), args).execute(&mut **tx).await?;
        Ok(())
    }

    async fn insert_intents(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        rows: &[(&Ingest, &NewIntent)],
    ) -> StoreResult<Vec<String>> {
        let args = arguments(|args| bind_intents(args, rows))?;
        Ok(sqlx::query_scalar_with(INSERT_INTENTS.as_str(), args).fetch_all(&mut **tx).await?)
    }

    async fn intents_status(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        keys: &[&str],
    ) -> StoreResult<Vec<IntentStatus>> {
        Ok(sqlx::query_as("SELECT key, decision, reason, state, mode FROM intents WHERE key = ANY($1)")
            .bind(keys)
            .fetch_all(&mut **tx)
            .await?)
    }

    async fn queue_jobs(&self, tx: &mut Transaction<'_, Postgres>, jobs: &[Job<'_>]) -> StoreResult<()> {
        let args = arguments(|args| bind_jobs(args, jobs))?;
        sqlx::query_with(QUEUE_JOBS.as_str(), args).execute(&mut **tx).await?;
        Ok(())
    }

    async fn record_requests(&self, tx: &mut Transaction<'_, Postgres>, answers: &[Answer<'_>]) -> StoreResult<u64> {
        let args = arguments(|args| bind_requests(args, answers))?;
        Ok(sqlx::query_with(RECORD_REQUESTS.as_str(), args).execute(&mut **tx).await?.rows_affected())
    }
}
