//! Free text that came from outside — a provider's bounce diagnostic, a
//! receipt's reason, an attempt's error, a rejected bus message's body and
//! error — never shows an email address or a phone number in the clear,
//! whoever's it is and however the text is shaped: it is scrubbed where it
//! enters Herald and again wherever stored text is shown.

mod common;

use common::smtp::FakeSmtp;
use common::{FakeSms, Reply, TestApp, TestDb, backends, sms_event};
use serde_json::{Value, json};

fn id_of(body: &Value) -> String {
    body["intents"][0]["id"].as_str().unwrap().to_string()
}

async fn generic(app: &common::Spawned, id: &str, body: &Value) -> (u16, Value) {
    common::receipts::post(app, id, body).await
}

/// Every raw form in `raw` is absent from `shown` (without case).
fn assert_none_in_clear(what: &str, shown: &str, raw: &[&str]) {
    let lower = shown.to_lowercase();
    for needle in raw {
        assert!(!lower.contains(&needle.to_lowercase()), "{what} shows {needle:?} in the clear:\n{shown}");
    }
}

#[tokio::test]
async fn a_bounce_diagnostic_is_scrubbed_on_the_suppression_list_and_the_intent() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let smtp = FakeSmtp::start().await;
        let toml = common::receipts::email_with_receipts(&smtp.url);
        let app = TestApp::new(&db).with_toml(&toml).spawn().await;
        let mut ev = sms_event("PO-SCRUB-1", "+15550000100");
        ev["recipients"] = json!([{"id": "u-scrub-1", "email": "asha@example.com"}]);
        ev["channels"] = json!(["email"]);
        let (_, b, _) = app.post_event(&ev, None).await;
        let id = id_of(&b);
        app.wait_state(&id, &["sent"]).await;
        // As SES writes a hard bounce: the address, and whatever else the
        // receiving server chose to echo (here a phone number and a second address).
        let diagnostic = "550 5.1.1 <asha@example.com> … +9779800000001 (forwarded for other.person@example.net)";
        let (s, body) = generic(&app, "scrub_1", &json!({"key": id, "status": "bounced", "reason": diagnostic})).await;
        assert_eq!(s, 200, "{backend:?}: {body}");
        let raw = ["asha@example.com", "9779800000001", "other.person@example.net"];

        let (_, list) = app.get("/v1/suppressions").await;
        let detail = list["suppressions"][0]["detail"].as_str().unwrap_or_else(|| panic!("{list}"));
        assert_none_in_clear("GET /v1/suppressions", &list.to_string(), &raw);
        assert!(detail.contains("a***@example.com") && detail.contains("+97798******01"), "{detail}");
        assert!(detail.starts_with("550 5.1.1 <"), "the diagnostic itself is kept: {detail}");
        let (_, it) = app.get(&format!("/v1/intents/{id}")).await;
        assert_none_in_clear("GET /v1/intents/{id}", &it.to_string(), &raw);
        let (_, letters) = app.get("/v1/dead-letters").await;
        assert_none_in_clear("GET /v1/dead-letters", &letters.to_string(), &raw);

        // Scrubbed before it was stored, not only when shown.
        let stored = common::count(
            &db,
            "SELECT COUNT(*) FROM suppressions WHERE detail LIKE '%asha@%' OR detail LIKE '%9779800000001%'",
        )
        .await;
        assert_eq!(stored, 0, "{backend:?}: the suppression's detail is stored scrubbed");
        let stored =
            common::count(&db, "SELECT COUNT(*) FROM receipts WHERE reason LIKE '%asha@%' OR reason LIKE '%97798000%'")
                .await;
        assert_eq!(stored, 0, "{backend:?}: the receipt's reason is stored scrubbed");

        // A row written before scrubbing existed is scrubbed when shown.
        common::execute(&db, &format!("UPDATE suppressions SET detail = '{diagnostic}'")).await;
        common::execute(&db, &format!("UPDATE receipts SET reason = '{diagnostic}'")).await;
        let (_, list) = app.get("/v1/suppressions").await;
        assert_none_in_clear("GET /v1/suppressions (an old row)", &list.to_string(), &raw);
        let (_, it) = app.get(&format!("/v1/intents/{id}")).await;
        assert_none_in_clear("GET /v1/intents/{id} (an old row)", &it.to_string(), &raw);
        let detail = db.store().await.intent_get("default", &id).await.unwrap().unwrap();
        let why = herald::why::timeline(("purchase_order", "PO-SCRUB-1"), "u-scrub-1", &[detail]);
        assert_none_in_clear("herald why (an old row)", &why, &raw);
        app.running.stop().await;
    }
}

#[tokio::test]
async fn an_attempt_error_naming_other_numbers_and_addresses_is_scrubbed() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let number = "+9779800000021";
        // The provider's refusal names the sender's number and a support
        // address besides the destination.
        sms.script(
            number,
            vec![Reply::status(
                400,
                json!({"error": "from +15005550006 to +9779800000021 refused; write to support.desk@provider.example"}),
            )],
        );
        let app = TestApp::new(&db).with_sms(&sms).spawn().await;
        let (_, b, _) = app.post_event(&sms_event("PO-SCRUB-2", number), None).await;
        let id = id_of(&b);
        let it = app.wait_state(&id, &["dead"]).await;
        let raw = ["15005550006", "9779800000021", "support.desk@provider.example"];
        assert_none_in_clear("GET /v1/intents/{id}", &it.to_string(), &raw);
        let error = it["attempts"][0]["error"].as_str().unwrap();
        assert!(error.contains("HTTP 400") && error.contains("s***@provider.example"), "{error}");
        let stored = common::count(
            &db,
            "SELECT COUNT(*) FROM attempts WHERE error LIKE '%15005550006%' OR error LIKE '%support.desk@%'",
        )
        .await;
        assert_eq!(stored, 0, "{backend:?}: the attempt's error is stored scrubbed");
        // An error stored before scrubbing existed is scrubbed when shown.
        common::execute(&db, "UPDATE attempts SET error = 'from +15005550006: support.desk@provider.example'").await;
        let (_, it) = app.get(&format!("/v1/intents/{id}")).await;
        assert_none_in_clear("GET /v1/intents/{id} (an old row)", &it.to_string(), &raw);
        app.running.stop().await;
    }
}

