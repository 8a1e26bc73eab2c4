//! A batch of new requests written set-wise: each statement once per batch,
//! the batch's rows given as one parameter — arrays read by `UNNEST` on
//! Postgres ([`super::postgres_batch`]), one JSON array read by `json_each` on
//! SQLite ([`super::sqlite_batch`]) — instead of once per request.
//!
//! It takes the common case only — requests that are new, each with its own
//! identity and event and no digest member — and leaves the rest to the
//! savepoint path (`ingest_tx.rs` in each backend), which decides any request as a
//! transaction of its own would. Every statement takes its rows in key order,
//! so two batches lock shared rows in one order.

use super::decide::{Event, Record, Request, Verdict, decide};
use super::*;
use serde::Serialize;
use sqlx::Transaction;
use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::Hash;

/// Whether the batch can go set-wise: each request with its own identity,
/// event and intent keys, and no digest member (a window row is locked and may
/// turn a member into a send of its own). On Postgres a batch of one goes
/// set-wise too: one statement per table, where the savepoint path takes one
/// per row and more for its savepoint. On SQLite a batch that fits, of one
/// or many, is first guessed all new ([`AllNew`]), and only what that guess
/// does not write comes here (see its `ingest_tx`).
pub fn fits(batch: &[Ingest]) -> bool {
    let (mut identities, mut events, mut keys) = (HashSet::new(), HashSet::new(), HashSet::new());
    !batch.is_empty()
        && batch.iter().all(|r| {
            identities.insert((r.tenant.as_str(), r.identity.as_str()))
                && events.insert(r.event_key.as_str())
                && r.intents.iter().all(|i| i.digest.is_none() && keys.insert(i.key.as_str()))
        })
}

/// What the set-wise pass made of a batch.
pub enum Pass {
    /// Per request, in order: its outcome, or None for one left to the
    /// savepoint path (a request seen before, a replay or a mismatch; a
    /// request whose event is in conflict; an event record that vanished
    /// under it).
    Decided(Vec<Option<IngestOutcome>>),
    /// Another transaction recorded one of these identities first: the
    /// transaction must be rolled back and the batch decided request by request.
    Raced,
}

/// A batch that fits, written on the guess that all of it is new — every
/// event, intent and request identity, as nearly every batch is — whose
/// answers are then known before anything is written: every intent created.
/// A backend writes these rows at once (on Postgres one statement, committed
/// on its own; on SQLite one unit of its commit loop, a prepared insert a
/// row) and keeps them only where the database says each row was indeed new; otherwise nothing of them is kept and the batch goes through
/// [`write`].
pub struct AllNew<'a> {
    /// In key order, as every statement takes its rows.
    pub events: Vec<&'a Ingest>,
    pub payloads: Vec<Payload<'a>>,
    pub intents: Vec<(&'a Ingest, &'a NewIntent)>,
    pub jobs: Vec<Job<'a>>,
    pub answers: Vec<Answer<'a>>,
    /// Per request, in the batch's order: what it is answered if the guess holds.
    pub outcomes: Vec<IngestOutcome>,
}

impl<'a> AllNew<'a> {
    /// The rows of a batch that [`fits`], as if all of it were new.
    pub fn of(batch: &'a [Ingest]) -> StoreResult<AllNew<'a>> {
        let requests: Vec<&Ingest> = batch.iter().collect();
        let intents = intent_rows(&requests);
        let created: HashSet<&str> = intents.iter().map(|(_, i)| i.key.as_str()).collect();
        let decided: Vec<(usize, IngestResponse, bool)> = (batch.iter().enumerate())
            .map(|(i, request)| {
                let (response, any_created) = response(request, &created, &HashMap::new());
                (i, response, any_created)
            })
            .collect();
        Ok(AllNew {
            payloads: payloads(&requests),
            jobs: jobs(&requests, &created),
            answers: answer_rows(batch, &decided)?,
            outcomes: (decided.into_iter())
                .map(|(_, response, any_created)| IngestOutcome::Accepted { response, any_created })
                .collect(),
            events: by_event_key(requests),
            intents,
        })
    }
}

/// A content record to store, or whose use to note.
#[derive(Serialize)]
pub struct Payload<'a> {
    pub digest: &'a str,
    pub body: &'a str,
    pub at: i64,
}

/// A job for a new intent that is to be sent, with its request's trace.
#[derive(Serialize)]
pub struct Job<'a> {
    pub key: &'a str,
    pub tenant: &'a str,
    pub run_at: i64,
    pub traceparent: Option<&'a str>,
}

