use super::*;
use crate::config::DigestRoute;
use crate::event::parse_event;
use serde_json::json;
use std::time::Duration;

fn route(channels: &[&str]) -> Route {
    Route {
        event: "purchase_order.approved".into(),
        template: "po_approved".into(),
        channels: channels.iter().map(|s| Channel::parse(s).expect("a channel")).collect(),
        critical: false,
        skip_superseded: false,
        failover_on_unknown: false,
        digest: None,
        mode: None,
        caps: None,
        uncapped: false,
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

/// 2026-06-01 23:00 UTC.
fn night() -> Timestamp {
    "2026-06-01T23:00:00Z".parse().unwrap()
}

fn run_at(ev: &Event, r: &Route, dir: &HashMap<String, RecipientRow>, now: Timestamp) -> Vec<NewIntent> {
    let templates = TemplateSet::built_in();
    let tenant = Tenant::default_tenant();
    plan(&PlanInput {
        tenant: &tenant,
        event: ev,
        route: r,
        templates: &templates,
        directory: dir,
        configured: &|_| true,
        suppressions: &HashMap::new(),
        caps: &Caps::default(),
        now,
    })
}

fn run(ev: &Event, r: &Route, dir: &HashMap<String, RecipientRow>) -> Vec<NewIntent> {
    run_at(ev, r, dir, night())
}

fn row(id: &str, preferences: serde_json::Value, version: i64) -> RecipientRow {
    RecipientRow {
        tenant: "default".into(),
        id: id.into(),
        email: Some("dir@example.com".into()),
        phone: Some("+15550000009".into()),
        locale: Some("ne".into()),
        timezone: Some("UTC".into()),
        webhook_url: None,
        preferences: preferences.to_string(),
        preferences_version: version,
        updated_at: 0,
    }
}

fn dir(r: RecipientRow) -> HashMap<String, RecipientRow> {
    HashMap::from([(r.id.clone(), r)])
}

fn decision(i: &NewIntent) -> (&str, &str, Option<&str>) {
    (i.decision.as_str(), i.state.as_str(), i.reason.map(Reason::as_str))
}

#[test]
fn one_intent_per_channel_and_recipient() {
    let ev = event(json!([{"id": "u-1", "phone": "+9779800000000", "email": "a@example.com"}, {"id": "u-2"}]));
    let out = run(&ev, &route(&["email", "sms", "in_app"]), &HashMap::new());
    assert_eq!(out.len(), 6);
    let queued: Vec<_> =
        out.iter().filter(|i| i.state == "queued").map(|i| (&i.recipient_id[..], i.channel.as_str())).collect();
    assert_eq!(queued, vec![("u-1", "email"), ("u-1", "sms"), ("u-1", "in_app"), ("u-2", "in_app")]);
    assert!(
        out.iter()
            .filter(|i| i.state == "queued")
            .all(|i| i.run_at == Some(night().as_microsecond()) && i.payload.is_some())
    );
    assert!(out.iter().all(|i| i.preferences_version.is_none()), "nobody here is in the directory");
}

#[test]
fn a_recipient_without_address_is_recorded_as_no_destination() {
    let out = run(&event(json!([{"id": "u-2"}])), &route(&["sms"]), &HashMap::new());
    assert_eq!(decision(&out[0]), ("suppress", "suppressed", Some("no_destination")));
    assert_eq!(out[0].run_at, None);
}

#[test]
fn an_unconfigured_channel_is_channel_disabled() {
    let ev = event(json!([{"id": "u-1", "phone": "+9779800000000"}]));
    let templates = TemplateSet::built_in();
    let tenant = Tenant::default_tenant();
    let r = route(&["sms"]);
    let input = PlanInput {
        tenant: &tenant,
        event: &ev,
        route: &r,
        templates: &templates,
        directory: &HashMap::new(),
        configured: &|c| c != Channel::Sms,
        suppressions: &HashMap::new(),
        caps: &Caps::default(),
        now: night(),
    };
    assert_eq!(plan(&input)[0].reason, Some(Reason::ChannelDisabled));
}

#[test]
fn inline_fields_override_the_directory_and_are_frozen() {
    let ev = event(json!([{"id": "u-1", "phone": "+15550000001"}]));
    let out = run(&ev, &route(&["sms", "email"]), &dir(row("u-1", json!({}), 1)));
    assert_eq!(out[0].destination.as_deref(), Some("+15550000001"));
    assert_eq!(out[1].destination.as_deref(), Some("dir@example.com"));
    assert_eq!(out[0].locale.as_deref(), Some("ne"), "locale comes from the directory");
    assert_eq!(out[0].preferences_version, Some(1));
}

#[test]
fn a_template_error_is_a_dead_intent_with_no_job() {
    let mut ev = event(json!([{"id": "u-1"}]));
    ev.data.remove("approver");
    let out = run(&ev, &route(&["in_app"]), &HashMap::new());
    assert_eq!(decision(&out[0]), ("send", "dead", Some("template_error")));
    assert!(out[0].run_at.is_none() && out[0].payload.is_none());
    let detail = out[0].detail.as_deref().unwrap_or_default();
    assert!(detail.contains("undefined"), "{detail}");
}

#[test]
fn the_event_can_narrow_the_route_channels() {
    let mut ev = event(json!([{"id": "u-1"}]));
    ev.channels = Some(vec![Channel::InApp]);
    let out = run(&ev, &route(&["email", "sms", "in_app"]), &HashMap::new());
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].channel, "in_app");
}

