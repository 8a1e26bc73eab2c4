//! Shadow mode: the same events give the same intents, keys, content and
//! decisions as live, and no provider is ever called; the mode is fixed when
//! an intent is planned, so switching to live sends only what is planned after.

mod common;

use common::capture::Capture;
use common::digest::{DIGEST_ROUTE, templates_with_digest};
use common::{FakeSms, Spawned, TestApp, TestClock, TestDb, backends, count, sms_event};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// One event to one or two recipients on SMS and in-app.
fn event(entity: &str, occurred_at: &str, recipients: Value) -> Value {
    json!({
        "type": "purchase_order.approved",
        "entity": {"type": "purchase_order", "id": entity, "version": 1},
        "occurred_at": occurred_at,
        "data": {"po": {"number": entity, "total": "1,20,000"}, "approver": {"name": "Asha"}},
        "recipients": recipients,
        "channels": ["sms", "in_app"]
    })
}

/// A stream with every kind of post a sender makes: new events, an exact
/// replay, the same event under another key, a reused key with another body,
/// a re-emitted event, a recipient with no phone, a bilingual (UCS-2) SMS.
fn stream() -> Vec<(Value, Option<&'static str>)> {
    let first = event("PO-1", "2026-11-29T10:15:00+05:45", json!([{"id": "u-1", "phone": "+9779800000001"}]));
    let mut other_body = first.clone();
    other_body["data"]["approver"]["name"] = json!("Someone else");
    let mut broken = event("PO-4", "2026-11-29T10:18:00Z", json!([{"id": "u-4", "phone": "+9779800000004"}]));
    broken["data"] = json!({"po": {"number": "PO-4", "total": "1"}});
    vec![
        (first.clone(), Some("k-1")),
        (first.clone(), Some("k-1")),
        (first.clone(), Some("k-1b")),
        (other_body.clone(), Some("k-1")),
        (other_body, None),
        (first, None),
        // No approver: every template fails to render, caught before any send.
        (broken, None),
        (
            event(
                "PO-2",
                "2026-11-29T10:16:00Z",
                json!([{"id": "u-2", "phone": "+9779800000002", "locale": "ne"}, {"id": "u-3"}]),
            ),
            None,
        ),
        (event("PO-3", "2026-11-29T10:17:00Z", json!([{"id": "u-1", "phone": "+9779800000001"}])), Some("k-3")),
    ]
}

/// What must not differ between shadow and live: per post, its status and
/// each intent's key, channel, recipient, decision and reason.
async fn post_all(app: &Spawned) -> (Vec<(u16, Vec<Value>)>, Vec<String>) {
    let mut answers = Vec::new();
    let mut keys = Vec::new();
    for (body, key) in stream() {
        let (status, answer, _) = app.post_event(&body, key).await;
        let intents: Vec<Value> = answer["intents"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .map(|i| {
                keys.push(i["key"].as_str().unwrap().to_string());
                json!([i["key"], i["channel"], i["recipient_id"], i["decision"], i["reason"], i["created"]])
            })
            .collect();
        answers.push((status, intents));
    }
    keys.sort();
    keys.dedup();
    (answers, keys)
}

/// Each intent once it has settled, by key.
async fn settled(app: &Spawned, keys: &[String], states: &[&str]) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for key in keys {
        out.insert(key.clone(), app.wait_state(key, states).await);
    }
    out
}

/// What live and shadow must agree on in one intent.
fn decided(i: &Value) -> Value {
    json!([
        i["key"],
        i["channel"],
        i["recipient_id"],
        i["destination"],
        i["decision"],
        i["reason"],
        i["template"],
        i["payload_digest"],
        i["content"]
    ])
}