/// A request's record: its answer and the status it was given with.
pub struct Answer<'a> {
    pub request: &'a Ingest,
    pub response: String,
    pub status: i64,
}

/// The statements of a set-wise batch as one backend writes them, each one
/// statement for all its rows.
pub(super) trait Statements {
    type Db: sqlx::Database;

    /// The (tenant, identity) of those requests that have a record already;
    /// None where the backend does not read them first.
    async fn seen(
        &self,
        tx: &mut Transaction<'_, Self::Db>,
        batch: &[Ingest],
    ) -> StoreResult<Option<Vec<(String, String)>>>;

    /// Each event's content record, where its key is new; the keys inserted.
    async fn insert_events(&self, tx: &mut Transaction<'_, Self::Db>, events: &[&Ingest]) -> StoreResult<Vec<String>>;

    /// Marks these content records used now (read by touching: retention
    /// cannot prune a record this batch is about to hang intents on), with
    /// the digest each was accepted with.
    async fn touch_events(
        &self,
        tx: &mut Transaction<'_, Self::Db>,
        keys: &[&str],
        now_us: i64,
    ) -> StoreResult<Vec<(String, String)>>;

    /// Stores each content; a reuse moves `created_at` forward.
    async fn put_payloads(&self, tx: &mut Transaction<'_, Self::Db>, payloads: &[Payload<'_>]) -> StoreResult<()>;

    /// Inserts the intents where their keys are new; the keys inserted.
    async fn insert_intents(
        &self,
        tx: &mut Transaction<'_, Self::Db>,
        rows: &[(&Ingest, &NewIntent)],
    ) -> StoreResult<Vec<String>>;

    /// The decision, reason and state of these intents as they stand.
    async fn intents_status(&self, tx: &mut Transaction<'_, Self::Db>, keys: &[&str])
    -> StoreResult<Vec<IntentStatus>>;

    /// Queues the jobs.
    async fn queue_jobs(&self, tx: &mut Transaction<'_, Self::Db>, jobs: &[Job<'_>]) -> StoreResult<()>;

    /// Writes the request records where their identities are new; how many.
    async fn record_requests(&self, tx: &mut Transaction<'_, Self::Db>, answers: &[Answer<'_>]) -> StoreResult<u64>;
}

/// Writes, in the caller's transaction, every request of a batch that fits
/// which it can decide set-wise, and says what it left (see [`Pass`]).
pub(super) async fn write<S: Statements>(
    statements: &S,
    tx: &mut Transaction<'_, S::Db>,
    batch: &[Ingest],
) -> StoreResult<Pass> {
    let seen = seen(statements, tx, batch).await?;
    let mut out: Vec<Option<IngestOutcome>> = vec![None; batch.len()];
    let fresh: Vec<usize> = (0..batch.len()).filter(|i| !seen.as_ref().is_some_and(|s| s.contains(i))).collect();
    // A request in conflict is left to the savepoint path, which reads its
    // identity's record again: a reused identity with another body is a
    // mismatch before it is a conflict, and the claim may have waited for the
    // transaction that holds the event, whose record of that identity the
    // read above, made before the wait, could not see.
    let (conflicts, vanished) = claim_events(statements, tx, batch, &fresh).await?;
    let new: Vec<usize> = fresh.into_iter().filter(|i| !conflicts.contains(i) && !vanished.contains(i)).collect();
    if new.is_empty() {
        return Ok(Pass::Decided(out));
    }
    let requests: Vec<&Ingest> = new.iter().map(|&i| &batch[i]).collect();
    let payloads = payloads(&requests);
    if !payloads.is_empty() {
        statements.put_payloads(tx, &payloads).await?;
    }
    let created = insert_intents(statements, tx, &requests).await?;
    let existing = existing_status(statements, tx, &requests, &created).await?;
    queue_jobs(statements, tx, &requests, &created).await?;
    let answers: Vec<(usize, IngestResponse, bool)> = (new.iter())
        .map(|&i| {
            let (response, any_created) = response(&batch[i], &created, &existing);
            (i, response, any_created)
        })
        .collect();
    if !record_requests(statements, tx, batch, &answers).await? {
        return Ok(Pass::Raced);
    }
    for (i, response, any_created) in answers {
        out[i] = Some(IngestOutcome::Accepted { response, any_created });
    }
    Ok(Pass::Decided(out))
}

