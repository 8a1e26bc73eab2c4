//! One event key, many posts (DESIGN §3): the content an event was accepted
//! with is frozen whatever the request identity, its audience is not, and a
//! replay shows the intents as they are now. Every order, on every backend,
//! with and without the Redis fast path in front.

mod common;

use common::{FakeSms, Spawned, TestApp, TestDb, backends, sms_event, test_redis};
use serde_json::{Value, json};
use std::sync::Arc;

/// A token that differs between runs, so identities remembered in a shared
/// Redis by an earlier run are never this run's.
fn run_id() -> String {
    format!("{}-{}", std::process::id(), jiff::Timestamp::now().as_nanosecond())
}

/// The variants of one event that the orders below combine.
#[derive(Clone, Copy, Debug)]
enum Body {
    /// The event as first accepted.
    X,
    /// Other `data`.
    OtherData,
    /// Another `entity.version`.
    OtherVersion,
    /// No `entity.version` at all.
    NoVersion,
    /// The same event for one more recipient.
    MoreRecipients,
    /// Other `data` and one more recipient.
    OtherDataMoreRecipients,
}

fn body(entity_id: &str, which: Body) -> Value {
    let mut ev = sms_event(entity_id, "+15550000700");
    ev["channels"] = json!(["sms", "in_app"]);
    let more = json!({"id": format!("u-more-{entity_id}"), "phone": "+15550000701"});
    match which {
        Body::X => {}
        Body::OtherData => ev["data"]["po"]["number"] = json!("PO-CHANGED"),
        Body::OtherVersion => ev["entity"]["version"] = json!(2),
        Body::NoVersion => {
            ev["entity"].as_object_mut().unwrap().remove("version");
        }
        Body::MoreRecipients => ev["recipients"].as_array_mut().unwrap().push(more),
        Body::OtherDataMoreRecipients => {
            ev["data"]["po"]["number"] = json!("PO-CHANGED");
            ev["recipients"].as_array_mut().unwrap().push(more);
        }
    }
    ev
}

/// What a post must answer.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Want {
    /// 202: at least one intent created.
    Created,
    /// 200, a new request whose intents all existed: `created: false` on each.
    AllExisted,
    /// 200, the stored request replayed.
    Replayed,
    Conflict,
    Mismatch,
}