#[tokio::test]
async fn the_same_events_in_shadow_and_live_plan_the_same_and_shadow_calls_no_provider() {
    for backend in backends() {
        let (live_db, shadow_db) = (TestDb::new(backend).await, TestDb::new(backend).await);
        let (live_sms, shadow_sms) = (FakeSms::start().await, FakeSms::start().await);
        let live = TestApp::new(&live_db).with_sms(&live_sms).spawn().await;
        let shadow = TestApp::new(&shadow_db).with_sms(&shadow_sms).with_mode("shadow").spawn().await;

        let (live_answers, live_keys) = post_all(&live).await;
        let (shadow_answers, shadow_keys) = post_all(&shadow).await;
        assert_eq!(live_answers, shadow_answers, "{backend:?}: the answers to the senders differ");
        assert_eq!(live_keys, shadow_keys);
        assert_eq!(live_answers[3].0, 422, "a reused key with another body is a mismatch in both");
        assert_eq!(live_answers[4].0, 409, "an accepted event with other content is a conflict in both");

        let finals = ["sent", "shadowed", "suppressed", "dead", "digested"];
        let live_intents = settled(&live, &live_keys, &finals).await;
        let shadow_intents = settled(&shadow, &shadow_keys, &finals).await;
        for key in &live_keys {
            let (l, s) = (&live_intents[key], &shadow_intents[key]);
            assert_eq!(decided(l), decided(s), "{backend:?}: intent {key} was planned differently");
            assert_eq!((l["mode"].as_str(), s["mode"].as_str()), (Some("live"), Some("shadow")));
            match l["state"].as_str().unwrap() {
                // What live sent, shadow would have sent, and says where.
                "sent" => {
                    assert_eq!(s["state"], "shadowed", "{key}");
                    assert_eq!(s["attempts"], json!([]), "{key}: a shadowed intent has no attempt");
                    assert_eq!(s["would_have_sent"]["channel"], l["channel"]);
                    assert_eq!(s["would_have_sent"]["to"], l["destination"], "masked as the intent is");
                    assert!(l.get("would_have_sent").is_none());
                }
                other => assert_eq!(s["state"], other, "{key}: a decision not to send is the same in shadow"),
            }
        }
        let shadowed = shadow_intents.values().filter(|i| i["state"] == "shadowed").count();
        let ucs2 = shadow_intents.values().filter(|i| i["content"]["encoding"] == "UCS-2").count();
        assert!(shadowed >= 5 && ucs2 == 1, "{backend:?}: {shadowed} shadowed, {ucs2} UCS-2 SMS");
        assert!(shadow_intents.values().any(|i| i["reason"] == "no_destination"));

        assert!(live_sms.calls() >= 3, "{backend:?}: live sent {} SMS", live_sms.calls());
        assert_eq!(shadow_sms.calls(), 0, "{backend:?}: shadow called the SMS provider");
        let (_, live_inbox) = live.get("/v1/recipients/u-1/inbox").await;
        let (_, shadow_inbox) = shadow.get("/v1/recipients/u-1/inbox").await;
        assert_eq!(live_inbox["cards"].as_array().map(Vec::len), Some(2));
        assert_eq!(shadow_inbox["cards"], json!([]), "{backend:?}: shadow showed an in-app card");

        // The timeline `herald why` prints says what would have gone where, masked.
        let store = shadow_db.store().await;
        let history = herald::why::history(store.as_ref(), "default", ("purchase_order", "PO-3"), "u-1").await.unwrap();
        let text = herald::why::timeline(("purchase_order", "PO-3"), "u-1", &history);
        assert!(text.contains("in shadow mode"), "{text}");
        assert!(text.contains("would have sent sms to +97798******01; no provider was called"), "{text}");
        assert!(text.contains("would have sent in_app to the recipient's in-app inbox"), "{text}");
        assert!(!text.contains("+9779800000001"), "{text}");

        let metrics = reqwest::get(format!("{}/metrics", shadow.base)).await.unwrap().text().await.unwrap();
        assert!(metrics.contains("herald_intents_shadowed_total{channel=\"sms\""), "{metrics}");

        // The shadow report: the same posts and decisions; shadow would have
        // sent what live sent.
        let shadow_report = report_once_tallied(&shadow).await;
        let live_report = report_once_tallied(&live).await;
        for field in ["events_received", "events_new", "duplicates", "mismatches", "intents", "sms", "template_errors"]
        {
            assert_eq!(shadow_report[field], live_report[field], "{backend:?}: {field}");
        }
        assert_eq!(shadow_report["would_send"], live_report["sent"], "{backend:?}");
        assert_eq!((shadow_report["sent"].clone(), live_report["would_send"].clone()), (json!({}), json!({})));
        assert_eq!(shadow_report["would_send"], json!({"sms": 3, "in_app": 4}), "{shadow_report:#}");
        assert_eq!(
            (shadow_report["events_received"].as_i64(), shadow_report["events_new"].as_i64()),
            (Some(9), Some(4)),
            "{shadow_report:#}"
        );
        assert_eq!(shadow_report["duplicates"], json!({"replay": 1, "another_key": 1, "reemitted": 1}));
        assert_eq!(shadow_report["mismatches"], json!({"idempotency_key_mismatch": 1, "event_conflict": 1}));
        assert_eq!(
            shadow_report["intents"],
            json!({
                "in_app": {"send": {"none": 4, "template_error": 1}},
                "sms": {"send": {"none": 3, "template_error": 1}, "suppress": {"no_destination": 1}}
            })
        );
        assert_eq!(
            shadow_report["sms"],
            json!([{"encoding": "GSM-7", "messages": 2, "segments": 2}, {"encoding": "UCS-2", "messages": 1, "segments": 1}])
        );
        assert_eq!(
            shadow_report["template_errors"],
            json!([{"template": "po_approved", "reason": "template_error", "count": 2}])
        );

        live.running.stop().await;
        shadow.running.stop().await;
    }
}

