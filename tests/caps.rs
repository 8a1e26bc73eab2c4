//! The frequency cap end to end, on each backend: messages to one recipient
//! on one channel go until the cap, the rest are recorded as suppressed
//! (`frequency_cap`) with the cap that applied, an uncapped route is never
//! held back, a digest route folds the rest into its digest, and two Herald
//! instances on one database never let one more through between them.

mod common;

use common::{FakeSms, TestApp, TestDb, backends, sms_event};
use serde_json::{Value, json};

const PHONE: &str = "+15550000300";

/// The tests here take turns: each counts `frequency_cap` decisions on the
/// metrics, which every app in this process shares.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// SMS at most 3 an hour; `auth.code` never capped.
const CAPS: &str = r#"
[caps]
sms = { max = 3, per = "1h" }

[[routes]]
event = "auth.code"
template = "po_approved"
channels = ["sms"]
uncapped = true
"#;

/// A distinct event (its own entity) for the one recipient `u-cap`.
fn event(kind: &str, n: usize) -> Value {
    let mut ev = sms_event(&format!("PO-{n}"), PHONE);
    ev["type"] = json!(kind);
    ev["recipients"] = json!([{"id": "u-cap", "phone": PHONE}]);
    ev
}

fn status(body: &Value) -> (String, Option<String>, String) {
    let it = &body["intents"][0];
    let text = |k: &str| it[k].as_str().map(String::from);
    (text("decision").unwrap_or_default(), text("reason"), text("state").unwrap_or_default())
}

#[tokio::test]
async fn messages_go_until_the_cap_and_the_rest_are_suppressed_with_the_cap_that_applied() {
    let _turn = ONE_AT_A_TIME.lock().await;
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let app = TestApp::new(&db).with_sms(&sms).with_toml(CAPS).spawn().await;
        let capped_before = app.metric("herald_decisions_total", &["reason=\"frequency_cap\""]).await;
        let mut answers = Vec::new();
        for n in 0..5 {
            let (s, body, _) = app.post_event(&event("purchase_order.approved", n), None).await;
            assert_eq!(s, 202, "{backend:?}: {body}");
            answers.push(body);
        }
        let decided: Vec<_> = answers.iter().map(status).collect();
        let send = ("send".to_string(), None, "queued".to_string());
        let capped = ("suppress".to_string(), Some("frequency_cap".to_string()), "suppressed".to_string());
        assert_eq!(decided, vec![send.clone(), send.clone(), send, capped.clone(), capped], "{backend:?}");

        // The fourth says which cap, and how many it counted.
        let id = answers[3]["intents"][0]["id"].as_str().unwrap();
        let (_, it) = app.get(&format!("/v1/intents/{id}")).await;
        assert_eq!(
            it["detail"], "frequency cap: 3 sms message(s) to this recipient in the last 1h; at most 3 (caps.sms)",
            "{backend:?}: {it}"
        );
        let key = it["key"].as_str().unwrap();
        let stored = db.store().await.intent_get("default", key).await.unwrap().unwrap();
        let why = herald::why::timeline(("purchase_order", "PO-3"), "u-cap", &[stored]);
        assert!(why.contains("decided: suppress (frequency_cap)") && why.contains("at most 3 (caps.sms)"), "{why}");
        let capped_after = app.metric("herald_decisions_total", &["reason=\"frequency_cap\""]).await;
        assert_eq!(capped_after - capped_before, 2.0, "{backend:?}: counted on the decisions metric");

        // A one-time code is never held back; it counts, so the cap stays shut.
        let (_, code, _) = app.post_event(&event("auth.code", 10), None).await;
        assert_eq!(status(&code).0, "send", "{backend:?}: {code}");
        // The same event again is its stored answer, not a new count.
        let (_, again, headers) = app.post_event(&event("purchase_order.approved", 0), None).await;
        assert_eq!(status(&again).0, "send", "{backend:?}: {again}");
        assert!(headers.get("idempotent-replayed").is_some() || again["intents"][0]["created"] == false);

        for body in answers.iter().take(3).chain([&code]) {
            app.wait_state(body["intents"][0]["id"].as_str().unwrap(), &["sent"]).await;
        }
        assert_eq!(sms.sent_to(PHONE).len(), 4, "{backend:?}: three under the cap and the uncapped code");
        let jobs = common::count(
            &db,
            &format!("SELECT COUNT(*) FROM jobs WHERE intent_id = (SELECT id FROM intents WHERE key = '{key}')"),
        )
        .await;
        assert_eq!(jobs, 0, "{backend:?}: nothing queued for a capped intent");
    }
}

