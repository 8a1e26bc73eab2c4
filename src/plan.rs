//! The planner: (event, route, recipient snapshot, preferences, clock) → one
//! intent per (channel, recipient) with its decision and reason. Pure: it reads
//! nothing and writes nothing, so every decision can be tested without a
//! database. The order of the checks is the precedence of the reasons:
//!
//! 1. the deployment has no provider for the channel → `suppress`/`channel_disabled`
//! 2. the recipient opted out of the channel → `suppress`/`opted_out` (even on a critical route)
//! 3. no address for the channel → `suppress`/`no_destination`; the address is on
//!    the tenant's suppression list → `suppress`/`address_bounced` or
//!    `address_complained` (even on a critical route: it cannot arrive, or was
//!    refused), with the entry it matched in `detail`
//! 4. rendering fails → dead `template_error`; an SMS over budget → dead `sms_too_long`
//! 5. quiet hours (not on a critical route) → `hold`/`quiet_hours` until the window ends
//! 6. a digest route (not critical, recipient not opted out of digests) → `digest`
//! 7. otherwise → `send`
//!
//! An intent to be sent or held (5, 7) carries the frequency cap its route and
//! channel are held to ([`CapCheck`]); the transaction that writes it counts the
//! recipient's recent messages and suppresses it (`frequency_cap`), or folds it
//! into its route's digest, when it is over ([`crate::store::caps`]).

use crate::config::{Caps, Route};
use crate::event::identity::sha256_hex;
use crate::event::{Channel, Event, RecipientSpec, Tenant};
use crate::intent::{Decision, Mode, Reason, State};
use crate::preferences::Preferences;
use crate::render::{Rendered, TemplateSet};
use crate::store::{CapCheck, NewDigest, NewIntent, RecipientRow, SuppressionRow};
use jiff::Timestamp;
use jiff::tz::TimeZone;
use std::collections::HashMap;

pub struct PlanInput<'a> {
    pub tenant: &'a Tenant,
    pub event: &'a Event,
    pub route: &'a Route,
    pub templates: &'a TemplateSet,
    /// Directory entries of the event's recipients, by id.
    pub directory: &'a HashMap<String, RecipientRow>,
    /// Whether this deployment delivers on a channel.
    pub configured: &'a dyn Fn(Channel) -> bool,
    /// The tenant's suppression entries for the event's addresses, by the
    /// address normalised ([`crate::suppression::normalised`]).
    pub suppressions: &'a HashMap<String, SuppressionRow>,
    /// The deployment's `[caps]` (a route's own replace them).
    pub caps: &'a Caps,
    pub now: Timestamp,
}

/// The channels an event goes out on: its own list when given, else the route's.
pub fn channels(event: &Event, route: &Route) -> Vec<Channel> {
    event.channels.clone().unwrap_or_else(|| route.channels.clone())
}

/// Inline fields override the directory, for this event only. The result is
/// what the intent freezes: a later directory change never alters it.
pub fn snapshot(inline: &RecipientSpec, entry: Option<&RecipientRow>) -> RecipientSpec {
    let pick = |own: &Option<String>, dir: Option<&Option<String>>| own.clone().or_else(|| dir.cloned().flatten());
    RecipientSpec {
        id: inline.id.clone(),
        email: pick(&inline.email, entry.map(|e| &e.email)),
        phone: pick(&inline.phone, entry.map(|e| &e.phone)),
        locale: pick(&inline.locale, entry.map(|e| &e.locale)),
        timezone: pick(&inline.timezone, entry.map(|e| &e.timezone)),
        webhook_url: pick(&inline.webhook_url, entry.map(|e| &e.webhook_url)),
    }
}

