//! Shadow mode: the same events give the same intents, keys, content and
//! decisions as live, and no provider is ever called; the mode is fixed when
//! an intent is planned, so switching to live sends only what is planned after.

mod common;

use common::{FakeSms, Spawned, TestApp, TestDb, backends};
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
    vec![
        (first.clone(), Some("k-1")),
        (first.clone(), Some("k-1")),
        (first.clone(), Some("k-1b")),
        (other_body, Some("k-1")),
        (first, None),
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

        live.running.stop().await;
        shadow.running.stop().await;
    }
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
