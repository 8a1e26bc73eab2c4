//! Decisions end to end: holds that wake, digests that close once, superseded
//! versions that are never sent, preference versions, and `herald why`.

mod common;

use common::digest::{DIGEST_ROUTE, templates_with_digest};
use common::{FakeSms, Reply, TestApp, TestClock, TestDb, backends, sms_event};
use herald::clock::Clock;
use herald::deliver::digest::DigestCloser;
use herald::render::TemplateSet;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;

fn id_of(body: &Value) -> String {
    body["intents"][0]["id"].as_str().unwrap().to_string()
}

/// An app with the digest route, its templates, and a clock at 10:05.
async fn digest_app(db: &TestDb, sms: &FakeSms, templates: &std::path::Path) -> (common::Spawned, Arc<TestClock>) {
    let clock = TestClock::at("2026-06-01T10:05:00Z");
    let app = TestApp::new(db)
        .with_sms(sms)
        .with_templates_dir(templates)
        .with_clock(clock.clone())
        .with_toml(DIGEST_ROUTE)
        .spawn()
        .await;
    (app, clock)
}

const SUPERSEDE_ROUTE: &str = r#"
[[routes]]
event = "purchase_order.updated"
template = "po_approved"
channels = ["sms"]
skip_superseded = true
"#;

#[tokio::test]
async fn a_held_intent_wakes_at_the_end_of_quiet_hours_with_its_frozen_content() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let clock = TestClock::at("2026-06-01T23:00:00Z");
        let app = TestApp::new(&db).with_sms(&sms).with_clock(clock.clone()).spawn().await;
        let prefs = json!({"quiet_hours": {"start": "21:00", "end": "07:00", "channels": ["sms"]}});
        let (s, _) = app
            .put("/v1/recipients/u-night", &json!({"phone": "+15550000200", "timezone": "UTC", "preferences": prefs}))
            .await;
        assert_eq!(s, 200);
        let mut ev = sms_event("PO-NIGHT", "+15550000200");
        ev["recipients"] = json!([{"id": "u-night"}]);
        let (_, b, _) = app.post_event(&ev, None).await;
        let it = &b["intents"][0];
        assert_eq!(
            (it["decision"].as_str(), it["reason"].as_str(), it["state"].as_str()),
            (Some("hold"), Some("quiet_hours"), Some("held"))
        );
        let id = id_of(&b);
        // the directory changes while it is held: the frozen destination stands
        app.put("/v1/recipients/u-night", &json!({"phone": "+15550000299", "timezone": "UTC", "preferences": prefs}))
            .await;
        clock.set("2026-06-02T06:59:00Z");
        // Held means its job cannot be claimed before the window ends: the
        // queue, not a pause, keeps it from going out during quiet hours.
        let wakes = "2026-06-02T07:00:00Z".parse::<jiff::Timestamp>().unwrap().as_microsecond();
        let key = b["intents"][0]["key"].as_str().unwrap();
        let not_before = format!(
            "SELECT COUNT(*) FROM jobs WHERE intent_id = (SELECT id FROM intents WHERE key = '{key}') AND run_at >= {wakes}"
        );
        assert_eq!(common::count(&db, &not_before).await, 1, "{backend:?}: its job waits for 07:00");
        let (_, it) = app.get(&format!("/v1/intents/{id}")).await;
        assert_eq!(it["state"], "held", "{backend:?}: {it}");
        // It says when it will go, and the window that held it.
        assert_eq!(
            it["detail"],
            "quiet hours 21:00–07:00 in UTC, preferences v1; due 2026-06-02T07:00:00Z (2026-06-02 07:00:00 +00:00 UTC)",
            "{backend:?}: {it}"
        );
        let stored = db.store().await.intent_get("default", key).await.unwrap().unwrap();
        let why = herald::why::timeline(("purchase_order", "PO-NIGHT"), "u-night", &[stored]);
        assert!(
            why.contains("note: quiet hours 21:00–07:00 in UTC, preferences v1; due 2026-06-02T07:00:00Z"),
            "{why}"
        );
        assert!(sms.sent_to("+15550000200").is_empty(), "{backend:?}: sent during quiet hours");
        clock.set("2026-06-02T07:00:01Z");
        let it = app.wait_state(&id, &["sent"]).await;
        assert_eq!(it["preferences_version"], 1);
        assert_eq!(sms.sent_to("+15550000200").len(), 1, "{backend:?}");
        assert!(sms.sent_to("+15550000299").is_empty());
        app.running.stop().await;
    }
}

