//! Operations end to end: dead letters read and replayed, the daily digest
//! posted once per day across processes, bounded metrics, retention, the
//! Redis fast path, and tenants kept apart.

mod common;

use common::webhook::FakeReceiver;
use common::{Backend, FakeSms, Reply, TestApp, TestClock, TestDb, backends, sms_event, test_redis};
use herald::clock::Clock;
use herald::config::RetentionConfig;
use herald::ops::dlq_digest::OpsDigest;
use herald::ops::retention::Retention;
use serde_json::{Value, json};
use sha2::Digest;
use std::sync::Arc;
use std::time::Duration;

fn id_of(body: &Value) -> String {
    body["intents"][0]["id"].as_str().unwrap().to_string()
}

async fn post_json(app: &common::Spawned, path: &str, body: &Value) -> (u16, Value) {
    let resp = app.client.post(format!("{}{path}", app.base)).json(body).send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn a_dead_letter_is_readable_and_replays_as_the_same_intent() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let phone = "+15550000300";
        sms.script(phone, vec![Reply::status(400, json!({"error": "invalid_destination"}))]);
        let app = TestApp::new(&db).with_sms(&sms).spawn().await;
        let (_, b, _) = app.post_event(&sms_event("PO-DLQ", phone), None).await;
        let id = id_of(&b);
        app.wait_state(&id, &["dead"]).await;

        let (s, list) = app.get("/v1/dead-letters?reason=invalid_destination").await;
        assert_eq!(s, 200, "{list}");
        let dl = &list["dead_letters"][0];
        assert_eq!(dl["id"], id.as_str(), "{backend:?}");
        assert_eq!(dl["event"]["entity"]["id"], "PO-DLQ", "the original event is kept");
        assert!(dl["content"]["body"].as_str().unwrap().contains("PO-DLQ"), "the frozen content is kept");
        assert_eq!(dl["attempts"][0]["outcome"], "permanent");
        assert_eq!(dl["destination"], "+15550****00");
        let (_, summary) = app.get("/v1/dead-letters/summary").await;
        assert_eq!(summary, json!({"total": 1, "by_reason": {"invalid_destination": 1}}));

        // fixed on the provider's side; replay
        sms.script(phone, vec![Reply::ok("after-fix")]);
        let (s, r) = post_json(&app, "/v1/dead-letters/replay", &json!({"ids": [id, "0".repeat(32)]})).await;
        assert_eq!(s, 200, "{r}");
        assert_eq!(r["replayed"], json!([id]));
        assert_eq!(r["skipped"][0]["why"], "no such intent");
        let it = app.wait_state(&id, &["sent"]).await;
        assert_eq!(it["attempts"].as_array().unwrap().len(), 2);
        let bodies: std::collections::HashSet<String> = sms.sent_to(phone).iter().map(|r| r.body.to_string()).collect();
        assert_eq!(bodies.len(), 1, "the replay sent the frozen content");
        let (_, again) = post_json(&app, "/v1/dead-letters/replay", &json!({"ids": [id]})).await;
        assert!(again["skipped"][0]["why"].as_str().unwrap().contains("not a dead letter"), "{again}");
        app.running.stop().await;
    }
}

