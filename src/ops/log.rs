//! The structured lines an investigation of one notification reads, and how
//! they are sampled without losing the rare paths.
//!
//! Two kinds of line, each with the same fields: `intent` (created, or
//! reused and by which kind of duplicate) and `attempt` (one per transition:
//! sent, retry, unknown, dead). Only the routine ones — an intent created to
//! be sent, an attempt the provider accepted — carry a [`SAMPLE_BY`] field,
//! the intent key; [`SampleRoutine`] keeps such a line when the key's hash
//! falls under `[log] sample_accepted`, so one notification's routine lines
//! are kept or dropped together. Every other line (conflicts, mismatches,
//! duplicates, decisions not to send, `unknown`, retries, dead letters) has
//! no such field and is always kept. Counters are metrics, never sampled.

use crate::event::Channel;
use crate::event::identity::sha256_hex;
use crate::intent::{Decision, State};
use crate::store::IntentSummary;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

/// The field a routine line is sampled by: the intent key.
pub const SAMPLE_BY: &str = "sample_by";

/// Keeps a share of the routine lines, chosen by intent key.
#[derive(Debug, Clone, Copy)]
pub struct SampleRoutine {
    ratio: f64,
}

impl SampleRoutine {
    /// `ratio` is `[log] sample_accepted`, validated to 0..=1 at load.
    pub fn new(ratio: f64) -> SampleRoutine {
        SampleRoutine { ratio: ratio.clamp(0.0, 1.0) }
    }

    /// Whether a routine line about `key` is kept: the same answer for the
    /// same key in every process, so a notification's ingest and worker
    /// lines go together.
    pub fn keeps(&self, key: &str) -> bool {
        if self.ratio >= 1.0 {
            return true;
        }
        let digest = sha256_hex(key.as_bytes());
        let top = u64::from_str_radix(&digest[..16], 16).unwrap_or(0);
        // The share of the 2^64 hash space below the ratio.
        (top as f64) < self.ratio * 18_446_744_073_709_551_616.0
    }
}

impl<S: Subscriber> Layer<S> for SampleRoutine {
    fn event_enabled(&self, event: &Event<'_>, _: Context<'_, S>) -> bool {
        if self.ratio >= 1.0 || event.metadata().fields().field(SAMPLE_BY).is_none() {
            return true;
        }
        let mut key = SampleKey(None);
        event.record(&mut key);
        key.0.is_none_or(|k| self.keeps(&k))
    }
}

struct SampleKey(Option<String>);

impl Visit for SampleKey {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == SAMPLE_BY {
            self.0 = Some(value.to_string());
        }
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == SAMPLE_BY {
            self.0 = Some(format!("{value:?}"));
        }
    }
}

/// Why an intent a request names already existed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Duplicate {
    /// The same request again (same identity, same body): its stored answer.
    Replay,
    /// The same event under another `Idempotency-Key`.
    AnotherKey,
    /// The same event posted again without a key (another audience, or the
    /// sender re-emitting it).
    Reemitted,
}

impl Duplicate {
    pub fn as_str(self) -> &'static str {
        match self {
            Duplicate::Replay => "replay",
            Duplicate::AnotherKey => "another_key",
            Duplicate::Reemitted => "reemitted",
        }
    }
}

/// The template an intent was (or would be) rendered from.
#[derive(Debug, Clone, Copy)]
pub struct TemplateRef<'a> {
    pub id: &'a str,
    pub revision: Option<&'a str>,
}

/// One line per intent a request named: created, or reused as `duplicate`
/// (a replay's stored answer says `created` as it was first answered).
pub fn intent(trace_id: &str, i: &IntentSummary, template: TemplateRef<'_>, duplicate: Option<Duplicate>) {
    let revision = template.revision.unwrap_or("");
    let reason = i.reason.as_deref().unwrap_or("");
    let created = i.created && duplicate.is_none();
    let outcome = if created { "created" } else { "reused" };
    let duplicate = duplicate.map_or("", Duplicate::as_str);
    // Created and queued to be sent: routine. A template error is created
    // with decision `send` too, but dead: never routine.
    if created && i.decision == Decision::Send && i.state == State::Queued {
        tracing::info!(
            sample_by = %i.key, trace_id, intent = %i.key, attempt = 0, channel = %i.channel,
            template = template.id, template_revision = revision, outcome, duplicate,
            decision = %i.decision, reason, state = %i.state, "intent"
        );
    } else {
        tracing::info!(
            trace_id, intent = %i.key, attempt = 0, channel = %i.channel,
            template = template.id, template_revision = revision, outcome, duplicate,
            decision = %i.decision, reason, state = %i.state, "intent"
        );
    }
}

