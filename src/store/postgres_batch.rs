//! Postgres: a batch of new requests written set-wise, each statement once per
//! batch with array parameters (`UNNEST`), instead of once per request.
//!
//! It takes the common case only — requests that are new, each with its own
//! identity and event and no digest member — and leaves the rest to the
//! savepoint path ([`super::queries::ingest`]), which decides any request as a
//! transaction of its own would. Every statement takes its rows in key order,
//! so two batches lock shared rows in one order.

use super::*;
use sqlx::{Postgres, Transaction};
use std::collections::{BTreeMap, HashMap, HashSet};

/// Whether the batch can go set-wise: each request with its own identity,
/// event and intent keys, and no digest member (a window row is locked and may
/// turn a member into a send of its own). A batch of one goes set-wise too:
/// that is six statements where its savepoint is nine.
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
    /// Per request, in order: its outcome, or None for a request seen before
    /// (a replay or a mismatch), left to the savepoint path; and whether the
    /// pass queued jobs, and so already notified listeners (at commit).
    Decided(Vec<Option<IngestOutcome>>, bool),
    /// Another transaction recorded one of these identities meanwhile: the
    /// transaction must be rolled back and the batch decided request by request.
    Raced,
}

/// Where the listeners of new jobs are told: the channel, and the payload that
/// names the store that sent it.
pub struct Wake<'a> {
    pub channel: &'a str,
    pub token: &'a str,
}

pub async fn write(tx: &mut Transaction<'_, Postgres>, batch: &[Ingest], wake: Wake<'_>) -> StoreResult<Pass> {
    let seen = seen(tx, batch).await?;
    let mut out: Vec<Option<IngestOutcome>> = vec![None; batch.len()];
    let fresh: Vec<usize> = (0..batch.len()).filter(|i| !seen.contains(i)).collect();
    let (conflicts, vanished) = claim_events(tx, batch, &fresh).await?;
    for &i in &conflicts {
        out[i] = Some(IngestOutcome::Conflict);
    }
    let new: Vec<usize> = fresh.into_iter().filter(|i| !conflicts.contains(i) && !vanished.contains(i)).collect();
    if new.is_empty() {
        return Ok(Pass::Decided(out, false));
    }
    let requests: Vec<&Ingest> = new.iter().map(|&i| &batch[i]).collect();
    put_payloads(tx, &requests).await?;
    let created = insert_intents(tx, &requests).await?;
    let existing = existing_status(tx, &requests, &created).await?;
    let notified = queue_jobs(tx, &requests, &created, wake).await?;
    let answers: Vec<(usize, IngestResponse, bool)> = (new.iter())
        .map(|&i| {
            let (response, any_created) = response(&batch[i], &created, &existing);
            (i, response, any_created)
        })
        .collect();
    if !record_requests(tx, batch, &answers).await? {
        return Ok(Pass::Raced);
    }
    for (i, response, any_created) in answers {
        out[i] = Some(IngestOutcome::Accepted { response, any_created });
    }
    Ok(Pass::Decided(out, notified))
}

/// The requests whose identity has a record already.
async fn seen(tx: &mut Transaction<'_, Postgres>, batch: &[Ingest]) -> StoreResult<HashSet<usize>> {
    let found: Vec<(String, String)> = sqlx::query_as(
        "SELECT r.tenant, r.identity FROM requests r
         JOIN UNNEST($1::text[], $2::text[]) AS u(t, i) ON r.tenant = u.t AND r.identity = u.i",
    )
    .bind(batch.iter().map(|r| r.tenant.as_str()).collect::<Vec<_>>())
    .bind(batch.iter().map(|r| r.identity.as_str()).collect::<Vec<_>>())
    .fetch_all(&mut **tx)
    .await?;
    let found: HashSet<(&str, &str)> = found.iter().map(|(t, i)| (t.as_str(), i.as_str())).collect();
    Ok((0..batch.len()).filter(|&i| found.contains(&(batch[i].tenant.as_str(), batch[i].identity.as_str()))).collect())
}