/// The report once the tally of the stream's nine posts has been written
/// (the tally is written in the background, every half second).
async fn report_once_tallied(app: &Spawned) -> Value {
    common::eventually("the tally to reach the stream's nine posts", || async {
        let (status, report) = app.get("/v1/shadow/report").await;
        assert_eq!(status, 200, "{report}");
        (report["events_received"] == 9).then_some(report)
    })
    .await
}

#[tokio::test]
async fn the_report_range_is_checked_naming_the_parameter() {
    let db = TestDb::new(common::Backend::Sqlite).await;
    let app = TestApp::new(&db).spawn().await;
    let cases = [
        ("since=yesterday", "since"),
        ("until=2026-11-30T00:00:00", "until"),
        ("since=2026-11-30T00:00:00Z&until=2026-11-29T00:00:00Z", "since"),
        ("sinse=2026-11-30T00:00:00Z", "sinse"),
    ];
    for (query, field) in cases {
        let (status, body) = app.get(&format!("/v1/shadow/report?{query}")).await;
        assert_eq!(status, 400, "{query}: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.starts_with(&format!("{field}:")), "{query}: {message}");
    }
    // The same instant written with another offset is no range at all.
    let (status, body) =
        app.get("/v1/shadow/report?since=2026-11-29T00:00:00Z&until=2026-11-29T01:00:00%2B01:00").await;
    assert_eq!(status, 400, "{body}");
    // A range of an idle deployment is all zeros, not an error.
    let (status, body) = app.get("/v1/shadow/report?since=2026-11-29T00:00:00Z&until=2026-11-30T00:00:00Z").await;
    assert_eq!((status, body["events_received"].as_i64(), body["intents"].clone()), (200, Some(0), json!({})));
    app.running.stop().await;
}

#[tokio::test]
async fn switching_to_live_sends_only_what_is_planned_afterwards() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let sms_of = |entity: &str, minute: u32| {
            let mut e = event(
                entity,
                &format!("2026-11-29T10:{minute:02}:00Z"),
                json!([{"id": "u-1", "phone": "+9779800000001"}]),
            );
            e["channels"] = json!(["sms"]);
            e
        };

        // Shadow, with a worker: the first event ends shadowed.
        let shadow = TestApp::new(&db).with_sms(&sms).with_mode("shadow").spawn().await;
        let (status, a, _) = shadow.post_event(&sms_of("PO-A", 1), None).await;
        assert_eq!(status, 202);
        let a = a["intents"][0]["key"].as_str().unwrap().to_string();
        shadow.wait_state(&a, &["shadowed"]).await;
        shadow.running.stop().await;

        // Shadow, without a worker: planned in shadow, still queued at the switch.
        let api_only = TestApp::new(&db).with_sms(&sms).with_mode("shadow").without_workers().spawn().await;
        let (_, b, _) = api_only.post_event(&sms_of("PO-B", 2), None).await;
        let b = b["intents"][0]["key"].as_str().unwrap().to_string();
        assert_eq!(api_only.wait_state(&b, &["queued"]).await["mode"], "shadow");
        api_only.running.stop().await;

        // Live from now on.
        let live = TestApp::new(&db).with_sms(&sms).spawn().await;
        let (_, c, _) = live.post_event(&sms_of("PO-C", 3), None).await;
        let c = c["intents"][0]["key"].as_str().unwrap().to_string();
        let sent = live.wait_state(&c, &["sent"]).await;
        assert_eq!(sent["mode"], "live");
        let queued_in_shadow = live.wait_state(&b, &["shadowed", "sent"]).await;
        assert_eq!(queued_in_shadow["state"], "shadowed", "{backend:?}: planned in shadow, it stays shadow");
        assert_eq!(live.wait_state(&a, &["shadowed", "sent"]).await["state"], "shadowed");
        // The replay of the first event is answered as it stands: still shadowed, not sent now.
        let (status, replay, _) = live.post_event(&sms_of("PO-A", 1), None).await;
        assert_eq!((status, replay["intents"][0]["state"].as_str()), (200, Some("shadowed")));
        assert_eq!(sms.calls(), 1, "{backend:?}: only the intent planned live was sent");
        assert_eq!(sms.sent_to("+9779800000001")[0].idempotency_key.as_deref(), Some(c.as_str()));
        live.running.stop().await;
    }
}