#[tokio::test]
async fn a_route_s_own_cap_replaces_the_deployment_s_and_other_recipients_have_their_own() {
    let _turn = ONE_AT_A_TIME.lock().await;
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let own = "[caps]\nsms = { max = 1, per = \"1h\" }\n\
                   [[routes]]\nevent = \"purchase_order.rejected\"\ntemplate = \"po_approved\"\nchannels = [\"sms\"]\n\
                   [routes.caps]\nsms = { max = 2, per = \"1h\" }\n";
        let app = TestApp::new(&db).with_sms(&sms).with_toml(own).spawn().await;
        let mut decided = Vec::new();
        for n in 0..3 {
            let (_, body, _) = app.post_event(&event("purchase_order.rejected", n), None).await;
            decided.push(status(&body).0);
        }
        assert_eq!(decided, ["send", "send", "suppress"], "{backend:?}");
        let (_, body, _) = app.post_event(&event("purchase_order.rejected", 3), None).await;
        let id = body["intents"][0]["id"].as_str().unwrap();
        let (_, it) = app.get(&format!("/v1/intents/{id}")).await;
        assert!(
            it["detail"].as_str().unwrap().ends_with("at most 2 (caps.sms of route purchase_order.rejected)"),
            "{it}"
        );
        // The deployment's cap of 1 counts the two the route let through.
        let (_, other, _) = app.post_event(&event("purchase_order.approved", 4), None).await;
        assert_eq!(status(&other).1.as_deref(), Some("frequency_cap"), "{backend:?}: {other}");
        // Another recipient is counted on their own.
        let mut ev = event("purchase_order.approved", 5);
        ev["recipients"] = json!([{"id": "u-other", "phone": "+15550000301"}]);
        let (_, fresh, _) = app.post_event(&ev, None).await;
        assert_eq!(status(&fresh).0, "send", "{backend:?}: {fresh}");
    }
}

#[tokio::test]
async fn over_the_cap_on_a_digest_route_the_rest_go_in_the_digest() {
    let _turn = ONE_AT_A_TIME.lock().await;
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let templates = common::digest::templates_with_digest();
        let route = "[caps]\nsms = { max = 1, per = \"1h\" }\n\
                     [[routes]]\nevent = \"purchase_order.commented\"\ntemplate = \"po_approved\"\nchannels = [\"sms\"]\n\
                     digest = { window = \"1h\", template = \"po_digest\" }\n";
        let app = TestApp::new(&db).with_sms(&sms).with_templates_dir(templates.path()).with_toml(route).spawn().await;
        // One by one, by the recipient's choice: until the cap.
        let (s, _) = app.put("/v1/recipients/u-cap", &json!({"phone": PHONE, "preferences": {"digest": false}})).await;
        assert_eq!(s, 200);
        let (_, first, _) = app.post_event(&event("purchase_order.commented", 0), None).await;
        let (_, second, _) = app.post_event(&event("purchase_order.commented", 1), None).await;
        assert_eq!(status(&first).0, "send", "{backend:?}: {first}");
        assert_eq!(
            status(&second),
            ("digest".to_string(), Some("frequency_cap".to_string()), "held".to_string()),
            "{backend:?}: {second}"
        );
        let id = second["intents"][0]["id"].as_str().unwrap();
        let (_, it) = app.get(&format!("/v1/intents/{id}")).await;
        let detail = it["detail"].as_str().unwrap();
        assert!(
            detail.contains("at most 1 (caps.sms); in the digest ") && detail.contains("due when it closes"),
            "{it}"
        );
        let windows = common::count(&db, "SELECT COUNT(*) FROM digests").await;
        assert_eq!(windows, 1, "{backend:?}: its digest window is open");
    }
}

/// Two Herald instances — each with its own store, pools and batching, as
/// two processes have — take events for one recipient at once.
#[tokio::test]
async fn two_instances_racing_on_one_recipient_let_exactly_the_cap_through() {
    let _turn = ONE_AT_A_TIME.lock().await;
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let cap = "[caps]\nsms = { max = 5, per = \"1h\" }\n";
        let a = TestApp::new(&db).with_sms(&sms).with_toml(cap).spawn().await;
        let b = TestApp::new(&db).with_sms(&sms).with_toml(cap).spawn().await;
        let events: Vec<Value> = (0..40).map(|n| event("purchase_order.approved", n)).collect();
        let posts = events
            .iter()
            .enumerate()
            .map(|(n, ev)| if n % 2 == 0 { a.post_event(ev, None) } else { b.post_event(ev, None) });
        let answers = futures_util::future::join_all(posts).await;
        let mut sent = 0;
        for (s, body, _) in &answers {
            assert_eq!(*s, 202, "{backend:?}: {body}");
            match status(body) {
                (d, None, _) if d == "send" => sent += 1,
                (_, Some(r), _) => assert_eq!(r, "frequency_cap", "{backend:?}: {body}"),
                other => panic!("{backend:?}: {other:?}"),
            }
        }
        assert_eq!(sent, 5, "{backend:?}: exactly the cap went out between the two");
        let stored = "SELECT COUNT(*) FROM intents WHERE recipient_id = 'u-cap' AND decision = 'send'";
        assert_eq!(common::count(&db, stored).await, 5, "{backend:?}");
        common::eventually("the five sent", || async { (sms.sent_to(PHONE).len() == 5).then_some(()) }).await;
    }
}
