//! The worker: claim due jobs in batches (their attempt rows are written in the
//! claiming transaction), call providers with no transaction open, and record
//! outcomes in batches (see [`recorder`]). A job whose worker dies is retaken
//! after its lease and the unfinished attempt recorded as `unknown`.

pub mod digest;
mod dispatch;
pub mod duplicate;
mod recorder;
pub use crate::lifecycle::retry;

use crate::channel::{Delivery, Outcome, Provider};
use crate::clock::{Clock, micros};
use crate::event::Channel;
use crate::ingest::IngestLoad;
use crate::intent::{OutcomeClass, Reason, State};
use crate::lifecycle;
use crate::ops::log::{AttemptLine, TemplateRef};
use crate::ops::trace::{self, TraceParent};
use crate::render::Content;
use crate::store::{Claim, ClaimedJob, FinishedAttempt, Store, Transition};
use opentelemetry::KeyValue;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use recorder::{Done, Unrecorded};
use retry::{Next, RetryPolicy};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::time::Instant;
use tracing::field::Empty;
use tracing::{Instrument, Span};

/// The most jobs one claim takes, whatever the concurrency.
const MAX_BATCH: usize = 256;
/// Under load, how long a claim may wait for more free slots.
const GATHER: Duration = Duration::from_millis(5);

pub type Providers = HashMap<Channel, Arc<dyn Provider>>;

pub struct Worker {
    pub store: Arc<dyn Store>,
    pub providers: Arc<Providers>,
    pub policy: RetryPolicy,
    pub concurrency: usize,
    pub poll_interval: Duration,
    pub lease: Duration,
    pub clock: Arc<dyn Clock>,
    /// Event types whose routes skip superseded versions.
    pub supersede_types: Vec<String>,
    /// This process's ingest requests in flight: while they queue, the
    /// worker gives way after each claim (`crate::ingest::load`).
    pub ingest_load: Arc<IngestLoad>,
}

impl Worker {
    /// Runs until `shutdown` turns true, then stops claiming, lets in-flight
    /// attempts finish for up to `grace` and records their outcomes.
    ///
    /// A slot (one of `concurrency`) is held from the claim until the
    /// attempt's outcome is in the recorder's queue. The queue is bounded,
    /// so when recording falls behind, finished attempts keep their slots and
    /// claiming slows down to the pace of the database.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>, grace: Duration) {
        let permits = Arc::new(Semaphore::new(self.concurrency));
        let (done_tx, done_rx) = mpsc::channel::<Done>(self.concurrency.max(1));
        let unrecorded = Arc::new(Unrecorded::default());
        let recorder = tokio::spawn(recorder::run(self.store.clone(), done_rx, unrecorded.clone()));
        let rng = Arc::new(Mutex::new(SmallRng::from_os_rng()));
        let this = Arc::new(self);
        let mut busy = false;
        loop {
            if *shutdown.borrow() {
                break;
            }
            let first = tokio::select! {
                p = permits.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
                _ = shutdown.changed() => break,
            };
            if busy {
                // The queue had more than we could take: let a few more slots
                // free up, so that one claim fetches many jobs instead of
                // one claim per finished job.
                let enough = (this.concurrency / 4).clamp(1, MAX_BATCH);
                let deadline = tokio::time::Instant::now() + GATHER;
                while 1 + permits.available_permits() < enough && tokio::time::Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
            if !this.wait_for_recording(&unrecorded, &mut shutdown).await {
                break;
            }
            let free = (1 + permits.available_permits()).min(MAX_BATCH);
            // Measured before the claim, so never later than the lease the
            // database grants.
            let claim_began = Instant::now();
            let lease_end = claim_began + this.lease;
            let claim_started = SystemTime::now();
            let (jobs, leased) = match this.claim(free).await {
                Ok(claimed) => claimed,
                Err(e) => {
                    tracing::error!(error = %e, "claiming jobs failed; retrying after the poll interval");
                    drop(first);
                    tokio::time::sleep(this.poll_interval).await;
                    continue;
                }
            };
            // A claim that leased fewer jobs than it asked for emptied what was
            // due: the next claim waits for new work (an ingest's wake-up, kept
            // by the store if it came during this claim) or the poll interval,
            // rather than asking at once and finding nothing — at low load that
            // empty claim was a transaction per job.
            busy = leased == free;
            let claimed = Claimed { times: (claim_started, SystemTime::now()), batch: jobs.len(), lease_end };
            if jobs.is_empty() {
                drop(first);
                this.wait_for_work(&mut shutdown).await;
                continue;
            }
            let mut first = Some(first);
            for job in jobs {
                let permit = match first.take() {
                    Some(p) => p,
                    None => match permits.clone().acquire_owned().await {
                        Ok(p) => p,
                        Err(_) => break,
                    },
                };
                let (this, done, rng, unrecorded) = (this.clone(), done_tx.clone(), rng.clone(), unrecorded.clone());
                tokio::spawn(async move {
                    let (attempt, trace) = this.attempt(job, &rng, claimed).await;
                    unrecorded.add(lease_end);
                    // Waits, holding the slot, while the recorder's queue is full.
                    let _ = done.send(Done { attempt, lease_end, trace }).await;
                    drop(permit);
                });
            }
            if let Some(pause) = this.ingest_load.give_way(claim_began.elapsed(), this.poll_interval) {
                tokio::select! {
                    _ = tokio::time::sleep(pause) => {},
                    _ = shutdown.changed() => break,
                }
            }
            if !busy {
                this.wait_for_work(&mut shutdown).await;
            }
        }
        // Stop claiming; wait (bounded) for the attempts in flight.
        let all = u32::try_from(this.concurrency).unwrap_or(u32::MAX);
        if tokio::time::timeout(grace, permits.acquire_many(all)).await.is_err() {
            tracing::warn!(
                "shutdown grace ran out with attempts in flight; their leases will expire and they will be retried"
            );
        }
        drop(done_tx);
        let _ = tokio::time::timeout(grace, recorder).await;
    }