/// Records each event's content, or checks it against the content it was
/// accepted with: the requests (by index) whose content differs, and those
/// whose content record vanished between the insert and the read (retention),
/// which the savepoint path decides.
async fn claim_events(
    tx: &mut Transaction<'_, Postgres>,
    batch: &[Ingest],
    fresh: &[usize],
) -> StoreResult<(HashSet<usize>, HashSet<usize>)> {
    let mut order: Vec<&Ingest> = fresh.iter().map(|&i| &batch[i]).collect();
    order.sort_by(|a, b| a.event_key.cmp(&b.event_key));
    let col = |f: fn(&Ingest) -> &str| order.iter().map(|r| f(r)).collect::<Vec<&str>>();
    let inserted: Vec<String> = sqlx::query_scalar(
        "INSERT INTO events (event_key, tenant, event_type, entity_type, entity_id, occurred_at, content_digest, created_at)
         SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::bigint[])
         ON CONFLICT (event_key) DO NOTHING
         RETURNING event_key",
    )
    .bind(col(|r| &r.event_key))
    .bind(col(|r| &r.tenant))
    .bind(col(|r| &r.event_type))
    .bind(col(|r| &r.entity_type))
    .bind(col(|r| &r.entity_id))
    .bind(col(|r| &r.occurred_at))
    .bind(col(|r| &r.content_digest))
    .bind(order.iter().map(|r| r.now_us).collect::<Vec<_>>())
    .fetch_all(&mut **tx)
    .await?;
    let inserted: HashSet<String> = inserted.into_iter().collect();
    let others: Vec<&str> = order.iter().map(|r| r.event_key.as_str()).filter(|k| !inserted.contains(*k)).collect();
    if others.is_empty() {
        return Ok(Default::default());
    }
    // Read by touching (see `event_claim`): retention cannot prune a record
    // this batch is about to hang intents on.
    let now_us = order.iter().map(|r| r.now_us).max().unwrap_or_default();
    let accepted: HashMap<String, String> = sqlx::query_as(
        "UPDATE events SET created_at = GREATEST(created_at, $2) WHERE event_key = ANY($1)
         RETURNING event_key, content_digest",
    )
    .bind(&others)
    .bind(now_us)
    .fetch_all(&mut **tx)
    .await?
    .into_iter()
    .collect();
    let (mut conflicts, mut vanished) = (HashSet::new(), HashSet::new());
    for &i in fresh.iter().filter(|&&i| !inserted.contains(&batch[i].event_key)) {
        match accepted.get(&batch[i].event_key) {
            Some(digest) if *digest == batch[i].content_digest => {}
            Some(_) => _ = conflicts.insert(i),
            None => _ = vanished.insert(i),
        }
    }
    Ok((conflicts, vanished))
}