/// A member of the digest route's window for `u-digest`, posted now.
async fn post_member(app: &Spawned, entity: &str, phone: &str) -> String {
    let mut ev = sms_event(entity, phone);
    ev["type"] = json!("purchase_order.batched");
    ev["recipients"] = json!([{"id": "u-digest", "phone": phone}]);
    let (status, body, _) = app.post_event(&ev, None).await;
    assert_eq!((status, body["intents"][0]["decision"].as_str()), (202, Some("digest")), "{body}");
    body["intents"][0]["key"].as_str().unwrap().to_string()
}

/// A digest window open across its route's switch from shadow to live.
struct Switched {
    /// The live Herald, still running, its clock past the window's close.
    live: Spawned,
    /// The member a Herald in shadow mode planned, before the switch.
    shadow_member: String,
    /// The member the live Herald planned, after it.
    live_member: String,
}

/// Posts one member of `u-digest`'s window (opened 10:05) from a Herald in
/// shadow mode, stops it, starts a live one that posts the second member at
/// 10:06, and moves the clock to 11:00, past the window's close.
async fn across_the_switch(
    db: &TestDb,
    sms: &FakeSms,
    templates: &std::path::Path,
    phone: &str,
    (first, second): (&str, &str),
) -> Switched {
    let clock = TestClock::at("2026-06-01T10:05:00Z");
    let app = |mode: Option<&'static str>| {
        let mut b = TestApp::new(db)
            .with_sms(sms)
            .with_templates_dir(templates)
            .with_clock(clock.clone())
            .with_toml(DIGEST_ROUTE);
        if let Some(m) = mode {
            b = b.with_mode(m);
        }
        b.spawn()
    };
    let shadow = app(Some("shadow")).await;
    let shadow_member = post_member(&shadow, first, phone).await;
    shadow.running.stop().await;

    let live = app(None).await;
    clock.set("2026-06-01T10:06:00Z");
    let live_member = post_member(&live, second, phone).await;
    clock.set("2026-06-01T11:00:00Z");
    Switched { live, shadow_member, live_member }
}

/// `herald why` for one member of the digest route.
async fn why(db: &TestDb, entity: &str) -> String {
    let store = db.store().await;
    let history =
        herald::why::history(store.as_ref(), "default", ("purchase_order", entity), "u-digest").await.unwrap();
    herald::why::timeline(("purchase_order", entity), "u-digest", &history)
}