    /// Waits while an outcome still on its way to the database belongs to a
    /// job whose lease ends within a quarter of a lease: a claim now could
    /// find that lease expired, rescue the finished attempt as `unknown` and
    /// send it again. False if shutdown came meanwhile.
    async fn wait_for_recording(&self, unrecorded: &Unrecorded, shutdown: &mut watch::Receiver<bool>) -> bool {
        let margin = self.lease / 4;
        let mut warned = false;
        loop {
            let next_write = unrecorded.next_write();
            tokio::pin!(next_write);
            next_write.as_mut().enable();
            match unrecorded.earliest() {
                Some(end) if end <= Instant::now() + margin => {}
                _ => return true,
            }
            if !warned {
                tracing::warn!("recording outcomes lags behind the leases; claims wait for it");
                warned = true;
            }
            tokio::select! {
                _ = next_write => {},
                _ = tokio::time::sleep(self.poll_interval) => {},
                _ = shutdown.changed() => return false,
            }
        }
    }

    /// Until new work may be due, the poll interval passes or shutdown begins.
    async fn wait_for_work(&self, shutdown: &mut watch::Receiver<bool>) {
        tokio::select! {
            _ = self.store.wait_for_work(self.poll_interval) => {},
            _ = shutdown.changed() => {},
        }
    }

    /// The jobs to attempt now, and how many jobs the claim leased. The claim
    /// also reports jobs it ended itself: intents planned in shadow mode
    /// (`shadowed`: counted and logged here, and no provider is called) and
    /// attempts rescued after an expired lease.
    async fn claim(&self, limit: usize) -> Result<(Vec<ClaimedJob>, usize), crate::store::StoreError> {
        let mut jobs = self
            .store
            .jobs_claim(Claim {
                now_us: micros(self.clock.now()),
                limit: u32::try_from(limit).unwrap_or(u32::MAX),
                lease_us: crate::clock::duration_us(self.lease),
                max_attempts: i64::from(self.policy.attempts),
                dedupe_window_us: self.policy.dedupe_window.map(crate::clock::duration_us),
                supersede_types: self.supersede_types.clone(),
                repeats_unrecognised: self.repeats_unrecognised(),
            })
            .await?;
        let leased = jobs.len();
        jobs.retain(|job| {
            let i = &job.intent;
            let template = TemplateRef { id: &i.template_id, revision: i.template_revision.as_deref() };
            if let Some(n) = job.rescued {
                let trace_id = job.traceparent.as_deref().and_then(TraceParent::parse).map(|t| t.trace_id_hex());
                if job.rescued_duplicate {
                    // No provider is on record for it: the channel's own.
                    crate::ops::metrics::possible_duplicate(
                        self.providers.get(&i.channel).map_or("unknown", |p| p.name()),
                    );
                }
                rescued(i, n, template, trace_id.as_deref(), job.rescued_duplicate);
            }
            if i.state == State::Shadowed {
                crate::ops::metrics::shadowed(i.channel, template, "worker");
                crate::ops::log::shadowed(&i.key, i.channel, template, None);
            }
            i.state == State::Sending
        });
        Ok((jobs, leased))
    }