#[tokio::test]
async fn a_digest_window_sends_its_members_once_as_one_message() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let templates = templates_with_digest();
        let (app, clock) = digest_app(&db, &sms, templates.path()).await;
        let phone = "+15550000201";
        let mut members = Vec::new();
        for (n, po) in ["PO-D1", "PO-D2", "PO-D1"].iter().enumerate() {
            clock.set(&format!("2026-06-01T10:{:02}:00Z", 5 + n));
            let mut ev = sms_event(po, phone);
            ev["type"] = json!("purchase_order.batched");
            ev["recipients"] = json!([{"id": "u-digest", "phone": phone}]);
            let (s, b, _) = app.post_event(&ev, None).await;
            assert_eq!(s, if n == 2 { 200 } else { 202 }, "the third is a duplicate of the first");
            assert_eq!(b["intents"][0]["decision"], "digest");
            members.push(id_of(&b));
        }
        // A member waits in the open digest, with no job of its own to send it alone.
        let alone = format!(
            "SELECT COUNT(*) FROM jobs j JOIN intents i ON i.id = j.intent_id WHERE i.key IN ({})",
            keys_of(&app, &members).await.iter().map(|k| format!("'{k}'")).collect::<Vec<_>>().join(", ")
        );
        assert_eq!(common::count(&db, &alone).await, 0, "{backend:?}: a member could be sent alone");
        assert!(sms.sent_to(phone).is_empty(), "{backend:?}: a member was sent alone");
        clock.set("2026-06-01T11:00:00Z");
        let member = app.wait_state(&members[0], &["digested"]).await;
        let digest_id = member["digest_id"].as_str().expect("a link to the digest").to_string();
        let digest = app.wait_state(&digest_id, &["sent"]).await;
        assert_eq!(digest["content"]["body"], "2 approved: PO-D1 PO-D2", "{backend:?}");
        assert_eq!(digest["template"]["id"], "po_digest");
        let second = app.wait_state(&members[1], &["digested"]).await;
        assert_eq!(second["digest_id"], digest_id.as_str());
        assert_eq!(sms.sent_to(phone).len(), 1);
        app.running.stop().await;
    }
}

#[tokio::test]
async fn two_closers_racing_for_one_window_make_one_digest() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let templates = templates_with_digest();
        let clock = TestClock::at("2026-06-01T10:05:00Z");
        // ingest through an API-only app, then race two closers on the store
        let app = TestApp::new(&db)
            .with_sms(&FakeSms::start().await)
            .with_templates_dir(templates.path())
            .with_clock(clock.clone())
            .with_toml(DIGEST_ROUTE)
            .without_workers()
            .spawn()
            .await;
        for po in ["PO-R1", "PO-R2", "PO-R3"] {
            let mut ev = sms_event(po, "+15550000202");
            ev["type"] = json!("purchase_order.batched");
            ev["recipients"] = json!([{"id": "u-race", "phone": "+15550000202"}]);
            app.post_event(&ev, None).await;
        }
        let config = TestApp::new(&db).with_templates_dir(templates.path()).with_toml(DIGEST_ROUTE).config();
        let routes: Arc<HashMap<_, _>> = Arc::new(config.routes.iter().map(|r| (r.event.clone(), r.clone())).collect());
        let set = Arc::new(TemplateSet::load_dir(templates.path()).unwrap());
        clock.set("2026-06-01T11:00:01Z");
        let mut tasks = Vec::new();
        for _ in 0..4 {
            let closer = DigestCloser {
                store: db.store().await,
                templates: set.clone(),
                routes: routes.clone(),
                clock: clock.clone() as Arc<dyn Clock>,
            };
            tasks.push(tokio::spawn(async move { closer.close_due().await.unwrap() }));
        }
        let mut closed = 0;
        for t in tasks {
            closed += t.await.unwrap();
        }
        assert_eq!(closed, 1, "{backend:?}");
        let (_, list) = app.get("/v1/intents?entity=digest:purchase_order").await;
        assert_eq!(list["intents"].as_array().unwrap().len(), 1, "{backend:?}: {list}");
        app.running.stop().await;
    }
}