/// Where a channel delivers for this recipient; in-app needs no address.
pub fn destination(channel: Channel, r: &RecipientSpec) -> Result<Option<String>, Reason> {
    let addr = match channel {
        Channel::InApp => return Ok(None),
        Channel::Email => &r.email,
        Channel::Sms => &r.phone,
        Channel::Webhook => &r.webhook_url,
    };
    addr.clone().map(Some).ok_or(Reason::NoDestination)
}

/// The suppression entry of this channel's address, if the list has one.
fn suppressed<'a>(input: &'a PlanInput<'_>, channel: Channel, address: Option<&str>) -> Option<&'a SuppressionRow> {
    let kind = crate::suppression::kind_of(channel.as_str())?;
    input.suppressions.get(&crate::suppression::normalised(kind, address?))
}

/// The preferences in force for a directory entry, with their version. Stored
/// preferences were validated when written; unreadable ones count as none.
fn preferences_of(entry: Option<&RecipientRow>) -> (Preferences, Option<i64>) {
    let Some(row) = entry else {
        return (Preferences::default(), None);
    };
    let parsed = serde_json::from_str(&row.preferences).ok().and_then(|v| Preferences::parse(&v).ok());
    (parsed.unwrap_or_default(), Some(row.preferences_version))
}

pub fn plan(input: &PlanInput<'_>) -> Vec<NewIntent> {
    let mut out = Vec::new();
    for inline in &input.event.recipients {
        let entry = input.directory.get(&inline.id);
        let recipient = snapshot(inline, entry);
        let (prefs, version) = preferences_of(entry);
        for channel in channels(input.event, input.route) {
            out.push(plan_one(input, channel, &recipient, &prefs, version));
        }
    }
    out
}

fn set(intent: &mut NewIntent, decision: Decision, state: State, reason: Option<Reason>) {
    intent.decision = decision;
    intent.state = state;
    intent.reason = reason;
}

/// One intent, in a span of its own that says what was decided (keys and
/// bounded names only: never the destination or the content).
fn plan_one(
    input: &PlanInput<'_>,
    channel: Channel,
    recipient: &RecipientSpec,
    prefs: &Preferences,
    version: Option<i64>,
) -> NewIntent {
    let key = input.event.notification_key(input.tenant, channel, &recipient.id);
    let span = tracing::info_span!(
        "intent",
        herald.intent_key = %key,
        herald.channel = channel.as_str(),
        herald.template = %input.route.template,
        herald.template_revision = tracing::field::Empty,
        herald.decision = tracing::field::Empty,
        herald.reason = tracing::field::Empty,
    )
    .entered();
    let intent = decide(input, channel, recipient, prefs, version, key.to_string());
    if let Some(revision) = &intent.template_revision {
        span.record("herald.template_revision", revision.as_str());
    }
    span.record("herald.decision", intent.decision.as_str());
    if let Some(reason) = &intent.reason {
        span.record("herald.reason", reason.as_str());
    }
    if intent.state == State::Dead {
        crate::ops::trace::fail(&span, "dead at planning");
    }
    intent
}