/// One post: which body, under which `Idempotency-Key` (none: the event's own
/// identity), and what it must answer.
type Post = (Body, Option<&'static str>, Want);

async fn run_order(app: &Spawned, name: &str, order: &[Post]) {
    let run = run_id();
    let entity_id = format!("PO-{name}-{run}");
    let mut first_ids: Option<Vec<String>> = None;
    let mut first_changed = false;
    for (step, (which, key, want)) in order.iter().enumerate() {
        let key = key.map(|k| format!("{k}-{run}"));
        let (s, b, h) = app.post_event(&body(&entity_id, *which), key.as_deref()).await;
        let at = format!("{name} step {step} ({which:?}, key {key:?}): {s} {b}");
        let created: Vec<bool> =
            b["intents"].as_array().map(|a| a.iter().map(|i| i["created"] == true).collect()).unwrap_or_default();
        match want {
            Want::Created => assert!(s == 202 && b["replayed"] == false && created.contains(&true), "{at}"),
            Want::AllExisted => {
                assert!(s == 200 && b["replayed"] == false && created.iter().all(|c| !c), "{at}");
                assert!(h.get("idempotent-replayed").is_none(), "{at}");
            }
            Want::Replayed => {
                assert!(s == 200 && b["replayed"] == true, "{at}");
                assert_eq!(h.get("idempotent-replayed").map(|v| v.to_str().unwrap()), Some("true"), "{at}");
            }
            Want::Conflict => assert!(s == 409 && b["error"]["code"] == "event_conflict", "{at}"),
            Want::Mismatch => assert!(s == 422 && b["error"]["code"] == "idempotency_key_mismatch", "{at}"),
        }
        if s < 300 && first_ids.is_none() {
            first_changed = matches!(which, OtherData | OtherDataMoreRecipients);
            // The in-app intents: they have content (no SMS provider is configured here).
            let in_app = b["intents"].as_array().unwrap().iter().filter(|i| i["channel"] == "in_app");
            first_ids = Some(in_app.map(|i| i["id"].as_str().unwrap().to_string()).collect());
        }
    }
    // Whatever came later, the intents carry the content first accepted.
    let ids = first_ids.expect("something was accepted");
    for id in ids {
        let (_, it) = app.get(&format!("/v1/intents/{id}")).await;
        let text = it["content"].to_string();
        assert_eq!(text.contains("PO-CHANGED"), first_changed, "{name}: {it}");
        assert_eq!(text.contains(&entity_id), !first_changed, "{name}: {it}");
    }
}

use Body::*;
use Want::*;

/// Every order of the issue's posts, and the ones around them.
const ORDERS: &[(&str, &[Post])] = &[
    // X without a key, then other data under a fresh key, then without one.
    (
        "nokey-then-fresh-key",
        &[(X, None, Created), (OtherData, Some("k1"), Conflict), (OtherData, None, Conflict), (X, None, Replayed)],
    ),
    // A refused request leaves nothing behind: its key is free for the real event.
    ("refused-key-is-free", &[(X, None, Created), (OtherData, Some("k2"), Conflict), (X, Some("k2"), AllExisted)]),
    // X under o4, other data without a key, then the original body without a key:
    // a retry, under an identity never seen — 200, nothing created.
    (
        "key-then-nokey",
        &[
            (X, Some("o4"), Created),
            (OtherData, None, Conflict),
            (X, None, AllExisted),
            (X, None, Replayed),
            (X, Some("o4"), Replayed),
        ],
    ),
    // The content also covers entity.version, present or not.
    (
        "version",
        &[
            (X, None, Created),
            (OtherVersion, Some("k3"), Conflict),
            (OtherVersion, None, Conflict),
            (NoVersion, None, Conflict),
        ],
    ),
    // A reused key with another body is a mismatch first, a conflict second.
    ("reused-key", &[(X, Some("k4"), Created), (OtherData, Some("k4"), Mismatch), (OtherData, None, Conflict)]),
    // The other data accepted first: X is then the conflicting one.
    ("other-first", &[(OtherData, None, Created), (X, None, Conflict), (X, Some("k5"), Conflict)]),
    // The audience is open: more recipients create their intents, with or without a key.
    (
        "more-recipients-nokey",
        &[
            (X, None, Created),
            (MoreRecipients, None, Created),
            (MoreRecipients, None, Replayed),
            (X, None, Replayed),
            (OtherDataMoreRecipients, None, Conflict),
            (OtherDataMoreRecipients, Some("k6"), Conflict),
        ],
    ),
    (
        "more-recipients-key",
        &[
            (X, Some("k7"), Created),
            (MoreRecipients, Some("k8"), Created),
            (MoreRecipients, Some("k7"), Mismatch),
            (X, Some("k9"), AllExisted),
            (MoreRecipients, None, AllExisted),
        ],
    ),
];

#[tokio::test]
async fn the_same_event_key_keeps_its_content_whatever_the_request_identity() {
    let redis = test_redis().await;
    for backend in backends() {
        for redis in [None, redis.clone()].into_iter().collect::<std::collections::HashSet<_>>() {
            let db = TestDb::new(backend).await;
            let mut app = TestApp::new(&db).without_workers();
            if let Some(url) = &redis {
                app = app.with_redis(url);
            }
            let app = app.spawn().await;
            for (name, order) in ORDERS {
                run_order(&app, &format!("{backend:?}-{}-{name}", redis.is_some()), order).await;
            }
            app.running.stop().await;
        }
    }
}

#[tokio::test]
async fn more_recipients_create_their_intents_and_report_the_others_as_they_stand() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let app = TestApp::new(&db).with_sms(&sms).spawn().await;
        let (s, first, _) = app.post_event(&body("PO-AUDIENCE", X), None).await;
        assert_eq!(s, 202);
        let sms_id = first["intents"].as_array().unwrap().iter().find(|i| i["channel"] == "sms").unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string();
        app.wait_state(&sms_id, &["sent"]).await;
        let (s, b, _) = app.post_event(&body("PO-AUDIENCE", MoreRecipients), None).await;
        assert_eq!(s, 202, "{backend:?}: {b}");
        let intents = b["intents"].as_array().unwrap();
        assert_eq!(intents.len(), 4, "{b}");
        for i in intents {
            let old = i["recipient_id"] == "u-PO-AUDIENCE";
            assert_eq!(i["created"], !old, "{i}");
        }
        let old_sms = intents.iter().find(|i| i["id"] == sms_id.as_str()).unwrap();
        assert_eq!(old_sms["state"], "sent", "the old intent as it stands: {old_sms}");
        app.running.stop().await;
    }
}

