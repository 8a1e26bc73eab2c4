//! The ingest transaction's statements on Postgres: a batch of requests, each
//! in its own savepoint, written row by row (the set-wise pass is
//! [`crate::store::batch`]); the event's content record, payloads, intents,
//! jobs and digest windows. Digest closes insert their intent through here too.

use super::Tx;
use super::ingest::request_seen;
use crate::intent::{Decision, State};
use crate::store::decide::{Event, Record, Request, Verdict, decide};
use crate::store::shared::Step;
use crate::store::{
    Ingest, IngestOutcome, IngestResponse, IntentSummary, NewDigest, NewIntent, RequestSeen, StoreError, StoreResult,
    SummaryStatus,
};
use sqlx::Connection as _;
use std::collections::HashMap;

/// A batch of requests in the caller's transaction, each in its own
/// savepoint: a request is written entirely or not at all, one that
/// fails (a conflict, a refused row, a deadlock) is rolled back alone,
/// and a later request sees an earlier one's rows, as two transactions
/// in a row would. A request whose statements failed is reported as
/// the error, for the caller to run again on its own.
///
/// `read_first` as for [`ingest_one`]: Postgres reads each record first
/// (what reaches this loop there is what its batch statements set
/// aside, replays among them); SQLite does not, since its pipeline read
/// the records just before and every statement is a hand-off to its one
/// writer's thread — a record there after all is found by the request's
/// own insert, and its rows go with its savepoint.
pub(super) async fn ingest_batch<'b>(
    tx: &mut Tx<'_>,
    batch: impl IntoIterator<Item = &'b Ingest>,
    read_first: bool,
) -> StoreResult<Vec<StoreResult<IngestOutcome>>> {
    let mut out = Vec::new();
    for ingest in batch {
        let mut one = tx.begin().await?;
        match ingest_one(&mut one, ingest, read_first).await {
            Ok(Step::Done(outcome @ IngestOutcome::Accepted { .. })) => {
                one.commit().await?;
                out.push(Ok(outcome));
            }
            Ok(Step::Done(outcome)) => {
                // A conflict or a replay wrote nothing that must stay.
                one.rollback().await?;
                out.push(Ok(outcome));
            }
            Ok(Step::Raced) => {
                one.rollback().await?;
                // Read on the batch's own transaction, outside any
                // savepoint: if the read fails, the transaction may be
                // aborted (Postgres), so the whole batch fails and its
                // requests run again alone. Answering the others would
                // answer rows a silent rollback had taken back.
                out.push(Ok(decided_elsewhere(tx, ingest).await?));
            }
            Err(e) => {
                one.rollback().await?;
                out.push(Err(e));
            }
        }
    }
    Ok(out)
}

/// A request whose identity another transaction recorded while this one
/// was writing (the request INSERT waited for it): now a
/// replay of it or a mismatch.
pub(super) async fn decided_elsewhere(tx: &mut Tx<'_>, ingest: &Ingest) -> StoreResult<IngestOutcome> {
    seen_before(tx, ingest).await?.ok_or_else(|| StoreError::Corrupt("request record without a response".into()))
}