/// The requests (by index) whose identity has a record already; None where
/// the records were not read.
async fn seen<S: Statements>(
    statements: &S,
    tx: &mut Transaction<'_, S::Db>,
    batch: &[Ingest],
) -> StoreResult<Option<HashSet<usize>>> {
    let Some(found) = statements.seen(tx, batch).await? else { return Ok(None) };
    let found: HashSet<(&str, &str)> = found.iter().map(|(t, i)| (t.as_str(), i.as_str())).collect();
    Ok(Some(
        (0..batch.len()).filter(|&i| found.contains(&(batch[i].tenant.as_str(), batch[i].identity.as_str()))).collect(),
    ))
}

/// Records each event's content, or checks it against the content it was
/// accepted with: the requests (by index) whose content differs, and those
/// whose content record vanished between the insert and the read (retention),
/// which the savepoint path decides.
async fn claim_events<S: Statements>(
    statements: &S,
    tx: &mut Transaction<'_, S::Db>,
    batch: &[Ingest],
    fresh: &[usize],
) -> StoreResult<(HashSet<usize>, HashSet<usize>)> {
    let order = by_event_key(fresh.iter().map(|&i| &batch[i]).collect());
    let inserted: HashSet<String> = statements.insert_events(tx, &order).await?.into_iter().collect();
    let others: Vec<&str> = order.iter().map(|r| r.event_key.as_str()).filter(|k| !inserted.contains(*k)).collect();
    if others.is_empty() {
        return Ok(Default::default());
    }
    let now_us = order.iter().map(|r| r.now_us).max().unwrap_or_default();
    let accepted: HashMap<String, String> = statements.touch_events(tx, &others, now_us).await?.into_iter().collect();
    let (mut conflicts, mut vanished) = (HashSet::new(), HashSet::new());
    for &i in fresh.iter().filter(|&&i| !inserted.contains(&batch[i].event_key)) {
        let event = match accepted.get(&batch[i].event_key) {
            Some(content_digest) => Event::Accepted { content_digest },
            None => Event::Vanished,
        };
        // Absent as far as this pass knows: a conflict goes to the savepoint
        // path, which reads the record before answering it.
        match decide(Request::of(&batch[i]), Record::Absent, event) {
            Verdict::Conflict => _ = conflicts.insert(i),
            Verdict::Again => _ = vanished.insert(i),
            _ => {}
        }
    }
    Ok((conflicts, vanished))
}

/// Each event body stored as a payload row once, in digest order: a
/// request that planned one intent writes its body in that intent's row
/// instead ([`Ingest::inline_body`]), and a rendered message is always
/// written in its intent's row, `content`.
fn payloads<'a>(new: &[&'a Ingest]) -> Vec<Payload<'a>> {
    let mut payloads: BTreeMap<&str, (&str, i64)> = BTreeMap::new();
    for r in new.iter().filter(|r| r.body_payload()) {
        payloads.insert(&r.fingerprint, (&r.event_body, r.now_us));
    }
    payloads.into_iter().map(|(digest, (body, at))| Payload { digest, body, at }).collect()
}

/// Inserts every intent, in key order; returns the keys that were new.
async fn insert_intents<S: Statements>(
    statements: &S,
    tx: &mut Transaction<'_, S::Db>,
    new: &[&Ingest],
) -> StoreResult<HashSet<String>> {
    Ok(statements.insert_intents(tx, &intent_rows(new)).await?.into_iter().collect())
}

/// The events of these requests, in key order.
fn by_event_key(mut requests: Vec<&Ingest>) -> Vec<&Ingest> {
    requests.sort_by(|a, b| a.event_key.cmp(&b.event_key));
    requests
}

/// Every intent of these requests with its request, in key order.
fn intent_rows<'a>(new: &[&'a Ingest]) -> Vec<(&'a Ingest, &'a NewIntent)> {
    let mut rows: Vec<(&Ingest, &NewIntent)> =
        new.iter().flat_map(|r| r.intents.iter().map(move |i| (*r, i))).collect();
    rows.sort_by(|a, b| a.1.key.cmp(&b.1.key));
    rows
}

