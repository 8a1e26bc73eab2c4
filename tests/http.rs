//! The real app on port 0, a fake SMS provider over HTTP, every backend.

mod common;

use common::peer::{Blackhole, Misbehaviour, Peer};
use common::{Backend, FakeSms, Reply, TestApp, TestClock, TestDb, backends, sms_event};
use herald::store::Claim;
use serde_json::{Value, json};
use std::time::Duration;

fn intent_ids(body: &Value) -> Vec<String> {
    let mut ids: Vec<String> =
        body["intents"].as_array().unwrap().iter().map(|i| i["id"].as_str().unwrap().to_string()).collect();
    ids.sort();
    ids
}

#[tokio::test]
async fn a_replayed_request_returns_the_stored_response_and_sends_once() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let app = TestApp::new(&db).with_sms(&sms).spawn().await;
        let ev = sms_event("PO-REPLAY", "+15550000001");
        let (s1, b1, _) = app.post_event(&ev, Some("erp:1")).await;
        let (s2, b2, h2) = app.post_event(&ev, Some("erp:1")).await;
        assert_eq!((s1, s2), (202, 200), "{backend:?}");
        assert_eq!(b2["replayed"], true);
        assert_eq!(h2.get("idempotent-replayed").unwrap(), "true");
        assert_eq!(intent_ids(&b1), intent_ids(&b2));
        app.wait_state(&intent_ids(&b1)[0], &["sent"]).await;
        // the same event under another Idempotency-Key: 200, no new intent
        let (s3, b3, _) = app.post_event(&ev, Some("erp:2")).await;
        assert_eq!(s3, 200);
        assert_eq!(b3["intents"][0]["created"], false);
        assert_eq!(b3["intents"][0]["state"], "sent");
        // Nothing is left to send, and once the app has stopped (waiting for
        // anything in flight) the count is final.
        assert_eq!(common::count(&db, "SELECT COUNT(*) FROM jobs").await, 0, "{backend:?}: nothing queued");
        app.running.stop().await;
        assert_eq!(sms.sent_to("+15550000001").len(), 1, "{backend:?}");
    }
}

#[tokio::test]
async fn the_same_key_with_another_body_is_422() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let app = TestApp::new(&db).spawn().await;
        let mut ev = sms_event("PO-MISMATCH", "+15550000002");
        ev["channels"] = json!(["in_app"]);
        assert_eq!(app.post_event(&ev, Some("k")).await.0, 202);
        ev["data"]["po"]["total"] = json!("2");
        let (s, b, _) = app.post_event(&ev, Some("k")).await;
        assert_eq!(s, 422, "{backend:?}");
        assert_eq!(b["error"]["code"], "idempotency_key_mismatch");
        app.running.stop().await;
    }
}

#[tokio::test]
async fn a_duplicate_storm_creates_one_intent_and_one_sms() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let app = std::sync::Arc::new(TestApp::new(&db).with_sms(&sms).spawn().await);
        let ev = sms_event("PO-STORM", "+15550000003");
        let mut tasks = Vec::new();
        for _ in 0..60 {
            let (app, ev) = (app.clone(), ev.clone());
            tasks.push(tokio::spawn(async move { app.post_event(&ev, None).await }));
        }
        let mut statuses = Vec::new();
        let mut ids = Vec::new();
        for t in tasks {
            let (s, b, _) = t.await.unwrap();
            statuses.push(s);
            ids.push(intent_ids(&b));
        }
        assert_eq!(statuses.iter().filter(|s| **s == 202).count(), 1, "{backend:?}: {statuses:?}");
        assert!(statuses.iter().all(|s| *s == 200 || *s == 202), "{statuses:?}");
        assert!(ids.windows(2).all(|w| w[0] == w[1]));
        app.wait_state(&ids[0][0], &["sent"]).await;
        assert_eq!(common::count(&db, "SELECT COUNT(*) FROM jobs").await, 0, "{backend:?}: nothing queued");
        match std::sync::Arc::try_unwrap(app) {
            Ok(app) => app.running.stop().await,
            Err(_) => panic!("app still shared"),
        }
        // Stopped, so nothing is in flight: the count is final.
        assert_eq!(sms.sent_to("+15550000003").len(), 1, "{backend:?}");
    }
}

#[tokio::test]
async fn transient_failures_retry_with_the_same_key() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let phone = "+15550000004";
        let mut throttled = Reply::status(429, json!({"error": "slow down"}));
        throttled.retry_after = Some("0".into());
        sms.script(phone, vec![Reply::status(503, json!({"error": "busy"})), throttled, Reply::ok("ok-1")]);
        let app = TestApp::new(&db).with_sms(&sms).spawn().await;
        let (_, b, _) = app.post_event(&sms_event("PO-RETRY", phone), None).await;
        let it = app.wait_state(b["intents"][0]["id"].as_str().unwrap(), &["sent"]).await;
        let outcomes: Vec<_> =
            it["attempts"].as_array().unwrap().iter().map(|a| a["outcome"].as_str().unwrap().to_string()).collect();
        assert_eq!(outcomes, ["retryable", "retryable", "accepted"], "{backend:?}");
        assert_eq!(it["attempts"][0]["error_class"], "provider_5xx");
        assert_eq!(it["attempts"][1]["error_class"], "throttled");
        assert_eq!(it["attempts"][2]["provider_message_id"], "ok-1");
        let keys: Vec<_> = sms.sent_to(phone).into_iter().map(|r| r.idempotency_key).collect();
        assert_eq!(keys, vec![Some(it["key"].as_str().unwrap().to_string()); 3]);
        app.running.stop().await;
    }
}