/// Each content once, in digest order; a reuse moves `created_at` forward.
async fn put_payloads(tx: &mut Transaction<'_, Postgres>, new: &[&Ingest]) -> StoreResult<()> {
    let mut payloads: BTreeMap<&str, (&str, i64)> = BTreeMap::new();
    for r in new {
        payloads.insert(&r.fingerprint, (&r.event_body, r.now_us));
        for (digest, body) in r.intents.iter().filter_map(|i| i.payload.as_ref()) {
            payloads.insert(digest, (body, r.now_us));
        }
    }
    sqlx::query(
        "INSERT INTO payloads (digest, body, created_at)
         SELECT * FROM UNNEST($1::text[], $2::text[], $3::bigint[])
         ON CONFLICT (digest) DO UPDATE SET created_at = excluded.created_at
         WHERE payloads.created_at < excluded.created_at",
    )
    .bind(payloads.keys().copied().collect::<Vec<_>>())
    .bind(payloads.values().map(|(b, _)| *b).collect::<Vec<_>>())
    .bind(payloads.values().map(|(_, t)| *t).collect::<Vec<_>>())
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Inserts every intent, in key order; returns the keys that were new.
async fn insert_intents(tx: &mut Transaction<'_, Postgres>, new: &[&Ingest]) -> StoreResult<HashSet<String>> {
    let mut rows: Vec<(&Ingest, &NewIntent)> =
        new.iter().flat_map(|r| r.intents.iter().map(move |i| (*r, i))).collect();
    rows.sort_by(|a, b| a.1.key.cmp(&b.1.key));
    let text =
        |f: for<'a> fn(&'a Ingest, &'a NewIntent) -> &'a str| rows.iter().map(|(r, i)| f(r, i)).collect::<Vec<&str>>();
    let opt = |f: for<'a> fn(&'a Ingest, &'a NewIntent) -> Option<&'a str>| {
        rows.iter().map(|(r, i)| f(r, i)).collect::<Vec<Option<&str>>>()
    };
    let created: Vec<String> = sqlx::query_scalar(
        "INSERT INTO intents (key, tenant, event_type, entity_type, entity_id, entity_version, occurred_at,
             channel, recipient_id, destination, locale, template_id, template_revision, event_digest,
             payload_digest, decision, reason, detail, state, attempts, created_at, updated_at,
             preferences_version, link_key, mode, traceparent)
         SELECT k, t, et, ent, eid, ev, oa, ch, rid, dst, loc, tid, trev, edg, pdg, dec, rsn, det, st, 0, ca, ca, pv, NULL, md, tp
         FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::text[], $8::text[],
                     $9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::text[], $15::text[],
                     $16::text[], $17::text[], $18::text[], $19::text[], $20::bigint[], $21::bigint[], $22::text[],
                     $23::text[])
              AS u(k, t, et, ent, eid, ev, oa, ch, rid, dst, loc, tid, trev, edg, pdg, dec, rsn, det, st, ca, pv, md, tp)
         ON CONFLICT (key) DO NOTHING
         RETURNING key",
    )
    .bind(text(|_, i| &i.key))
    .bind(text(|r, _| &r.tenant))
    .bind(text(|r, _| &r.event_type))
    .bind(text(|r, _| &r.entity_type))
    .bind(text(|r, _| &r.entity_id))
    .bind(rows.iter().map(|(r, _)| r.entity_version).collect::<Vec<_>>())
    .bind(text(|r, _| &r.occurred_at))
    .bind(text(|_, i| i.channel.as_str()))
    .bind(text(|_, i| &i.recipient_id))
    .bind(opt(|_, i| i.destination.as_deref()))
    .bind(opt(|_, i| i.locale.as_deref()))
    .bind(text(|_, i| &i.template_id))
    .bind(opt(|_, i| i.template_revision.as_deref()))
    .bind(text(|r, _| &r.fingerprint))
    .bind(opt(|_, i| i.payload.as_ref().map(|(d, _)| d.as_str())))
    .bind(text(|_, i| i.decision.as_str()))
    .bind(opt(|_, i| i.reason.map(crate::intent::Reason::as_str)))
    .bind(opt(|_, i| i.detail.as_deref()))
    .bind(text(|_, i| i.state.as_str()))
    .bind(rows.iter().map(|(r, _)| r.now_us).collect::<Vec<_>>())
    .bind(rows.iter().map(|(_, i)| i.preferences_version).collect::<Vec<_>>())
    .bind(text(|_, i| i.mode.as_str()))
    .bind(opt(|r, _| r.traceparent.as_deref()))
    .fetch_all(&mut **tx)
    .await?;
    Ok(created.into_iter().collect())
}