#[tokio::test]
async fn a_replay_by_reason_gets_a_fresh_retry_budget_and_a_template_error_is_not_replayable() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let phone = "+15550000301";
        sms.script(phone, vec![Reply::status(503, json!({}))]);
        let app = TestApp::new(&db).with_sms(&sms).with_retry(2, "10ms", "10ms").spawn().await;
        let (_, b, _) = app.post_event(&sms_event("PO-EXH", phone), None).await;
        let id = id_of(&b);
        app.wait_state(&id, &["dead"]).await;
        // a transient failure then success: the replay must get more than one try
        sms.script(phone, vec![Reply::status(503, json!({})), Reply::ok("ok")]);
        let (s, r) = post_json(
            &app,
            "/v1/dead-letters/replay",
            &json!({"reason": "retries_exhausted", "since": "2020-01-01T00:00:00Z"}),
        )
        .await;
        assert_eq!((s, r["replayed"].as_array().map(Vec::len)), (200, Some(1)), "{r}");
        let it = app.wait_state(&id, &["sent"]).await;
        assert_eq!(it["attempts"].as_array().unwrap().len(), 4, "{backend:?}: 2 before, 2 after the replay");

        let mut broken = sms_event("PO-TPL", phone);
        broken["data"] = json!({"po": {"number": "X"}});
        let (_, b, _) = app.post_event(&broken, None).await;
        assert_eq!(b["intents"][0]["reason"], "template_error");
        let (_, r) = post_json(&app, "/v1/dead-letters/replay", &json!({"ids": [id_of(&b)]})).await;
        assert!(r["skipped"][0]["why"].as_str().unwrap().contains("nothing to resend"), "{r}");
        let (s, e) = post_json(&app, "/v1/dead-letters/replay", &json!({"reason": "bogus"})).await;
        assert_eq!((s, e["error"]["message"].as_str().map(|m| m.starts_with("reason"))), (400, Some(true)));
        let (s, _) = post_json(&app, "/v1/dead-letters/replay", &json!({})).await;
        assert_eq!(s, 400);
        app.running.stop().await;
    }
}

fn digest(db_store: Arc<dyn herald::store::Store>, clock: Arc<TestClock>, hook: &FakeReceiver) -> OpsDigest {
    OpsDigest {
        store: db_store,
        clock: clock as Arc<dyn Clock>,
        webhook: Some(format!("{}/hook/ops", hook.base)),
        at: "08:30".parse().unwrap(),
        tz: jiff::tz::TimeZone::get("Asia/Kathmandu").unwrap(),
        client: reqwest::Client::new(),
    }
}

#[tokio::test]
async fn the_daily_digest_is_posted_once_per_day_even_when_empty() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let hook = FakeReceiver::start("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").await;
        // 08:00 in Kathmandu: yesterday's digest is the latest due
        let clock = TestClock::at("2026-11-30T02:15:00Z");
        let mut tasks = Vec::new();
        for _ in 0..3 {
            let d = digest(db.store().await, clock.clone(), &hook);
            tasks.push(tokio::spawn(async move { d.tick().await.unwrap() }));
        }
        let mut posted = 0;
        for t in tasks {
            posted += usize::from(t.await.unwrap());
        }
        assert_eq!(posted, 1, "{backend:?}: three processes, one post");
        let got = hook.received("ops");
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].body["total"], 0);
        assert!(got[0].body["text"].as_str().unwrap().contains("none"), "{}", got[0].body);
        // a restart the same day posts nothing more
        assert!(!digest(db.store().await, clock.clone(), &hook).tick().await.unwrap());
        // today's, after 08:30 local, starts where yesterday's ended
        clock.set("2026-11-30T03:00:00Z");
        assert!(digest(db.store().await, clock.clone(), &hook).tick().await.unwrap());
        let got = hook.received("ops");
        assert_eq!(got.len(), 2);
        assert_eq!(got[1].body["since"], got[0].body["until"], "{backend:?}: no gap between digests");
        assert_eq!(got[1].body["until"], "2026-11-30T02:45:00Z");
    }
}

#[tokio::test]
async fn the_digest_names_reasons_examples_and_replay_commands() {
    let db = TestDb::new(Backend::Sqlite).await;
    let sms = FakeSms::start().await;
    let hook = FakeReceiver::start("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").await;
    let phone = "+15550000302";
    sms.script(phone, vec![Reply::status(400, json!({"error": "invalid_destination"}))]);
    let ops = format!("[ops]\ndigest_webhook = \"{}/hook/ops\"\n", hook.base);
    let app = TestApp::new(&db).with_sms(&sms).with_toml(&ops).spawn().await;
    let (_, b, _) = app.post_event(&sms_event("PO-DIG", phone), None).await;
    app.wait_state(&id_of(&b), &["dead"]).await;
    let (s, body) = post_json(&app, "/v1/ops/dlq-digest", &json!({})).await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(body["by_reason"], json!({"invalid_destination": 1}));
    let text = body["text"].as_str().unwrap();
    assert!(text.contains("invalid_destination") && text.contains("+15550****02"), "{text}");
    assert!(!text.contains(phone), "destinations are masked: {text}");
    assert!(text.contains("herald dlq replay --tenant default --reason invalid_destination"), "{text}");
    // the scheduled digest (yesterday's, due at start-up) may have gone out too
    let manual: Vec<_> = hook.received("ops").into_iter().filter(|r| r.body["total"] == 1).collect();
    assert_eq!(manual.len(), 1);
    app.running.stop().await;
}

