//! `herald why`: the answer to "did they get told, and if not, why?" as a
//! readable timeline — each event received, the decision and its reason with
//! the preferences version that made it, every attempt, and where it ended.

use crate::clock::rfc3339;
use crate::intent::{Mode, State};
use crate::recipient::mask_for_channel;
use crate::redact::provider_text;
use crate::store::{IntentDetail, IntentFilter, ReplayRow, StoreResult, ViewStore};
use std::fmt::Write;
use std::time::Duration;

/// Every intent for (entity, recipient), oldest first, with its attempts.
pub async fn history(
    store: &dyn ViewStore,
    tenant: &str,
    entity: (&str, &str),
    recipient: &str,
) -> StoreResult<Vec<IntentDetail>> {
    let mut keys = Vec::new();
    let mut cursor = None;
    loop {
        let page = store
            .intents_list(IntentFilter {
                tenant: Some(tenant.to_string()),
                entity: Some((entity.0.to_string(), entity.1.to_string())),
                recipient_id: Some(recipient.to_string()),
                state: None,
                cursor: cursor.take(),
                limit: 200,
            })
            .await?;
        keys.extend(page.items.into_iter().map(|i| i.key));
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let mut out = Vec::new();
    for key in keys.iter().rev() {
        if let Some(d) = store.intent_get(tenant, key).await? {
            out.push(d);
        }
    }
    Ok(out)
}

/// The reason that goes with a decision. An intent keeps one `reason`, which
/// ends up saying how it ended (`retries_exhausted`, `hard_bounce`); only a
/// suppression's reason is the decision's own, and a hold is always for quiet
/// hours. A send has no reason of its own, nor a digest member, unless the
/// frequency cap put it there.
pub fn decision_reason<'r>(decision: &str, reason: Option<&'r str>) -> Option<&'r str> {
    match decision {
        "suppress" => reason,
        "hold" => Some("quiet_hours"),
        "digest" => reason.filter(|r| *r == "frequency_cap"),
        _ => None,
    }
}

fn time(us: i64) -> String {
    rfc3339(us).unwrap_or_else(|| us.to_string())
}