/// The intents that existed already (the same event under another request
/// identity), as they stand.
async fn existing_status(
    tx: &mut Transaction<'_, Postgres>,
    new: &[&Ingest],
    created: &HashSet<String>,
) -> StoreResult<HashMap<String, IntentStatus>> {
    let keys: Vec<&str> =
        new.iter().flat_map(|r| &r.intents).map(|i| i.key.as_str()).filter(|k| !created.contains(*k)).collect();
    if keys.is_empty() {
        return Ok(HashMap::new());
    }
    let rows: Vec<IntentStatus> =
        sqlx::query_as("SELECT key, decision, reason, state, mode FROM intents WHERE key = ANY($1)")
            .bind(&keys)
            .fetch_all(&mut **tx)
            .await?;
    Ok(rows.into_iter().map(|s| (s.key.clone(), s)).collect())
}

/// A job for each new intent that is to be sent, with its request's trace,
/// and in the same statement the notification of listeners (delivered when
/// the transaction commits); true when there were jobs to queue.
async fn queue_jobs(
    tx: &mut Transaction<'_, Postgres>,
    new: &[&Ingest],
    created: &HashSet<String>,
    wake: Wake<'_>,
) -> StoreResult<bool> {
    let mut jobs: Vec<(&str, &str, i64, Option<&str>)> = (new.iter())
        .flat_map(|r| r.intents.iter().map(move |i| (r, i)))
        .filter(|(_, i)| created.contains(&i.key))
        .filter_map(|(r, i)| Some((i.key.as_str(), r.tenant.as_str(), i.run_at?, r.traceparent.as_deref())))
        .collect();
    if jobs.is_empty() {
        return Ok(false);
    }
    jobs.sort_unstable();
    sqlx::query(
        "WITH queued AS (
             INSERT INTO jobs (intent_key, tenant, run_at, traceparent)
             SELECT * FROM UNNEST($1::text[], $2::text[], $3::bigint[], $4::text[]))
         SELECT pg_notify($5, $6)",
    )
    .bind(jobs.iter().map(|j| j.0).collect::<Vec<_>>())
    .bind(jobs.iter().map(|j| j.1).collect::<Vec<_>>())
    .bind(jobs.iter().map(|j| j.2).collect::<Vec<_>>())
    .bind(jobs.iter().map(|j| j.3).collect::<Vec<_>>())
    .bind(wake.channel)
    .bind(wake.token)
    .execute(&mut **tx)
    .await?;
    Ok(true)
}

/// A request's answer: its intents in the order it planned them.
fn response(
    request: &Ingest,
    created: &HashSet<String>,
    existing: &HashMap<String, IntentStatus>,
) -> (IngestResponse, bool) {
    let mut any_created = false;
    let intents = (request.intents.iter())
        .map(|i| {
            let new = created.contains(&i.key);
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
async fn record_requests(
    tx: &mut Transaction<'_, Postgres>,
    batch: &[Ingest],
    answers: &[(usize, IngestResponse, bool)],
) -> StoreResult<bool> {
    let mut rows: Vec<(&Ingest, String, i64)> = Vec::with_capacity(answers.len());
    for (i, response, any_created) in answers {
        let text = serde_json::to_string(response).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        rows.push((&batch[*i], text, if *any_created { 202 } else { 200 }));
    }
    rows.sort_by(|a, b| (&a.0.tenant, &a.0.identity).cmp(&(&b.0.tenant, &b.0.identity)));
    let recorded = sqlx::query(
        "INSERT INTO requests (tenant, identity, fingerprint, created_at, status, response)
         SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::text[])
         ON CONFLICT (tenant, identity) DO NOTHING",
    )
    .bind(rows.iter().map(|r| r.0.tenant.as_str()).collect::<Vec<_>>())
    .bind(rows.iter().map(|r| r.0.identity.as_str()).collect::<Vec<_>>())
    .bind(rows.iter().map(|r| r.0.fingerprint.as_str()).collect::<Vec<_>>())
    .bind(rows.iter().map(|r| r.0.now_us).collect::<Vec<_>>())
    .bind(rows.iter().map(|r| r.2).collect::<Vec<_>>())
    .bind(rows.iter().map(|r| r.1.as_str()).collect::<Vec<_>>())
    .execute(&mut **tx)
    .await?
    .rows_affected();
    Ok(recorded == rows.len() as u64)
}