/// The intents that existed already (the same event under another request
/// identity), as they stand.
async fn existing_status<S: Statements>(
    statements: &S,
    tx: &mut Transaction<'_, S::Db>,
    new: &[&Ingest],
    created: &HashSet<String>,
) -> StoreResult<HashMap<String, IntentStatus>> {
    let keys: Vec<&str> =
        new.iter().flat_map(|r| &r.intents).map(|i| i.key.as_str()).filter(|k| !created.contains(*k)).collect();
    if keys.is_empty() {
        return Ok(HashMap::new());
    }
    let rows = statements.intents_status(tx, &keys).await?;
    Ok(rows.into_iter().map(|s| (s.key.clone(), s)).collect())
}

/// A job for each new intent that is to be sent.
async fn queue_jobs<S: Statements>(
    statements: &S,
    tx: &mut Transaction<'_, S::Db>,
    new: &[&Ingest],
    created: &HashSet<String>,
) -> StoreResult<()> {
    let jobs = jobs(new, created);
    if !jobs.is_empty() {
        statements.queue_jobs(tx, &jobs).await?;
    }
    Ok(())
}

/// A job for each created intent that is to be sent, in key order.
fn jobs<'a, S: Borrow<str> + Eq + Hash>(new: &[&'a Ingest], created: &HashSet<S>) -> Vec<Job<'a>> {
    let mut jobs: Vec<Job<'_>> = (new.iter())
        .flat_map(|r| r.intents.iter().map(move |i| (r, i)))
        .filter(|(_, i)| created.contains(i.key.as_str()))
        .filter_map(|(r, i)| {
            Some(Job { key: &i.key, tenant: &r.tenant, run_at: i.run_at?, traceparent: r.traceparent.as_deref() })
        })
        .collect();
    jobs.sort_unstable_by(|a, b| a.key.cmp(b.key));
    jobs
}

/// A request's answer: its intents in the order it planned them.
fn response<S: Borrow<str> + Eq + Hash>(
    request: &Ingest,
    created: &HashSet<S>,
    existing: &HashMap<String, IntentStatus>,
) -> (IngestResponse, bool) {
    let mut any_created = false;
    let intents = (request.intents.iter())
        .map(|i| {
            let new = created.contains(i.key.as_str());
            any_created |= new;
            let status = match existing.get(&i.key).filter(|_| !new) {
                Some(s) => (s.decision, s.reason.clone(), s.state),
                None => i.planned(),
            };
            i.summary(new, status)
        })
        .collect();
    (IngestResponse { event_key: request.event_key.clone(), replayed: false, intents }, any_created)
}

/// The request records with their responses, in identity order; false when
/// another transaction recorded one of the identities first.
async fn record_requests<S: Statements>(
    statements: &S,
    tx: &mut Transaction<'_, S::Db>,
    batch: &[Ingest],
    answers: &[(usize, IngestResponse, bool)],
) -> StoreResult<bool> {
    let rows = answer_rows(batch, answers)?;
    Ok(statements.record_requests(tx, &rows).await? == rows.len() as u64)
}

/// The request records of these answers, in identity order.
fn answer_rows<'a>(batch: &'a [Ingest], answers: &[(usize, IngestResponse, bool)]) -> StoreResult<Vec<Answer<'a>>> {
    let mut rows: Vec<Answer<'_>> = Vec::with_capacity(answers.len());
    for (i, response, any_created) in answers {
        let response = serde_json::to_string(response).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        rows.push(Answer { request: &batch[*i], response, status: if *any_created { 202 } else { 200 } });
    }
    rows.sort_by(|a, b| (&a.request.tenant, &a.request.identity).cmp(&(&b.request.tenant, &b.request.identity)));
    Ok(rows)
}

/// The batch's outcomes: the set-wise pass's where it decided, and in order
/// those of the savepoint path for the requests it left (`rest`).
pub fn merge(
    decided: Vec<Option<IngestOutcome>>,
    rest: Vec<StoreResult<IngestOutcome>>,
) -> Vec<StoreResult<IngestOutcome>> {
    let mut rest = rest.into_iter();
    decided
        .into_iter()
        .map(|o| {
            o.map(Ok)
                .or_else(|| rest.next())
                .unwrap_or_else(|| Err(StoreError::Corrupt("an ingest batch lost a request".into())))
        })
        .collect()
}

/// The requests the set-wise pass left undecided, in order.
pub fn undecided<'a>(decided: &[Option<IngestOutcome>], batch: &'a [Ingest]) -> Vec<&'a Ingest> {
    decided.iter().zip(batch).filter(|(o, _)| o.is_none()).map(|(_, r)| r).collect()
}