#[tokio::test]
async fn a_replay_shows_the_intents_as_they_are_now() {
    let redis = test_redis().await;
    for backend in backends() {
        for redis in [None, redis.clone()].into_iter().collect::<std::collections::HashSet<_>>() {
            let db = TestDb::new(backend).await;
            let sms = FakeSms::start().await;
            let mut app = TestApp::new(&db).with_sms(&sms);
            if let Some(url) = &redis {
                app = app.with_redis(url);
            }
            let app = app.spawn().await;
            let entity = format!("PO-NOW-{}", run_id());
            let mut ev = sms_event(&entity, "+15550000702");
            ev["channels"] = json!(["sms"]);
            for key in [Some(format!("now-{}", run_id())), None] {
                let (s, first, _) = app.post_event(&ev, key.as_deref()).await;
                assert!(s == 202 || s == 200, "{first}");
                let id = first["intents"][0]["id"].as_str().unwrap().to_string();
                app.wait_state(&id, &["sent"]).await;
                let (s, again, h) = app.post_event(&ev, key.as_deref()).await;
                let at = format!("{backend:?} redis={} key={key:?}: {again}", redis.is_some());
                assert_eq!((s, h.get("idempotent-replayed").is_some()), (200, true), "{at}");
                assert_eq!(again["intents"][0]["state"], "sent", "{at}");
                assert_eq!(again["intents"][0]["decision"], "send", "{at}");
                // `created` is the original answer's: that request created it
                assert_eq!(again["intents"][0]["created"], first["intents"][0]["created"], "{at}");
            }
            app.running.stop().await;
        }
    }
}

#[tokio::test]
async fn two_conflicting_bodies_racing_for_one_event_key_make_one_set_of_intents() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let app = Arc::new(TestApp::new(&db).without_workers().spawn().await);
        for round in 0..8 {
            let entity = format!("PO-RACE-{round}");
            let mut tasks = Vec::new();
            for (i, which) in [X, OtherData, X, OtherData].into_iter().enumerate() {
                let (app, ev) = (app.clone(), body(&entity, which));
                let key = (i >= 2).then(|| format!("race-{round}-{i}"));
                tasks.push(tokio::spawn(async move {
                    let (s, b, _) = app.post_event(&ev, key.as_deref()).await;
                    (which, s, b)
                }));
            }
            let mut results = Vec::new();
            for t in tasks {
                results.push(t.await.unwrap());
            }
            let won: Vec<_> = results.iter().filter(|(_, s, _)| *s == 202).collect();
            assert_eq!(won.len(), 1, "{backend:?} round {round}: {results:?}");
            let winner = format!("{:?}", won[0].0);
            for (which, s, b) in &results {
                let same = format!("{which:?}") == winner;
                // the winner's twin is a 200 (all intents existed); the other body is refused
                let want = if same { [200, 202] } else { [409, 409] };
                assert!(want.contains(s), "{backend:?} round {round}: {which:?} got {s} {b}");
            }
            let intents = won[0].2["intents"].as_array().unwrap();
            let id = intents.iter().find(|i| i["channel"] == "in_app").unwrap()["id"].as_str().unwrap();
            let (_, it) = app.get(&format!("/v1/intents/{id}")).await;
            let changed = it["content"].to_string().contains("PO-CHANGED");
            assert_eq!(changed, winner == "OtherData", "the intents carry the winner's content: {it}");
        }
        match Arc::try_unwrap(app) {
            Ok(app) => app.running.stop().await,
            Err(_) => panic!("app still shared"),
        }
    }
}

