//! The planner: (event, route, recipients, clock) → one intent per (channel,
//! recipient) with its decision. Pure: it reads nothing and writes nothing,
//! so every decision can be tested without a database.

use crate::config::Route;
use crate::event::{Channel, Event, RecipientSpec, Tenant};
use crate::intent::{Decision, Reason, State};
use crate::render::{Rendered, TemplateSet};
use crate::store::{NewIntent, RecipientRow};
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
    pub now_us: i64,
}

/// The channels an event goes out on: its own list when given, else the route's.
pub fn channels(event: &Event, route: &Route) -> Vec<Channel> {
    event.channels.clone().unwrap_or_else(|| route.channels())
}

/// Inline fields override the directory, for this event only. The result is
/// what the intent freezes: a later directory change never alters it.
pub fn snapshot(inline: &RecipientSpec, entry: Option<&RecipientRow>) -> RecipientSpec {
    let pick = |own: &Option<String>, dir: Option<&Option<String>>| {
        own.clone().or_else(|| dir.cloned().flatten())
    };
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

pub fn plan(input: &PlanInput<'_>) -> Vec<NewIntent> {
    let mut out = Vec::new();
    for inline in &input.event.recipients {
        let recipient = snapshot(inline, input.directory.get(&inline.id));
        for channel in channels(input.event, input.route) {
            out.push(plan_one(input, channel, &recipient));
        }
    }
    out
}

fn plan_one(input: &PlanInput<'_>, channel: Channel, recipient: &RecipientSpec) -> NewIntent {
    let key = input
        .event
        .notification_key(input.tenant, channel, &recipient.id);
    let mut intent = NewIntent {
        key: key.to_string(),
        channel: channel.as_str().to_string(),
        recipient_id: recipient.id.clone(),
        destination: None,
        locale: recipient.locale.clone(),
        template_id: input.route.template.clone(),
        template_revision: input
            .templates
            .meta(&input.route.template)
            .map(|m| m.revision.clone()),
        payload: None,
        decision: Decision::Send.as_str().into(),
        reason: None,
        detail: None,
        state: State::Queued.as_str().into(),
        run_at: None,
    };
    let suppress = |mut intent: NewIntent, reason: Reason| {
        intent.decision = Decision::Suppress.as_str().into();
        intent.state = State::Suppressed.as_str().into();
        intent.reason = Some(reason.as_str().into());
        intent
    };
    if !(input.configured)(channel) {
        return suppress(intent, Reason::ChannelDisabled);
    }
    match destination(channel, recipient) {
        Ok(d) => intent.destination = d,
        Err(reason) => return suppress(intent, reason),
    }
    // Render before committing to send (rule 6): a failure is a dead intent
    // that is recorded and never sent.
    let rendered = input.templates.render(
        &input.route.template,
        channel,
        input.event,
        recipient,
        recipient.locale.as_deref(),
    );
    match rendered {
        Err(e) => {
            intent.state = State::Dead.as_str().into();
            intent.reason = Some(Reason::TemplateError.as_str().into());
            intent.detail = Some(e.to_string());
        }
        Ok(Rendered {
            locale,
            revision,
            content,
            over_budget,
        }) => {
            intent.locale = Some(locale);
            intent.template_revision = Some(revision);
            intent.payload = Some((content.digest(), content.to_json()));
            match over_budget {
                Some(b) if !b.send_anyway => {
                    intent.state = State::Dead.as_str().into();
                    intent.reason = Some(Reason::SmsTooLong.as_str().into());
                    intent.detail = Some(format!(
                        "renders as {} {} segments; the template's budget is {} (set sms_over_budget = \"send\" to send it anyway)",
                        b.segments,
                        content.encoding.as_deref().unwrap_or("SMS"),
                        b.budget
                    ));
                }
                _ => intent.run_at = Some(input.now_us),
            }
        }
    }
    intent
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::parse_event;
    use serde_json::json;

    fn route(channels: &[&str]) -> Route {
        Route {
            event: "purchase_order.approved".into(),
            template: "po_approved".into(),
            channels: channels.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn event(recipients: serde_json::Value) -> Event {
        parse_event(&json!({
            "type": "purchase_order.approved",
            "entity": {"type": "purchase_order", "id": "PO-1", "version": 1},
            "occurred_at": "2026-11-29T10:15:00Z",
            "data": {"po": {"number": "PO-1", "total": "5"}, "approver": {"name": "Asha"}},
            "recipients": recipients
        }))
        .unwrap()
    }

    fn run(
        ev: &Event,
        r: &Route,
        dir: &HashMap<String, RecipientRow>,
        configured: &dyn Fn(Channel) -> bool,
    ) -> Vec<NewIntent> {
        let templates = TemplateSet::built_in();
        let tenant = Tenant::default_tenant();
        plan(&PlanInput {
            tenant: &tenant,
            event: ev,
            route: r,
            templates: &templates,
            directory: dir,
            configured,
            now_us: 7,
        })
    }

    fn row(id: &str, phone: Option<&str>) -> RecipientRow {
        RecipientRow {
            tenant: "default".into(),
            id: id.into(),
            email: Some("dir@example.com".into()),
            phone: phone.map(String::from),
            locale: Some("ne".into()),
            timezone: None,
            webhook_url: None,
            preferences: "{}".into(),
            preferences_version: 1,
            updated_at: 0,
        }
    }

    #[test]
    fn one_intent_per_channel_and_recipient() {
        let ev = event(
            json!([{"id": "u-1", "phone": "+9779800000000", "email": "a@example.com"}, {"id": "u-2"}]),
        );
        let out = run(
            &ev,
            &route(&["email", "sms", "in_app"]),
            &HashMap::new(),
            &|_| true,
        );
        assert_eq!(out.len(), 6);
        let queued: Vec<_> = out
            .iter()
            .filter(|i| i.state == "queued")
            .map(|i| (&i.recipient_id[..], &i.channel[..]))
            .collect();
        assert_eq!(
            queued,
            vec![
                ("u-1", "email"),
                ("u-1", "sms"),
                ("u-1", "in_app"),
                ("u-2", "in_app")
            ]
        );
        assert!(
            out.iter()
                .filter(|i| i.state == "queued")
                .all(|i| i.run_at == Some(7) && i.payload.is_some())
        );
    }

    #[test]
    fn a_recipient_without_address_is_recorded_as_no_destination() {
        let ev = event(json!([{"id": "u-2"}]));
        let out = run(&ev, &route(&["sms"]), &HashMap::new(), &|_| true);
        assert_eq!(
            (out[0].decision.as_str(), out[0].reason.as_deref()),
            ("suppress", Some("no_destination"))
        );
        assert_eq!(out[0].run_at, None);
    }

    #[test]
    fn an_unconfigured_channel_is_channel_disabled() {
        let ev = event(json!([{"id": "u-1", "phone": "+9779800000000"}]));
        let out = run(&ev, &route(&["sms"]), &HashMap::new(), &|c| {
            c != Channel::Sms
        });
        assert_eq!(out[0].reason.as_deref(), Some("channel_disabled"));
    }

    #[test]
    fn inline_fields_override_the_directory_and_are_frozen() {
        let ev = event(json!([{"id": "u-1", "phone": "+15550000001"}]));
        let dir = HashMap::from([("u-1".to_string(), row("u-1", Some("+15550000009")))]);
        let out = run(&ev, &route(&["sms", "email"]), &dir, &|_| true);
        assert_eq!(out[0].destination.as_deref(), Some("+15550000001"));
        assert_eq!(out[1].destination.as_deref(), Some("dir@example.com"));
        assert_eq!(
            out[0].locale.as_deref(),
            Some("ne"),
            "locale comes from the directory"
        );
    }

    #[test]
    fn a_template_error_is_a_dead_intent_with_no_job() {
        let mut ev = event(json!([{"id": "u-1"}]));
        ev.data.remove("approver");
        let out = run(&ev, &route(&["in_app"]), &HashMap::new(), &|_| true);
        assert_eq!(
            (out[0].state.as_str(), out[0].reason.as_deref()),
            ("dead", Some("template_error"))
        );
        assert!(out[0].run_at.is_none() && out[0].payload.is_none());
        let detail = out[0].detail.as_deref().unwrap_or_default();
        assert!(detail.contains("undefined"), "{detail}");
    }

    #[test]
    fn the_event_can_narrow_the_route_channels() {
        let mut ev = event(json!([{"id": "u-1"}]));
        ev.channels = Some(vec![Channel::InApp]);
        let out = run(
            &ev,
            &route(&["email", "sms", "in_app"]),
            &HashMap::new(),
            &|_| true,
        );
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].channel, "in_app");
    }
}