/// The timeline as text.
pub fn timeline(entity: (&str, &str), recipient: &str, intents: &[IntentDetail]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}:{} → {recipient}", entity.0, entity.1);
    if intents.is_empty() {
        let _ =
            writeln!(out, "  no notification was ever planned for this pair (no event named them, or it was pruned)");
        return out;
    }
    for d in intents {
        let i = &d.intent;
        let version = i.entity_version.map(|v| format!(" v{v}")).unwrap_or_default();
        let _ = writeln!(out, "\n[{}] {}  {}{version}  (key {})", i.channel, i.event_type, i.occurred_at, i.key);
        let _ = writeln!(out, "  {}  event received", time(i.created_at));
        let prefs = i.preferences_version.map(|v| format!(", preferences v{v}")).unwrap_or_default();
        let reason = i.reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default();
        let why_decided =
            decision_reason(i.decision.as_str(), i.reason.as_deref()).map(|r| format!(" ({r})")).unwrap_or_default();
        let to =
            i.destination.as_deref().map(|d| format!(" to {}", mask_for_channel(i.channel, d))).unwrap_or_default();
        let locale = i.locale.as_deref().map(|l| format!(", locale {l}")).unwrap_or_default();
        let shadow = if i.mode == Mode::Shadow { ", in shadow mode" } else { "" };
        let _ =
            writeln!(out, "  {}  decided: {}{why_decided}{prefs}{to}{locale}{shadow}", time(i.created_at), i.decision);
        if let Some(detail) = &i.detail {
            let detail = crate::suppression::named_detail(&i.tenant, detail);
            let _ = writeln!(out, "  {}  note: {detail}", " ".repeat(time(i.created_at).len()));
        }
        let mut replays = d.replays.iter().peekable();
        for a in &d.attempts {
            while let Some(r) = replays.next_if(|r| r.replayed_at <= a.started_at) {
                replayed(&mut out, r);
            }
            let _ = writeln!(out, "  {}  attempt {} started", time(a.started_at), a.n);
            let Some(finished) = a.finished_at else {
                let _ = writeln!(out, "  {}  attempt {} still running", " ".repeat(time(a.started_at).len()), a.n);
                continue;
            };
            let mut line = format!("attempt {} {}", a.n, a.outcome.map_or("?", |o| o.as_str()));
            if let Some(p) = &a.provider {
                let _ = write!(line, " via {p}");
            }
            if let Some(c) = &a.error_class {
                let _ = write!(line, ": {c}");
            }
            if let Some(s) = a.provider_status {
                let _ = write!(line, ", status {s}");
            }
            if let Some(m) = &a.provider_message_id {
                let m = crate::channel::sink::shown_message_id(a.provider.as_deref(), m);
                let _ = write!(line, ", provider id {m}");
            }
            if let Some(e) = &a.error {
                let _ = write!(line, " — {}", provider_text(e, i.channel, i.destination.as_deref()));
            }
            if a.possible_duplicate {
                line.push_str(
                    "; POSSIBLE DUPLICATE: an earlier attempt's outcome was unknown and this provider cannot recognise a retry",
                );
            }
            if let Some(at) = a.retry_at {
                let _ = write!(line, "; next try {}", time(at));
                if let Some(us) = a.retry_after {
                    let _ = write!(
                        line,
                        " (Retry-After honoured: {})",
                        crate::config::format_duration(Duration::from_micros(us.max(0) as u64))
                    );
                }
            }
            let _ = writeln!(out, "  {}  {line}", time(finished));
        }
        for r in replays {
            replayed(&mut out, r);
        }
        if d.attempts.iter().any(|a| a.possible_duplicate) {
            let reached = crate::deliver::duplicate::messages_may_have_reached(&d.attempts);
            let _ = writeln!(
                out,
                "  {}  up to {reached} messages may have reached the person: every attempt after the first unknown \
                 one on a provider that cannot recognise a retry may have been another message",
                " ".repeat(time(i.updated_at).len())
            );
        }
        for r in &d.receipts {
            let mut line = format!("receipt from {}: {}", r.source, r.status);
            if r.provider_status != r.status {
                let _ = write!(line, " ({})", r.provider_status);
            }
            if let Some(reason) = &r.reason {
                let _ = write!(line, " — {}", provider_text(reason, i.channel, i.destination.as_deref()));
            }
            if !r.applied {
                line.push_str(" [late or repeated: the status had gone further]");
            }
            if r.ended_retry {
                line.push_str("; the provider had the message, so the pending retry was called off");
            }
            let _ = writeln!(out, "  {}  {line}", time(r.received_at));
        }
        let link = match (&i.link_key, i.reason.as_deref()) {
            (Some(k), Some("superseded")) => format!(", superseded by {k}"),
            (Some(k), _) => format!(", in digest {k}"),
            _ => String::new(),
        };
        if i.state == State::Shadowed {
            let to = match i.destination.as_deref() {
                Some(d) => mask_for_channel(i.channel, d),
                None => "the recipient's in-app inbox (no card was shown)".to_string(),
            };
            let _ = writeln!(
                out,
                "  {}  shadow mode: would have sent {} to {to}; no provider was called",
                time(i.updated_at),
                i.channel
            );
        }
        let _ = writeln!(out, "  {}  now {}{reason}{link}", time(i.updated_at), i.state);
    }
    out
}

/// A replay from the dead letters, where it falls between the attempts.
fn replayed(out: &mut String, r: &ReplayRow) {
    let who = r.requested_by.as_deref().map(|w| format!(" by {w}")).unwrap_or_default();
    let reason = r.previous_reason.as_deref().map(|p| format!(" (dead letter: {p})")).unwrap_or_default();
    let _ = writeln!(out, "  {}  replayed{who}{reason}: queued again with a fresh retry budget", time(r.replayed_at));
}
