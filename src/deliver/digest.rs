//! Closing digest windows: when a window's time is up, its members are
//! rendered together through the route's digest template into one digest
//! intent, which is queued like any other; the members become `digested`,
//! linked to it. Any number of processes may run this: the store lets exactly
//! one close a window.
//!
//! Shadow mode: a window whose members were all planned in shadow closes
//! into a `shadowed` digest (rendered and frozen, never queued). A window
//! open across the switch of its route from shadow to live holds both: the
//! digest goes live with only the members planned live — the system Herald
//! shadowed sent the others, and Herald sends only what was planned live.
//! Those planned in shadow still end `digested`, as a live Herald would have
//! batched them, with a detail saying the live digest left them out: they are
//! no message of their own, shadowed or sent. Should the digest fail to
//! render, live sends each member alone, and one planned in shadow ends
//! `shadowed` there instead.
//!
//! Each close runs in a `digest` span of its own trace (derived from the
//! window's key), linked to the traces of its members' requests; the digest's
//! job continues it, and its attempts link to those traces too.

use crate::clock::Clock;
use crate::config::Route;
use crate::event::identity::sha256_hex;
use crate::event::{OccurredAt, canonical_json};
use crate::intent::{Decision, Mode, Reason, State};
use crate::ops::log::TemplateRef;
use crate::ops::trace::{self, TraceParent};
use crate::render::TemplateSet;
use crate::store::{DigestClose, DigestCloseOutcome, DigestMember, DigestRow, NewIntent, QueueStore, StoreResult};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tracing::Instrument;
use tracing::field::Empty;

pub struct DigestCloser {
    pub store: Arc<dyn QueueStore>,
    pub templates: Arc<TemplateSet>,
    pub routes: Arc<HashMap<String, Route>>,
    pub clock: Arc<dyn Clock>,
}

/// What a window's members make of its digest: shadowed when every member
/// was planned in shadow, else live with only the members planned live (the
/// route was switched to live within the window: the system Herald shadowed
/// has sent the others, and never sees the live ones). Returns the mode,
/// the members the digest is made of, and those it leaves out.
fn split(members: &[DigestMember]) -> (Mode, Vec<&DigestMember>, Vec<&DigestMember>) {
    let (live, shadow): (Vec<&DigestMember>, Vec<&DigestMember>) =
        members.iter().partition(|m| m.intent.mode == Mode::Live);
    if live.is_empty() && !shadow.is_empty() { (Mode::Shadow, shadow, Vec::new()) } else { (Mode::Live, live, shadow) }
}

fn parse_json(text: Option<&str>) -> Value {
    text.and_then(|t| serde_json::from_str(t).ok()).unwrap_or(Value::Null)
}

impl DigestCloser {
    pub async fn run(self, mut shutdown: watch::Receiver<bool>, interval: Duration) {
        loop {
            if let Err(e) = self.close_due().await {
                tracing::error!(error = %e, "closing digests failed; trying again");
            }
            tokio::select! {
                _ = tokio::time::sleep(interval) => {},
                _ = shutdown.changed() => return,
            }
        }
    }

    /// Closes every window whose time is up; returns how many this call closed.
    pub async fn close_due(&self) -> StoreResult<usize> {
        let now = self.clock.now().as_microsecond();
        let mut closed = 0;
        for digest in self.store.digests_due(now, 100).await? {
            // A member that joined while we rendered sends us round again.
            for _ in 0..3 {
                match self.close_one(&digest, now).await? {
                    DigestCloseOutcome::Closed => {
                        closed += 1;
                        break;
                    }
                    DigestCloseOutcome::AlreadyClosed => break,
                    DigestCloseOutcome::MembersChanged => continue,
                }
            }
        }
        Ok(closed)
    }

    /// One try at closing a window, in its `digest` span.
    async fn close_one(&self, digest: &DigestRow, now_us: i64) -> StoreResult<DigestCloseOutcome> {
        let members = self.store.digest_members(&digest.key).await?;
        let span = tracing::info_span!(
            parent: None,
            "digest",
            herald.intent_key = %digest.key,
            herald.channel = %digest.channel,
            herald.members = members.len(),
            herald.mode = Empty,
            herald.outcome = Empty,
        );
        let links = trace::links_text(members.iter().filter_map(|m| m.traceparent.as_deref()));
        // Links first: the span is built when its trace is chosen.
        trace::link(&span, &trace::parse_links(links.as_deref()));
        let own = TraceParent::derived(&format!("digest|{}", digest.key));
        trace::start_trace(&span, own.trace_id);
        let mut close = self.prepare(digest, &members, now_us);
        close.traceparent = Some(trace::traceparent_of(&span, own).to_string());
        close.links = links;
        span.record("herald.mode", close.intent.mode.as_str());
        let shadowed = (close.intent.state == State::Shadowed).then(|| close.intent.clone());
        // Left out of a digest that could not be rendered, a member planned
        // in shadow ends `shadowed` alone; left out of a rendered one, it is
        // `digested` and no message of its own.
        let alone = if close.intent.payload.is_none() { close.shadow_members.clone() } else { Vec::new() };
        let outcome = match self.store.digest_close(close).instrument(span.clone()).await {
            Ok(outcome) => outcome,
            Err(e) => {
                trace::fail(&span, "the store failed");
                return Err(e);
            }
        };
        span.record(
            "herald.outcome",
            match outcome {
                DigestCloseOutcome::Closed => "closed",
                DigestCloseOutcome::AlreadyClosed => "already_closed",
                DigestCloseOutcome::MembersChanged => "members_changed",
            },
        );
        if outcome == DigestCloseOutcome::Closed {
            tracing::info!(digest = %digest.key, members = members.len(), channel = %digest.channel, "digest closed");
            // Counted and logged once each: the shadowed digest, or the
            // members planned in shadow that ended shadowed alone.
            let ended_shadowed =
                shadowed.iter().map(|i| (&i.key, i.channel, &i.template_id, &i.template_revision)).chain(
                    members
                        .iter()
                        .map(|m| &m.intent)
                        .filter(|i| alone.contains(&i.key))
                        .map(|i| (&i.key, i.channel, &i.template_id, &i.template_revision)),
                );
            for (key, channel, template_id, revision) in ended_shadowed {
                let template = TemplateRef { id: template_id, revision: revision.as_deref() };
                crate::ops::metrics::shadowed(channel, template, "digest");
                crate::ops::log::shadowed(key, channel, template, None);
            }
        }
        Ok(outcome)
    }