#[tokio::test]
async fn metrics_count_what_happened_with_bounded_labels_only() {
    let db = TestDb::new(Backend::Sqlite).await;
    let sms = FakeSms::start().await;
    let app = TestApp::new(&db).with_sms(&sms).spawn().await;
    let (_, b, _) = app.post_event(&sms_event("PO-MET", "+15550000303"), None).await;
    app.wait_state(&id_of(&b), &["sent"]).await;
    app.post_event(&sms_event("PO-MET", "+15550000303"), None).await;
    let text = app.client.get(format!("{}/metrics", app.base)).send().await.unwrap().text().await.unwrap();
    for name in [
        "herald_intents_created_total",
        "herald_decisions_total",
        "herald_idempotency_conflicts_total",
        "herald_attempts_started_total",
        "herald_attempts_total",
        "herald_attempt_duration_seconds_bucket",
        "herald_queue_depth",
        "herald_queue_oldest_due_age_seconds",
    ] {
        assert!(text.contains(name), "missing {name} in\n{text}");
    }
    assert!(!text.contains("PO-MET") && !text.contains("+1555") && !text.contains("u-PO"), "an id leaked:\n{text}");
    // Which template and revision each intent and attempt came from.
    let labelled = |name: &str| {
        text.lines().any(|l| {
            l.starts_with(name) && l.contains(r#"template="po_approved""#) && l.contains("template_revision=\"")
        })
    };
    assert!(labelled("herald_intents_created_total{"), "{text}");
    assert!(labelled("herald_attempts_total{"), "{text}");
    let version = env!("CARGO_PKG_VERSION");
    assert!(
        text.lines().any(|l| l.starts_with("herald_build_info{")
            && l.contains(&format!("version=\"{version}\""))
            && l.contains("deployment=\"")
            && l.ends_with(" 1")),
        "{text}"
    );
    app.running.stop().await;
}

#[tokio::test]
async fn retention_prunes_old_data_in_order_and_keeps_the_dedupe_window() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let clock = TestClock::at("2026-01-01T00:00:00Z");
        // the apps' own pruning is off: this test runs it by hand
        let no_pruning = "[retention]\nenabled = false\n";
        let app = TestApp::new(&db).with_sms(&sms).with_clock(clock.clone()).with_toml(no_pruning).spawn().await;
        let (_, old, _) = app.post_event(&sms_event("PO-OLD", "+15550000304"), None).await;
        app.wait_state(&id_of(&old), &["sent"]).await;
        app.running.stop().await;
        clock.set("2026-03-01T00:00:00Z");
        let app = TestApp::new(&db).with_sms(&sms).with_clock(clock.clone()).with_toml(no_pruning).spawn().await;
        let (_, new, _) = app.post_event(&sms_event("PO-NEW", "+15550000305"), None).await;
        app.wait_state(&id_of(&new), &["sent"]).await;
        app.running.stop().await;

        let retention = Retention {
            store: db.store().await,
            clock: clock.clone() as Arc<dyn Clock>,
            config: RetentionConfig {
                enabled: true,
                attempt_diagnostics: Duration::from_secs(86_400),
                payloads: Duration::from_secs(30 * 86_400),
                intents: Duration::from_secs(40 * 86_400),
                interval: Duration::from_secs(600),
                batch: 1,
                ..RetentionConfig::default()
            },
            dedupe_window: Duration::from_secs(3600),
        };
        let (_tx, rx) = tokio::sync::watch::channel(false);
        let counts = retention.prune(&rx).await.unwrap();
        let get = |name: &str| counts.iter().find(|(n, _)| *n == name).unwrap().1;
        assert_eq!(get("intents"), 1, "{backend:?}: {counts:?}");
        assert_eq!(get("requests"), 1);
        // One recipient: the old event's body was in its intent's row, and
        // goes with its message, before the intent does.
        assert_eq!(get("payloads"), 0, "no payload row was written: {counts:?}");
        assert_eq!(get("contents"), 1, "the old intent's message and body, before its intent goes: {counts:?}");
        let store = db.store().await;
        assert!(store.intent_get("default", &id_of(&old)).await.unwrap().is_none());
        let kept = store.intent_get("default", &id_of(&new)).await.unwrap().unwrap();
        assert!(kept.content.is_some(), "recent content stays");
        assert!(kept.event_body.is_some(), "and so does its event body");
    }
}