#[tokio::test]
async fn retries_run_out_as_dead_with_retries_exhausted() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let phone = "+15550000005";
        sms.script(phone, vec![Reply::status(500, json!({"error": "down"}))]);
        let app = TestApp::new(&db).with_sms(&sms).with_retry(3, "10ms", "20ms").spawn().await;
        let (_, b, _) = app.post_event(&sms_event("PO-EXHAUST", phone), None).await;
        let it = app.wait_state(b["intents"][0]["id"].as_str().unwrap(), &["dead"]).await;
        assert_eq!(it["reason"], "retries_exhausted", "{backend:?}");
        assert_eq!(it["attempts"].as_array().unwrap().len(), 3);
        assert_eq!(it["attempts"][2]["error_class"], "provider_5xx", "the last attempt keeps the provider's class");
        app.running.stop().await;
    }
}

#[tokio::test]
async fn a_permanent_failure_is_dead_after_one_attempt() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let (bad, rejected) = ("+15550000006", "+15550000016");
        sms.script(bad, vec![Reply::status(400, json!({"error": "invalid_destination"}))]);
        sms.script(rejected, vec![Reply::status(403, json!({"error": "blocked"}))]);
        let app = TestApp::new(&db).with_sms(&sms).spawn().await;
        for (phone, reason) in [(bad, "invalid_destination"), (rejected, "rejected")] {
            let (_, b, _) = app.post_event(&sms_event(&format!("PO-{reason}"), phone), None).await;
            let it = app.wait_state(b["intents"][0]["id"].as_str().unwrap(), &["dead"]).await;
            assert_eq!(it["reason"], reason, "{backend:?}");
            assert_eq!(it["attempts"].as_array().unwrap().len(), 1);
            assert_eq!(it["attempts"][0]["outcome"], "permanent");
        }
        app.running.stop().await;
    }
}

#[tokio::test]
async fn a_timeout_after_sending_is_unknown_and_retried_with_the_same_key() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let phone = "+15550000007";
        sms.script(phone, vec![Reply::ok("late").slow(Duration::from_millis(800)), Reply::ok("ok-2")]);
        let app = TestApp::new(&db).with_sms(&sms).with_lease("3s", "300ms").spawn().await;
        let (_, b, _) = app.post_event(&sms_event("PO-TIMEOUT", phone), None).await;
        let it = app.wait_state(b["intents"][0]["id"].as_str().unwrap(), &["sent"]).await;
        assert_eq!(it["attempts"][0]["outcome"], "unknown", "{backend:?}: {it}");
        assert_eq!(it["attempts"][1]["outcome"], "accepted");
        let keys: Vec<_> = sms.sent_to(phone).into_iter().map(|r| r.idempotency_key.unwrap()).collect();
        assert!(keys.len() == 2 && keys.iter().all(|k| k == it["key"].as_str().unwrap()));
        app.running.stop().await;
    }
}

#[tokio::test]
async fn a_crashed_workers_attempt_is_recorded_unknown_and_retaken_after_its_lease() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let phone = "+15550000008";
        // First process: ingest only (no workers), then "crash" holding a claim.
        let api_only = TestApp::new(&db).with_sms(&sms).without_workers().spawn().await;
        let (_, b, _) = api_only.post_event(&sms_event("PO-CRASH", phone), None).await;
        let id = b["intents"][0]["id"].as_str().unwrap().to_string();
        let store = db.store().await;
        let now = jiff::Timestamp::now().as_microsecond();
        let claimed = store
            .jobs_claim(Claim {
                now_us: now,
                limit: 10,
                lease_us: 300_000,
                max_attempts: 4,
                dedupe_window_us: None,
                supersede_types: vec![],
                repeats_unrecognised: vec![],
            })
            .await
            .unwrap();
        assert_eq!(claimed.len(), 1, "{backend:?}");
        api_only.running.stop().await;
        // The claim is never finished. A new process retakes it once the lease ends.
        let app = TestApp::new(&db).with_sms(&sms).spawn().await;
        let it = app.wait_state(&id, &["sent"]).await;
        let attempts = it["attempts"].as_array().unwrap();
        assert_eq!(attempts.len(), 2, "{backend:?}: {it}");
        assert_eq!(attempts[0]["outcome"], "unknown");
        assert_eq!(attempts[0]["error_class"], "lease_expired");
        assert_eq!(attempts[1]["outcome"], "accepted");
        assert_eq!(sms.sent_to(phone).len(), 1, "the crashed attempt never reached the provider");
        app.running.stop().await;
    }
}

