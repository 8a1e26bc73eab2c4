//! One attempt in three typed stages, as svix's dispatch goes from
//! incomplete to completed:
//!
//! 1. [`Worker::prepare`]: what is sent, to whom and through which provider,
//!    knowing the earlier attempts a retry needs (to pick a failover member,
//!    and to judge whether a call may repeat one that went through);
//! 2. [`Prepared::call`]: the network, bounded by the lease, and nothing else;
//! 3. [`Worker::record`]: what the outcome leads to — the transition and
//!    retry delay, the possible-duplicate flag, the circuit breaker, metrics,
//!    the span and the log line — as the [`FinishedAttempt`] the recorder
//!    writes.
//!
//! Each stage takes the one before it by value, so a stage cannot be skipped
//! or run twice, and each is short enough to read on its own.

use super::{Worker, call, delivery, duplicate, finished, outcome_class_reason, record_on};
use crate::channel::{Delivery, Outcome, Provider};
use crate::clock::micros;
use crate::intent::Reason;
use crate::ops::log::{AttemptLine, TemplateRef};
use crate::store::{AttemptRow, ClaimedJob, FinishedAttempt, Transition};
use rand::rngs::SmallRng;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;
use tracing::Span;

/// Stage one's result: the job, what it sends, and through whom.
pub(super) struct Prepared<'w> {
    job: ClaimedJob,
    /// The channel's provider as configured (a failover chain is one).
    configured: Option<&'w dyn Provider>,
    /// The provider this attempt goes through: the configured one, or the
    /// member of its chain it picked.
    chosen: Option<&'w dyn Provider>,
    /// What is sent, or why nothing can be (content that does not read).
    delivery: Result<Delivery, String>,
    /// The earlier attempts, when this attempt needed them; None when they
    /// could not be read.
    earlier: Option<Vec<AttemptRow>>,
}

/// Stage two's result: what the provider answered, or why it was not called,
/// with what stage one knew (the delivery itself is spent).
pub(super) struct Called<'w> {
    job: ClaimedJob,
    configured: Option<&'w dyn Provider>,
    chosen: Option<&'w dyn Provider>,
    earlier: Option<Vec<AttemptRow>>,
    outcome: Outcome,
    /// Whether the provider was called: only its own answers move its
    /// circuit breaker.
    reached_provider: bool,
    took: Duration,
}

impl Worker {
    /// One attempt: prepared, called by `call_by`, recorded.
    pub(super) async fn dispatch(
        &self,
        job: ClaimedJob,
        rng: &Mutex<SmallRng>,
        span: &Span,
        trace_id: &str,
        call_by: Instant,
    ) -> FinishedAttempt {
        let called = self.prepare(job).await.call(call_by).await;
        self.record(called, rng, span, trace_id).await
    }

    /// Stage one. A retry reads the earlier attempts only when its provider
    /// needs them.
    pub(super) async fn prepare(&self, job: ClaimedJob) -> Prepared<'_> {
        let n = job.intent.attempts;
        let configured: Option<&dyn Provider> = self.providers.get(&job.intent.channel).map(|p| p.as_ref());
        let delivery = delivery(&job);
        let earlier = match configured {
            Some(p) if n > 1 && delivery.is_ok() && (p.needs_history() || !p.dedupes_retries()) => {
                self.earlier_attempts(&job.intent.key).await
            }
            _ => Some(Vec::new()),
        };
        let chosen: Option<&dyn Provider> = configured.map(|p| match &delivery {
            Ok(d) => p.pick(d, earlier.as_deref().unwrap_or_default()).unwrap_or(p),
            Err(_) => p,
        });
        Prepared { job, configured, chosen, delivery, earlier }
    }

    /// Stage three: everything the outcome leads to.
    pub(super) async fn record(
        &self,
        called: Called<'_>,
        rng: &Mutex<SmallRng>,
        span: &Span,
        trace_id: &str,
    ) -> FinishedAttempt {
        let Called { job, configured, chosen, earlier, outcome, reached_provider, took } = called;
        let provider_name = chosen.map_or("none", |p| p.name());
        if reached_provider && let (Some(all), Some(_)) = (configured, chosen) {
            all.observe(provider_name, &outcome);
        }
        let n = job.intent.attempts;
        let now = self.clock.now();
        let window_ends = self.window_ends(&job.intent, &outcome, earlier.as_deref(), now).await;
        // The policy counts the tries since the last replay from the dead letters.
        let (transition, retry_after) = self.transition(&outcome, n - job.intent.retry_base, (now, window_ends), rng);
        let template = TemplateRef { id: &job.intent.template_id, revision: job.intent.template_revision.as_deref() };
        crate::ops::metrics::attempt_finished(
            job.intent.channel,
            provider_name,
            outcome.class().as_str(),
            template,
            took,
        );
        // A failover chain (the one provider that picks from the history) may
        // have sent an earlier attempt through any of its members.
        let chained = configured.is_some_and(|p| p.needs_history());
        let possible_duplicate = match chosen {
            Some(p) if n > 1 => {
                let made = duplicate::Made { provider: p.name(), dedupes_retries: p.dedupes_retries(), chained };
                duplicate::possible_duplicate(made, earlier.as_deref(), n, &outcome)
            }
            _ => false,
        };
        if possible_duplicate {
            crate::ops::metrics::possible_duplicate(provider_name);
        }
        if let Transition::Dead { reason } = &transition {
            crate::ops::metrics::dead_letter(reason.as_str());
        }
        let outcome_class = outcome.class();
        record_on(span, provider_name, &outcome, &transition);
        crate::ops::log::attempt(AttemptLine {
            key: &job.intent.key,
            n,
            channel: job.intent.channel,
            template,
            provider: provider_name,
            outcome: outcome_class.as_str(),
            error_class: outcome_class_reason(&outcome),
            next: match &transition {
                Transition::Sent => "sent",
                Transition::Retry { .. } => "retry",
                Transition::Dead { .. } => "dead",
            },
            possible_duplicate,
            trace_id: Some(trace_id),
        });
        let mut done = finished(job.intent.key, n, micros(now), outcome, transition);
        done.retry_after_us = retry_after.map(crate::clock::duration_us);
        done.provider = chosen.map(|p| p.name().to_string());
        done.possible_duplicate = possible_duplicate;
        done
    }
}

impl<'w> Prepared<'w> {
    /// Stage two: the call, over by `call_by` (the lease must still cover
    /// recording its outcome), or the reason there is none.
    pub(super) async fn call(self, call_by: Instant) -> Called<'w> {
        let Prepared { job, configured, chosen, delivery, earlier } = self;
        crate::ops::metrics::attempt_started(job.intent.channel, chosen.map_or("none", |p| p.name()));
        let started = std::time::Instant::now();
        let (outcome, reached_provider) = match (chosen, delivery) {
            (None, _) => (
                Outcome::Permanent {
                    reason: Reason::ChannelDisabled,
                    status: None,
                    error: format!("no provider is configured for channel {}", job.intent.channel),
                },
                false,
            ),
            (_, Err(e)) => (Outcome::Permanent { reason: Reason::TemplateError, status: None, error: e }, false),
            (Some(provider), Ok(d)) => match call(provider, d, call_by).await {
                Some(outcome) => (outcome, true),
                None => (
                    Outcome::Retryable {
                        class: Reason::LeaseExpired,
                        status: None,
                        error: "not called: the claim's lease was nearly spent before the call (the database was slow)"
                            .into(),
                        retry_after: None,
                    },
                    false,
                ),
            },
        };
        Called { job, configured, chosen, earlier, outcome, reached_provider, took: started.elapsed() }
    }
}
