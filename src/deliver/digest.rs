//! Closing digest windows: when a window's time is up, its members are
//! rendered together through the route's digest template into one digest
//! intent, which is queued like any other; the members become `digested`,
//! linked to it. Any number of processes may run this: the store lets exactly
//! one close a window.

use crate::clock::Clock;
use crate::config::Route;
use crate::event::identity::sha256_hex;
use crate::event::{Channel, OccurredAt, canonical_json};
use crate::intent::{Decision, Mode, Reason, State};
use crate::ops::log::TemplateRef;
use crate::render::TemplateSet;
use crate::store::{DigestClose, DigestCloseOutcome, DigestMember, DigestRow, NewIntent, Store, StoreResult};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

pub struct DigestCloser {
    pub store: Arc<dyn Store>,
    pub templates: Arc<TemplateSet>,
    pub routes: Arc<HashMap<String, Route>>,
    pub clock: Arc<dyn Clock>,
}

/// A digest is shadowed when every member was planned in shadow; one live
/// member (the route was switched to live within the window) makes it live,
/// since the system Herald shadowed never saw that member.
fn digest_mode(members: &[DigestMember]) -> Mode {
    if !members.is_empty() && members.iter().all(|m| m.intent.mode == Mode::Shadow) { Mode::Shadow } else { Mode::Live }
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

    async fn close_one(&self, digest: &DigestRow, now_us: i64) -> StoreResult<DigestCloseOutcome> {
        let members = self.store.digest_members(&digest.key).await?;
        let close = self.prepare(digest, &members, now_us);
        let shadowed = (close.intent.state == State::Shadowed.as_str()).then(|| close.intent.clone());
        let outcome = self.store.digest_close(close).await?;
        if outcome == DigestCloseOutcome::Closed {
            tracing::info!(digest = %digest.key, members = members.len(), channel = %digest.channel, "digest closed");
            if let Some(i) = &shadowed {
                let template = TemplateRef { id: &i.template_id, revision: i.template_revision.as_deref() };
                crate::ops::metrics::shadowed(&i.channel, template, "digest");
                crate::ops::log::shadowed(&i.key, &i.channel, template, None);
            }
        }
        Ok(outcome)
    }

    /// Renders the digest intent from its members.
    fn prepare(&self, d: &DigestRow, members: &[DigestMember], now_us: i64) -> DigestClose {
        let route = self.routes.get(&d.event_type);
        let template = route.and_then(|r| r.digest.as_ref()).map(|g| g.template.clone()).unwrap_or_default();
        let channel = Channel::parse(&d.channel).unwrap_or(Channel::Email);
        let locale = self.templates.resolve_locale(&template, d.locale.as_deref(), channel).unwrap_or_default();
        let closes = jiff::Timestamp::from_microsecond(d.closes_at).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
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
            channel: d.channel.clone(),
            recipient_id: d.recipient_id.clone(),
            destination: d.destination.clone(),
            locale: Some(locale.clone()),
            template_id: template.clone(),
            template_revision: self.templates.meta(&template).map(|m| m.revision.clone()),
            payload: None,
            decision: Decision::Send.as_str().into(),
            reason: None,
            detail: Some(format!("digest of {} message(s)", members.len())),
            state: State::Queued.as_str().into(),
            run_at: Some(now_us),
            preferences_version: None,
            digest: None,
            mode: digest_mode(members),
        };
        match self.templates.render_context(&template, channel, &locale, &ctx) {
            Ok(r) => {
                intent.payload = Some((r.content.digest(), r.content.to_json()));
                if intent.mode == Mode::Shadow {
                    // Rendered and frozen as live would, but never queued:
                    // this is where live would hand it to the worker.
                    intent.state = State::Shadowed.as_str().into();
                    intent.run_at = None;
                }
            }
            Err(e) => {
                intent.state = State::Dead.as_str().into();
                intent.reason = Some(Reason::TemplateError.as_str().into());
                intent.detail = Some(format!("digest template: {e}"));
                intent.run_at = None;
            }
        }
        let member_keys: Vec<String> = members.iter().map(|m| m.intent.key.clone()).collect();
        let event_body = canonical_json(&json!({"digest": d.key, "members": member_keys}));
        DigestClose {
            digest: d.clone(),
            member_keys,
            intent,
            event_digest: sha256_hex(event_body.as_bytes()),
            event_body,
            occurred_at: OccurredAt::from_timestamp(closes).canonical(),
            now_us,
        }
    }
}