#[tokio::test]
async fn shutdown_lets_an_attempt_in_flight_finish_and_records_it() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let phone = "+15550000009";
        sms.script(phone, vec![Reply::ok("slow-ok").slow(Duration::from_millis(400))]);
        let app = TestApp::new(&db).with_sms(&sms).spawn().await;
        let (_, b, _) = app.post_event(&sms_event("PO-SHUTDOWN", phone), None).await;
        let id = b["intents"][0]["id"].as_str().unwrap().to_string();
        // wait until the provider has the request, then stop
        common::eventually("the provider to have the request", || async { sms.has(phone) }).await;
        app.running.stop().await;
        let store = db.store().await;
        let detail = store.intent_get("default", &id).await.unwrap().unwrap();
        assert_eq!(detail.intent.state, "sent", "{backend:?}");
        assert_eq!(detail.attempts[0].outcome.map(|o| o.as_str()), Some("accepted"));
    }
}

#[tokio::test]
async fn bad_input_gets_a_4xx_naming_the_field() {
    let db = TestDb::new(Backend::Sqlite).await;
    let app = TestApp::new(&db).spawn().await;
    let url = format!("{}/v1/events", app.base);
    let raw = |body: &'static str, ct: &'static str| app.client.post(&url).header("content-type", ct).body(body).send();
    assert_eq!(raw("{", "application/json").await.unwrap().status(), 400);
    assert_eq!(raw("hello", "text/plain").await.unwrap().status(), 415);
    let big = json!({"type": "purchase_order.approved", "data": {"x": "y".repeat(300 * 1024)}});
    assert_eq!(app.client.post(&url).json(&big).send().await.unwrap().status(), 413);
    let mut ev = sms_event("PO-BAD", "+15550000010");
    ev["type"] = json!("no.such.event");
    let (s, b, _) = app.post_event(&ev, None).await;
    assert_eq!((s, b["error"]["code"].as_str()), (422, Some("unknown_event_type")));
    for (path, value, field) in [
        ("/recipients/0/phone", json!("12345"), "recipients[0].phone"),
        ("/occurred_at", json!("2026-11-29"), "occurred_at"),
        ("/occurred_at", json!("2016-12-31T23:59:60Z"), "occurred_at"),
        ("/occurred_at", json!("2026-11-29T04:30:60Z"), "occurred_at"),
        ("/occurred_at", json!("9999-12-31T23:59:59Z"), "occurred_at"),
        ("/occurred_at", json!("2026-11-29T10:15:00+24:00"), "occurred_at"),
        ("/occurred_at", json!("2026-11-29T10:15:00+05:45[America/New_York]"), "occurred_at"),
        ("/entity/version", json!("three"), "entity.version"),
        ("/data/recipient", json!({}), "data.recipient"),
        ("/channels", json!(["fax"]), "channels[0]"),
    ] {
        let mut ev = sms_event("PO-BAD", "+15550000010");
        if path == "/data/recipient" {
            ev["data"]["recipient"] = value;
        } else {
            *ev.pointer_mut(path).unwrap_or_else(|| panic!("{path}")) = value;
        }
        let (s, b, _) = app.post_event(&ev, None).await;
        assert_eq!(s, 400, "{path}: {b}");
        assert!(b["error"]["message"].as_str().unwrap().starts_with(field), "{path}: {b}");
    }
    let (s, b, _) = app.post_event(&sms_event("PO-BAD", "+15550000010"), Some("")).await;
    assert_eq!(s, 400, "{b}");
    let (s, b) = app.get("/v1/intents/not-a-key").await;
    assert_eq!((s, b["error"]["code"].as_str()), (404, Some("not_found")));
    let (s, _) = app.get("/v1/intents?entity=nocolon").await;
    assert_eq!(s, 400);
    app.running.stop().await;
}

/// A NUL is valid JSON and valid percent-encoding, and Postgres refuses it
/// in any text it is given: each of these was a 500 on Postgres (and
/// something else on SQLite). Now a path, a query parameter or a webhook URL
/// holding a control character is a 400 naming it, on every backend, and a
/// digest key that the event's data filled with one is stored escaped.
#[tokio::test]
async fn a_control_character_in_a_path_query_or_url_is_a_400_naming_it_on_every_backend() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        // The tests' digest route, keyed by the event's data.
        let route = common::digest::DIGEST_ROUTE.replace("{{ entity.type }}", "{{ po.number }}");
        assert_ne!(route, common::digest::DIGEST_ROUTE);
        let templates = common::digest::templates_with_digest();
        let app = TestApp::new(&db).with_sms(&sms).with_templates_dir(templates.path()).with_toml(&route).spawn().await;
        let refused = |(s, b): (u16, Value), field: &str| {
            assert_eq!(s, 400, "{backend:?} {field}: {b}");
            assert_eq!(b["error"]["code"], "invalid_field", "{backend:?}: {b}");
            let message = b["error"]["message"].as_str().unwrap();
            assert!(message.starts_with(&format!("{field}: ")), "{backend:?}: {b}");
        };
        refused(app.get("/v1/recipients/a%00b").await, "path");
        refused(app.get("/v1/recipients/u%00/inbox").await, "path");
        refused(app.put("/v1/recipients/a%00b", &json!({"email": "a@example.com"})).await, "path");
        refused(app.get("/v1/intents?entity=purchase_order:PO%00").await, "entity");
        refused(app.get("/v1/intents?recipient=u%0A1").await, "recipient");
        refused(
            app.put("/v1/recipients/u-1", &json!({"webhook_url": "https://h.example.com/x#a\u{0}b"})).await,
            "webhook_url",
        );
        let mut ev = sms_event("PO-NUL", "+15550000011");
        ev["recipients"][0]["webhook_url"] = json!("https://h.example.com/x#a\u{0}b");
        let (s, b, _) = app.post_event(&ev, None).await;
        refused((s, b), "recipients[0].webhook_url");
        // A digest key from data is the sender's text: kept, escaped.
        let mut ev = sms_event("PO-NUL-D", "+15550000012");
        ev["type"] = json!("purchase_order.batched");
        ev["data"]["po"]["number"] = json!("PO\u{0}7");
        let (s, b, _) = app.post_event(&ev, None).await;
        assert_eq!((s, b["intents"][0]["decision"].as_str()), (202, Some("digest")), "{backend:?}: {b}");
        app.running.stop().await;
    }
}