/// One request: the request record is written last with its response,
/// where a record written first by another request makes this one
/// [`Step::Raced`]. With `read_first` the record is read before anything
/// is written, so a replay writes nothing; without it a new request
/// saves that statement, and a replay that got this far (the caller read
/// the record just before) is written and then rolled back.
pub(super) async fn ingest_one(tx: &mut Tx<'_>, ingest: &Ingest, read_first: bool) -> StoreResult<Step> {
    if read_first && let Some(seen) = seen_before(tx, ingest).await? {
        return Ok(Step::Done(seen));
    }
    let accepted = event_claim(tx, ingest).await?;
    let event = match &accepted {
        None => Event::New,
        Some(content_digest) => Event::Accepted { content_digest },
    };
    if decide(Request::of(ingest), Record::Absent, event) == Verdict::Conflict {
        // The identity's record decides before the event's: a reused
        // identity with another body is a mismatch before a conflict.
        // Read again even when it was read first: the claim may have
        // waited for the transaction that holds the event, and that
        // one's record of this identity is visible only now.
        if let Some(seen) = seen_before(tx, ingest).await? {
            return Ok(Step::Done(seen));
        }
        return Ok(Step::Done(IngestOutcome::Conflict));
    }

    // The event's body first, as the set-wise pass writes payloads before
    // intents, unless it goes in the row of the request's one intent
    // (`Ingest::inline_body`). A rendered message goes in its intent's row.
    if ingest.body_payload() {
        payload_put(tx, &ingest.fingerprint, &ingest.event_body, ingest.now_us).await?;
    }
    let mut ordered: Vec<&NewIntent> = ingest.intents.iter().collect();
    // Digest members go in the order of their windows' keys, since each
    // locks its window's row: every transaction then takes every lock
    // in one global order.
    ordered.sort_by(|a, b| {
        let window = |i: &NewIntent| i.digest.as_ref().map(|d| d.key.clone()).unwrap_or_default();
        (window(a), &a.key).cmp(&(window(b), &b.key))
    });
    let mut summaries: HashMap<&str, IntentSummary> = HashMap::new();
    let mut any_created = false;
    for it in ordered {
        let summary = intent_insert(tx, ingest, it).await?;
        any_created |= summary.created;
        summaries.insert(it.key.as_str(), summary);
    }
    let intents = ingest.intents.iter().filter_map(|it| summaries.remove(it.key.as_str())).collect();
    let response = IngestResponse { event_key: ingest.event_key.clone(), replayed: false, intents };
    let text = serde_json::to_string(&response).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    let recorded = sqlx::query(
        "INSERT INTO requests (tenant, identity, fingerprint, created_at, status, response)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (tenant, identity) DO NOTHING",
    )
    .bind(&ingest.tenant)
    .bind(&ingest.identity)
    .bind(&ingest.fingerprint)
    .bind(ingest.now_us)
    .bind(if any_created { 202_i64 } else { 200_i64 })
    .bind(text)
    .execute(&mut **tx)
    .await?
    .rows_affected();
    if recorded == 0 {
        return Ok(Step::Raced);
    }
    Ok(Step::Done(IngestOutcome::Accepted { response, any_created }))
}

/// The answer already recorded for this request's identity, if any.
async fn seen_before(tx: &mut Tx<'_>, ingest: &Ingest) -> StoreResult<Option<IngestOutcome>> {
    Ok(match request_seen(tx, &ingest.tenant, &ingest.identity, &ingest.fingerprint).await? {
        Some(RequestSeen::Replay(response)) => Some(IngestOutcome::Replayed { response }),
        Some(RequestSeen::Mismatch) => Some(IngestOutcome::Mismatch),
        None => None,
    })
}

/// Records the content this event key is accepted with, or reads the
/// content it was accepted with before: None when this request's
/// content became the event's. A concurrent insert of the
/// same key waits here for the other transaction, then sees its row.
async fn event_claim(tx: &mut Tx<'_>, ingest: &Ingest) -> StoreResult<Option<String>> {
    // Twice at most: retention may remove a forgotten event's record
    // between the insert that found it and the read.
    for _ in 0..2 {
        let inserted = sqlx::query(
            "INSERT INTO events (event_key, tenant, event_type, entity_type, entity_id, occurred_at, content_digest,
                 created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
             ON CONFLICT (event_key) DO NOTHING",
        )
        .bind(&ingest.event_key)
        .bind(&ingest.tenant)
        .bind(&ingest.event_type)
        .bind(&ingest.entity_type)
        .bind(&ingest.entity_id)
        .bind(&ingest.occurred_at)
        .bind(&ingest.content_digest)
        .bind(ingest.now_us)
        .execute(&mut **tx)
        .await?
        .rows_affected();
        if inserted == 1 {
            return Ok(None);
        }
        // Read by touching: the record counts as used now, so retention
        // (which goes by age, and re-checks it on a row that changed
        // under it) cannot prune it before these intents commit.
        let accepted: Option<String> = sqlx::query_scalar(
            "UPDATE events SET created_at = CASE WHEN created_at < $2 THEN $2 ELSE created_at END
             WHERE event_key = $1 RETURNING content_digest",
        )
        .bind(&ingest.event_key)
        .bind(ingest.now_us)
        .fetch_optional(&mut **tx)
        .await?;
        if accepted.is_some() {
            return Ok(accepted);
        }
    }
    Err(StoreError::Corrupt(format!("the content record of {} vanished twice", ingest.event_key)))
}