#[tokio::test]
async fn an_older_version_is_never_sent_after_a_newer_one() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let phone = "+15550000203";
        let app = TestApp::new(&db).with_sms(&sms).with_toml(SUPERSEDE_ROUTE).spawn().await;
        let post = |version: u64, minute: u32| {
            let mut ev = sms_event("PO-SUP", phone);
            ev["type"] = json!("purchase_order.updated");
            ev["entity"]["version"] = json!(version);
            ev["occurred_at"] = json!(format!("2026-11-29T10:{minute:02}:00Z"));
            ev
        };
        let (_, granted, _) = app.post_event(&post(2, 10), None).await;
        app.wait_state(&id_of(&granted), &["sent"]).await;
        // "requested" arrives late
        let (_, requested, _) = app.post_event(&post(1, 5), None).await;
        let it = app.wait_state(&id_of(&requested), &["suppressed"]).await;
        assert_eq!(
            (it["decision"].as_str(), it["reason"].as_str()),
            (Some("suppress"), Some("superseded")),
            "{backend:?}"
        );
        assert_eq!(it["superseded_by"], id_of(&granted).as_str());
        assert!(it["attempts"].as_array().unwrap().is_empty());
        assert_eq!(sms.sent_to(phone).len(), 1);
        app.running.stop().await;
    }
}

#[tokio::test]
async fn every_preferences_version_is_kept_and_named_by_its_decisions() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let app = TestApp::new(&db).with_sms(&sms).spawn().await;
        let path = "/v1/recipients/u-prefs";
        app.put(path, &json!({"phone": "+15550000204"})).await;
        let (_, r) =
            app.put(path, &json!({"phone": "+15550000204", "preferences": {"channels": {"sms": false}}})).await;
        assert_eq!(r["preferences_version"], 2);
        let (s, e) = app.put(path, &json!({"preferences": {"channels": {"fax": false}}})).await;
        assert_eq!(s, 400);
        assert!(e["error"]["message"].as_str().unwrap().starts_with("preferences.channels.fax"), "{e}");
        let (s, v1) = app.get(&format!("{path}/preferences/1")).await;
        assert_eq!((s, &v1["preferences"]), (200, &json!({})), "{backend:?}");
        let (_, v2) = app.get(&format!("{path}/preferences/2")).await;
        assert_eq!(v2["preferences"], json!({"channels": {"sms": false}}));
        assert_eq!(app.get(&format!("{path}/preferences/9")).await.0, 404);
        let mut ev = sms_event("PO-PREF", "+15550000204");
        ev["recipients"] = json!([{"id": "u-prefs"}]);
        ev["channels"] = json!(["sms", "in_app"]);
        let (_, b, _) = app.post_event(&ev, None).await;
        let (_, it) = app.get(&format!("/v1/intents/{}", id_of(&b))).await;
        assert_eq!((it["reason"].as_str(), it["preferences_version"].as_i64()), (Some("opted_out"), Some(2)));
        app.running.stop().await;
    }
}