fn decide(
    input: &PlanInput<'_>,
    channel: Channel,
    recipient: &RecipientSpec,
    prefs: &Preferences,
    version: Option<i64>,
    key: String,
) -> NewIntent {
    let route = input.route;
    let mut intent = NewIntent {
        key,
        channel,
        recipient_id: recipient.id.clone(),
        destination: None,
        locale: recipient.locale.clone(),
        template_id: route.template.clone(),
        template_revision: input.templates.meta(&route.template).map(|m| m.revision.clone()),
        payload: None,
        decision: Decision::Send,
        reason: None,
        detail: None,
        state: State::Queued,
        run_at: None,
        preferences_version: version,
        digest: None,
        // The deployment's setting, applied by the caller (`ingest`).
        mode: Mode::Live,
        cap: None,
    };
    if !(input.configured)(channel) {
        set(&mut intent, Decision::Suppress, State::Suppressed, Some(Reason::ChannelDisabled));
        return intent;
    }
    if prefs.opted_out(channel) {
        set(&mut intent, Decision::Suppress, State::Suppressed, Some(Reason::OptedOut));
        // The part of the preferences that decided, so support can show it.
        let switched_off = format!(
            "\"channels\": {{\"{}\": false}}{}",
            channel.as_str(),
            version.map(|v| format!(" in preferences v{v}")).unwrap_or_default()
        );
        intent.detail = Some(match route.critical {
            true => format!("{switched_off}: critical route, but an explicit opt-out is always honoured"),
            false => switched_off,
        });
        return intent;
    }
    match destination(channel, recipient) {
        Ok(d) => intent.destination = d,
        Err(reason) => {
            set(&mut intent, Decision::Suppress, State::Suppressed, Some(reason));
            return intent;
        }
    }
    if let Some(entry) = suppressed(input, channel, intent.destination.as_deref()) {
        set(&mut intent, Decision::Suppress, State::Suppressed, Some(entry.reason));
        intent.detail = Some(format!(
            "on the suppression list since {} (entry {}, from intent {})",
            crate::clock::rfc3339(entry.created_at).unwrap_or_default(),
            entry.id.as_deref().unwrap_or("not yet named"),
            entry.source_intent
        ));
        return intent;
    }
    // Render before committing to send (rule 6): a failure is a dead intent
    // that is recorded and never sent.
    let rendered = tracing::info_span!("render").in_scope(|| {
        input.templates.render(&route.template, channel, input.event, recipient, recipient.locale.as_deref())
    });
    let Rendered { locale, revision, content, over_budget } = match rendered {
        Ok(r) => r,
        Err(e) => {
            set(&mut intent, Decision::Send, State::Dead, Some(Reason::TemplateError));
            intent.detail = Some(e.to_string());
            return intent;
        }
    };
    intent.locale = Some(locale);
    intent.template_revision = Some(revision);
    intent.payload = Some(content.stored());
    if let Some(b) = over_budget.filter(|b| !b.send_anyway) {
        set(&mut intent, Decision::Send, State::Dead, Some(Reason::SmsTooLong));
        intent.detail = Some(format!(
            "renders as {} {} segments; the template's budget is {} (set sms_over_budget = \"send\" to send it anyway)",
            b.segments,
            content.encoding.as_deref().unwrap_or("SMS"),
            b.budget
        ));
        return intent;
    }

    let mut bypassed = Vec::new();
    // The recipient's zone: where quiet hours are read, and a due time told.
    let tz = recipient.timezone.as_deref().and_then(|z| TimeZone::get(z).ok()).unwrap_or(TimeZone::UTC);
    if let Some(q) = prefs.quiet_hours.as_ref().filter(|q| q.channels.contains(&channel))
        && let Some(until) = q.holds_until(&tz, input.now)
    {
        if !route.critical {
            set(&mut intent, Decision::Hold, State::Held, Some(Reason::QuietHours));
            intent.run_at = Some(until.as_microsecond());
            intent.detail = Some(format!(
                "quiet hours {}–{} in {}{}; due {}",
                hh_mm(q.start),
                hh_mm(q.end),
                zone_name(&tz),
                intent.preferences_version.map(|v| format!(", preferences v{v}")).unwrap_or_default(),
                due(until, &tz)
            ));
            intent.cap = cap_check(input, channel, recipient, &intent, &tz);
            return intent;
        }
        bypassed.push("quiet hours");
    }
    if let Some(d) = route.digest.as_ref().filter(|d| d.batches(route, channel)) {
        if prefs.digest == Some(false) {
            intent.detail = Some("the recipient receives this route's messages one by one (digest: false)".into());
        } else if route.critical {
            bypassed.push("digest");
        } else {
            match digest_window(input, channel, recipient, &intent, d) {
                Ok(window) => {
                    set(&mut intent, Decision::Digest, State::Held, None);
                    if let Ok(closes) = Timestamp::from_microsecond(window.closes_at) {
                        intent.detail =
                            Some(format!("in the digest {}; due when it closes {}", window.key, due(closes, &tz)));
                    }
                    intent.digest = Some(window);
                    return intent;
                }
                Err(e) => {
                    set(&mut intent, Decision::Send, State::Dead, Some(Reason::TemplateError));
                    intent.detail = Some(format!("digest key: {e}"));
                    return intent;
                }
            }
        }
    }
    if !bypassed.is_empty() {
        intent.detail = Some(format!("critical route: bypassed {}", bypassed.join(" and ")));
    }
    intent.run_at = Some(input.now.as_microsecond());
    intent.cap = cap_check(input, channel, recipient, &intent, &tz);
    intent
}