#[tokio::test]
async fn an_all_shadow_digest_closes_shadowed_with_no_provider_call_and_no_attempt() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let templates = templates_with_digest();
        let clock = TestClock::at("2026-06-01T10:05:00Z");
        let app = TestApp::new(&db)
            .with_sms(&sms)
            .with_templates_dir(templates.path())
            .with_clock(clock.clone())
            .with_toml(DIGEST_ROUTE)
            .with_mode("shadow")
            .spawn()
            .await;
        let phone = "+15550000301";
        let first = post_member(&app, "PO-SD1", phone).await;
        clock.set("2026-06-01T10:06:00Z");
        let second = post_member(&app, "PO-SD2", phone).await;
        clock.set("2026-06-01T11:00:00Z");

        let member = app.wait_state(&first, &["digested"]).await;
        assert_eq!(member["mode"], "shadow");
        let digest_id = member["digest_id"].as_str().expect("a link to the digest").to_string();
        let digest = app.wait_state(&digest_id, &["shadowed", "queued", "sending", "sent"]).await;
        assert_eq!(digest["state"], "shadowed", "{backend:?}: {digest}");
        assert_eq!(digest["mode"], "shadow");
        assert_eq!(digest["content"]["body"], "2 approved: PO-SD1 PO-SD2", "rendered and frozen as live would");
        assert_eq!(digest["would_have_sent"]["to"], "+15550****01", "masked");
        assert_eq!(digest["would_have_sent"]["payload_digest"], digest["payload_digest"]);
        assert_eq!((digest["attempt_count"].as_i64(), digest["attempts"].clone()), (Some(0), json!([])));
        assert_eq!(app.wait_state(&second, &["digested"]).await["digest_id"], digest_id.as_str());

        // Nothing queued, nothing attempted, no provider called. No wait is
        // needed to see it: a digest's job would be written with its state,
        // and a claim writes the attempt in the claiming transaction, so a
        // job that ever existed shows now as a job or an attempt.
        assert_eq!(count(&db, "SELECT COUNT(*) FROM jobs").await, 0, "{backend:?}: a job was queued");
        assert_eq!(count(&db, "SELECT COUNT(*) FROM attempts").await, 0, "{backend:?}: an attempt was made");
        assert_eq!(sms.calls(), 0, "{backend:?}: a provider was called");
        assert_eq!(app.get(&format!("/v1/intents/{digest_id}")).await.1["state"], "shadowed");

        let text = why(&db, "PO-SD1").await;
        assert!(
            text.contains("in shadow mode") && text.contains(&format!("now digested, in digest {digest_id}")),
            "{text}"
        );
        app.running.stop().await;
    }
}

/// A window that was open when its route went from shadow to live: the
/// member planned in shadow was sent by the system Herald shadowed, so the
/// live digest carries only what was planned live. A live Herald would have
/// batched the shadow member into that digest, so it ends `digested`, in
/// shadow mode, linked to the window and saying it was left out: not a
/// message of its own that shadow "would have sent", and the shadow report
/// counts the window's one SMS, not one more per shadow member.
#[tokio::test]
async fn a_digest_open_across_the_switch_to_live_sends_only_its_live_members() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let templates = templates_with_digest();
        let phone = "+15550000302";
        let Switched { live, shadow_member: observed, live_member: sent_live } =
            across_the_switch(&db, &sms, templates.path(), phone, ("PO-MX1", "PO-MX2")).await;

        let member = live.wait_state(&sent_live, &["digested"]).await;
        let digest_id = member["digest_id"].as_str().expect("a link to the digest").to_string();
        let digest = live.wait_state(&digest_id, &["sent", "shadowed", "dead"]).await;
        assert_eq!((digest["state"].as_str(), digest["mode"].as_str()), (Some("sent"), Some("live")), "{digest}");
        assert_eq!(digest["content"]["body"], "1 approved: PO-MX2", "{backend:?}: the shadow member was sent");
        assert_eq!(sms.calls(), 1);
        assert!(sms.sent_to(phone)[0].body["body"].as_str().unwrap().contains("PO-MX2"));

        let left_out = live.wait_state(&observed, &["shadowed", "digested"]).await;
        assert_eq!(
            (left_out["state"].as_str(), left_out["mode"].as_str()),
            (Some("digested"), Some("shadow")),
            "{backend:?}: {left_out}"
        );
        assert_eq!(left_out["digest_id"], digest_id.as_str(), "still linked to the window it joined");
        assert!(left_out["detail"].as_str().unwrap_or_default().contains("left out of the live digest"), "{left_out}");
        assert!(left_out.get("would_have_sent").is_none(), "{backend:?}: not a message of its own: {left_out}");
        assert_eq!(left_out["attempt_count"], 0);

        let text = why(&db, "PO-MX1").await;
        for expected in [
            "decided: digest",
            "in shadow mode",
            "left out of the live digest",
            &format!("now digested, in digest {digest_id}"),
        ] {
            assert!(text.contains(expected), "{backend:?}: missing {expected:?} in:\n{text}");
        }
        assert!(!text.contains("would have sent"), "{backend:?}: {text}");

        // The window cost one SMS, the live digest: not 1 + one per shadow member.
        let (status, report) =
            live.get("/v1/shadow/report?since=2026-06-01T00:00:00Z&until=2026-06-02T00:00:00Z").await;
        assert_eq!(status, 200, "{report}");
        assert_eq!(
            report["sms"],
            json!([{"encoding": "GSM-7", "messages": 1, "segments": 1}]),
            "{backend:?}: {report:#}"
        );
        assert_eq!(
            (report["sent"].clone(), report["would_send"].clone()),
            (json!({"sms": 1}), json!({})),
            "{report:#}"
        );
        live.running.stop().await;
    }
}