#[tokio::test]
async fn redis_absorbs_a_storm_and_flushing_it_costs_no_duplicate() {
    let Some(redis_url) = test_redis().await else { return };
    // A logical database of this test's own, flushed alone: a FLUSHALL also
    // took the answers other tests running beside it had just stored.
    let mut own = reqwest::Url::parse(&redis_url).expect("a Redis URL");
    own.set_path("/9");
    let redis_url = own.to_string();
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let phone = "+15550000306";
        let app = Arc::new(TestApp::new(&db).with_sms(&sms).with_redis(&redis_url).spawn().await);
        let mut ev = sms_event("PO-REDIS", phone);
        ev["entity"]["id"] = json!(format!("PO-REDIS-{}", std::process::id()));
        ev["occurred_at"] = json!(jiff::Timestamp::now().to_string());
        let (s, first, _) = app.post_event(&ev, None).await;
        assert_eq!(s, 202);
        // The first repeat is answered by the database and kept in Redis;
        // the storm after it is answered there.
        assert_eq!(app.post_event(&ev, None).await.0, 200);
        let mut tasks = Vec::new();
        for _ in 0..40 {
            let (app, ev) = (app.clone(), ev.clone());
            tasks.push(tokio::spawn(async move { app.post_event(&ev, None).await.0 }));
        }
        for t in tasks {
            assert_eq!(t.await.unwrap(), 200);
        }
        let metrics = app.client.get(format!("{}/metrics", app.base)).send().await.unwrap().text().await.unwrap();
        assert!(metrics.contains("herald_redis_fastpath_total{result=\"hit\"}"), "{metrics}");
        // Every answer Redis held is gone: the database still knows.
        let client = redis::Client::open(redis_url.as_str()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let _: () = redis::cmd("FLUSHDB").query_async(&mut conn).await.unwrap();
        let (s, again, headers) = app.post_event(&ev, None).await;
        assert_eq!((s, headers.get("idempotent-replayed").map(|v| v.to_str().unwrap())), (200, Some("true")));
        assert_eq!(id_of(&again), id_of(&first));
        app.wait_state(&id_of(&first), &["sent"]).await;
        // Sent, one intent, and no job left that could send it again: there
        // is nothing to wait for.
        assert_eq!(common::count(&db, "SELECT COUNT(*) FROM intents").await, 1, "{backend:?}");
        assert_eq!(common::count(&db, "SELECT COUNT(*) FROM jobs").await, 0, "{backend:?}");
        assert_eq!(sms.sent_to(phone).len(), 1, "{backend:?}");
        match Arc::try_unwrap(app) {
            Ok(app) => app.running.stop().await,
            Err(_) => panic!("app still shared"),
        }
    }
}