/// The frequency cap an intent to be sent is held to, if any; with the
/// digest window it joins instead when over, where its route batches the
/// channel and is not critical (a critical message over the cap is
/// suppressed: folding it would delay it past the point of being critical).
fn cap_check(
    input: &PlanInput<'_>,
    channel: Channel,
    recipient: &RecipientSpec,
    intent: &NewIntent,
    tz: &TimeZone,
) -> Option<CapCheck> {
    let route = input.route;
    let applied = input.caps.applied(route, channel)?;
    let fold = (route.digest.as_ref())
        .filter(|d| d.batches(route, channel) && !route.critical)
        .and_then(|d| digest_window(input, channel, recipient, intent, d).ok())
        .map(|window| {
            let closes = Timestamp::from_microsecond(window.closes_at).map(|t| due(t, tz)).unwrap_or_default();
            (window, closes)
        });
    Some(CapCheck {
        max: applied.cap.max,
        per_us: crate::clock::duration_us(applied.cap.per),
        per: crate::config::format_duration(applied.cap.per),
        source: applied.source,
        fold,
    })
}

/// The aligned window this event falls in, for this recipient, channel and
/// digest group. Its key is the key of the digest intent it will become.
fn digest_window(
    input: &PlanInput<'_>,
    channel: Channel,
    recipient: &RecipientSpec,
    intent: &NewIntent,
    d: &crate::config::DigestRoute,
) -> Result<NewDigest, String> {
    let ctx = crate::render::context(input.event, recipient, intent.locale.as_deref().unwrap_or_default());
    let group_key = input.templates.render_key(&d.key, &ctx).map_err(|e| e.to_string())?;
    let width = crate::clock::duration_us(d.window).max(1);
    let now = input.now.as_microsecond();
    let window_start = now.div_euclid(width) * width;
    let identity = format!(
        "digest|{}|{}|{}|{}|{}|{}",
        input.tenant.as_str(),
        input.event.event_type,
        channel.as_str(),
        recipient.id,
        group_key,
        window_start
    );
    Ok(NewDigest {
        key: sha256_hex(identity.as_bytes())[..32].to_string(),
        event_type: input.event.event_type.clone(),
        channel,
        recipient_id: recipient.id.clone(),
        group_key,
        destination: intent.destination.clone(),
        locale: intent.locale.clone(),
        window_start,
        closes_at: window_start.saturating_add(width),
    })
}

#[cfg(test)]
mod tests;

/// When a held intent is due, in UTC and in the recipient's zone, to the
/// second: `2026-06-02T01:15:00Z (07:00:00 +05:45 Asia/Kathmandu)`.
fn due(at: Timestamp, tz: &TimeZone) -> String {
    let local = at.to_zoned(tz.clone());
    format!("{} ({} {})", at.strftime("%Y-%m-%dT%H:%M:%SZ"), local.strftime("%Y-%m-%d %H:%M:%S %:z"), zone_name(tz))
}

fn zone_name(tz: &TimeZone) -> &str {
    tz.iana_name().unwrap_or("UTC")
}

fn hh_mm(t: jiff::civil::Time) -> String {
    t.strftime("%H:%M").to_string()
}