#[test]
fn an_opt_out_suppresses_with_the_preferences_version() {
    let ev = event(json!([{"id": "u-1"}]));
    let out = run(&ev, &route(&["sms", "email"]), &dir(row("u-1", json!({"channels": {"sms": false}}), 4)));
    assert_eq!(decision(&out[0]), ("suppress", "suppressed", Some("opted_out")));
    assert_eq!(out[0].preferences_version, Some(4));
    // The part of the preferences that decided, not only its version.
    assert_eq!(out[0].detail.as_deref(), Some(r#""channels": {"sms": false} in preferences v4"#));
    assert_eq!(decision(&out[1]), ("send", "queued", None));
}

#[test]
fn an_opt_out_wins_over_a_critical_route_and_a_missing_address() {
    let mut r = route(&["sms"]);
    r.critical = true;
    let mut entry = row("u-1", json!({"channels": {"sms": false}}), 2);
    entry.phone = None;
    let out = run(&event(json!([{"id": "u-1"}])), &r, &dir(entry));
    assert_eq!(decision(&out[0]), ("suppress", "suppressed", Some("opted_out")));
    assert_eq!(
        out[0].detail.as_deref(),
        Some(
            r#""channels": {"sms": false} in preferences v2: critical route, but an explicit opt-out is always honoured"#
        )
    );
}

#[test]
fn quiet_hours_hold_until_the_window_ends_in_the_recipients_zone() {
    let prefs = json!({"quiet_hours": {"start": "21:00", "end": "07:00"}});
    let out = run(&event(json!([{"id": "u-1"}])), &route(&["sms", "email", "in_app"]), &dir(row("u-1", prefs, 3)));
    let end: Timestamp = "2026-06-02T07:00:00Z".parse().unwrap();
    for i in &out[..2] {
        assert_eq!(decision(i), ("hold", "held", Some("quiet_hours")), "{}", i.channel);
        assert_eq!(i.run_at, Some(end.as_microsecond()));
        assert!(i.payload.is_some(), "content is frozen at ingest, not at wake-up");
        let detail = i.detail.as_deref().unwrap_or_default();
        assert!(detail.ends_with("due 2026-06-02T07:00:00Z (2026-06-02 07:00:00 +00:00 UTC)"), "{detail}");
    }
    assert_eq!(decision(&out[2]), ("send", "queued", None), "in-app is not held unless listed");
    // outside the window: sent now
    let noon: Timestamp = "2026-06-01T12:00:00Z".parse().unwrap();
    let out = run_at(
        &event(json!([{"id": "u-1"}])),
        &route(&["sms"]),
        &dir(row("u-1", json!({"quiet_hours": {"start": "21:00", "end": "07:00"}}), 3)),
        noon,
    );
    assert_eq!(decision(&out[0]), ("send", "queued", None));
}

#[test]
fn quiet_hours_use_the_inline_timezone_over_the_directory() {
    // 23:00 UTC is 04:45 the next morning in Kathmandu: inside 21:00–07:00 there too.
    let prefs = json!({"quiet_hours": {"start": "21:00", "end": "07:00", "channels": ["sms"]}});
    let ev = event(json!([{"id": "u-1", "timezone": "Asia/Kathmandu"}]));
    let out = run(&ev, &route(&["sms"]), &dir(row("u-1", prefs.clone(), 1)));
    let end: Timestamp = "2026-06-02T01:15:00Z".parse().unwrap(); // 07:00 +05:45
    assert_eq!(out[0].run_at, Some(end.as_microsecond()));
    // When it will go, in UTC and in the recipient's zone, and the window that held it.
    assert_eq!(
        out[0].detail.as_deref(),
        Some(
            "quiet hours 21:00–07:00 in Asia/Kathmandu, preferences v1; \
             due 2026-06-02T01:15:00Z (2026-06-02 07:00:00 +05:45 Asia/Kathmandu)"
        )
    );
    // In Los Angeles it is 16:00: no hold.
    let ev = event(json!([{"id": "u-1", "timezone": "America/Los_Angeles"}]));
    assert_eq!(decision(&run(&ev, &route(&["sms"]), &dir(row("u-1", prefs, 1)))[0]), ("send", "queued", None));
}

#[test]
fn a_critical_route_bypasses_quiet_hours_and_says_so() {
    let mut r = route(&["sms"]);
    r.critical = true;
    let prefs = json!({"quiet_hours": {"start": "21:00", "end": "07:00"}});
    let out = run(&event(json!([{"id": "u-1"}])), &r, &dir(row("u-1", prefs, 1)));
    assert_eq!(decision(&out[0]), ("send", "queued", None));
    assert_eq!(out[0].detail.as_deref(), Some("critical route: bypassed quiet hours"));
}

fn digest_route() -> Route {
    let mut r = route(&["email", "in_app"]);
    r.digest = Some(DigestRoute {
        window: Duration::from_secs(3600),
        key: "{{ approver.name }}".into(),
        template: "po_approved".into(),
        channels: None,
    });
    r
}

#[test]
fn a_digest_route_batches_by_window_and_key() {
    let out = run(&event(json!([{"id": "u-1"}])), &digest_route(), &dir(row("u-1", json!({}), 1)));
    assert_eq!(decision(&out[0]), ("digest", "held", None));
    let d = out[0].digest.as_ref().unwrap();
    assert_eq!(d.group_key, "Asha");
    assert_eq!(d.window_start, "2026-06-01T23:00:00Z".parse::<Timestamp>().unwrap().as_microsecond());
    assert_eq!(d.closes_at - d.window_start, 3_600_000_000);
    assert!(out[0].run_at.is_none(), "members are sent as part of the digest, not alone");
    assert_eq!(
        out[0].detail.as_deref(),
        Some(
            format!(
                "in the digest {}; due when it closes 2026-06-02T00:00:00Z (2026-06-02 00:00:00 +00:00 UTC)",
                d.key
            )
            .as_str()
        )
    );
    assert_eq!(decision(&out[1]), ("send", "queued", None), "in-app is not batched by default");
    // the same recipient, key and window: the same digest
    let mut ev2 = event(json!([{"id": "u-1"}]));
    ev2.entity.id = "PO-2".into();
    let later = night().checked_add(jiff::SignedDuration::from_mins(30)).unwrap();
    let again = run_at(&ev2, &digest_route(), &dir(row("u-1", json!({}), 1)), later);
    assert_eq!(again[0].digest.as_ref().unwrap().key, d.key);
    assert_ne!(again[0].key, out[0].key);
}

#[test]
fn digests_yield_to_critical_routes_and_to_recipients_who_decline_them() {
    let mut r = digest_route();
    r.critical = true;
    let out = run(&event(json!([{"id": "u-1"}])), &r, &dir(row("u-1", json!({}), 1)));
    assert_eq!(decision(&out[0]), ("send", "queued", None));
    assert_eq!(out[0].detail.as_deref(), Some("critical route: bypassed digest"));
    let out = run(&event(json!([{"id": "u-1"}])), &digest_route(), &dir(row("u-1", json!({"digest": false}), 2)));
    assert_eq!(decision(&out[0]), ("send", "queued", None));
}

#[test]
fn quiet_hours_come_before_digests() {
    let prefs = json!({"quiet_hours": {"start": "21:00", "end": "07:00"}});
    let out = run(&event(json!([{"id": "u-1"}])), &digest_route(), &dir(row("u-1", prefs, 1)));
    assert_eq!(decision(&out[0]), ("hold", "held", Some("quiet_hours")));
}

fn run_capped(r: &Route, caps: &Caps, dir: &HashMap<String, RecipientRow>) -> Vec<NewIntent> {
    let (templates, tenant) = (TemplateSet::built_in(), Tenant::default_tenant());
    let ev = event(json!([{"id": "u-1", "phone": "+9779800000000", "email": "a@example.com"}]));
    plan(&PlanInput {
        tenant: &tenant,
        event: &ev,
        route: r,
        templates: &templates,
        directory: dir,
        configured: &|_| true,
        suppressions: &HashMap::new(),
        caps,
        now: night(),
    })
}

fn sms_cap(max: u32) -> Caps {
    Caps { sms: Some(crate::config::Cap { max, per: Duration::from_secs(3600) }), ..Caps::default() }
}

#[test]
fn an_intent_to_be_sent_or_held_carries_its_cap_and_others_none() {
    let out = run_capped(&route(&["sms", "email"]), &sms_cap(10), &HashMap::new());
    let cap = out[0].cap.as_ref().expect("the SMS is capped");
    assert_eq!((cap.max, cap.per_us, cap.source.as_str(), cap.fold.is_some()), (10, 3_600_000_000, "caps.sms", false));
    assert_eq!(out[1].cap, None, "email has no cap");

    let quiet = json!({"quiet_hours": {"start": "21:00", "end": "07:00"}});
    let held = run_capped(&route(&["sms"]), &sms_cap(10), &dir(row("u-1", quiet, 1)));
    assert_eq!((decision(&held[0]), held[0].cap.is_some()), (("hold", "held", Some("quiet_hours")), true));

    let opted_out =
        run_capped(&route(&["sms"]), &sms_cap(10), &dir(row("u-1", json!({"channels": {"sms": false}}), 1)));
    assert_eq!((decision(&opted_out[0]).2, &opted_out[0].cap), (Some("opted_out"), &None));

    let mut code = route(&["sms"]);
    code.uncapped = true;
    assert_eq!(run_capped(&code, &sms_cap(10), &HashMap::new())[0].cap, None);
}

#[test]
fn a_capped_intent_on_a_digest_route_knows_the_window_it_would_join() {
    let mut r = route(&["sms"]);
    r.digest = Some(DigestRoute {
        window: Duration::from_secs(3600),
        key: "{{ approver.name }}".into(),
        template: "po_approved".into(),
        channels: None,
    });
    // One by one by the recipient's choice, until the cap.
    let out = run_capped(&r, &sms_cap(3), &dir(row("u-1", json!({"digest": false}), 2)));
    let (window, closes) = out[0].cap.as_ref().and_then(|c| c.fold.clone()).expect("a window to fold into");
    assert_eq!(
        (window.group_key.as_str(), closes.as_str()),
        ("Asha", "2026-06-02T00:00:00Z (2026-06-02 00:00:00 +00:00 UTC)")
    );
    r.critical = true;
    let critical = run_capped(&r, &sms_cap(3), &dir(row("u-1", json!({}), 2)));
    assert_eq!(
        critical[0].cap.as_ref().map(|c| c.fold.is_none()),
        Some(true),
        "a critical message is never delayed into a digest"
    );
}
