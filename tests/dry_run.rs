//! `POST /v1/events?dry_run=true`: the same plan and render as a real post,
//! answered with what would be recorded — and nothing written, on either
//! backend, nor in Redis.

mod common;

use common::{Backend, TestApp, TestDb, backends, count, sms_event, test_redis};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const TABLES: [&str; 6] = ["requests", "events", "intents", "jobs", "payloads", "attempts"];

async fn rows(db: &TestDb) -> Vec<(&'static str, i64)> {
    let mut out = Vec::new();
    for t in TABLES {
        out.push((t, count(db, &format!("SELECT COUNT(*) FROM {t}")).await));
    }
    out
}

async fn dry(app: &common::Spawned, event: &Value, key: Option<&str>, query: &str) -> (u16, Value) {
    let mut req = app.client.post(format!("{}/v1/events?{query}", app.base)).json(event);
    if let Some(k) = key {
        req = req.header("Idempotency-Key", k);
    }
    let resp = req.send().await.unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap_or(Value::Null))
}

/// The fast path's key for a request identity, as Herald names it.
fn redis_key(tenant: &str, identity: &str) -> String {
    let digest = hex::encode(Sha256::digest(format!("{tenant}|{identity}").as_bytes()));
    format!("notify:seen:{}", &digest[..32])
}

async fn redis_has(url: &str, key: &str) -> bool {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    redis::cmd("EXISTS").arg(key).query_async::<i64>(&mut conn).await.unwrap() == 1
}

fn bilingual(entity: &str) -> Value {
    let mut ev = sms_event(entity, "+9779800000000");
    ev["recipients"] = json!([
        {"id": "u-en", "phone": "+9779800000000", "email": "asha@example.com"},
        {"id": "u-ne", "phone": "+9779800000001", "locale": "ne"},
        {"id": "u-none"},
    ]);
    ev["channels"] = json!(["sms", "email"]);
    ev
}

#[tokio::test]
async fn a_dry_run_answers_what_would_be_recorded_and_writes_nothing() {
    let redis = test_redis().await;
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let outbox = tempfile::tempdir().unwrap();
        let email = format!("[channels.email]\nsink = {:?}\ntimeout = \"1s\"\n", outbox.path().display().to_string());
        let mut builder = TestApp::new(&db).without_workers().with_sms_url("http://127.0.0.1:9/sms").with_toml(&email);
        if let Some(url) = &redis {
            builder = builder.with_redis(url);
        }
        let app = builder.spawn().await;
        let entity = format!("PO-DRY-{backend:?}-{}", std::process::id());
        let ev = bilingual(&entity);
        let idem = format!("dry-{entity}");

        let (status, body) = dry(&app, &ev, Some(&idem), "dry_run=true").await;
        assert_eq!(status, 200, "{body}");
        assert_eq!((body["dry_run"].clone(), body["replay"].clone()), (json!(true), json!(false)));
        let intents = body["intents"].as_array().unwrap();
        assert_eq!(intents.len(), 6, "two channels for three recipients: {body:#}");
        let find = |r: &str, c: &str| {
            intents.iter().find(|i| i["recipient_id"] == r && i["channel"] == c).unwrap_or_else(|| panic!("{r} {c}"))
        };
        let sms = find("u-en", "sms");
        assert_eq!(
            (sms["decision"].as_str(), sms["state"].as_str(), sms["exists"].as_bool()),
            (Some("send"), Some("queued"), Some(false))
        );
        assert_eq!(sms["destination"], "+97798******00", "masked");
        assert_eq!(sms["content"]["encoding"], "GSM-7");
        assert!(sms["content"]["segments"].as_u64().unwrap() >= 1);
        assert!(sms["content"]["body"].as_str().unwrap().contains(&entity));
        assert_eq!(sms["payload_digest"].as_str().map(str::len), Some(64));
        assert_eq!(sms["template"]["id"], "po_approved");
        let email = find("u-en", "email");
        assert_eq!(email["destination"], "a***@example.com");
        assert!(email["content"]["subject"].is_string());
        let nepali = find("u-ne", "sms");
        assert_eq!(
            (nepali["content"]["encoding"].as_str(), nepali["template"]["locale"].as_str()),
            (Some("UCS-2"), Some("ne"))
        );
        let nowhere = find("u-none", "sms");
        assert_eq!(
            (nowhere["decision"].as_str(), nowhere["reason"].as_str()),
            (Some("suppress"), Some("no_destination"))
        );
        assert_eq!(nowhere["destination"], Value::Null);
        assert!(!body.to_string().contains("9800000000"), "no destination in the clear: {body}");

        assert!(rows(&db).await.iter().all(|(_, n)| *n == 0), "{backend:?}: a dry run wrote {:?}", rows(&db).await);
        if let Some(url) = &redis {
            assert!(!redis_has(url, &redis_key("default", &format!("key:{idem}"))).await, "a dry run left a Redis key");
        }

        // The real post is the first of its identity: created, not replayed,
        // with the keys and decisions the dry run announced.
        let (status, real, _) = app.post_event(&ev, Some(&idem)).await;
        assert_eq!(status, 202, "{real}");
        let mut planned: Vec<(String, String)> = intents
            .iter()
            .map(|i| (i["key"].as_str().unwrap().into(), i["decision"].as_str().unwrap().into()))
            .collect();
        let mut recorded: Vec<(String, String)> = (real["intents"].as_array().unwrap().iter())
            .map(|i| (i["key"].as_str().unwrap().into(), i["decision"].as_str().unwrap().into()))
            .collect();
        planned.sort();
        recorded.sort();
        assert_eq!(planned, recorded);
        let stored = app.get(&format!("/v1/intents/{}", sms["key"].as_str().unwrap())).await.1;
        assert_eq!(
            stored["payload_digest"], sms["payload_digest"],
            "the content the dry run rendered is what was frozen"
        );

        // A dry run after it: the request would replay, the intents exist.
        let before = rows(&db).await;
        let (status, again) = dry(&app, &ev, Some(&idem), "dry_run=true").await;
        assert_eq!(status, 200);
        assert_eq!(again["replay"], true);
        assert!(again["intents"].as_array().unwrap().iter().all(|i| i["exists"] == true), "{again}");
        assert_eq!(rows(&db).await, before);
        // `dry_run=false` is a real post.
        let (status, _) = dry(&app, &ev, Some(&idem), "dry_run=false").await;
        assert_eq!(status, 200, "a replay");
    }
}