    /// Renders the digest intent from its members.
    fn prepare(&self, d: &DigestRow, all: &[DigestMember], now_us: i64) -> DigestClose {
        let route = self.routes.get(&d.event_type);
        let template = route.and_then(|r| r.digest.as_ref()).map(|g| g.template.clone()).unwrap_or_default();
        let channel = d.channel;
        let locale = self.templates.resolve_locale(&template, d.locale.as_deref(), channel).unwrap_or_default();
        let closes = jiff::Timestamp::from_microsecond(d.closes_at).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
        let (mode, members, alone) = split(all);
        let items: Vec<Value> = members
            .iter()
            .map(|m| {
                let event = parse_json(m.event_body.as_deref());
                json!({
                    "key": m.intent.key,
                    "event": {"type": m.intent.event_type, "occurred_at": m.intent.occurred_at},
                    "entity": {"type": m.intent.entity_type, "id": m.intent.entity_id, "version": m.intent.entity_version},
                    "data": event.get("data").cloned().unwrap_or(Value::Null),
                    "content": parse_json(m.content.as_deref()),
                })
            })
            .collect();
        let ctx = json!({
            "members": items,
            "count": members.len(),
            "group_key": d.group_key,
            "window": {"start": crate::clock::rfc3339(d.window_start), "end": crate::clock::rfc3339(d.closes_at)},
            "event": {"type": d.event_type, "occurred_at": OccurredAt::from_timestamp(closes).canonical()},
            "entity": {"type": "digest", "id": d.group_key, "version": Value::Null},
            "recipient": {"id": d.recipient_id, "locale": locale},
        });
        let mut intent = NewIntent {
            key: d.key.clone(),
            channel,
            recipient_id: d.recipient_id.clone(),
            destination: d.destination.clone(),
            locale: Some(locale.clone()),
            template_id: template.clone(),
            template_revision: self.templates.meta(&template).map(|m| m.revision.clone()),
            payload: None,
            decision: Decision::Send,
            reason: None,
            detail: Some(match alone.len() {
                0 => format!("digest of {} message(s)", members.len()),
                n => format!(
                    "digest of {} message(s); {n} planned in shadow mode before the switch to live left out",
                    members.len()
                ),
            }),
            state: State::Queued,
            run_at: Some(now_us),
            preferences_version: None,
            digest: None,
            mode,
            // A digest is what an intent over the cap folds into.
            cap: None,
        };
        match self.templates.render_context(&template, channel, &locale, &ctx) {
            Ok(r) => {
                intent.payload = Some((r.content.digest(), r.content.to_json()));
                if intent.mode == Mode::Shadow {
                    // Rendered and frozen as live would, but never queued:
                    // this is where live would hand it to the worker.
                    intent.state = State::Shadowed;
                    intent.run_at = None;
                }
            }
            Err(e) => {
                intent.state = State::Dead;
                intent.reason = Some(Reason::TemplateError);
                intent.detail = Some(format!("digest template: {e}"));
                intent.run_at = None;
            }
        }
        // The event: the members the digest is made of. Every member counts
        // for the store's check that none joined meanwhile.
        let rendered: Vec<&str> = members.iter().map(|m| m.intent.key.as_str()).collect();
        let event_body = canonical_json(&json!({"digest": d.key, "members": rendered}));
        let member_keys: Vec<String> = all.iter().map(|m| m.intent.key.clone()).collect();
        DigestClose {
            digest: d.clone(),
            member_keys,
            shadow_members: alone.iter().map(|m| m.intent.key.clone()).collect(),
            traceparent: None,
            links: None,
            intent,
            event_digest: sha256_hex(event_body.as_bytes()),
            event_body,
            occurred_at: OccurredAt::from_timestamp(closes).canonical(),
            now_us,
        }
    }
}