/// Stores content once by digest. A reuse moves `created_at` forward, so
/// retention measures a payload's age from its latest use.
async fn payload_put(tx: &mut Tx<'_>, digest: &str, body: &str, now_us: i64) -> StoreResult<()> {
    sqlx::query(
        "INSERT INTO payloads (digest, body, created_at) VALUES ($1, $2, $3)
         ON CONFLICT (digest) DO UPDATE SET created_at = excluded.created_at
         WHERE payloads.created_at < excluded.created_at",
    )
    .bind(digest)
    .bind(body)
    .bind(now_us)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Inserts one intent, its rendered message (and, for a request that
/// planned only it, the event body) in its row, queues its job
/// or joins its digest window when it is new, and reports it.
pub(super) async fn intent_insert(tx: &mut Tx<'_>, ingest: &Ingest, it: &NewIntent) -> StoreResult<IntentSummary> {
    let created = sqlx::query(
        "INSERT INTO intents (key, tenant, event_type, entity_type, entity_id, entity_version, occurred_at,
             channel, recipient_id, destination, locale, template_id, template_revision, event_digest,
             payload_digest, content, event_body, decision, reason, detail, state, attempts, created_at,
             updated_at, preferences_version, link_key, mode, traceparent)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, 0,
             $22, $22, $23, $24, $25, $26)
         ON CONFLICT (key) DO NOTHING",
    )
    .bind(&it.key)
    .bind(&ingest.tenant)
    .bind(&ingest.event_type)
    .bind(&ingest.entity_type)
    .bind(&ingest.entity_id)
    .bind(ingest.entity_version)
    .bind(&ingest.occurred_at)
    .bind(it.channel)
    .bind(&it.recipient_id)
    .bind(&it.destination)
    .bind(&it.locale)
    .bind(&it.template_id)
    .bind(&it.template_revision)
    .bind(&ingest.fingerprint)
    .bind(it.payload.as_ref().map(|(d, _)| d.as_str()))
    .bind(it.payload.as_ref().map(|(_, c)| c.as_str()))
    .bind(ingest.inline_body())
    .bind(it.decision)
    .bind(it.reason)
    .bind(&it.detail)
    .bind(it.state)
    .bind(ingest.now_us)
    .bind(it.preferences_version)
    .bind(it.digest.as_ref().map(|d| d.key.as_str()))
    .bind(it.mode)
    .bind(ingest.traceparent.as_deref())
    .execute(&mut **tx)
    .await?
    .rows_affected()
        == 1;
    if created {
        if it.state == State::Dead {
            super::dead_at_write(tx, &it.key).await?;
        }
        if crate::lifecycle::publishes(it.state) {
            super::publications_write(tx, std::slice::from_ref(&it.key), None).await?;
        }
        if let Some(d) = &it.digest
            && !digest_join(tx, ingest, d).await?
        {
            // The window closed between planning and this transaction:
            // the member goes out on its own rather than being lost.
            super::intents_apply(tx, &[crate::lifecycle::digest::too_late(&it.key, ingest.now_us)]).await?;
            sqlx::query(crate::store::shared::JOB_INSERT)
                .bind(&it.key)
                .bind(&ingest.tenant)
                .bind(ingest.now_us)
                .bind(ingest.traceparent.as_deref())
                .execute(&mut **tx)
                .await?;
            return Ok(it.summary(created, (Decision::Send, None, State::Queued)));
        }
        if let Some(run_at) = it.run_at {
            sqlx::query(crate::store::shared::JOB_INSERT)
                .bind(&it.key)
                .bind(&ingest.tenant)
                .bind(run_at)
                .bind(ingest.traceparent.as_deref())
                .execute(&mut **tx)
                .await?;
        }
        return Ok(it.summary(created, it.planned()));
    }
    // The same event arrived under another request identity: report the
    // intent as it stands.
    let now: SummaryStatus = sqlx::query_as("SELECT decision, reason, state FROM intents WHERE key = $1")
        .bind(&it.key)
        .fetch_one(&mut **tx)
        .await?;
    Ok(it.summary(false, now))
}

/// Opens the digest window if this member is its first, and says whether
/// it is still open (the row lock orders this with a closing worker).
async fn digest_join(tx: &mut Tx<'_>, ingest: &Ingest, d: &NewDigest) -> StoreResult<bool> {
    sqlx::query(
        "INSERT INTO digests (key, tenant, event_type, channel, recipient_id, group_key, destination, locale,
             window_start, closes_at, state, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 'open', $11)
         ON CONFLICT (key) DO NOTHING",
    )
    .bind(&d.key)
    .bind(&ingest.tenant)
    .bind(&d.event_type)
    .bind(d.channel)
    .bind(&d.recipient_id)
    .bind(&d.group_key)
    .bind(&d.destination)
    .bind(&d.locale)
    .bind(d.window_start)
    .bind(d.closes_at)
    .bind(ingest.now_us)
    .execute(&mut **tx)
    .await?;
    let state: String = sqlx::query_scalar("SELECT state FROM digests WHERE key = $1 FOR UPDATE")
        .bind(&d.key)
        .fetch_one(&mut **tx)
        .await?;
    Ok(state == "open")
}
