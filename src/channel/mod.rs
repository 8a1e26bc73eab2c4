//! Channels: the seam between a claimed intent and a provider. Each provider
//! makes one call and classifies what happened (DESIGN §5); the worker bounds
//! the call by the provider's timeout and turns the outcome into a state
//! transition.
//!
//! The classification rests on one question: can the provider have acted on
//! the request? A connection that never opened (refused, no such host, a
//! connect that timed out) sent nothing, so it is retryable. A timeout or a
//! lost connection once the request may have left is `unknown` (DESIGN rule 8).

pub mod destination;
pub mod failover;
mod http;
pub mod in_app;
pub mod sink;
pub mod sms_http;
pub mod smtp;
pub mod twilio;
pub mod webhook;

use crate::event::Channel;
use crate::intent::{OutcomeClass, Reason};
use crate::recipient::{Kind, redact, redact_for_channel};
use crate::render::Content;
use async_trait::async_trait;
use std::borrow::Cow;
use std::time::Duration;

/// One message to hand to a provider: the intent's frozen content and
/// destination, never re-read from the directory or re-rendered.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub key: String,
    pub tenant: String,
    pub recipient_id: String,
    pub destination: Option<String>,
    pub entity_type: String,
    pub entity_id: String,
    pub entity_version: Option<i64>,
    pub occurred_at: String,
    pub event_type: String,
    pub payload_digest: Option<String>,
    pub content: Content,
    pub attempt: i64,
    /// The call must be over by then: the worker abandons it a moment later
    /// (as `unknown`), so a provider that tracks how far it got should stop
    /// here and say so itself.
    pub deadline: tokio::time::Instant,
}

/// What one provider call came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Accepted {
        status: Option<u16>,
        message_id: Option<String>,
    },
    /// Worth trying again; `retry_after` is the provider's floor.
    Retryable {
        class: Reason,
        status: Option<u16>,
        error: String,
        retry_after: Option<Duration>,
    },
    /// The request may or may not have been acted on (a timeout or a lost
    /// connection after it was sent): `class` says which. Retried with the
    /// same downstream key.
    Unknown {
        class: Reason,
        error: String,
    },
    Permanent {
        reason: Reason,
        status: Option<u16>,
        error: String,
    },
}

impl Outcome {
    /// What the call means for its intent ([`crate::lifecycle::outcome`]).
    pub fn called(&self) -> crate::lifecycle::outcome::Called {
        use crate::lifecycle::outcome::Called;
        match self {
            Outcome::Accepted { .. } => Called::Accepted,
            Outcome::Permanent { reason, .. } => Called::Permanent { reason: *reason },
            Outcome::Retryable { retry_after, .. } => Called::Retryable { retry_after: *retry_after },
            Outcome::Unknown { .. } => Called::Unknown,
        }
    }

    /// The outcome with its destination kept out of the error text, however
    /// the provider (or its client library) wrote it back: what an attempt
    /// records is shown to readers who may see destinations only masked.
    pub fn redacted(self, kind: Kind, destination: Option<&str>) -> Outcome {
        let clean = |error: String| match destination {
            Some(d) => redact(&error, kind, d),
            None if kind == Kind::Email => redact_for_channel(&error, Channel::Email, None),
            None => error,
        };
        match self {
            Outcome::Retryable { class, status, error, retry_after } => {
                Outcome::Retryable { class, status, error: clean(error), retry_after }
            }
            Outcome::Unknown { class, error } => Outcome::Unknown { class, error: clean(error) },
            Outcome::Permanent { reason, status, error } => Outcome::Permanent { reason, status, error: clean(error) },
            accepted @ Outcome::Accepted { .. } => accepted,
        }
    }

    pub fn class(&self) -> OutcomeClass {
        match self {
            Outcome::Accepted { .. } => OutcomeClass::Accepted,
            Outcome::Retryable { .. } => OutcomeClass::Retryable,
            Outcome::Unknown { .. } => OutcomeClass::Unknown,
            Outcome::Permanent { .. } => OutcomeClass::Permanent,
        }
    }
}

#[async_trait]
pub trait Provider: Send + Sync {
    /// The provider's name as attempts record it and metrics label it: from
    /// the configuration, so a bounded set.
    fn name(&self) -> &str;

    /// Whether the provider can recognise a retry of a call whose outcome
    /// was `unknown` (an idempotency key it honours, a stable Message-ID).
    /// When it cannot, such a retry is recorded as a possible duplicate.
    fn dedupes_retries(&self) -> bool;

    /// The longest one call may take, from the first connect to the final
    /// answer; shorter than the worker's lease. The worker enforces it.
    fn timeout(&self) -> Duration;

    /// One call, over by `delivery.deadline`.
    async fn send(&self, delivery: &Delivery) -> Outcome;

    /// Whether [`Provider::pick`] needs the intent's earlier attempts.
    fn needs_history(&self) -> bool {
        false
    }

    /// The provider that makes this attempt when it is not this one: for a
    /// failover chain, the member its rules choose from the earlier attempts.
    fn pick(&self, _delivery: &Delivery, _earlier: &[crate::store::AttemptRow]) -> Option<&dyn Provider> {
        None
    }