/// A window open across the switch whose digest cannot be rendered: live
/// Herald sends each member on its own then, so the live member goes out
/// alone and the member planned in shadow ends `shadowed` right there — no
/// job, no attempt, counted and logged as shadowed once, and its detail
/// says what happened rather than that it was sent.
#[tokio::test]
async fn a_digest_open_across_the_switch_that_cannot_be_rendered_shadows_its_shadow_member_once() {
    for backend in backends() {
        // Keys derive from the event: each backend's lines apart.
        let capture = Capture::default();
        let _guard = capture.install(1.0);
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let templates = templates_with_digest();
        // strict undefined: the digest's SMS fails to render at close
        std::fs::write(templates.path().join("po_digest/en/sms.j2"), "{{ nope }}").unwrap();
        let phone = "+15550000303";
        let Switched { live, shadow_member: observed, live_member: planned_live } =
            across_the_switch(&db, &sms, templates.path(), phone, ("PO-UR1", "PO-UR2")).await;

        let sent = live.wait_state(&planned_live, &["sent", "dead"]).await;
        assert_eq!(sent["state"], "sent", "{backend:?}: {sent}");
        let digest_id = sent["digest_id"].as_str().expect("a link to the digest").to_string();
        let digest = live.wait_state(&digest_id, &["dead"]).await;
        assert_eq!(digest["reason"], "template_error", "{backend:?}: {digest}");

        let shadowed = live.wait_state(&observed, &["shadowed", "sent", "dead"]).await;
        assert_eq!(
            (shadowed["state"].as_str(), shadowed["mode"].as_str(), shadowed["attempt_count"].as_i64()),
            (Some("shadowed"), Some("shadow"), Some(0)),
            "{backend:?}: {shadowed}"
        );
        let detail = shadowed["detail"].as_str().unwrap_or_default();
        assert!(detail.contains("shadow") && !detail.contains("sent"), "{backend:?}: {detail}");
        assert_eq!(sms.calls(), 1, "{backend:?}: only the member planned live");
        assert!(sms.sent_to(phone)[0].body["body"].as_str().unwrap().contains("PO-UR2"));
        let jobs =
            format!("SELECT COUNT(*) FROM jobs WHERE intent_id = (SELECT id FROM intents WHERE key = '{observed}')");
        assert_eq!(count(&db, &jobs).await, 0, "{backend:?}: a job was queued for the shadow member");

        // Counted and logged once: the metric and the line go together.
        let lines = capture.about(&observed);
        let shadow_lines = lines.iter().filter(|l| l["outcome"] == "shadowed").count();
        assert_eq!(shadow_lines, 1, "{backend:?}: {lines:#?}");
        live.running.stop().await;
    }
}