/// Requests that arrive together are looked up together: one `MGET`, then the
/// database for the ones Redis did not answer. Every request still gets its
/// own answer: repeats of a stored replay interleaved with new events, all at
/// once, each new event its own new intent and each repeat the stored one.
#[tokio::test]
async fn requests_looked_up_together_each_get_their_own_answer() {
    let Some(redis_url) = test_redis().await else { return };
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let app = Arc::new(TestApp::new(&db).with_sms(&sms).with_redis(&redis_url).spawn().await);
        let run = format!("{}-{}", std::process::id(), jiff::Timestamp::now().as_microsecond());
        let mut stored = sms_event(&format!("PO-MIX-{run}"), "+15550000310");
        stored["occurred_at"] = json!(jiff::Timestamp::now().to_string());
        let (s, first, _) = app.post_event(&stored, None).await;
        assert_eq!(s, 202, "{backend:?}: {first}");
        // The first repeat puts the answer in Redis.
        assert_eq!(app.post_event(&stored, None).await.0, 200);
        let mut tasks = Vec::new();
        for n in 0..30 {
            let app = app.clone();
            let ev = if n % 2 == 0 {
                stored.clone()
            } else {
                let mut ev = sms_event(&format!("PO-MIX-{run}-{n}"), "+15550000310");
                ev["recipients"][0]["id"] = json!(format!("u-mix-{n}"));
                ev
            };
            tasks.push(tokio::spawn(async move { (n, app.post_event(&ev, None).await) }));
        }
        let mut new_ids = std::collections::HashSet::new();
        for t in tasks {
            let (n, (s, body, _)) = t.await.unwrap();
            if n % 2 == 0 {
                assert_eq!((s, body["replayed"].as_bool()), (200, Some(true)), "{backend:?} #{n}: {body}");
                assert_eq!(id_of(&body), id_of(&first), "{backend:?} #{n}");
            } else {
                assert_eq!(s, 202, "{backend:?} #{n}: {body}");
                assert_ne!(id_of(&body), id_of(&first), "{backend:?} #{n}");
                assert!(new_ids.insert(id_of(&body)), "{backend:?} #{n}: another request's intent");
            }
        }
        let metrics = app.client.get(format!("{}/metrics", app.base)).send().await.unwrap().text().await.unwrap();
        assert!(metrics.contains("herald_redis_fastpath_total{result=\"hit\"}"), "{metrics}");
        assert!(metrics.contains("herald_redis_fastpath_total{result=\"miss\"}"), "{metrics}");
        match Arc::try_unwrap(app) {
            Ok(app) => app.running.stop().await,
            Err(_) => panic!("app still shared"),
        }
    }
}

/// A repeat answered from Redis reads nothing from the database: with the
/// request record gone, the database would answer "every intent exists"
/// (`replayed: false`), and Redis still answers the stored replay. A first
/// answer is not stored: only a repeated request is worth a `SET`.
#[tokio::test]
async fn a_repeat_is_answered_from_redis_alone_and_a_first_answer_is_not_stored() {
    let Some(redis_url) = test_redis().await else { return };
    let client = redis::Client::open(redis_url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let app = TestApp::new(&db).with_sms(&sms).with_redis(&redis_url).spawn().await;
        let idempotency_key = format!("redis-alone-{backend:?}-{}-{}", std::process::id(), jiff::Timestamp::now());
        let redis_key = format!(
            "notify:seen:{}",
            &herald::event::identity::sha256_hex(format!("default|key:{idempotency_key}").as_bytes())[..32]
        );
        let mut ev = sms_event("PO-REDIS-ALONE", "+15550000309");
        ev["occurred_at"] = json!(jiff::Timestamp::now().to_string());
        let (s, first, _) = app.post_event(&ev, Some(&idempotency_key)).await;
        assert_eq!(s, 202, "{backend:?}: {first}");
        let stored: bool = redis::cmd("EXISTS").arg(&redis_key).query_async(&mut conn).await.unwrap();
        assert!(!stored, "{backend:?}: a first answer costs no SET");
        let (s, replay, _) = app.post_event(&ev, Some(&idempotency_key)).await;
        assert_eq!((s, replay["replayed"].as_bool()), (200, Some(true)), "{backend:?}: {replay}");
        let stored: bool = redis::cmd("EXISTS").arg(&redis_key).query_async(&mut conn).await.unwrap();
        assert!(stored, "{backend:?}: the first repeat is kept in Redis");
        // Without its request record the database would not call this a replay.
        common::execute(&db, "DELETE FROM requests").await;
        let (s, again, headers) = app.post_event(&ev, Some(&idempotency_key)).await;
        assert_eq!(
            (s, again["replayed"].as_bool(), headers.get("idempotent-replayed").map(|v| v.to_str().unwrap())),
            (200, Some(true), Some("true")),
            "{backend:?}: {again}"
        );
        assert_eq!(again["intents"], replay["intents"], "{backend:?}: the answer as it was stored");
        assert_eq!(id_of(&again), id_of(&first));
        app.running.stop().await;
    }
}