    /// What the chosen member's call came to (a chain's breakers count it).
    fn observe(&self, _member: &str, _outcome: &Outcome) {}
}

/// How long opening a connection may take: at most half the call, so a
/// connect that hangs fails as a connect (nothing sent, retryable) before the
/// whole call runs out.
pub fn connect_timeout(call: Duration) -> Duration {
    (call / 2).min(Duration::from_secs(5))
}

/// Provider error text as stored on the attempt: bounded, one line.
pub fn short_error(text: &str) -> String {
    let one_line: String = text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    let mut out: String = one_line.chars().take(300).collect();
    if one_line.chars().count() > 300 {
        out.push('…');
    }
    out
}

/// A value for a header-like line (a sink file's `Subject:`, an SMTP header):
/// CR, LF and every other control or line-separator character becomes a
/// space, so data from an event can never end the line and start a forged
/// one (`Bcc: …`).
pub fn header_value(value: &str) -> Cow<'_, str> {
    let breaks = |c: char| c.is_control() || matches!(c, '\u{2028}' | '\u{2029}');
    if !value.contains(breaks) {
        return Cow::Borrowed(value);
    }
    Cow::Owned(value.chars().map(|c| if breaks(c) { ' ' } else { c }).collect())
}

/// A provider's message id as stored: printable, at most 200 characters
/// (the database refuses a NUL, and an id is not a place for an essay).
pub fn clean_id(id: &str) -> Option<String> {
    let id: String = id.chars().filter(|c| !c.is_control()).take(200).collect();
    (!id.is_empty()).then_some(id)
}

/// `Retry-After` as the provider wrote it (RFC 9110 §10.2.3): a number of
/// seconds, or an HTTP date in any of its three forms. A number too large
/// for a `u64` is as good as forever (the retry policy caps it); a date in
/// the past means now.
pub fn parse_retry_after(value: &str, now: jiff::Timestamp) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        return Some(Duration::from_secs(value.parse::<u64>().unwrap_or(u64::MAX)));
    }
    let at = http_date(value)?;
    Some(Duration::try_from(at.duration_since(now)).unwrap_or(Duration::ZERO))
}

/// IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), and the obsolete RFC 850
/// (`Sunday, 06-Nov-94 08:49:37 GMT`) and asctime (`Sun Nov  6 08:49:37 1994`)
/// forms a recipient must still accept.
fn http_date(value: &str) -> Option<jiff::Timestamp> {
    if let Ok(z) = jiff::fmt::rfc2822::parse(value) {
        return Some(z.timestamp());
    }
    ["%A, %d-%b-%y %H:%M:%S GMT", "%a %b %e %H:%M:%S %Y"].iter().find_map(|format| {
        let civil = jiff::fmt::strtime::parse(format, value).ok()?.to_datetime().ok()?;
        civil.to_zoned(jiff::tz::TimeZone::UTC).ok().map(|z| z.timestamp())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_takes_seconds_or_a_date() {
        let now: jiff::Timestamp = "2026-11-30T10:00:00Z".parse().unwrap();
        assert_eq!(parse_retry_after("120", now), Some(Duration::from_secs(120)));
        assert_eq!(parse_retry_after("Mon, 30 Nov 2026 10:01:00 GMT", now), Some(Duration::from_secs(60)));
        assert_eq!(parse_retry_after("Mon, 30 Nov 2026 09:00:00 GMT", now), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-5", now), None);
        assert_eq!(parse_retry_after("", now), None);
    }

    #[test]
    fn retry_after_takes_the_obsolete_date_forms_too() {
        let now: jiff::Timestamp = "2026-11-30T10:00:00Z".parse().unwrap();
        assert_eq!(parse_retry_after("Monday, 30-Nov-26 10:02:00 GMT", now), Some(Duration::from_secs(120)));
        assert_eq!(parse_retry_after("Mon Nov 30 10:00:30 2026", now), Some(Duration::from_secs(30)));
        assert_eq!(parse_retry_after("Tue Dec  1 10:00:00 2026", now), Some(Duration::from_secs(86_400)));
    }

    #[test]
    fn a_retry_after_too_large_for_a_number_is_forever_not_zero() {
        let now = jiff::Timestamp::UNIX_EPOCH;
        assert_eq!(parse_retry_after(&u64::MAX.to_string(), now), Some(Duration::from_secs(u64::MAX)));
        assert_eq!(parse_retry_after("99999999999999999999999999", now), Some(Duration::from_secs(u64::MAX)));
    }

    #[test]
    fn a_header_value_is_always_one_line() {
        assert_eq!(header_value("PO-1 approved"), "PO-1 approved");
        assert_eq!(header_value("a\r\nBcc: x@evil.example"), "a  Bcc: x@evil.example");
        assert_eq!(header_value("a\nb\rc\u{85}d\u{2028}e\u{2029}f\tg"), "a b c d e f g");
    }

    #[test]
    fn errors_are_bounded_to_one_line() {
        let e = short_error(&format!("a\nb{}", "x".repeat(400)));
        assert!(!e.contains('\n') && e.chars().count() == 301);
    }
}