/// What one attempt led to, as its line tells it.
#[derive(Debug, Clone, Copy)]
pub struct AttemptLine<'a> {
    pub key: &'a str,
    pub n: i64,
    pub channel: Channel,
    pub template: TemplateRef<'a>,
    pub provider: &'a str,
    /// `accepted`, `retryable`, `unknown` or `permanent`.
    pub outcome: &'a str,
    /// The provider's error class, if any.
    pub error_class: &'a str,
    /// `sent`, `retry` or `dead`.
    pub next: &'a str,
    pub possible_duplicate: bool,
    pub trace_id: Option<&'a str>,
}

/// One line per attempt transition; only an accepted, sent attempt is routine.
pub fn attempt(a: AttemptLine<'_>) {
    let revision = a.template.revision.unwrap_or("");
    let trace_id = a.trace_id.unwrap_or("");
    if a.outcome == "accepted" && a.next == "sent" {
        tracing::info!(
            sample_by = a.key,
            trace_id,
            intent = a.key,
            attempt = a.n,
            channel = a.channel.as_str(),
            template = a.template.id,
            template_revision = revision,
            provider = a.provider,
            outcome = a.outcome,
            error_class = a.error_class,
            next = a.next,
            possible_duplicate = a.possible_duplicate,
            "attempt"
        );
    } else {
        tracing::warn!(
            trace_id,
            intent = a.key,
            attempt = a.n,
            channel = a.channel.as_str(),
            template = a.template.id,
            template_revision = revision,
            provider = a.provider,
            outcome = a.outcome,
            error_class = a.error_class,
            next = a.next,
            possible_duplicate = a.possible_duplicate,
            "attempt"
        );
    }
}

/// An intent planned in shadow mode ended `shadowed` where live would have
/// called a provider: a decision not to send, so always kept. The destination
/// is never logged (the intent's API view shows it masked).
pub fn shadowed(key: &str, channel: Channel, template: TemplateRef<'_>, trace_id: Option<&str>) {
    tracing::info!(
        trace_id = trace_id.unwrap_or(""),
        intent = key,
        attempt = 0,
        channel = channel.as_str(),
        template = template.id,
        template_revision = template.revision.unwrap_or(""),
        provider = "none",
        outcome = "shadowed",
        error_class = "",
        next = "shadowed",
        possible_duplicate = false,
        "attempt"
    );
}

/// The target sqlx logs a Postgres notice under, at info whatever it says.
pub const PG_NOTICES: &str = "sqlx::postgres::notice";

/// `filter` with Postgres's notices kept out of an info log. Each start's
/// migration check creates `_sqlx_migrations` "if not exists", and Postgres
/// answers with a notice ("relation … already exists, skipping") that sqlx
/// would log at info on every start of every process. They still show when
/// the filter asks for debug or trace everywhere, or names a `sqlx` target
/// itself (`HERALD_LOG=info,sqlx::postgres::notice=info`).
pub fn quiet_notices(filter: &str) -> String {
    let directives: Vec<&str> = filter.split(',').map(str::trim).filter(|d| !d.is_empty()).collect();
    let everywhere = |level: &str| directives.iter().any(|d| d.eq_ignore_ascii_case(level));
    let names_sqlx = directives.iter().any(|d| d.starts_with("sqlx"));
    if everywhere("info") && !everywhere("debug") && !everywhere("trace") && !names_sqlx {
        format!("{},{PG_NOTICES}=warn", directives.join(","))
    } else {
        filter.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_notices_stay_out_of_an_info_log_unless_asked_for() {
        assert_eq!(quiet_notices("info"), "info,sqlx::postgres::notice=warn");
        assert_eq!(quiet_notices("herald=debug, info"), "herald=debug,info,sqlx::postgres::notice=warn");
        assert_eq!(quiet_notices("warn,herald=debug"), "warn,herald=debug", "no notice shows at warn anyway");
        assert_eq!(quiet_notices("debug"), "debug");
        assert_eq!(quiet_notices("info,sqlx=info"), "info,sqlx=info");
        assert_eq!(quiet_notices("info,sqlx::postgres::notice=info"), "info,sqlx::postgres::notice=info");
    }

    #[test]
    fn sampling_is_by_key_and_keeps_about_the_ratio() {
        let keys: Vec<String> = (0..10_000).map(|n| format!("key-{n}")).collect();
        let kept = |r: f64| keys.iter().filter(|k| SampleRoutine::new(r).keeps(k)).count();
        assert_eq!(kept(0.0), 0);
        assert_eq!(kept(1.0), keys.len());
        let tenth = kept(0.1);
        assert!((800..1200).contains(&tenth), "{tenth} of 10000 kept at 0.1");
        // A key kept at a ratio is kept at every higher ratio: raising it
        // only adds notifications, never swaps them.
        for k in &keys {
            if SampleRoutine::new(0.1).keeps(k) {
                assert!(SampleRoutine::new(0.5).keeps(k), "{k}");
            }
        }
    }
}
