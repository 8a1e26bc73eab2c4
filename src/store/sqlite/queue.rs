//! The queue on SQLite: the `QueueStore` impl (claim, record, wait for work,
//! digest windows), what a claim writes once the jobs are leased, and the
//! queue's depth. What happens to each job is decided in
//! [`crate::lifecycle::claim`]; the SQL here fetches the facts and writes the
//! answers, a statement per kind of answer for the whole batch, never one per
//! job.

use super::commits::End;
use super::direct;
use super::{SqliteStore, digests, keys_arg};
use crate::intent::{OutcomeClass, Reason, State};
use crate::lifecycle::Change;
use crate::store::shared::report;
use crate::store::{
    Claim, ClaimCandidate, ClaimedJob, DigestClose, DigestCloseOutcome, DigestMember, DigestRow, FinishReport,
    FinishedAttempt, QueueStats, QueueStore, StoreResult,
};
use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension};
use sqlx::SqlitePool;
use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;
use std::time::Duration;

/// After the backend has leased jobs and read their intents (the
/// candidates): record the lapsed attempts among them as `unknown`, end
/// the jobs the rules end, start the next attempt of the rest and
/// return them with their content (state `sending`), a statement per
/// kind of answer. Returned too, already ended: shadowed jobs (no
/// attempt) and jobs a rescue ended, so that the worker counts and
/// logs them.
fn claim_candidates(db: &Connection, candidates: Vec<ClaimCandidate>, claim: &Claim) -> StoreResult<Vec<ClaimedJob>> {
    use crate::lifecycle::claim as rules;
    let now_us = claim.now_us;
    // A lapsed attempt may have reached the person: after an earlier
    // `unknown` on a channel that cannot recognise the repeat, it is
    // a possible duplicate. The facts are read before it is recorded
    // `unknown` itself; the rule is in `lifecycle::claim`.
    let lapsed: Vec<&ClaimCandidate> = candidates.iter().filter(|c| c.lease_lapsed).collect();
    let exposed: Vec<String> = lapsed
        .iter()
        .filter(|c| claim.repeats_unrecognised.contains(&c.intent.channel))
        .map(|c| c.intent.key.clone())
        .collect();
    let first_unknown: HashMap<String, i64> = if exposed.is_empty() {
        HashMap::new()
    } else {
        direct::query(
            db,
            "SELECT i.key, MIN(a.n) FROM attempts a JOIN intents i ON i.id = a.intent_id
             WHERE a.outcome = $2 AND i.key IN (SELECT value FROM json_each($1)) GROUP BY i.key",
            &[&keys_arg(&exposed), &OutcomeClass::Unknown.as_str()],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?
        .into_iter()
        .collect()
    };
    let duplicates: HashSet<String> = lapsed
        .iter()
        .filter(|c| {
            rules::rescued_possible_duplicate(
                claim.repeats_unrecognised.contains(&c.intent.channel),
                first_unknown.get(&c.intent.key).copied(),
                c.intent.attempts,
            )
        })
        .map(|c| c.intent.key.clone())
        .collect();
    let (flagged, plain): (Vec<String>, Vec<String>) =
        lapsed.iter().map(|c| c.intent.key.clone()).partition(|k| duplicates.contains(k));
    for (keys, possible_duplicate) in [(flagged, true), (plain, false)] {
        if keys.is_empty() {
            continue;
        }
        direct::execute(
            db,
            "UPDATE attempts SET finished_at = $2, outcome = $3, error_class = $4, error = $5,
                 possible_duplicate = $6
             WHERE finished_at IS NULL
               AND intent_id IN (SELECT id FROM intents WHERE key IN (SELECT value FROM json_each($1)))",
            &[
                &keys_arg(&keys),
                &now_us,
                &OutcomeClass::Unknown.as_str(),
                &Reason::LeaseExpired.as_str(),
                &"the worker's lease expired before it reported an outcome",
                &possible_duplicate,
            ],
        )?;
    }

    // A lapsed try is retried only inside its chain's dedupe window:
    // when each chain started (its first try since the last replay).
    let lapsed_keys: Vec<String> = if claim.dedupe_window_us.is_some() {
        lapsed.iter().map(|c| c.intent.key.clone()).collect()
    } else {
        Vec::new()
    };
    let chain_started: HashMap<String, i64> = if lapsed_keys.is_empty() {
        HashMap::new()
    } else {
        direct::query(
            db,
            "SELECT i.key, a.started_at FROM attempts a JOIN intents i ON i.id = a.intent_id
             WHERE a.n = i.retry_base + 1 AND i.key IN (SELECT value FROM json_each($1))",
            &[&keys_arg(&lapsed_keys)],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?
        .into_iter()
        .collect()
    };

    let terms = claim.terms();
    let versioned: Vec<String> = candidates
        .iter()
        .filter(|c| rules::may_be_superseded(&c.job(), &terms))
        .map(|c| c.intent.key.clone())
        .collect();
    let newer = newer_versions(db, &versioned)?;

    let (mut ended, mut started, mut reported) = (Vec::new(), Vec::new(), Vec::new());
    for c in candidates {
        let on_claim = rules::on_claim(&c.job(), &newer, chain_started.get(&c.intent.key).copied(), &terms);
        let Some(end) = on_claim.change(&c.intent.key, now_us) else {
            started.push(c);
            continue;
        };
        // Reported back, ended: a shadowed intent (for the worker to
        // count) and one whose lapsed attempt was rescued (to log it).
        if end.to == State::Shadowed || c.lease_lapsed {
            let mut intent = c.intent.clone();
            intent.state = end.to;
            intent.reason = end.reason.flatten().map(|r| r.as_str().to_string()).or(intent.reason);
            intent.updated_at = now_us;
            let rescued = c.lease_lapsed.then_some(c.intent.attempts);
            reported.push(ClaimedJob {
                intent,
                content: None,
                rescued,
                rescued_duplicate: duplicates.contains(&c.intent.key),
                traceparent: c.traceparent.clone(),
                links: c.links.clone(),
            });
        }
        ended.push(end);
    }
    intents_end(db, &ended)?;
    if started.is_empty() {
        return Ok(reported);
    }
    let keys: Vec<String> = started.iter().map(|c| c.intent.key.clone()).collect();
    start_attempts(db, &keys, now_us)?;
    reported.extend(started.into_iter().map(|c| {
        let rescued = c.lease_lapsed.then_some(c.intent.attempts);
        let rescued_duplicate = duplicates.contains(&c.intent.key);
        let mut intent = c.intent;
        intent.attempts += 1;
        intent.state = State::Sending;
        intent.updated_at = now_us;
        ClaimedJob {
            intent,
            content: c.content,
            rescued,
            rescued_duplicate,
            traceparent: c.traceparent,
            links: c.links,
        }
    }));
    Ok(reported)
}

/// The next attempt of each of these intents: its count goes up, it is
/// `sending`, and its attempt row is written.
fn start_attempts(db: &Connection, keys: &[String], now_us: i64) -> StoreResult<()> {
    let keys = keys_arg(keys);
    direct::execute(
        db,
        "UPDATE intents SET attempts = attempts + 1, state = $3, updated_at = $2
         WHERE key IN (SELECT value FROM json_each($1))",
        &[&keys, &now_us, &State::Sending.as_str()],
    )?;
    direct::execute(
        db,
        "INSERT INTO attempts (intent_id, n, started_at)
         SELECT id, attempts, $2 FROM intents WHERE key IN (SELECT value FROM json_each($1))",
        &[&keys, &now_us],
    )?;
    Ok(())
}

/// Every newer version of these intents' entities for the same
/// recipient and channel, whatever its state: the rules choose.
fn newer_versions(db: &Connection, keys: &[String]) -> StoreResult<Vec<crate::lifecycle::claim::NewerVersion>> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    direct::query(
        db,
        "SELECT i.key AS of, n.key, n.entity_version, n.state FROM intents i JOIN intents n
             ON n.tenant = i.tenant AND n.entity_type = i.entity_type AND n.entity_id = i.entity_id
            AND n.recipient_id = i.recipient_id AND n.channel = i.channel AND n.entity_version > i.entity_version
         WHERE i.key IN (SELECT value FROM json_each($1))",
        &[&keys_arg(keys)],
        |r| {
            Ok(crate::lifecycle::claim::NewerVersion {
                of: r.get(0)?,
                key: r.get(1)?,
                entity_version: r.get(2)?,
                state: r.get(3)?,
            })
        },
    )
}

/// Writes how these intents ended (with their publications) and
/// takes their jobs off the queue, each statement for the whole batch.
fn intents_end(db: &Connection, ended: &[Change]) -> StoreResult<()> {
    if ended.is_empty() {
        return Ok(());
    }
    direct::intents_apply(db, ended)?;
    let keys: Vec<String> = ended.iter().map(|e| e.key.clone()).collect();
    direct::execute(
        db,
        "DELETE FROM jobs WHERE intent_id IN (SELECT id FROM intents WHERE key IN (SELECT value FROM json_each($1)))",
        &[&keys_arg(&keys)],
    )?;
    Ok(())
}

/// The queue: the whole deployment's (`/metrics`), or one tenant's.
pub(super) async fn queue_stats(pool: &SqlitePool, tenant: Option<&str>, now_us: i64) -> StoreResult<QueueStats> {
    let Some(tenant) = tenant else {
        let (due, oldest): (i64, Option<i64>) =
            sqlx::query_as("SELECT COUNT(*), MIN(run_at) FROM jobs WHERE run_at <= $1")
                .bind(now_us)
                .fetch_one(pool)
                .await?;
        let total: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM jobs").fetch_one(pool).await?;
        return Ok(QueueStats { due, total, oldest_due_us: oldest });
    };
    // Read from `jobs_by_tenant` (tenant, run_at) alone.
    let (due, total, oldest): (i64, i64, Option<i64>) = sqlx::query_as(
        "SELECT CAST(COALESCE(SUM(CASE WHEN run_at <= $2 THEN 1 ELSE 0 END), 0) AS BIGINT), COUNT(*),
                MIN(CASE WHEN run_at <= $2 THEN run_at END)
         FROM jobs WHERE tenant = $1",
    )
    .bind(tenant)
    .bind(now_us)
    .fetch_one(pool)
    .await?;
    Ok(QueueStats { due, total, oldest_due_us: oldest })
}

#[async_trait]
impl QueueStore for SqliteStore {
    /// On the writer's thread ([`super::writer`]).
    async fn jobs_claim(&self, claim: Claim) -> StoreResult<Vec<ClaimedJob>> {
        self.commits.run(move |db| claim_tx(db, &claim)).await
    }

    /// On the writer's thread ([`super::writer`]).
    async fn attempts_finish(&self, finished: &[FinishedAttempt]) -> StoreResult<FinishReport> {
        if finished.is_empty() {
            return Ok(FinishReport::default());
        }
        let finished = finished.to_vec();
        self.commits.run(move |db| finish_tx(db, &finished)).await
    }

    async fn wait_for_work(&self, timeout: Duration) {
        let _ = tokio::time::timeout(timeout, self.wake.notified()).await;
    }

    async fn digests_due(&self, now_us: i64, limit: u32) -> StoreResult<Vec<DigestRow>> {
        digests::digests_due(&self.reader, now_us, limit).await
    }

    async fn digest_members(&self, key: &str) -> StoreResult<Vec<DigestMember>> {
        digests::digest_members(&self.reader, key).await
    }

    async fn digest_close(&self, close: DigestClose) -> StoreResult<DigestCloseOutcome> {
        let mut tx = self.writer.begin().await?;
        let outcome = digests::digest_close(&mut tx, &close).await?;
        if outcome == DigestCloseOutcome::Closed {
            tx.commit().await?;
            self.jobs_queued();
        } else {
            tx.rollback().await?;
        }
        Ok(outcome)
    }
}

/// A claim: leases what is due and decides each job ([`claim_candidates`]).
/// One process: its clock judges the leases (Postgres uses the database's).
fn claim_tx(db: &Connection, claim: &Claim) -> StoreResult<End<Vec<ClaimedJob>>> {
    let leased: Vec<i64> = direct::query(
        db,
        "UPDATE jobs SET locked_until = $1 + $3 WHERE intent_id IN (
             SELECT intent_id FROM jobs
             WHERE run_at <= $1 AND (locked_until IS NULL OR locked_until <= $1)
             ORDER BY run_at LIMIT $2)
         RETURNING intent_id",
        &[&claim.now_us, &i64::from(claim.limit), &claim.lease_us],
        |r| r.get(0),
    )?;
    if leased.is_empty() {
        return Ok(End::Rollback(Vec::new()));
    }
    let candidates = direct::query(db, &CANDIDATES, &[&keys_arg(&leased)], |r| {
        let after = direct::INTENT_COLUMNS.len();
        Ok(ClaimCandidate {
            intent: direct::intent_row(r)?,
            content: r.get(after)?,
            lease_lapsed: r.get(after + 1)?,
            traceparent: r.get(after + 2)?,
            links: r.get(after + 3)?,
        })
    })?;
    Ok(End::Commit(claim_candidates(db, candidates, claim)?))
}