#[tokio::test]
async fn herald_why_tells_the_story_of_a_notification() {
    let db = TestDb::new(common::Backend::Sqlite).await;
    let sms = FakeSms::start().await;
    let phone = "+15550000205";
    sms.script(phone, vec![Reply::status(503, json!({"error": "busy"})), Reply::ok("prov-9")]);
    let app = TestApp::new(&db).with_sms(&sms).spawn().await;
    let mut ev = sms_event("PO-WHY", phone);
    ev["channels"] = json!(["sms", "email"]);
    let (_, b, _) = app.post_event(&ev, None).await;
    app.wait_state(&id_of(&b), &["sent"]).await;
    app.running.stop().await;

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("herald.toml");
    std::fs::write(&config, format!("database_url = \"{}\"\n", db.url)).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(["why", "--entity", "purchase_order:PO-WHY", "--recipient", "u-PO-WHY", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text} {}", String::from_utf8_lossy(&out.stderr));
    for expected in [
        "purchase_order:PO-WHY → u-PO-WHY",
        "[email]",
        "decided: suppress (channel_disabled)",
        "[sms]",
        "to +15550****05",
        "attempt 1 retryable via http: provider_5xx, status 503",
        "attempt 2 accepted via http, status 200, provider id prov-9",
        "now sent",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(["why", "--entity", "nocolon", "--recipient", "x"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--entity"));
}

/// `herald why` keeps the decision and its reason apart from how the
/// notification ended; `herald dlq show` shows the stored event, as the API
/// does, with its addresses masked.
#[tokio::test]
async fn the_cli_tells_the_decision_apart_from_the_end_and_shows_the_event() {
    let db = TestDb::new(common::Backend::Sqlite).await;
    let sms = FakeSms::start().await;
    let phone = "+15550000207";
    sms.script(phone, vec![Reply::status(503, json!({"error": "busy"}))]);
    let app = TestApp::new(&db).with_sms(&sms).spawn().await;
    let (_, b, _) = app.post_event(&sms_event("PO-END", phone), None).await;
    let id = id_of(&b);
    app.wait_state(&id, &["dead"]).await;
    app.running.stop().await;

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("herald.toml");
    std::fs::write(&config, format!("database_url = \"{}\"\n", db.url)).unwrap();
    let herald = |args: &[&str]| {
        let out =
            std::process::Command::new(env!("CARGO_BIN_EXE_herald")).args(args).arg("--config").arg(&config).output();
        let out = out.unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let why = herald(&["why", "--entity", "purchase_order:PO-END", "--recipient", "u-PO-END"]);
    let decided = why.lines().find(|l| l.contains("decided:")).unwrap_or_default();
    assert!(decided.contains("decided: send") && !decided.contains("retries_exhausted"), "{why}");
    assert!(why.lines().last().unwrap_or_default().contains("now dead (retries_exhausted)"), "{why}");

    let show: Value = serde_json::from_str(&herald(&["dlq", "show", &id])).unwrap();
    assert_eq!(show["event"]["data"]["po"]["number"], "PO-END", "{show}");
    assert_eq!(show["event"]["recipients"][0]["phone"], "+15550****07", "{show}");
    assert_eq!((show["reason"].as_str(), show["tenant"].as_str()), (Some("retries_exhausted"), Some("default")));
}

#[tokio::test]
async fn a_digest_that_cannot_be_rendered_sends_its_members_one_by_one() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let templates = templates_with_digest();
        // strict undefined: the digest's SMS fails to render (a file missing
        // altogether stops start-up instead)
        std::fs::write(templates.path().join("po_digest/en/sms.j2"), "{{ nope }}").unwrap();
        let (app, clock) = digest_app(&db, &sms, templates.path()).await;
        let phone = "+15550000206";
        let mut ids = Vec::new();
        for po in ["PO-F1", "PO-F2"] {
            let mut ev = sms_event(po, phone);
            ev["type"] = json!("purchase_order.batched");
            ev["recipients"] = json!([{"id": "u-fail", "phone": phone}]);
            let (_, b, _) = app.post_event(&ev, None).await;
            ids.push(id_of(&b));
        }
        clock.set("2026-06-01T11:00:00Z");
        for id in &ids {
            let it = app.wait_state(id, &["sent"]).await;
            assert!(it["detail"].as_str().unwrap().contains("sent on its own"), "{backend:?}: {it}");
            let (_, digest) = app.get(&format!("/v1/intents/{}", it["digest_id"].as_str().unwrap())).await;
            assert_eq!((digest["state"].as_str(), digest["reason"].as_str()), (Some("dead"), Some("template_error")));
        }
        assert_eq!(sms.sent_to(phone).len(), 2);
        app.running.stop().await;
    }
}

/// The keys of these intents, as the API gives them.
async fn keys_of(app: &common::Spawned, ids: &[String]) -> Vec<String> {
    let mut keys = Vec::new();
    for id in ids {
        let (_, it) = app.get(&format!("/v1/intents/{id}")).await;
        keys.push(it["key"].as_str().unwrap().to_string());
    }
    keys
}
