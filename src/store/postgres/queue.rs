//! The queue on Postgres: the `QueueStore` impl (claim, record, wait for work,
//! digest windows), what a claim writes once the jobs are leased, and the
//! queue's depth. What happens to each job is decided in
//! [`crate::lifecycle::claim`]; the SQL here fetches the facts and writes the
//! answers, a statement per kind of answer for the whole batch, never one per
//! job.

use super::{PostgresStore, Tx, digests, intents_apply, start_attempts};
use crate::intent::{OutcomeClass, Reason, State};
use crate::lifecycle::{self, Change};
use crate::store::shared::report;
use crate::store::{
    Claim, ClaimCandidate, ClaimedJob, DigestClose, DigestCloseOutcome, DigestMember, DigestRow, FinishReport,
    FinishedAttempt, QueueStats, QueueStore, StoreResult, Transition,
};
use async_trait::async_trait;
use sqlx::PgPool;
use std::collections::HashMap;
use std::time::Duration;

/// After the backend has leased jobs and read their intents (the
/// candidates): record the lapsed attempts among them as `unknown`, end
/// the jobs the rules end, start the next attempt of the rest and
/// return them with their content (state `sending`), a statement per
/// kind of answer. Returned too, already ended: shadowed jobs (no
/// attempt) and jobs a rescue ended, so that the worker counts and
/// logs them.
pub(super) async fn claim_candidates(
    tx: &mut Tx<'_>,
    candidates: Vec<ClaimCandidate>,
    claim: &Claim,
) -> StoreResult<Vec<ClaimedJob>> {
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
        sqlx::query_as::<_, (String, i64)>(
            "SELECT i.key, MIN(a.n) FROM attempts a JOIN intents i ON i.id = a.intent_id
             WHERE a.outcome = $2 AND i.key = ANY($1) GROUP BY i.key",
        )
        .bind(&exposed)
        .bind(OutcomeClass::Unknown.as_str())
        .fetch_all(&mut **tx)
        .await?
        .into_iter()
        .collect()
    };
    let duplicates: std::collections::HashSet<String> = lapsed
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
        sqlx::query(
            "UPDATE attempts SET finished_at = $2, outcome = $3, error_class = $4, error = $5,
                 possible_duplicate = $6
             WHERE finished_at IS NULL AND intent_id IN (SELECT id FROM intents WHERE key = ANY($1))",
        )
        .bind(&keys)
        .bind(now_us)
        .bind(OutcomeClass::Unknown.as_str())
        .bind(Reason::LeaseExpired.as_str())
        .bind("the worker's lease expired before it reported an outcome")
        .bind(possible_duplicate)
        .execute(&mut **tx)
        .await?;
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
        sqlx::query_as::<_, (String, i64)>(
            "SELECT i.key, a.started_at FROM attempts a JOIN intents i ON i.id = a.intent_id
             WHERE a.n = i.retry_base + 1 AND i.key = ANY($1)",
        )
        .bind(&lapsed_keys)
        .fetch_all(&mut **tx)
        .await?
        .into_iter()
        .collect()
    };

    let terms = claim.terms();
    let versioned: Vec<String> = candidates
        .iter()
        .filter(|c| rules::may_be_superseded(&c.job(), &terms))
        .map(|c| c.intent.key.clone())
        .collect();
    let newer = newer_versions(tx, &versioned).await?;

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
    intents_end(tx, &ended).await?;
    if started.is_empty() {
        return Ok(reported);
    }
    let keys: Vec<String> = started.iter().map(|c| c.intent.key.clone()).collect();
    // Each intent's attempt count goes up and its next attempt's row is
    // written, in one statement.
    start_attempts(tx, &keys, now_us).await?;
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

/// Every newer version of these intents' entities for the same
/// recipient and channel, whatever its state: the rules choose.
async fn newer_versions(tx: &mut Tx<'_>, keys: &[String]) -> StoreResult<Vec<crate::lifecycle::claim::NewerVersion>> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let rows: Vec<(String, String, i64, State)> = sqlx::query_as(
        "SELECT i.key AS of, n.key, n.entity_version, n.state FROM intents i JOIN intents n
             ON n.tenant = i.tenant AND n.entity_type = i.entity_type AND n.entity_id = i.entity_id
            AND n.recipient_id = i.recipient_id AND n.channel = i.channel AND n.entity_version > i.entity_version
         WHERE i.key = ANY($1)",
    )
    .bind(keys)
    .fetch_all(&mut **tx)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(of, key, entity_version, state)| crate::lifecycle::claim::NewerVersion {
            of,
            key,
            entity_version,
            state,
        })
        .collect())
}