#[tokio::test]
async fn the_inbox_keeps_one_card_per_entity_at_its_highest_version() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let app = TestApp::new(&db).spawn().await;
        for (v, minute) in [(2, "10"), (1, "11"), (3, "12")] {
            let mut ev = sms_event("PO-INBOX", "+15550000011");
            ev["channels"] = json!(["in_app"]);
            ev["entity"]["version"] = json!(v);
            ev["occurred_at"] = json!(format!("2026-11-29T10:{minute}:00Z"));
            let (_, b, _) = app.post_event(&ev, None).await;
            app.wait_state(b["intents"][0]["id"].as_str().unwrap(), &["sent"]).await;
        }
        let (s, inbox) = app.get("/v1/recipients/u-PO-INBOX/inbox").await;
        assert_eq!(s, 200);
        let cards = inbox["cards"].as_array().unwrap();
        assert_eq!(cards.len(), 1, "{backend:?}: {inbox}");
        assert_eq!((cards[0]["version"].as_i64(), cards[0]["collapsed"].as_i64()), (Some(3), Some(2)));
        assert_eq!(cards[0]["read"], false);
        let card = cards[0]["id"].as_str().unwrap();
        let resp =
            app.client.post(format!("{}/v1/recipients/u-PO-INBOX/inbox/{card}/read", app.base)).send().await.unwrap();
        assert_eq!(resp.status(), 200);
        let (_, inbox) = app.get("/v1/recipients/u-PO-INBOX/inbox").await;
        assert_eq!(inbox["cards"][0]["read"], true);
        app.running.stop().await;
    }
}

#[tokio::test]
async fn intents_are_listed_by_entity_and_recipient_with_masked_destinations() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let app = TestApp::new(&db).with_sms(&sms).spawn().await;
        let mut ev = sms_event("PO-LIST", "+9779800000000");
        ev["channels"] = json!(["sms", "in_app"]);
        app.post_event(&ev, None).await;
        let (s, page) = app.get("/v1/intents?entity=purchase_order:PO-LIST&recipient=u-PO-LIST&limit=1").await;
        assert_eq!(s, 200);
        assert_eq!(page["intents"].as_array().unwrap().len(), 1);
        let next = page["next"].as_str().expect("a second page").to_string();
        let (_, page2) = app
            .get(&format!("/v1/intents?entity=purchase_order:PO-LIST&recipient=u-PO-LIST&limit=1&cursor={next}"))
            .await;
        assert_eq!(page2["intents"].as_array().unwrap().len(), 1, "{backend:?}");
        assert!(page2["next"].is_null());
        let all: Vec<Value> = [page, page2].iter().flat_map(|p| p["intents"].as_array().unwrap().clone()).collect();
        let sms_intent = all.iter().find(|i| i["channel"] == "sms").unwrap();
        assert_eq!(sms_intent["destination"], "+97798******00");
        app.running.stop().await;
    }
}