/// An event accepted before content records existed (migration 0006) has
/// intents and a stored body but no record: the upgrade derives its record
/// from the body, so a changed post is a 409 and an exact repeat still a 200.
#[tokio::test]
async fn an_event_accepted_before_content_records_is_protected_after_the_upgrade() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let app = TestApp::new(&db).with_sms(&sms).without_workers().spawn().await;
        let (s, _, _) = app.post_event(&body("PO-OLD", Body::X), None).await;
        assert_eq!(s, 202);
        let mut pruned = body("PO-PRUNED", Body::X);
        pruned["occurred_at"] = json!("2026-11-29T11:00:00Z");
        assert_eq!(app.post_event(&pruned, None).await.0, 202);
        app.running.stop().await;
        // Back to the database as the release before 0006 left it: intents and
        // bodies, no content records (and, for one event, its body pruned since).
        for sql in [
            "DELETE FROM events",
            "DROP TABLE events_backfill",
            "DELETE FROM _sqlx_migrations WHERE version = 8",
            "DELETE FROM payloads WHERE digest IN (SELECT event_digest FROM intents WHERE entity_id = 'PO-PRUNED')",
        ] {
            common::execute(&db, sql).await;
        }

        // The upgrade: `herald serve` migrates, then fills in the records.
        let app = TestApp::new(&db).with_sms(&sms).without_workers().spawn().await;
        let (s, b, _) = app.post_event(&body("PO-OLD", Body::OtherData), Some(&format!("fresh-{}", run_id()))).await;
        assert_eq!((s, b["error"]["code"].as_str()), (409, Some("event_conflict")), "{backend:?}: {b}");
        let (s, b, _) = app.post_event(&body("PO-OLD", Body::OtherVersion), None).await;
        assert_eq!(s, 409, "{backend:?}: {b}");
        let (s, b, _) = app.post_event(&body("PO-OLD", Body::X), Some(&format!("again-{}", run_id()))).await;
        assert_eq!(s, 200, "{backend:?}: an exact repeat is not a conflict: {b}");
        let (s, b, _) = app.post_event(&body("PO-OLD", Body::MoreRecipients), None).await;
        assert_eq!(s, 202, "{backend:?}: the audience is not frozen: {b}");
        app.running.stop().await;

        // Nothing is left to do, and the event without a body was left as it was.
        for (sql, want) in [
            ("SELECT COUNT(*) FROM events_backfill", 0),
            ("SELECT COUNT(*) FROM events WHERE entity_id = 'PO-OLD'", 1),
            ("SELECT COUNT(*) FROM events WHERE entity_id = 'PO-PRUNED'", 0),
        ] {
            assert_eq!(common::count(&db, sql).await, want, "{backend:?}: {sql}");
        }
    }
}

/// Raw bytes posted as an event, with an optional Idempotency-Key.
async fn post_raw(app: &Spawned, body: &str, key: Option<&str>) -> (u16, Value) {
    let mut req = app
        .client
        .post(format!("{}/v1/events", app.base))
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(k) = key {
        req = req.header("idempotency-key", k);
    }
    let resp = req.send().await.unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap_or(Value::Null))
}

/// The same event from two JSON writers — one writes `5.0` and `3.0`, the
/// other `5` and `3e0` (JavaScript writes every whole double as an integer) —
/// is one event: a retry through the other writer replays under its
/// Idempotency-Key and is an exact repeat without one, never a 422 or a 409.
/// (Found by the re-serialisation property test in tests/properties.rs.)
#[tokio::test]
async fn the_same_numbers_written_another_way_are_the_same_event() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let app = TestApp::new(&db).without_workers().spawn().await;
        let python = r#"{"type": "purchase_order.approved", "entity": {"type": "purchase_order", "id": "PO-NUM", "version": 3.0},
            "occurred_at": "2026-11-29T10:15:00+05:45", "data": {"po": {"number": "PO-NUM", "total": 1200.0, "lines": [1.0, 2.5, -0.0]}},
            "recipients": [{"id": "u-num", "phone": "+15550000800"}], "channels": ["sms"]}"#;
        let javascript = r#"{"channels":["sms"],"data":{"po":{"lines":[1,2.5,0],"number":"PO-NUM","total":1.2e3}},
            "entity":{"id":"PO-NUM","type":"purchase_order","version":3e0},"occurred_at":"2026-11-29T04:30:00Z",
            "recipients":[{"id":"u-num","phone":"+15550000800"}],"type":"purchase_order.approved"}"#;
        let key = format!("num-{}", run_id());
        let (s, first) = post_raw(&app, python, Some(&key)).await;
        assert_eq!(s, 202, "{backend:?}: {first}");
        let (s, again) = post_raw(&app, javascript, Some(&key)).await;
        assert_eq!((s, &again["replayed"]), (200, &json!(true)), "{backend:?}: {again}");
        let (s, bare) = post_raw(&app, javascript, None).await;
        assert_eq!(s, 200, "{backend:?}: {bare}");
        assert_eq!(bare["intents"][0]["created"], false);
        // A number that differs is still other data.
        let (s, other) = post_raw(&app, &javascript.replace("1.2e3", "1.2e4"), None).await;
        assert_eq!((s, &other["error"]["code"]), (409, &json!("event_conflict")), "{backend:?}: {other}");
    }
}