#[tokio::test]
async fn a_redis_that_is_down_never_fails_ingest() {
    let db = TestDb::new(Backend::Sqlite).await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let app = TestApp::new(&db).with_redis(&format!("redis://{closed}")).spawn().await;
    let mut ev = sms_event("PO-NOREDIS", "+15550000307");
    ev["channels"] = json!(["in_app"]);
    let (s1, _, _) = app.post_event(&ev, None).await;
    let (s2, _, _) = app.post_event(&ev, None).await;
    assert_eq!((s1, s2), (202, 200));
    let metrics = app.client.get(format!("{}/metrics", app.base)).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("herald_redis_fastpath_total{result=\"error\"}"), "{metrics}");
    app.running.stop().await;
}

#[tokio::test]
async fn tenants_are_kept_apart_and_only_the_operator_sees_across_them() {
    let db = TestDb::new(Backend::Sqlite).await;
    let sms = FakeSms::start().await;
    let phone = "+15550000308";
    sms.script(phone, vec![Reply::status(400, json!({"error": "invalid_destination"}))]);
    let sha = |t: &str| hex::encode(sha2::Sha256::digest(t.as_bytes()));
    let tokens = format!(
        "[[auth.tokens]]\nname = \"a\"\ntenant = \"acme\"\ntoken_sha256 = \"{}\"\nscopes = [\"events:write\", \"intents:read\", \"recipients:write\", \"ops\"]\n\
         [[auth.tokens]]\nname = \"b\"\ntenant = \"globex\"\ntoken_sha256 = \"{}\"\nscopes = [\"events:write\", \"intents:read\", \"recipients:write\", \"ops\"]\n\
         [[auth.tokens]]\nname = \"reader\"\ntenant = \"acme\"\ntoken_sha256 = \"{}\"\nscopes = [\"intents:read\"]\n\
         [[auth.tokens]]\nname = \"operator\"\ntenant = \"operators\"\ntoken_sha256 = \"{}\"\nscopes = [\"admin\"]\n",
        sha("tok-a"),
        sha("tok-b"),
        sha("tok-r"),
        sha("tok-admin")
    );
    let hook = FakeReceiver::start("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").await;
    let ops = format!("[ops]\ndigest_webhook = \"{}/hook/ops\"\n", hook.base);
    let app = TestApp::new(&db).with_sms(&sms).with_toml(&tokens).with_toml(&ops).spawn().await;
    let call = |method: reqwest::Method, path: &str, token: Option<&str>, body: Option<Value>| {
        let mut req = app.client.request(method, format!("{}{path}", app.base));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        req.send()
    };
    let ev = sms_event("PO-TEN", phone);
    let resp = call(reqwest::Method::POST, "/v1/events", Some("tok-a"), Some(ev)).await.unwrap();
    assert_eq!(resp.status(), 202);
    let b: Value = resp.json().await.unwrap();
    let id = id_of(&b);
    common::eventually("the intent to be dead", || async {
        let r = call(reqwest::Method::GET, &format!("/v1/intents/{id}"), Some("tok-a"), None).await.unwrap();
        (r.json::<Value>().await.unwrap()["state"] == "dead").then_some(())
    })
    .await;
    let status = |r: reqwest::Response| r.status().as_u16();
    assert_eq!(status(call(reqwest::Method::GET, "/v1/dead-letters", None, None).await.unwrap()), 401);
    assert_eq!(status(call(reqwest::Method::GET, "/v1/dead-letters", Some("tok-r"), None).await.unwrap()), 403);
    assert_eq!(status(call(reqwest::Method::GET, "/metrics", Some("tok-r"), None).await.unwrap()), 403);
    // The deployment's queue is the operator's, not a tenant's.
    assert_eq!(status(call(reqwest::Method::GET, "/metrics", Some("tok-a"), None).await.unwrap()), 403);
    assert_eq!(status(call(reqwest::Method::GET, "/metrics", Some("tok-admin"), None).await.unwrap()), 200);
    let theirs: Value =
        call(reqwest::Method::GET, "/v1/dead-letters", Some("tok-b"), None).await.unwrap().json().await.unwrap();
    assert_eq!(theirs["dead_letters"], json!([]));
    let ours: Value =
        call(reqwest::Method::GET, "/v1/dead-letters", Some("tok-a"), None).await.unwrap().json().await.unwrap();
    assert_eq!(ours["dead_letters"][0]["id"], id.as_str());
    let replay: Value =
        call(reqwest::Method::POST, "/v1/dead-letters/replay", Some("tok-b"), Some(json!({"ids": [id]})))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    assert_eq!(replay["skipped"][0]["why"], "no such intent", "another tenant cannot replay it");
    let put =
        call(reqwest::Method::PUT, "/v1/recipients/u-1", Some("tok-a"), Some(json!({"phone": phone}))).await.unwrap();
    assert_eq!(put.status(), 200);
    assert_eq!(status(call(reqwest::Method::GET, "/v1/recipients/u-1", Some("tok-b"), None).await.unwrap()), 404);
    assert_eq!(status(call(reqwest::Method::GET, "/healthz", None, None).await.unwrap()), 200);
    // Views across tenants are the operator's; a tenant's ops token cannot ask for them.
    for path in [
        "/v1/dead-letters?tenant=acme",
        "/v1/dead-letters?all_tenants=true",
        "/v1/dead-letters/summary?all_tenants=true",
    ] {
        assert_eq!(status(call(reqwest::Method::GET, path, Some("tok-b"), None).await.unwrap()), 403, "{path}");
    }
    assert_eq!(status(call(reqwest::Method::GET, "/v1/dead-letters", Some("tok-admin"), None).await.unwrap()), 403);
    // A tenant's ops token naming its own tenant gets its own view.
    for path in ["/v1/dead-letters?tenant=acme", "/v1/dead-letters/summary?tenant=acme"] {
        let resp = call(reqwest::Method::GET, path, Some("tok-a"), None).await.unwrap();
        assert_eq!(resp.status(), 200, "{path}");
        let body: Value = resp.json().await.unwrap();
        assert!(body["dead_letters"][0]["id"] == id.as_str() || body["total"] == 1, "{path}: {body}");
    }
    let get = |path: &'static str| async move {
        call(reqwest::Method::GET, path, Some("tok-admin"), None).await.unwrap().json::<Value>().await.unwrap()
    };
    let all = get("/v1/dead-letters?all_tenants=true").await;
    assert_eq!(
        (all["dead_letters"][0]["id"].as_str(), all["dead_letters"][0]["tenant"].as_str()),
        (Some(id.as_str()), Some("acme"))
    );
    assert_eq!(get("/v1/dead-letters?tenant=acme").await["dead_letters"][0]["id"], id.as_str());
    assert_eq!(get("/v1/dead-letters?tenant=globex").await["dead_letters"], json!([]));
    assert_eq!(get("/v1/dead-letters/summary?all_tenants=true").await["total"], 1);
    // Only the operator posts to the operators' webhook: no tenant can spam it.
    let posted_before = hook.received("ops").len();
    for tenant_token in ["tok-a", "tok-b"] {
        let resp = call(reqwest::Method::POST, "/v1/ops/dlq-digest", Some(tenant_token), None).await.unwrap();
        assert_eq!(status(resp), 403, "{tenant_token}");
    }
    assert_eq!(hook.received("ops").len(), posted_before, "a tenant's token posted to the operators' channel");
    let digest: Value =
        call(reqwest::Method::POST, "/v1/ops/dlq-digest", Some("tok-admin"), None).await.unwrap().json().await.unwrap();
    assert_eq!(digest["total"], 1, "{digest}");
    assert!(digest["text"].as_str().unwrap().contains("--tenant acme"), "{digest}");
    app.running.stop().await;
}