    /// The channels where a retry after an `unknown` attempt may go
    /// unrecognised, for the claim to flag an attempt that died in flight.
    fn repeats_unrecognised(&self) -> Vec<Channel> {
        let mut channels: Vec<Channel> = (self.providers.iter())
            .filter(|(_, p)| duplicate::repeats_unrecognised(p.dedupes_retries(), p.needs_history()))
            .map(|(c, _)| *c)
            .collect();
        channels.sort_unstable();
        channels
    }

    /// One attempt in its `attempt` span, which continues the trace stored
    /// with the job — the request's that planned it, the replay request's
    /// for a dead letter replayed, the closing's for a digest — or, for a job
    /// queued before traces were stored, a trace derived from the intent key,
    /// the same on every retry. The span links to the traces the job names
    /// (a replayed intent's original request, a digest's members' requests).
    /// Returns the span's context, which the outcome's `record` span goes under.
    async fn attempt(
        &self,
        job: ClaimedJob,
        rng: &Mutex<SmallRng>,
        claimed: Claimed,
    ) -> (FinishedAttempt, opentelemetry::Context) {
        let i = &job.intent;
        let span = tracing::info_span!(
            parent: None,
            "attempt",
            otel.kind = "client",
            herald.intent_key = %i.key,
            herald.attempt = i.attempts,
            herald.channel = %i.channel,
            herald.template = %i.template_id,
            herald.template_revision = i.template_revision.as_deref().unwrap_or(""),
            herald.provider = Empty,
            herald.outcome = Empty,
            herald.reason = Empty,
            herald.provider_status = Empty,
            herald.next = Empty,
        );
        // Links first: the span is built when its parent is read.
        trace::link(&span, &trace::parse_links(job.links.as_deref()));
        let stored = job.traceparent.as_deref().and_then(TraceParent::parse);
        let own = TraceParent::derived(&format!("intent|{}", i.key));
        let parent = match stored {
            Some(tp) => {
                trace::continue_trace(&span, &tp);
                tp.context()
            }
            None => {
                trace::start_trace(&span, own.trace_id);
                trace::context_of(&span)
            }
        };
        if trace::exporting() {
            let attributes = vec![
                KeyValue::new("herald.intent_key", i.key.clone()),
                KeyValue::new("herald.attempt", i.attempts),
                KeyValue::new("herald.claim.batch", claimed.batch as i64),
            ];
            trace::batch_span("claim", &parent, claimed.times, attributes, None);
        }
        let trace_id = stored.unwrap_or(own).trace_id_hex();
        // The call must be over while the lease still covers recording its
        // outcome: the quarter of it that `config check` keeps for that.
        let call_by = claimed.lease_end - self.lease / 4;
        let done = self.dispatch(job, rng, &span, &trace_id, call_by).instrument(span.clone()).await;
        (done, trace::context_of(&span))
    }

    /// When the dedupe window of this retry chain runs out: counted from
    /// the start of the chain's first try (the first since the intent was
    /// created or last replayed from the dead letters), as the retry horizon
    /// is; an unreadable start counts from the intent's creation, the
    /// earliest it can be. The backoff alone keeps a chain inside the window
    /// (`config check`), so the start is looked up only once a chain may have
    /// been stretched: on a `Retry-After`, or on any retry after the first
    /// try (an earlier `Retry-After` may have stretched it).
    async fn window_ends(
        &self,
        intent: &crate::store::IntentRow,
        outcome: &Outcome,
        earlier: Option<&[crate::store::AttemptRow]>,
        now: jiff::Timestamp,
    ) -> Option<jiff::Timestamp> {
        let asked = match outcome {
            Outcome::Retryable { retry_after, .. } => retry_after.is_some(),
            Outcome::Unknown { .. } => false,
            Outcome::Accepted { .. } | Outcome::Permanent { .. } => return None,
        };
        if self.policy.dedupe_window.is_none() || (!asked && intent.attempts <= intent.retry_base + 1) {
            return None;
        }
        let first = intent.retry_base + 1;
        let read;
        let attempts = match earlier.filter(|a| a.iter().any(|a| a.n == first)) {
            Some(a) => Some(a),
            None => {
                read = self.earlier_attempts(&intent.key).await;
                read.as_deref()
            }
        };
        let started =
            attempts.and_then(|a| a.iter().find(|a| a.n == first)).map_or(intent.created_at, |a| a.started_at);
        self.policy.window_ends(jiff::Timestamp::from_microsecond(started).unwrap_or(now))
    }

