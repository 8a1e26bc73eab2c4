//! Prometheus metrics (DESIGN rule 10). Every label is from a bounded set —
//! channel, provider (a configured name), decision, reason, outcome class,
//! template and its revision, the deployment's name — never an id, address
//! or entity.

use crate::event::Channel;
use crate::intent::{Decision, Reason};
use crate::ops::log::TemplateRef;
use crate::store::QueueStats;
use metrics::{counter, gauge, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::sync::OnceLock;
use std::time::Duration;

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the process-wide recorder once; later calls reuse it.
pub fn install() -> Option<&'static PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            let buckets = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];
            // Recorded by the SQLite store (the store reaches no module above it).
            let held = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0];
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Full("herald_attempt_duration_seconds".into()), &buckets)
                .ok()?
                .set_buckets_for_metric(Matcher::Full("herald_sqlite_writer_hold_seconds".into()), &held)
                .ok()?;
            match builder.install_recorder() {
                Ok(h) => Some(h),
                Err(e) => {
                    tracing::warn!(error = %e, "metrics recorder not installed");
                    None
                }
            }
        })
        .as_ref()
}

pub fn render() -> String {
    install().map(|h| h.render()).unwrap_or_default()
}

/// Which build runs as which deployment: a constant 1, its labels the answer.
pub fn build_info(deployment: &str) {
    gauge!("herald_build_info", "version" => env!("CARGO_PKG_VERSION"), "deployment" => deployment.to_string())
        .set(1.0);
}

/// Channel, decision and reason are the bounded enums' own static names;
/// template and revision are bounded by the templates a deployment has had.
pub fn intent_created(channel: Channel, decision: Decision, reason: Option<&str>, template: TemplateRef<'_>) {
    let decision = decision.as_str();
    let reason = reason.map_or("none", |r| Reason::parse(r).map_or("other", Reason::as_str));
    counter!(
        "herald_intents_created_total",
        "channel" => channel.as_str(),
        "decision" => decision,
        "template" => template.id.to_string(),
        "template_revision" => template.revision.unwrap_or("").to_string()
    )
    .increment(1);
    counter!("herald_decisions_total", "decision" => decision, "reason" => reason).increment(1);
}

/// `duplicate`: the same request replayed; `mismatch`: the same identity with another body.
pub fn idempotency_conflict(kind: &'static str) {
    counter!("herald_idempotency_conflicts_total", "kind" => kind).increment(1);
}

pub fn attempt_started(channel: Channel, provider: &str) {
    counter!("herald_attempts_started_total", "channel" => channel.as_str(), "provider" => provider.to_string())
        .increment(1);
}

pub fn attempt_finished(channel: Channel, provider: &str, outcome: &str, template: TemplateRef<'_>, took: Duration) {
    counter!(
        "herald_attempts_total",
        "channel" => channel.as_str(),
        "provider" => provider.to_string(),
        "outcome" => outcome.to_string(),
        "template" => template.id.to_string(),
        "template_revision" => template.revision.unwrap_or("").to_string()
    )
    .increment(1);
    histogram!("herald_attempt_duration_seconds", "channel" => channel.as_str(), "provider" => provider.to_string())
        .record(took.as_secs_f64());
}

/// An intent planned in shadow mode reached the point where live would have
/// called a provider (`source`: `worker`, or `digest` for a digest closed in shadow).
pub fn shadowed(channel: Channel, template: TemplateRef<'_>, source: &'static str) {
    counter!(
        "herald_intents_shadowed_total",
        "channel" => channel.as_str(),
        "template" => template.id.to_string(),
        "source" => source
    )
    .increment(1);
}

/// A retry after an `unknown` outcome, on a provider that cannot recognise
/// it, that may have reached the recipient again.
pub fn possible_duplicate(provider: &str) {
    counter!("herald_possible_duplicates_total", "provider" => provider.to_string()).increment(1);
}

/// A delivery receipt: `applied`, `late` (the status had gone further),
/// `duplicate`, `not_found`.
pub fn receipt(source: &str, status: &str, result: &'static str) {
    counter!(
        "herald_receipts_total",
        "source" => source.to_string(),
        "status" => status.to_string(),
        "result" => result
    )
    .increment(1);
}

/// A provider's circuit opened: it is skipped for its cool-down.
pub fn circuit_opened(provider: &str) {
    counter!("herald_provider_circuit_opened_total", "provider" => provider.to_string()).increment(1);
}

/// 1 while a provider's circuit is open.
pub fn circuit_state(provider: &str, open: bool) {
    gauge!("herald_provider_circuit_open", "provider" => provider.to_string()).set(if open { 1.0 } else { 0.0 });
}

/// A wrong or missing credential: `api` (a bearer token) or `console` (a
/// sign-in with a token Herald does not know).
pub fn auth_failure(surface: &'static str) {
    counter!("herald_auth_failures_total", "surface" => surface).increment(1);
}

pub fn dead_letter(reason: &str) {
    counter!("herald_dead_letters_total", "reason" => reason.to_string()).increment(1);
}

/// `hit` (answered from Redis), `miss`, `error` (Redis unreachable: the database answered).
pub fn fastpath(result: &'static str) {
    counter!("herald_redis_fastpath_total", "result" => result).increment(1);
}

pub fn queue(stats: QueueStats, now_us: i64) {
    gauge!("herald_queue_depth", "due" => "now").set(stats.due as f64);
    gauge!("herald_queue_depth", "due" => "any").set(stats.total as f64);
    let age = stats.oldest_due_us.map_or(0.0, |t| ((now_us - t).max(0) as f64) / 1e6);
    gauge!("herald_queue_oldest_due_age_seconds").set(age);
}

pub fn ops_digest_posted(ok: bool) {
    counter!("herald_ops_digests_total", "result" => if ok { "posted" } else { "failed" }).increment(1);
}

pub fn pruned(step: &'static str, rows: u64) {
    counter!("herald_retention_pruned_total", "step" => step).increment(rows);
}

/// A bus message's verdict: `accepted` (acked after commit), `rejected`
/// (recorded and terminated), `retry` (a Nak: the store failed).
pub fn bus_message(stream: &str, verdict: &'static str) {
    counter!("herald_bus_messages_total", "stream" => stream.to_string(), "verdict" => verdict).increment(1);
}

/// A bus message recorded in `rejected_messages`, by the error code it got.
pub fn rejected_message(stream: &str, code: &'static str) {
    counter!("herald_rejected_messages_total", "stream" => stream.to_string(), "code" => code).increment(1);
}

/// Status publications the bus acknowledged, and those it did not (tried again).
pub fn publications(published: u64, failed: u64) {
    counter!("herald_publications_total", "result" => "published").increment(published);
    counter!("herald_publications_total", "result" => "failed").increment(failed);
}

/// How many status publications wait, and how long the oldest has.
pub fn publication_backlog(backlog: crate::store::PublicationBacklog, now_us: i64) {
    gauge!("herald_publications_unpublished").set(backlog.unpublished as f64);
    let lag = backlog.oldest_at_us.map_or(0.0, |t| ((now_us - t).max(0) as f64) / 1e6);
    gauge!("herald_publications_lag_seconds").set(lag);
}