/// Writes how these intents ended (with their publications) and
/// takes their jobs off the queue: two statements for the whole
/// batch.
async fn intents_end(tx: &mut Tx<'_>, ended: &[Change]) -> StoreResult<()> {
    if ended.is_empty() {
        return Ok(());
    }
    intents_apply(tx, ended).await?;
    let keys: Vec<String> = ended.iter().map(|e| e.key.clone()).collect();
    sqlx::query("DELETE FROM jobs WHERE intent_id IN (SELECT id FROM intents WHERE key = ANY($1))")
        .bind(&keys)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// The queue: the whole deployment's (`/metrics`), or one tenant's.
pub(super) async fn queue_stats(pool: &PgPool, tenant: Option<&str>, now_us: i64) -> StoreResult<QueueStats> {
    let Some(tenant) = tenant else {
        let (due, oldest): (i64, Option<i64>) =
            sqlx::query_as("SELECT COUNT(*), MIN(run_at) FROM jobs WHERE run_at <= $1")
                .bind(now_us)
                .fetch_one(pool)
                .await?;
        let total: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM jobs").fetch_one(pool).await?;
        return Ok(QueueStats { due, total, oldest_due_us: oldest });
    };
    // A count of the queue itself: `jobs` holds only what is still to be
    // sent, and an index of its own for this page cost every ingest an
    // entry (dropped by migration 0062).
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
impl QueueStore for PostgresStore {
    async fn jobs_claim(&self, claim: Claim) -> StoreResult<Vec<ClaimedJob>> {
        let mut tx = self.pool.begin().await?;
        // Due by the claimer's clock (what the tests and the schedules drive),
        // leased by the database's: one clock for every process, so a process
        // whose clock runs ahead cannot see another's lease as expired, nor
        // one whose clock lags hold a lease longer than asked.
        // The lease and the read of what the rules need, in one statement.
        // Whether an attempt was left unfinished is a probe of the attempts'
        // key per job (LATERAL … LIMIT 1): as an EXISTS, Postgres may answer
        // it by hashing every unfinished attempt in a scan of the whole table,
        // once per claim.
        let candidates: Vec<ClaimCandidate> = sqlx::query_as(
            "WITH due AS (
                     SELECT intent_id FROM jobs
                     WHERE run_at <= $1
                       AND (locked_until IS NULL OR locked_until <= (EXTRACT(EPOCH FROM now()) * 1000000)::bigint)
                     ORDER BY run_at LIMIT $2
                     FOR UPDATE SKIP LOCKED),
                 leased AS (
                     UPDATE jobs SET locked_until = (EXTRACT(EPOCH FROM now()) * 1000000)::bigint + $3 FROM due
                     WHERE jobs.intent_id = due.intent_id
                     RETURNING jobs.intent_id, jobs.traceparent, jobs.links)
             SELECT i.key, i.tenant, i.event_type, i.entity_type, i.entity_id, i.entity_version, i.occurred_at,
                 i.channel, i.recipient_id, i.destination, i.locale, i.template_id, i.template_revision,
                 i.event_digest, i.payload_digest, i.decision, i.reason, i.detail, i.state, i.attempts,
                 i.created_at, i.updated_at, i.preferences_version, i.link_key, i.retry_base, i.mode,
                 COALESCE(i.content, (SELECT p.body FROM payloads p WHERE p.digest = i.payload_digest)) AS content,
                    lapsed.found IS NOT NULL AS lease_lapsed, l.traceparent, l.links
             FROM leased l JOIN intents i ON i.id = l.intent_id
             LEFT JOIN LATERAL (
                 SELECT 1 AS found FROM attempts a WHERE a.intent_id = i.id AND a.finished_at IS NULL LIMIT 1
             ) lapsed ON TRUE",
        )
        .bind(claim.now_us)
        .bind(i64::from(claim.limit))
        .bind(claim.lease_us)
        .fetch_all(&mut *tx)
        .await?;
        if candidates.is_empty() {
            tx.rollback().await?;
            return Ok(Vec::new());
        }
        let jobs = claim_candidates(&mut tx, candidates, &claim).await?;
        tx.commit().await?;
        Ok(jobs)
    }

    async fn attempts_finish(&self, finished: &[FinishedAttempt]) -> StoreResult<FinishReport> {
        if finished.is_empty() {
            return Ok(FinishReport::default());
        }
        // One statement, so one round trip and atomic without a transaction
        // around it (it was six: BEGIN, four writes, COMMIT). The attempts
        // still unfinished are finished; only for those (`a`, by key and
        // attempt number: an outcome that arrives after its attempt was
        // rescued is stale and changes nothing) the intent takes its new
        // state, with its publication when the state is a published one it
        // was not in (as `intents_apply` decides it), and the job is removed
        // or rescheduled.
        let transitions: Vec<&Transition> = finished.iter().map(|f| &f.transition).collect();
        let applied: Vec<(String, i64)> = sqlx::query_as(
            "WITH u AS (
                 SELECT * FROM UNNEST($1::text[], $2::bigint[], $3::bigint[], $4::text[], $5::text[], $6::bigint[],
                                      $7::text[], $8::text[], $9::bigint[], $10::bigint[], $11::text[],
                                      $12::boolean[], $13::text[], $14::text[], $15::boolean[])
                      AS u(k, n, finished_at, outcome, error_class, provider_status, provider_message_id, error,
                           retry_after, retry_at, provider, possible_duplicate, state, reason, publishes)),
             a AS (
                 UPDATE attempts a SET finished_at = u.finished_at, outcome = u.outcome, error_class = u.error_class,
                        provider_status = u.provider_status, provider_message_id = u.provider_message_id,
                        error = u.error, retry_after = u.retry_after, retry_at = u.retry_at, provider = u.provider,
                        possible_duplicate = u.possible_duplicate
                 FROM u JOIN intents k ON k.key = u.k
                 WHERE a.intent_id = k.id AND a.n = u.n AND a.finished_at IS NULL
                 RETURNING k.id, u.k, u.n, u.finished_at, u.retry_at, u.state, u.reason, u.publishes),
             old AS (SELECT i.key, i.state FROM intents i JOIN a ON i.key = a.k FOR UPDATE OF i),
             d AS (SELECT a.*, (a.publishes AND a.state IS DISTINCT FROM old.state
                                AND EXISTS (SELECT 1 FROM settings WHERE name = 'publications')) AS bump
                   FROM a JOIN old ON old.key = a.k),
             i AS (
                 UPDATE intents i SET state = d.state, reason = d.reason, updated_at = d.finished_at,
                        dead_at = CASE WHEN d.state = 'dead' THEN d.finished_at END,
                        publication_seq = i.publication_seq + CASE WHEN d.bump THEN 1 ELSE 0 END
                 FROM d WHERE i.key = d.k
                 RETURNING i.key, i.tenant, i.entity_type, i.entity_id, i.entity_version, i.channel, i.recipient_id,
                           i.state, i.reason, i.attempts, i.updated_at AS at, i.publication_seq, d.bump),
             published AS (
                 INSERT INTO publications (msg_id, tenant, intent_key, entity_type, entity_id, entity_version,
                                           channel, recipient_id, state, reason, attempts, at)
                 SELECT p.key || ':' || p.state || ':' || p.publication_seq, p.tenant, p.key, p.entity_type,
                        p.entity_id, p.entity_version, p.channel, p.recipient_id, p.state, p.reason, p.attempts, p.at
                 FROM i p WHERE p.bump ON CONFLICT (msg_id) DO NOTHING),
             done AS (
                 DELETE FROM jobs j USING a WHERE j.intent_id = a.id AND a.retry_at IS NULL),
             retry AS (
                 UPDATE jobs j SET run_at = a.retry_at, locked_until = NULL
                 FROM a WHERE j.intent_id = a.id AND a.retry_at IS NOT NULL)
             SELECT k, n FROM a",
        )
        .bind(finished.iter().map(|f| f.key.as_str()).collect::<Vec<_>>())
        .bind(finished.iter().map(|f| f.n).collect::<Vec<_>>())
        .bind(finished.iter().map(|f| f.finished_at_us).collect::<Vec<_>>())
        .bind(finished.iter().map(|f| f.outcome.as_str()).collect::<Vec<_>>())
        .bind(finished.iter().map(|f| f.error_class.map(|r| r.as_str())).collect::<Vec<_>>())
        .bind(finished.iter().map(|f| f.provider_status).collect::<Vec<_>>())
        .bind(finished.iter().map(|f| f.provider_message_id.as_deref()).collect::<Vec<_>>())
        .bind(finished.iter().map(|f| f.error.as_deref()).collect::<Vec<_>>())
        .bind(finished.iter().map(|f| f.retry_after_us).collect::<Vec<_>>())
        .bind(transitions.iter().map(|t| t.retry_at()).collect::<Vec<_>>())
        .bind(finished.iter().map(|f| f.provider.as_deref()).collect::<Vec<_>>())
        .bind(finished.iter().map(|f| f.possible_duplicate).collect::<Vec<_>>())
        .bind(transitions.iter().map(|t| t.state().as_str()).collect::<Vec<_>>())
        .bind(transitions.iter().map(|t| t.reason().map(|r| r.as_str())).collect::<Vec<_>>())
        .bind(transitions.iter().map(|t| lifecycle::publishes(t.state())).collect::<Vec<_>>())
        .fetch_all(&self.pool)
        .await?;
        Ok(report(finished, &applied))
    }

    async fn wait_for_work(&self, timeout: Duration) {
        let _ = tokio::time::timeout(timeout, self.wake.notified()).await;
    }

    async fn digests_due(&self, now_us: i64, limit: u32) -> StoreResult<Vec<DigestRow>> {
        digests::digests_due(&self.pool, now_us, limit).await
    }

    async fn digest_members(&self, key: &str) -> StoreResult<Vec<DigestMember>> {
        digests::digest_members(&self.pool, key).await
    }

    async fn digest_close(&self, close: DigestClose) -> StoreResult<DigestCloseOutcome> {
        let mut tx = self.pool.begin().await?;
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