#[tokio::test]
async fn a_repeated_json_key_is_refused_naming_it() {
    let db = TestDb::new(Backend::Sqlite).await;
    let app = TestApp::new(&db).spawn().await;
    let post = |body: String| {
        app.client.post(format!("{}/v1/events", app.base)).header("content-type", "application/json").body(body).send()
    };
    let event = |data: &str, channels: &str| {
        format!(
            r#"{{"type": "purchase_order.approved", "entity": {{"type": "purchase_order", "id": "PO-DUP"}},
                "occurred_at": "2026-11-29T10:15:00Z", "data": {data}, "recipients": [{{"id": "u-1"}}], {channels}}}"#
        )
    };
    for (body, path) in [
        (event(r#"{"po": {"number": "PO-1", "number": "PO-2"}}"#, r#""channels": ["in_app"]"#), "data.po.number"),
        (event("{}", r#""channels": ["in_app"], "channels": ["email"]"#), "channels"),
    ] {
        let resp = post(body).await.unwrap();
        assert_eq!(resp.status(), 400);
        let b: Value = resp.json().await.unwrap();
        assert_eq!(b["error"]["code"], "duplicate_key", "{b}");
        assert!(b["error"]["message"].as_str().unwrap().starts_with(path), "{b}");
    }
    // nesting past Herald's limit is refused, naming where
    let deep = format!("{}1{}", "[".repeat(40), "]".repeat(40));
    let resp = post(event(&format!(r#"{{"deep": {deep}}}"#), r#""channels": ["in_app"]"#)).await.unwrap();
    assert_eq!(resp.status(), 400);
    let b: Value = resp.json().await.unwrap();
    assert_eq!(b["error"]["code"], "too_deep", "{b}");
    assert!(b["error"]["message"].as_str().unwrap().starts_with("data.deep[0]"), "{b}");
    // within the limit, the same shape is accepted
    let ok = format!("{}1{}", "[".repeat(20), "]".repeat(20));
    let resp = post(event(&format!(r#"{{"deep": {ok}}}"#), r#""channels": ["in_app"]"#)).await.unwrap();
    assert_eq!(resp.status(), 202);
    // the directory reads its bodies the same way
    let resp = app
        .client
        .put(format!("{}/v1/recipients/u-1", app.base))
        .header("content-type", "application/json")
        .body(r#"{"email": "a@example.com", "email": "b@example.com"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let b: Value = resp.json().await.unwrap();
    assert_eq!(
        (b["error"]["code"].as_str(), b["error"]["message"].as_str().map(|m| m.starts_with("email"))),
        (Some("duplicate_key"), Some(true)),
        "{b}"
    );
    app.running.stop().await;
}

#[tokio::test]
async fn an_undecodable_cursor_is_a_400_naming_it() {
    let db = TestDb::new(Backend::Sqlite).await;
    let app = TestApp::new(&db).spawn().await;
    let key = "0".repeat(32);
    for path in [
        "/v1/intents?recipient=u-1&cursor=garbage".to_string(),
        format!("/v1/intents?recipient=u-1&cursor=12.{}", "x".repeat(32)),
        format!("/v1/intents?recipient=u-1&cursor=twelve.{key}"),
        "/v1/dead-letters?cursor=garbage".to_string(),
        "/v1/recipients/u-1/inbox?cursor=garbage".to_string(),
        "/v1/recipients/u-1/inbox?cursor=".to_string(),
    ] {
        let (s, b) = app.get(&path).await;
        assert_eq!(s, 400, "{path}: {b}");
        assert!(b["error"]["message"].as_str().unwrap().starts_with("cursor"), "{path}: {b}");
    }
    // a cursor of the shape Herald hands out is accepted
    let (s, b) = app.get(&format!("/v1/intents?recipient=u-1&cursor=1764390000000000.{key}")).await;
    assert_eq!(s, 200, "{b}");
    app.running.stop().await;
}

/// Seconds between an attempt's start (its claim) and its recorded finish.
fn took(attempt: &Value) -> f64 {
    let at = |k: &str| attempt[k].as_str().unwrap().parse::<jiff::Timestamp>().unwrap();
    at("finished_at").duration_since(at("started_at")).as_secs_f64()
}

/// An SMS provider that misbehaves on the network: nothing can have been sent
/// when the connection never opened (retryable); once the request may have
/// left, a timeout or a dropped connection is unknown (DESIGN rule 8).
#[tokio::test]
async fn sms_transport_failures_are_retryable_before_the_request_and_unknown_after() {
    let hang = Peer::start(Misbehaviour::AcceptAndHang).await;
    let read_hang = Peer::start(Misbehaviour::ReadThenHang).await;
    let read_drop = Peer::start(Misbehaviour::ReadThenDrop).await;
    let hole = Blackhole::start().await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let cases = [
        ("accepts-never-answers", hang.url("/sms"), "unknown", "timeout"),
        ("reads-never-answers", read_hang.url("/sms"), "unknown", "timeout"),
        ("reads-then-drops", read_drop.url("/sms"), "unknown", "connection_lost"),
        ("nobody-listens", format!("http://{closed}/sms"), "retryable", "unreachable"),
        ("connect-never-completes", format!("http://{}/sms", hole.addr), "retryable", "unreachable"),
        ("no-such-host", "http://herald-test.invalid/sms".to_string(), "retryable", "unreachable"),
    ];
    let mut running = Vec::new();
    for (name, url, _, _) in &cases {
        let db = TestDb::new(Backend::Sqlite).await;
        let app =
            TestApp::new(&db).with_sms_url(url).with_lease("3s", "1s").with_retry(1, "10ms", "10ms").spawn().await;
        let (s, b, _) = app.post_event(&sms_event(&format!("PO-NET-{name}"), "+15550000020"), None).await;
        assert_eq!(s, 202, "{name}: {b}");
        running.push((db, app, b["intents"][0]["id"].as_str().unwrap().to_string()));
    }
    for ((name, _, outcome, class), (_db, app, id)) in cases.iter().zip(&running) {
        let it = app.wait_state(id, &["dead"]).await;
        let a = &it["attempts"][0];
        assert_eq!((a["outcome"].as_str(), a["error_class"].as_str()), (Some(*outcome), Some(*class)), "{name}: {a}");
        assert!(took(a) < 2.5, "{name}: abandoned inside the 3s lease: {a}");
    }
    assert_eq!((read_hang.requests(), read_drop.requests()), (1, 1));
    for held in hang.held_for().into_iter().chain(read_hang.held_for()) {
        assert!(held < Duration::from_millis(1500), "a silent peer was held {held:?} past the 1s timeout");
    }
    for (_db, app, _) in running {
        app.running.stop().await;
    }
}

/// A provider's `Retry-After` is a floor, never cut by `retry.max` but never
/// above its own ceiling `retry.max_retry_after`: not ten years, and not
/// "immediately" when the number overflows. Seconds and HTTP dates both
/// count, and the floor applied is recorded on the attempt.
#[tokio::test]
async fn retry_after_is_capped_at_its_ceiling_and_recorded_on_the_attempt() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let in_ten_years = jiff::Timestamp::now().checked_add(jiff::SignedDuration::from_hours(24 * 3650)).unwrap();
        let cases = [
            ("+15550000030", 429, "315360000".to_string()),
            ("+15550000031", 429, u64::MAX.to_string()),
            (
                "+15550000032",
                503,
                jiff::fmt::rfc2822::to_string(&in_ten_years.to_zoned(jiff::tz::TimeZone::UTC))
                    .unwrap()
                    .replace("+0000", "GMT"),
            ),
        ];
        for (phone, status, retry_after) in &cases {
            let mut first = Reply::status(*status, json!({"error": "later"}));
            first.retry_after = Some(retry_after.clone());
            sms.script(phone, vec![first, Reply::ok("ok")]);
        }
        let app =
            TestApp::new(&db).with_sms(&sms).with_retry(4, "10ms", "100ms").with_max_retry_after("1s").spawn().await;
        let mut ids = Vec::new();
        for (phone, _, _) in &cases {
            let (_, b, _) = app.post_event(&sms_event(&format!("PO-RA{phone}"), phone), None).await;
            ids.push(b["intents"][0]["id"].as_str().unwrap().to_string());
        }
        for ((phone, _, retry_after), id) in cases.iter().zip(&ids) {
            let it = app.wait_state(id, &["sent"]).await;
            let first = &it["attempts"][0];
            assert_eq!(first["retry_after_seconds"], 1.0, "{backend:?} {retry_after}: capped at the ceiling: {it}");
            let at = |v: &Value| v.as_str().unwrap().parse::<jiff::Timestamp>().unwrap();
            let waited = at(&it["attempts"][1]["started_at"]).duration_since(at(&first["finished_at"])).as_secs_f64();
            assert!((0.95..3.0).contains(&waited), "{retry_after}: waited {waited}s, not the provider's years nor 0");
            assert_eq!(at(&first["next_try_at"]).duration_since(at(&first["finished_at"])).as_secs_f64(), 1.0);
            assert_eq!(sms.sent_to(phone).len(), 2);
        }
        // `herald why` says so too
        let store = db.store().await;
        let entity = format!("PO-RA{}", cases[0].0);
        let history =
            herald::why::history(store.as_ref(), "default", ("purchase_order", &entity), &format!("u-{entity}"))
                .await
                .unwrap();
        let text = herald::why::timeline(("purchase_order", &entity), &format!("u-{entity}"), &history);
        assert!(text.contains("(Retry-After honoured: 1s)") && text.contains("; next try 20"), "{text}");
        app.running.stop().await;
    }
}

/// Two processes on one Postgres, the second with its clock an hour ahead.
/// It must not take the first one's job while that is being sent: leases are
/// set and judged by the database's clock. (SQLite is one process.)
#[tokio::test]
async fn a_process_whose_clock_runs_an_hour_ahead_never_takes_a_leased_job() {
    for backend in backends().into_iter().filter(|b| *b == Backend::Postgres) {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let phone = "+15550000040";
        sms.script(phone, vec![Reply::ok("slow-ok").slow(Duration::from_millis(1500))]);
        let on_time = TestApp::new(&db).with_sms(&sms).with_lease("5s", "3s").spawn().await;
        let (_, b, _) = on_time.post_event(&sms_event("PO-SKEW", phone), None).await;
        let id = b["intents"][0]["id"].as_str().unwrap().to_string();
        common::eventually("the provider to have the request", || async { sms.has(phone) }).await;
        let later = jiff::Timestamp::now().checked_add(jiff::SignedDuration::from_hours(1)).unwrap();
        let ahead = TestApp::new(&db)
            .with_sms(&sms)
            .with_lease("5s", "3s")
            .with_clock(TestClock::at(&later.to_string()))
            .spawn()
            .await;
        let it = on_time.wait_state(&id, &["sent"]).await;
        assert_eq!(it["attempts"].as_array().unwrap().len(), 1, "{it}");
        assert_eq!(sms.sent_to(phone).len(), 1, "the process an hour ahead sent it again");
        ahead.running.stop().await;
        on_time.running.stop().await;
    }
}

/// Every timestamp Herald takes is read as strictly as `occurred_at`: a
/// lenient reader would fold a leap second onto :59.
#[tokio::test]
async fn every_timestamp_herald_takes_is_read_strictly() {
    let db = TestDb::new(Backend::Sqlite).await;
    let app = TestApp::new(&db).spawn().await;
    for path in [
        "/v1/dead-letters?since=2026-06-30T23:59:60Z",
        "/v1/dead-letters/summary?since=2026-11-29T04:30:60Z",
        "/v1/dead-letters?since=2026-11-29",
    ] {
        let (s, b) = app.get(path).await;
        assert_eq!(s, 400, "{path}: {b}");
        assert!(b["error"]["message"].as_str().unwrap().starts_with("since:"), "{path}: {b}");
    }
    let url = format!("{}/v1/dead-letters/replay", app.base);
    let body = json!({"reason": "rejected", "since": "2026-06-30T23:59:60Z"});
    let resp = app.client.post(url).json(&body).send().await.unwrap();
    assert_eq!(resp.status(), 400);
    let b: Value = resp.json().await.unwrap();
    assert!(b["error"]["message"].as_str().unwrap().starts_with("since:"), "{b}");
    let (s, b) = app.get("/v1/dead-letters?since=2026-06-30T23:59:59.5%2B05:45").await;
    assert_eq!(s, 200, "an offset is fine: {b}");
    app.running.stop().await;
}

/// A misspelt query parameter (`curser`) is not silently ignored, on any
/// endpoint: it is a 400 naming it.
#[tokio::test]
async fn an_unknown_or_repeated_query_parameter_is_a_400_naming_it() {
    let db = TestDb::new(Backend::Sqlite).await;
    let app = TestApp::new(&db).spawn().await;
    let key = "0".repeat(32);
    let get = |path: String| (reqwest::Method::GET, path, None::<Value>);
    let cases = [
        get("/v1/intents?recipient=u-1&curser=x".into()),
        get("/v1/dead-letters?reason=rejected&curser=x".into()),
        get("/v1/dead-letters/summary?curser=x".into()),
        get("/v1/recipients/u-1/inbox?curser=x".into()),
        get("/healthz?curser=x".into()),
        get("/readyz?curser=x".into()),
        get("/metrics?curser=x".into()),
        get(format!("/v1/intents/{key}?curser=x")),
        get("/v1/recipients/u-1?curser=x".into()),
        get("/v1/recipients/u-1/preferences/1?curser=x".into()),
        (reqwest::Method::POST, "/v1/events?curser=x".into(), Some(sms_event("PO-Q", "+15550000011"))),
        (reqwest::Method::PUT, "/v1/recipients/u-1?curser=x".into(), Some(json!({"phone": "+15550000011"}))),
        (reqwest::Method::POST, "/v1/dead-letters/replay?curser=x".into(), Some(json!({"ids": [key]}))),
        (reqwest::Method::POST, "/v1/ops/dlq-digest?curser=x".into(), None),
        (reqwest::Method::POST, "/v1/recipients/u-1/inbox/c-1/read?curser=x".into(), None),
    ];
    for (method, path, body) in cases {
        let mut req = app.client.request(method.clone(), format!("{}{path}", app.base));
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let b: Value = resp.json().await.unwrap_or(Value::Null);
        assert_eq!(status, 400, "{method} {path}: {b}");
        assert!(b["error"]["message"].as_str().unwrap_or_default().starts_with("curser:"), "{method} {path}: {b}");
    }
    let (s, b) = app.get("/v1/intents?recipient=u-1&limit=1&limit=2").await;
    assert_eq!(s, 400, "{b}");
    assert!(b["error"]["message"].as_str().unwrap().starts_with("limit:"), "{b}");
    let (s, b) = app.get("/v1/intents?recipient=u-1&limit=2").await;
    assert_eq!(s, 200, "{b}");
    app.running.stop().await;
}

#[tokio::test]
async fn an_idempotency_key_is_one_header_of_visible_ascii() {
    let db = TestDb::new(Backend::Sqlite).await;
    let app = TestApp::new(&db).without_workers().spawn().await;
    let ev = sms_event("PO-IK", "+15550000012");
    let post = |keys: &[&str]| {
        let mut req = app.client.post(format!("{}/v1/events", app.base)).json(&ev);
        for k in keys {
            req = req.header("idempotency-key", *k);
        }
        req.send()
    };
    for keys in [&["a b"][..], &["k-1", "k-2"][..], &["k-1", "k-1"][..]] {
        let resp = post(keys).await.unwrap();
        assert_eq!(resp.status(), 400, "{keys:?}");
        let b: Value = resp.json().await.unwrap();
        assert!(b["error"]["message"].as_str().unwrap().starts_with("Idempotency-Key:"), "{keys:?}: {b}");
    }
    assert_eq!(post(&["k-1"]).await.unwrap().status(), 202);
    app.running.stop().await;
}

/// Two different numbers must never make one event: 123456789012345678901 and
/// …902 are the same double, so the second post would replay the first.
#[tokio::test]
async fn a_number_a_double_cannot_hold_is_refused_rather_than_merged() {
    let db = TestDb::new(Backend::Sqlite).await;
    let app = TestApp::new(&db).without_workers().spawn().await;
    let post = |number: &str| {
        let body = format!(
            r#"{{"type": "purchase_order.approved", "entity": {{"type": "purchase_order", "id": "PO-BIG"}},
                "occurred_at": "2026-11-29T10:15:00Z", "data": {{"po": {{"number": {number}}}}},
                "recipients": [{{"id": "u-1"}}], "channels": ["in_app"]}}"#
        );
        app.client.post(format!("{}/v1/events", app.base)).header("content-type", "application/json").body(body).send()
    };
    for number in ["123456789012345678901", "123456789012345678902", "0.1000000000000000055511151231257827"] {
        let resp = post(number).await.unwrap();
        assert_eq!(resp.status(), 400, "{number}");
        let b: Value = resp.json().await.unwrap();
        assert_eq!(b["error"]["code"], "inexact_number", "{b}");
        let message = b["error"]["message"].as_str().unwrap();
        assert!(message.starts_with("data.po.number") && message.contains("as a string"), "{b}");
    }
    // what a double holds as written is accepted, and as a string any number is
    assert_eq!(post("12345.25").await.unwrap().status(), 202);
    assert_eq!(post("\"123456789012345678901\"").await.unwrap().status(), 409, "another value of the same event");
    app.running.stop().await;
}

/// An email field is one mailbox: `victim@evil.example,a@example.com` was
/// taken (and masked as one address) and died later at SMTP. A list, a
/// display name, a quoted local part or white space is a 400 naming the
/// field, inline and in the directory.
#[tokio::test]
async fn an_email_field_holding_more_than_one_mailbox_is_a_400_naming_it() {
    let db = TestDb::new(Backend::Sqlite).await;
    let app = TestApp::new(&db).spawn().await;
    for bad in [
        "victim@evil.example,a@example.com",
        "victim@evil.example;a@example.com",
        "Victim <victim@evil.example>",
        "\"a,b\"@example.com",
        "a@example.com ",
        "a(comment)@example.com",
    ] {
        let mut ev = sms_event("PO-MAIL", "+15550000011");
        ev["recipients"][0]["email"] = json!(bad);
        ev["channels"] = json!(["email"]);
        let (s, b, _) = app.post_event(&ev, None).await;
        assert_eq!((s, b["error"]["code"].as_str()), (400, Some("invalid_field")), "{bad:?}: {b}");
        assert!(b["error"]["message"].as_str().unwrap().starts_with("recipients[0].email"), "{bad:?}: {b}");
        let (s, b) = app.put("/v1/recipients/u-mail", &json!({ "email": bad })).await;
        assert_eq!((s, b["error"]["code"].as_str()), (400, Some("invalid_field")), "{bad:?}: {b}");
        assert!(b["error"]["message"].as_str().unwrap().starts_with("email"), "{bad:?}: {b}");
    }
    let (s, b) = app.put("/v1/recipients/u-mail", &json!({"email": "asha.k+po@mail.example.com"})).await;
    assert_eq!(s, 200, "{b}");
    app.running.stop().await;
}

/// A template variable the event's data lacks is named with its file and
/// line wherever the dead intent is shown — the request's answer, the
/// intent, `herald why` — and none of the data's values is.
#[tokio::test]
async fn a_missing_template_variable_is_named_with_its_file_and_line() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let app = TestApp::new(&db).with_sms(&sms).spawn().await;
        let mut ev = sms_event("PO-UNDEF", "+15550000012");
        ev["data"] = json!({"po": {"number": "PO-SECRET-7", "totl": "9,99,999"}, "approver": {"name": "Mallory"}});
        let (s, b, _) = app.post_event(&ev, None).await;
        assert_eq!(s, 202, "{backend:?}: {b}");
        let said = "undefined value po.total in po_approved/en/sms.j2:1";
        assert_eq!(
            (b["intents"][0]["reason"].as_str(), b["intents"][0]["detail"].as_str()),
            (Some("template_error"), Some(said)),
            "{backend:?}: {b}"
        );
        let (_, it) = app.get(&format!("/v1/intents/{}", b["intents"][0]["id"].as_str().unwrap())).await;
        assert_eq!(it["detail"], said, "{backend:?}: {it}");
        let store = db.store().await;
        let history = herald::why::history(store.as_ref(), "default", ("purchase_order", "PO-UNDEF"), "u-PO-UNDEF")
            .await
            .unwrap();
        let why = herald::why::timeline(("purchase_order", "PO-UNDEF"), "u-PO-UNDEF", &history);
        let note = why.lines().find(|l| l.contains("note:")).unwrap_or_default();
        assert!(note.trim_start().strip_prefix("note: ") == Some(said), "{backend:?}: {why}");
        app.running.stop().await;
    }
}