    /// The intent's attempts so far; None when they cannot be read (a
    /// failover chain then starts from its first member, and a duplicate
    /// cannot be ruled out).
    async fn earlier_attempts(&self, key: &str) -> Option<Vec<crate::store::AttemptRow>> {
        match self.store.attempts_of(&[key.to_string()]).await {
            Ok(rows) => Some(rows),
            Err(e) => {
                tracing::warn!(intent = %key, error = %e, "earlier attempts unreadable");
                None
            }
        }
    }

    /// What the outcome leads to, and the provider's `Retry-After` as
    /// honoured when a retry is scheduled. `window_ends`: see
    /// [`RetryPolicy::next`].
    fn transition(
        &self,
        outcome: &Outcome,
        n: i64,
        (now, window_ends): (jiff::Timestamp, Option<jiff::Timestamp>),
        rng: &Mutex<SmallRng>,
    ) -> (Transition, Option<Duration>) {
        let (retry_after, state) = match lifecycle::outcome::before_policy(outcome.called()) {
            Ok(waits) => waits,
            Err(ended) => return (ended, None),
        };
        let made = u32::try_from(n).unwrap_or(u32::MAX);
        let next = {
            let mut rng = rng.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            self.policy.next(made, retry_after, now, window_ends, &mut *rng)
        };
        let honoured = match next {
            Next::Retry { retry_after: honoured, .. } => honoured,
            Next::Exhausted => None,
            Next::PastWindow { delay } => {
                tracing::warn!(
                    next_in = ?delay,
                    "the next try would run after the intent's dedupe window; the chain ends here"
                );
                None
            }
        };
        if let (Some(asked), Some(honoured)) = (retry_after, honoured)
            && honoured < asked
        {
            tracing::warn!(asked = ?asked, honoured = ?honoured, "the provider's Retry-After is beyond retry.max_retry_after; capped");
        }
        (lifecycle::outcome::after_policy(&next, state, now), honoured)
    }
}

/// The times and size of the claim that took a job, and when its lease ends
/// (by this process's monotonic clock, measured from before the claim).
#[derive(Debug, Clone, Copy)]
struct Claimed {
    times: (SystemTime, SystemTime),
    batch: usize,
    lease_end: Instant,
}

/// What the attempt led to, on its span: bounded names and the provider's
/// status code, never its text. `unknown` and a dead end are errors.
fn record_on(span: &Span, provider: &str, outcome: &Outcome, transition: &Transition) {
    span.record("herald.provider", provider);
    span.record("herald.outcome", outcome.class().as_str());
    let reason = outcome_class_reason(outcome);
    if !reason.is_empty() {
        span.record("herald.reason", reason);
    }
    let status = match outcome {
        Outcome::Accepted { status, .. } | Outcome::Retryable { status, .. } | Outcome::Permanent { status, .. } => {
            *status
        }
        Outcome::Unknown { .. } => None,
    };
    if let Some(status) = status {
        span.record("herald.provider_status", i64::from(status));
    }
    let next = match transition {
        Transition::Sent => "sent",
        Transition::Retry { .. } => "retry",
        Transition::Dead { .. } => "dead",
    };
    span.record("herald.next", next);
    if matches!(transition, Transition::Dead { .. }) {
        trace::fail(span, "dead: a terminal failure");
    } else if matches!(outcome, Outcome::Unknown { .. }) {
        trace::fail(span, "unknown: the provider may have acted on it");
    }
}

