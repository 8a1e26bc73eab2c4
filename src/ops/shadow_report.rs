//! The shadow report: over a time range, what arrived and what Herald did or
//! would have done with it — the figures a team compares with the notifier
//! Herald runs beside before switching anything to live. Derived from stored
//! rows: the ingest tally (every post by how it was answered), the intents
//! (planned in the range), their frozen SMS content, the rejected bus messages.
//! Served as JSON by `GET /v1/shadow/report` and printed as a table by
//! `herald shadow report`.

use crate::clock::rfc3339;
use crate::event::OccurredAt;
use crate::intent::State;
use crate::store::{ReportFilter, StoreResult, TallyKind, ViewStore};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write;

/// The default range: the last day.
const DEFAULT_SPAN_US: i64 = 24 * 3600 * 1_000_000;

/// `since` and `until` (RFC 3339 with an offset, read as `occurred_at` is),
/// defaulting to the day before `now`. An error names the field.
pub fn range(since: Option<&str>, until: Option<&str>, now_us: i64) -> Result<(i64, i64), (&'static str, String)> {
    let read = |field: &'static str, value: Option<&str>| {
        value.map(|v| OccurredAt::parse(v).map(|t| t.timestamp().as_microsecond()).map_err(|m| (field, m))).transpose()
    };
    let until_us = read("until", until)?.unwrap_or(now_us);
    let since_us = read("since", since)?.unwrap_or(until_us.saturating_sub(DEFAULT_SPAN_US));
    if since_us >= until_us {
        return Err(("since", "must be before until".into()));
    }
    Ok((since_us, until_us))
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Duplicates {
    /// The same request again (same identity, same body): its stored answer.
    pub replay: i64,
    /// The same event under another `Idempotency-Key`.
    pub another_key: i64,
    /// The same event posted again without a key.
    pub reemitted: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Mismatches {
    /// A reused `Idempotency-Key` with another body (422).
    pub idempotency_key_mismatch: i64,
    /// An accepted event key with other content (409).
    pub event_conflict: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct SmsSegments {
    pub encoding: String,
    pub messages: i64,
    pub segments: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct TemplateErrors {
    pub template: String,
    /// `template_error` or `sms_too_long`.
    pub reason: String,
    pub count: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ShadowReport {
    #[schema(format = DateTime)]
    pub since: Option<String>,
    #[schema(format = DateTime)]
    pub until: Option<String>,
    /// Null: every tenant.
    pub tenant: Option<String>,
    /// Every post answered in the range (new, duplicate or refused for its identity).
    pub events_received: i64,
    /// Posts that were new requests.
    pub events_new: i64,
    /// Posts that created nothing, by kind.
    pub duplicates: Duplicates,
    pub mismatches: Mismatches,
    /// Intents planned in the range: channel → decision → reason (`none`) → count.
    pub intents: BTreeMap<String, BTreeMap<String, BTreeMap<String, i64>>>,
    /// Shadowed intents by channel: what would have been sent.
    pub would_send: BTreeMap<String, i64>,
    /// Live intents sent, by channel.
    pub sent: BTreeMap<String, i64>,
    /// Shadowed or sent SMS, by encoding: messages and the segments billed.
    pub sms: Vec<SmsSegments>,
    /// Renders that failed when planned, before any send, by template.
    pub template_errors: Vec<TemplateErrors>,
    /// Bus messages that could not become an event.
    pub bus_rejected: i64,
}

/// The report of one tenant (or every tenant) over [since, until).
pub async fn build(
    store: &dyn ViewStore,
    tenant: Option<&str>,
    since_us: i64,
    until_us: i64,
) -> StoreResult<ShadowReport> {
    let rows = store.report_rows(ReportFilter { tenant: tenant.map(str::to_string), since_us, until_us }).await?;
    let mut r = ShadowReport {
        since: rfc3339(since_us),
        until: rfc3339(until_us),
        tenant: tenant.map(str::to_string),
        events_received: 0,
        events_new: 0,
        duplicates: Duplicates::default(),
        mismatches: Mismatches::default(),
        intents: BTreeMap::new(),
        would_send: BTreeMap::new(),
        sent: BTreeMap::new(),
        sms: Vec::new(),
        template_errors: Vec::new(),
        bus_rejected: rows.bus_rejected,
    };
    for (kind, n) in rows.tally {
        r.events_received += n;
        match kind {
            TallyKind::New => r.events_new += n,
            TallyKind::Replay => r.duplicates.replay += n,
            TallyKind::AnotherKey => r.duplicates.another_key += n,
            TallyKind::Reemitted => r.duplicates.reemitted += n,
            TallyKind::Mismatch => r.mismatches.idempotency_key_mismatch += n,
            TallyKind::Conflict => r.mismatches.event_conflict += n,
        }
    }
    for c in rows.intents {
        let reason = c.reason.clone().unwrap_or_else(|| "none".into());
        *r.intents
            .entry(c.channel.as_str().to_string())
            .or_default()
            .entry(c.decision.as_str().to_string())
            .or_default()
            .entry(reason)
            .or_default() += c.n;
        match c.state {
            State::Shadowed => *r.would_send.entry(c.channel.as_str().to_string()).or_default() += c.n,
            State::Sent => *r.sent.entry(c.channel.as_str().to_string()).or_default() += c.n,
            _ => {}
        }
    }
    r.sms = rows
        .sms
        .into_iter()
        .map(|s| SmsSegments {
            encoding: s.encoding.unwrap_or_else(|| "unknown".into()),
            messages: s.messages,
            segments: s.segments,
        })
        .collect();
    r.template_errors = rows
        .template_errors
        .into_iter()
        .map(|t| TemplateErrors { template: t.template_id, reason: t.reason, count: t.n })
        .collect();
    Ok(r)
}

/// The report as the CLI prints it.
pub fn table(r: &ShadowReport) -> String {
    let mut out = String::new();
    let whose = r.tenant.as_deref().map_or("every tenant".to_string(), |t| format!("tenant {t}"));
    let _ = writeln!(
        out,
        "shadow report, {whose}, {} → {}",
        r.since.as_deref().unwrap_or("?"),
        r.until.as_deref().unwrap_or("?")
    );
    let row = |out: &mut String, label: &str, n: i64| {
        let _ = writeln!(out, "  {label:<48} {n:>10}");
    };
    let _ = writeln!(out, "\nposts");
    row(&mut out, "events received", r.events_received);
    row(&mut out, "new", r.events_new);
    row(&mut out, "duplicate: exact replay", r.duplicates.replay);
    row(&mut out, "duplicate: same event, another Idempotency-Key", r.duplicates.another_key);
    row(&mut out, "duplicate: re-emitted, same identity", r.duplicates.reemitted);
    row(&mut out, "mismatch: Idempotency-Key with another body", r.mismatches.idempotency_key_mismatch);
    row(&mut out, "mismatch: event with other content", r.mismatches.event_conflict);
    row(&mut out, "bus messages rejected", r.bus_rejected);
    let _ = writeln!(out, "\nintents by channel, decision, reason");
    if r.intents.is_empty() {
        let _ = writeln!(out, "  (none)");
    }
    for (channel, decisions) in &r.intents {
        for (decision, reasons) in decisions {
            for (reason, n) in reasons {
                row(&mut out, &format!("{channel:<8} {decision:<9} {reason}"), *n);
            }
        }
    }
    let _ = writeln!(out, "\nwould send (shadowed) / sent (live), by channel");
    let channels: std::collections::BTreeSet<&String> = r.would_send.keys().chain(r.sent.keys()).collect();
    if channels.is_empty() {
        let _ = writeln!(out, "  (none)");
    }
    for c in channels {
        let _ = writeln!(
            out,
            "  {c:<22} would send {:>10}   sent {:>10}",
            r.would_send.get(c).copied().unwrap_or(0),
            r.sent.get(c).copied().unwrap_or(0)
        );
    }
    let _ = writeln!(out, "\nSMS by encoding");
    if r.sms.is_empty() {
        let _ = writeln!(out, "  (none)");
    }
    for s in &r.sms {
        let _ = writeln!(out, "  {:<22} messages {:>10}   segments {:>10}", s.encoding, s.messages, s.segments);
    }
    let _ = writeln!(out, "\ntemplate errors caught before any send");
    if r.template_errors.is_empty() {
        let _ = writeln!(out, "  (none)");
    }
    for t in &r.template_errors {
        row(&mut out, &format!("{} ({})", t.template, t.reason), t.count);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_range_defaults_to_the_last_day_and_names_a_bad_field() {
        let now = 1_800_000_000_000_000;
        assert_eq!(range(None, None, now), Ok((now - DEFAULT_SPAN_US, now)));
        let (since, until) = range(Some("2026-11-29T00:00:00Z"), Some("2026-11-30T00:00:00+00:00"), now).unwrap();
        assert_eq!(until - since, DEFAULT_SPAN_US);
        assert_eq!(range(Some("yesterday"), None, now).unwrap_err().0, "since");
        assert_eq!(range(None, Some("2026-11-30T00:00:00"), now).unwrap_err().0, "until");
        let e = range(Some("2026-11-30T00:00:00Z"), Some("2026-11-29T00:00:00Z"), now).unwrap_err();
        assert_eq!(e, ("since", "must be before until".to_string()));
    }
}