/// The leased jobs' intents (`$1`, their numbers), with their content, whether an attempt of
/// theirs is still open (its lease lapsed), and their jobs' trace and links,
/// in that order after the intent's columns.
static CANDIDATES: LazyLock<String> = LazyLock::new(|| {
    let intent: Vec<String> = direct::INTENT_COLUMNS.iter().map(|c| format!("i.{c}")).collect();
    format!(
        "SELECT {}, COALESCE(i.content, (SELECT p.body FROM payloads p WHERE p.digest = i.payload_digest)) AS content,
           EXISTS (SELECT 1 FROM attempts a WHERE a.intent_id = i.id AND a.finished_at IS NULL) AS
               lease_lapsed,
           j.traceparent, j.links
         FROM intents i JOIN jobs j ON j.intent_id = i.id
         WHERE i.id IN (SELECT value FROM json_each($1))",
        intent.join(", ")
    )
});

/// A batch of outcomes: each attempt's row, its intent's change, and its job
/// taken off the queue or put back for its retry, one statement a row, each
/// prepared once. Reports which it recorded and which were stale.
fn finish_tx(db: &Connection, finished: &[FinishedAttempt]) -> StoreResult<End<FinishReport>> {
    let mut record = direct::statement(
        db,
        "UPDATE attempts SET finished_at = ?3, outcome = ?4, error_class = ?5, provider_status = ?6,
             provider_message_id = ?7, error = ?8, retry_after = ?9, retry_at = ?10, provider = ?11,
             possible_duplicate = ?12
         WHERE intent_id = (SELECT id FROM intents WHERE key = ?1) AND n = ?2 AND finished_at IS NULL
         RETURNING intent_id",
    )?;
    // Each outcome's own statement says whether it applied, by (key, n): a
    // stale outcome for an attempt that was rescued must not ride along with
    // the new attempt's outcome for the same intent. What it returns, the
    // intent's number, finds the job without the key's index again.
    let (mut applied, mut applied_outcomes) = (Vec::with_capacity(finished.len()), Vec::new());
    for f in finished {
        let recorded: Option<i64> = record
            .query_row(
                rusqlite::params![
                    f.key,
                    f.n,
                    f.finished_at_us,
                    f.outcome.as_str(),
                    f.error_class.map(|r| r.as_str()),
                    f.provider_status,
                    f.provider_message_id,
                    f.error,
                    f.retry_after_us,
                    f.transition.retry_at(),
                    f.provider,
                    f.possible_duplicate
                ],
                |r| r.get(0),
            )
            .optional()?;
        if let Some(intent_id) = recorded {
            applied.push((f.key.clone(), f.n));
            applied_outcomes.push((intent_id, f));
        }
    }
    let changes: Vec<Change> =
        applied_outcomes.iter().map(|(_, f)| f.transition.change(&f.key, f.finished_at_us)).collect();
    direct::intents_apply(db, &changes)?;
    let mut done = direct::statement(db, "DELETE FROM jobs WHERE intent_id = ?1")?;
    let mut retry = direct::statement(db, "UPDATE jobs SET run_at = ?2, locked_until = NULL WHERE intent_id = ?1")?;
    for (intent_id, f) in applied_outcomes {
        match f.transition.retry_at() {
            Some(at) => retry.execute(rusqlite::params![intent_id, at])?,
            None => done.execute([intent_id])?,
        };
    }
    Ok(End::Commit(report(finished, &applied)))
}