#[tokio::test]
async fn a_dry_run_refuses_what_a_real_post_refuses() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let app = TestApp::new(&db).without_workers().with_sms_url("http://127.0.0.1:9/sms").spawn().await;
        let ev = sms_event("PO-DRY-ERR", "+15550000123");
        assert_eq!(app.post_event(&ev, Some("k-1")).await.0, 202);
        let before = rows(&db).await;

        let mut other = ev.clone();
        other["data"]["po"]["total"] = json!("2");
        let (status, body) = dry(&app, &other, Some("k-1"), "dry_run=true").await;
        assert_eq!((status, body["error"]["code"].as_str()), (422, Some("idempotency_key_mismatch")), "{body}");
        let (status, body) = dry(&app, &other, Some("k-2"), "dry_run=true").await;
        assert_eq!((status, body["error"]["code"].as_str()), (409, Some("event_conflict")), "{body}");
        let (status, body) = dry(&app, &other, None, "dry_run=true").await;
        assert_eq!(status, 409, "{body}");

        let mut unknown = ev.clone();
        unknown["type"] = json!("nobody.routes.this");
        assert_eq!(dry(&app, &unknown, None, "dry_run=true").await.0, 422);
        let mut bad = sms_event("PO-DRY-ERR-2", "12");
        bad["recipients"][0]["phone"] = json!("12");
        let (status, body) = dry(&app, &bad, None, "dry_run=true").await;
        assert_eq!(status, 400);
        assert!(body["error"]["message"].as_str().unwrap().contains("recipients[0].phone"), "{body}");
        let (status, body) = dry(&app, &ev, None, "dry_run=maybe").await;
        assert_eq!(status, 400, "{body}");
        assert!(body["error"]["message"].as_str().unwrap().contains("dry_run"), "{body}");
        let (status, body) = dry(&app, &ev, None, "dry=true").await;
        assert_eq!((status, body["error"]["code"].as_str()), (400, Some("invalid_field")), "{body}");

        // A new audience for the accepted event: the existing intent as it
        // stands, the new one as it would be created.
        let mut wider = ev.clone();
        wider["recipients"] = json!([ev["recipients"][0].clone(), {"id": "u-new", "phone": "+15550000124"}]);
        let (status, body) = dry(&app, &wider, None, "dry_run=true").await;
        assert_eq!(status, 200, "{body}");
        let exists: Vec<(String, bool)> = (body["intents"].as_array().unwrap().iter())
            .map(|i| (i["recipient_id"].as_str().unwrap().to_string(), i["exists"].as_bool().unwrap()))
            .collect();
        assert_eq!(exists, vec![("u-PO-DRY-ERR".to_string(), true), ("u-new".to_string(), false)]);
        assert_eq!(rows(&db).await, before, "{backend:?}: refused and accepted dry runs alike wrote nothing");
        if backend == Backend::Postgres {
            assert_eq!(count(&db, "SELECT COUNT(*) FROM requests").await, 1);
        }
    }
}