/// An attempt whose worker lost its lease, recorded `unknown` by the claim
/// that found it: its transition is logged like any other attempt's (never
/// sampled: an `unknown` outcome).
fn rescued(
    intent: &crate::store::IntentRow,
    n: i64,
    template: TemplateRef<'_>,
    trace_id: Option<&str>,
    possible_duplicate: bool,
) {
    let next = match intent.state {
        State::Sending => "retry",
        State::Dead => "dead",
        _ => "superseded",
    };
    if intent.state == State::Dead {
        crate::ops::metrics::dead_letter(intent.reason.as_deref().unwrap_or("retries_exhausted"));
    }
    crate::ops::log::attempt(AttemptLine {
        key: &intent.key,
        n,
        channel: intent.channel,
        template,
        provider: "unknown",
        outcome: OutcomeClass::Unknown.as_str(),
        error_class: Reason::LeaseExpired.as_str(),
        next,
        possible_duplicate,
        trace_id,
    });
}

/// One provider call, bounded by the provider's timeout whatever the provider
/// does, and by `call_by`: a call still going when its lease ends could be
/// retaken by another worker and sent again while in flight. `config check`
/// keeps every timeout within three quarters of the lease, but the lease
/// starts at the claim, and a slow database (the claim's own transaction, a
/// retry's read of its earlier attempts) can spend part of it before the
/// call. The provider is asked to be done a moment before the bound, so one
/// that knows how far it got can say so; at the bound itself the call is
/// abandoned and recorded `unknown`, the one answer that is never wrong. When
/// nothing of the lease is left to call in, the provider is not called (None).
async fn call(provider: &dyn Provider, mut d: Delivery, call_by: Instant) -> Option<Outcome> {
    let timeout = provider.timeout();
    let now = Instant::now();
    if call_by <= now {
        return None;
    }
    let bound = (now + timeout).min(call_by);
    let allowed = bound - now;
    d.deadline = bound - (allowed / 20).min(Duration::from_millis(50));
    Some(match tokio::time::timeout_at(bound, provider.send(&d)).await {
        Ok(outcome) => outcome,
        Err(_) if allowed < timeout => Outcome::Unknown {
            class: Reason::Timeout,
            error: format!(
                "the provider call was abandoned after {allowed:?}, all its lease had left for it (its timeout is \
                 {timeout:?}); it may have been acted on"
            ),
        },
        Err(_) => Outcome::Unknown {
            class: Reason::Timeout,
            error: format!(
                "the provider call did not finish within {timeout:?} and was abandoned; it may have been acted on"
            ),
        },
    })
}

fn delivery(job: &ClaimedJob) -> Result<Delivery, String> {
    let i = &job.intent;
    let text = job.content.as_deref().ok_or("the intent has no rendered content")?;
    let content: Content = serde_json::from_str(text).map_err(|e| format!("stored content is unreadable: {e}"))?;
    Ok(Delivery {
        key: i.key.clone(),
        tenant: i.tenant.clone(),
        recipient_id: i.recipient_id.clone(),
        destination: i.destination.clone(),
        entity_type: i.entity_type.clone(),
        entity_id: i.entity_id.clone(),
        entity_version: i.entity_version,
        occurred_at: i.occurred_at.clone(),
        event_type: i.event_type.clone(),
        payload_digest: i.payload_digest.clone(),
        content,
        attempt: i.attempts,
        deadline: tokio::time::Instant::now(),
    })
}

fn finished(key: String, n: i64, at: i64, outcome: Outcome, transition: Transition) -> FinishedAttempt {
    let class = outcome.class();
    let (error_class, status, message_id, error) = match outcome {
        Outcome::Accepted { status, message_id } => (None, status, message_id, None),
        Outcome::Retryable { class, status, error, .. } => (Some(class), status, None, Some(error)),
        Outcome::Unknown { class, error } => (Some(class), None, None, Some(error)),
        Outcome::Permanent { reason, status, error } => (Some(reason), status, None, Some(error)),
    };
    // The provider's text may name other people's addresses and numbers than
    // the destination the channel already kept out.
    let error = error.map(|e| crate::redact::scrub_text(&e));
    FinishedAttempt {
        key,
        n,
        finished_at_us: at,
        outcome: class,
        error_class,
        provider_status: status.map(i64::from),
        provider_message_id: message_id,
        error,
        retry_after_us: None,
        transition,
        provider: None,
        possible_duplicate: false,
    }
}

/// The error class of an outcome, for logs (never the provider's text, which
/// may echo a destination).
fn outcome_class_reason(outcome: &Outcome) -> &'static str {
    match outcome {
        Outcome::Accepted { .. } => "",
        Outcome::Retryable { class, .. } => class.as_str(),
        Outcome::Unknown { class, .. } => class.as_str(),
        Outcome::Permanent { reason, .. } => reason.as_str(),
    }
}