/// Retention took the content of an old dead letter: a replay would die again
/// as a template error and could be replayed forever, so it is refused, by id
/// and in a reason-wide replay, with the cause named.
#[tokio::test]
async fn a_dead_letter_whose_content_was_pruned_is_refused_as_content_pruned() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let (old, new) = ("+15550000310", "+15550000311");
        for phone in [old, new] {
            sms.script(phone, vec![Reply::status(400, json!({"error": "invalid_destination"}))]);
        }
        let clock = TestClock::at("2026-01-01T00:00:00Z");
        let app = TestApp::new(&db).with_sms(&sms).with_clock(clock.clone()).spawn().await;
        let (_, b, _) = app.post_event(&sms_event("PO-PRUNED", old), None).await;
        let pruned = id_of(&b);
        app.wait_state(&pruned, &["dead"]).await;
        clock.set("2026-03-01T00:00:00Z");
        let mut ev = sms_event("PO-KEPT", new);
        ev["occurred_at"] = json!("2026-02-28T10:00:00Z");
        let (_, b, _) = app.post_event(&ev, None).await;
        let kept = id_of(&b);
        app.wait_state(&kept, &["dead"]).await;
        // retention.payloads has passed for the first one only
        let cutoff = "2026-02-01T00:00:00Z".parse::<jiff::Timestamp>().unwrap().as_microsecond();
        let store = db.store().await;
        assert_eq!(store.retention_batch(herald::store::PruneStep::Contents, cutoff, 100).await.unwrap(), 1);

        let (s, r) = post_json(&app, "/v1/dead-letters/replay", &json!({"ids": [pruned, kept]})).await;
        assert_eq!(s, 200, "{r}");
        assert_eq!(r["replayed"], json!([kept]), "{backend:?}: {r}");
        assert_eq!(r["skipped"][0]["id"], pruned.as_str());
        assert_eq!(r["skipped"][0]["reason"], "content_pruned", "{r}");
        assert!(r["skipped"][0]["why"].as_str().unwrap().contains("retention"), "{r}");
        assert_eq!(r["skipped_by_reason"], json!({"content_pruned": 1}));
        app.wait_state(&kept, &["dead"]).await;

        let (s, r) = post_json(&app, "/v1/dead-letters/replay", &json!({"reason": "invalid_destination"})).await;
        assert_eq!(s, 200, "{r}");
        assert_eq!(r["replayed"], json!([kept]), "{backend:?}: {r}");
        assert_eq!(r["skipped_by_reason"], json!({"content_pruned": 1}), "{r}");
        let (_, it) = app.get(&format!("/v1/intents/{pruned}")).await;
        assert_eq!((it["state"].as_str(), it["reason"].as_str()), (Some("dead"), Some("invalid_destination")), "{it}");
        assert_eq!(it["attempts"].as_array().unwrap().len(), 1, "never sent again: {it}");
        assert_eq!(sms.sent_to(old).len(), 1);
        app.running.stop().await;

        // The CLI says the same.
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("herald.toml");
        std::fs::write(&config, format!("database_url = \"{}\"\n", db.url)).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
            .args(["dlq", "replay", "--reason", "invalid_destination", "--config"])
            .arg(&config)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{text} {}", String::from_utf8_lossy(&out.stderr));
        assert!(
            text.contains(&format!("skipped {pruned}: content_pruned: its content was pruned by retention")),
            "{text}"
        );
        assert!(text.contains("1 skipped (content_pruned: 1)"), "{text}");
    }
}