/// A rejected bus message as the consumer records it.
fn rejected(seq: i64, message: &str, body: &str) -> herald::store::RejectedMessage {
    herald::store::RejectedMessage {
        id: herald::store::RejectedMessage::id_of("scrub", seq),
        tenant: "default".into(),
        stream: "scrub".into(),
        consumer: "herald".into(),
        subject: "scrub.events".into(),
        stream_seq: seq,
        deliveries: 1,
        status: 400,
        code: "invalid_field".into(),
        message: message.into(),
        body: Some(body.into()),
        created_at: 1_700_000_000_000_000 + seq,
    }
}

#[tokio::test]
async fn a_malformed_rejected_message_shows_no_address_or_number_whatever_its_shape() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let app = TestApp::new(&db).without_workers().spawn().await;
        let store = db.store().await;
        let bodies: Vec<(&str, String, &[&str], &[&str])> = vec![
            (
                "recipients as an object",
                json!({"type": "purchase_order.approved", "recipients": {"u-1": {"email": "asha@example.com", "phone": "+9779800000031"}}})
                    .to_string(),
                &["asha@example.com", "9779800000031"],
                &["a***@example.com", "+97798******31"],
            ),
            (
                "a phone as a number",
                json!({"recipients": [{"id": "u-2", "phone": 14155550778_u64}]}).to_string(),
                &["14155550778"],
                &["+14155****78"],
            ),
            (
                "nested arrays",
                json!({"recipients": [[{"email": "nested@example.com"}], ["+9779800000032", [9779800000033_u64]]]})
                    .to_string(),
                &["nested@example.com", "9779800000032", "9779800000033"],
                &["n***@example.com"],
            ),
            (
                "addresses as keys",
                json!({"recipients": {"keyed@example.com": true, "+9779800000034": {"locale": "ne"}}}).to_string(),
                &["keyed@example.com", "9779800000034"],
                &["k***@example.com"],
            ),
            (
                "a webhook URL where no recipient is",
                json!({"recipients": {"u-3": {"webhook_url": "https://hooks.example.com/services/T0/B0/SECRETPATH"}}})
                    .to_string(),
                &["SECRETPATH", "services/T0"],
                &["https://hooks.example.com/***"],
            ),
            (
                "a body that is not JSON",
                "recipients: asha@example.com, phone +9779800000035 {\"email\": ".to_string(),
                &["asha@example.com", "9779800000035"],
                &["a***@example.com", "+97798******35"],
            ),
        ];
        let message = "recipients[0].email: \"victim@evil.example,a@example.com\" is not one address (+9779800000036)";
        for (seq, (_, body, _, _)) in bodies.iter().enumerate() {
            store.rejected_record(rejected(seq as i64 + 1, message, body)).await.unwrap();
        }
        let (status, list) = app.get("/v1/rejected").await;
        assert_eq!(status, 200, "{list}");
        assert_none_in_clear("GET /v1/rejected", &list.to_string(), &["victim@evil.example", "9779800000036"]);
        for (seq, (shape, _, raw, masked)) in bodies.iter().enumerate() {
            let id = herald::store::RejectedMessage::id_of("scrub", seq as i64 + 1);
            let (status, one) = app.get(&format!("/v1/rejected/{id}")).await;
            assert_eq!(status, 200, "{one}");
            let what = format!("{backend:?}: GET /v1/rejected/{{id}} with {shape}");
            assert_none_in_clear(&what, &one.to_string(), raw);
            assert_none_in_clear(&what, &one.to_string(), &["victim@evil.example", "9779800000036"]);
            // JSON shown as JSON, as a dead letter's event is; text as a string
            let format = if *shape == "a body that is not JSON" { "text" } else { "json" };
            assert_eq!(one["body_format"], format, "{what}: {one}");
            assert_eq!(one["body"].is_string(), format == "text", "{what}: {one}");
            let body = match &one["body"] {
                Value::String(text) => text.clone(),
                Value::Null => panic!("{what}: the body is shown, masked: {one}"),
                json => json.to_string(),
            };
            for m in *masked {
                assert!(body.contains(m), "{what}: {m:?} expected in {body}");
            }
        }
        app.running.stop().await;
    }
}

#[tokio::test]
async fn herald_rejected_show_masks_the_body_too() {
    let db = TestDb::new(common::Backend::Sqlite).await;
    let store = db.store().await;
    let body = json!({"recipients": {"u-1": {"email": "asha@example.com", "phone": 14155550778_u64}}}).to_string();
    store.rejected_record(rejected(1, "recipients: must be an array", &body)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("herald.toml");
    std::fs::write(&config, format!("database_url = \"{}\"\n", db.url)).unwrap();
    let id = herald::store::RejectedMessage::id_of("scrub", 1);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_herald"))
        .args(["rejected", "show", &id, "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert_none_in_clear("herald rejected show", &stdout, &["asha@example.com", "14155550778"]);
    let shown: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(shown["body_format"], "json", "{stdout}");
    assert_eq!(shown["body"]["recipients"]["u-1"], json!({"email": "a***@example.com", "phone": "+14155****78"}));
    assert!(stdout.contains("\n      \"u-1\": {"), "the body pretty-printed with the rest: {stdout}");
}