#[tokio::test]
async fn a_dry_run_shows_each_intent_in_the_mode_a_real_post_would_plan_it() {
    // In-app observed only, on every route; a second route observed whole;
    // the deployment live.
    let config = r#"
[channels.in_app]
mode = "shadow"
[[routes]]
event = "purchase_order.observed"
template = "po_approved"
channels = ["sms"]
mode = "shadow"
"#;
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let app =
            TestApp::new(&db).without_workers().with_sms_url("http://127.0.0.1:9/sms").with_toml(config).spawn().await;
        let mut ev = sms_event("PO-DRY-MODE", "+15550000131");
        ev["channels"] = json!(["sms", "in_app"]);
        let (status, body) = dry(&app, &ev, None, "dry_run=true").await;
        assert_eq!(status, 200, "{body}");
        let modes: Vec<(String, String)> = (body["intents"].as_array().unwrap().iter())
            .map(|i| (i["channel"].as_str().unwrap().to_string(), i["mode"].as_str().unwrap().to_string()))
            .collect();
        assert_eq!(modes, vec![("sms".into(), "live".into()), ("in_app".into(), "shadow".into())], "{backend:?}");

        let mut observed = sms_event("PO-DRY-MODE-2", "+15550000132");
        observed["type"] = json!("purchase_order.observed");
        let (status, body) = dry(&app, &observed, None, "dry_run=true").await;
        assert_eq!((status, body["intents"][0]["mode"].as_str()), (200, Some("shadow")), "{body}");
        app.running.stop().await;

        // The deployment in shadow, the SMS channel live: the channel, most
        // specific, wins.
        let sms_live = "[channels.sms]\nurl = \"http://127.0.0.1:9/sms\"\ntimeout = \"1s\"\nmode = \"live\"\n";
        let shadow = TestApp::new(&db).without_workers().with_mode("shadow").with_toml(sms_live).spawn().await;
        let (status, body) = dry(&shadow, &ev, None, "dry_run=true").await;
        assert_eq!(status, 200, "{body}");
        let modes: Vec<&str> =
            body["intents"].as_array().unwrap().iter().map(|i| i["mode"].as_str().unwrap()).collect();
        assert_eq!(modes, vec!["live", "shadow"], "{backend:?}: {body}");
        // Posted for real in shadow, the in-app intent exists in shadow mode.
        let (status, _, _) = shadow.post_event(&ev, None).await;
        assert_eq!(status, 202);
        shadow.running.stop().await;

        // Whatever the configuration says now, an intent that exists keeps
        // the mode it was planned in.
        let live = TestApp::new(&db).without_workers().with_sms_url("http://127.0.0.1:9/sms").spawn().await;
        let mut wider = ev.clone();
        wider["recipients"] = json!([ev["recipients"][0].clone(), {"id": "u-new", "phone": "+15550000133"}]);
        let (status, body) = dry(&live, &wider, None, "dry_run=true").await;
        assert_eq!(status, 200, "{body}");
        let seen: Vec<(String, String, bool, String)> = (body["intents"].as_array().unwrap().iter())
            .map(|i| {
                (
                    i["recipient_id"].as_str().unwrap().to_string(),
                    i["channel"].as_str().unwrap().to_string(),
                    i["exists"].as_bool().unwrap(),
                    i["mode"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        assert_eq!(
            seen,
            vec![
                ("u-PO-DRY-MODE".into(), "sms".into(), true, "live".into()),
                ("u-PO-DRY-MODE".into(), "in_app".into(), true, "shadow".into()),
                ("u-new".into(), "sms".into(), false, "live".into()),
                ("u-new".into(), "in_app".into(), false, "live".into()),
            ],
            "{backend:?}"
        );
        live.running.stop().await;
    }
}
