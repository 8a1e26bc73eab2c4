//! Amazon SES's notifications through SNS (`POST /v1/receipts/ses`): signed
//! like SNS signs them (SignatureVersion 1 and 2, with a test-only key), a
//! fake SMTP server answering `DATA` as SES does so the attempt records SES's
//! message id, bounces and complaints onto the suppression list, and every
//! message that is not SNS's own refused.

mod common;

use common::smtp::{FakeSmtp, SilentAfter};
use common::sns::{self, By, FakeSns, TOPIC};
use common::{Spawned, TestApp, TestClock, TestDb, backends, sms_event};
use herald::clock::Clock;
use serde_json::{Value, json};

const CERT_URL: &str = "https://sns.eu-west-1.amazonaws.com/SimpleNotificationService-test.pem";

fn email_toml(smtp: &FakeSmtp, ses: &str) -> String {
    format!(
        "[channels.email]\nsmtp_url = \"{}\"\nfrom = \"Herald <noreply@herald.test>\"\n\
         message_id_domain = \"herald.test\"\ntimeout = \"1s\"\n[receipts.ses]\ntopic_arns = [\"{TOPIC}\"]\n{ses}",
        smtp.url
    )
}

fn with_cert_file() -> String {
    format!("certificate_file = {:?}\n", sns::CERT)
}

fn email_event(entity: &str, email: &str) -> Value {
    let mut ev = sms_event(entity, "+15550000100");
    ev["recipients"] = json!([{"id": format!("u-{entity}"), "email": email}]);
    ev["channels"] = json!(["email"]);
    ev
}

async fn post(app: &Spawned, body: &Value) -> (u16, Value) {
    let resp = app
        .client
        .post(format!("{}/v1/receipts/ses", app.base))
        // SNS posts its JSON as text/plain.
        .header("content-type", "text/plain; charset=UTF-8")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// Sends an email and waits until SES (the fake) has accepted it: the intent
/// and the id SES answered with.
async fn sent_email(app: &Spawned, smtp: &FakeSmtp, entity: &str, address: &str) -> (Value, String) {
    let (s, b, _) = app.post_event(&email_event(entity, address), None).await;
    assert_eq!(s, 202, "{b}");
    let it = app.wait_state(b["intents"][0]["id"].as_str().unwrap(), &["sent"]).await;
    let ses_id = smtp.to(address)[0].ses_id.clone().expect("the fake answers like SES");
    (it, ses_id)
}

#[tokio::test]
async fn a_bounce_signed_like_sns_suppresses_the_address_and_a_repeat_changes_nothing() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let smtp = FakeSmtp::start().await;
        smtp.answer_like_ses();
        let app = TestApp::new(&db).with_toml(&email_toml(&smtp, &with_cert_file())).spawn().await;
        let address = "asha@example.com";
        let (it, ses_id) = sent_email(&app, &smtp, "PO-SES1", address).await;
        let id = it["id"].as_str().unwrap().to_string();
        assert_eq!(it["attempts"][0]["provider_message_id"], ses_id.as_str(), "{backend:?}: SES's id is recorded");

        let message_id = format!("<{}@herald.test>", it["key"].as_str().unwrap());
        let bounce =
            sns::notification(&sns::ses_message("Bounce", &ses_id, &message_id, address), "n-1", CERT_URL, By::V2);
        let (s, body) = post(&app, &bounce).await;
        assert_eq!((s, body["delivery_status"].as_str()), (200, Some("bounced")), "{backend:?}: {body}");
        let (_, it) = app.get(&format!("/v1/intents/{id}")).await;
        assert_eq!((it["state"].as_str(), it["reason"].as_str()), (Some("dead"), Some("hard_bounce")), "{it}");
        let receipt = &it["receipts"][0];
        assert_eq!(
            (receipt["source"].as_str(), receipt["provider_status"].as_str()),
            (Some("ses"), Some("Bounce/Permanent/General"))
        );
        assert!(!it.to_string().contains(address), "the address never shows unmasked: {it}");

        let (_, letters) = app.get("/v1/dead-letters?reason=hard_bounce").await;
        assert_eq!(letters["dead_letters"][0]["id"], id.as_str(), "{letters}");
        let (_, list) = app.get("/v1/suppressions").await;
        let entry = &list["suppressions"][0];
        assert_eq!(
            (entry["reason"].as_str(), entry["source_intent"].as_str()),
            (Some("address_bounced"), Some(id.as_str()))
        );

        // SNS delivers at least once: the same notification again is a 200 that changes nothing.
        let (s, again) = post(&app, &bounce).await;
        assert_eq!((s, again["duplicate"].as_bool()), (200, Some(true)), "{again}");
        let (_, after) = app.get(&format!("/v1/intents/{id}")).await;
        assert_eq!(after["receipts"].as_array().unwrap().len(), 1);
        assert_eq!(app.get("/v1/suppressions").await.1["suppressions"].as_array().unwrap().len(), 1);

        // The next event to that address is planned suppress and never mailed.
        let (_, b, _) = app.post_event(&email_event("PO-SES1b", address), None).await;
        assert_eq!(
            (b["intents"][0]["decision"].as_str(), b["intents"][0]["reason"].as_str()),
            (Some("suppress"), Some("address_bounced"))
        );
        assert_eq!(smtp.to(address).len(), 1);

        let detail = db.store().await.intent_get("default", &id).await.unwrap().unwrap();
        let why = herald::why::timeline(("purchase_order", "PO-SES1"), "u-PO-SES1", &[detail]);
        assert!(why.contains("receipt from ses: bounced (Bounce/Permanent/General)"), "{why}");
        app.running.stop().await;
    }
}

#[tokio::test]
async fn signature_version_1_and_2_verify_and_deliveries_and_complaints_are_recorded() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let smtp = FakeSmtp::start().await;
        smtp.answer_like_ses();
        let app = TestApp::new(&db).with_toml(&email_toml(&smtp, &with_cert_file())).spawn().await;
        let (it, ses_id) = sent_email(&app, &smtp, "PO-SES2", "ravi@example.com").await;
        let mid = format!("<{}@herald.test>", it["key"].as_str().unwrap());
        let delivered = sns::notification(
            &sns::ses_message("Delivery", &ses_id, &mid, "ravi@example.com"),
            "n-2",
            CERT_URL,
            By::V1,
        );
        let (s, body) = post(&app, &delivered).await;
        assert_eq!((s, body["delivery_status"].as_str()), (200, Some("delivered")), "{backend:?} v1: {body}");
        let complaint = sns::notification(
            &sns::ses_message("Complaint", &ses_id, &mid, "ravi@example.com"),
            "n-3",
            CERT_URL,
            By::V2,
        );
        let (s, body) = post(&app, &complaint).await;
        assert_eq!((s, body["delivery_status"].as_str()), (200, Some("complained")), "{backend:?} v2: {body}");
        let (_, it) = app.get(&format!("/v1/intents/{}", it["id"].as_str().unwrap())).await;
        assert_eq!(it["state"], "sent", "a complaint is about the address, the message was delivered: {it}");
        let (_, list) = app.get("/v1/suppressions").await;
        assert_eq!(list["suppressions"][0]["reason"], "address_complained", "{list}");
        // An SES event that says nothing about delivery is acknowledged and ignored.
        let open =
            sns::notification(&json!({"eventType": "Open", "mail": {"messageId": ses_id}}), "n-4", CERT_URL, By::V2);
        assert_eq!(post(&app, &open).await, (200, json!({"type": "Notification", "ignored": "Open"})));
        app.running.stop().await;
    }
}

#[tokio::test]
async fn messages_sns_did_not_sign_for_this_topic_are_refused_and_change_nothing() {
    let db = TestDb::new(common::Backend::Sqlite).await;
    let smtp = FakeSmtp::start().await;
    smtp.answer_like_ses();
    let app = TestApp::new(&db).with_toml(&email_toml(&smtp, &with_cert_file())).spawn().await;
    let address = "mira@example.com";
    let (it, ses_id) = sent_email(&app, &smtp, "PO-SES3", address).await;
    let mid = format!("<{}@herald.test>", it["key"].as_str().unwrap());
    let bounce = sns::ses_message("Bounce", &ses_id, &mid, address);

    let mut tampered =
        sns::notification(&sns::ses_message("Delivery", &ses_id, &mid, address), "n-5", CERT_URL, By::V2);
    tampered["Message"] = json!(bounce.to_string());
    let impostor = sns::notification(&bounce, "n-6", CERT_URL, By::Impostor);
    let mut other_topic = sns::notification(&bounce, "n-7", CERT_URL, By::V2);
    other_topic["TopicArn"] = json!("arn:aws:sns:eu-west-1:999999999999:not-ours");
    sns::sign(&mut other_topic, By::V2);
    let mut foreign_cert = sns::notification(&bounce, "n-8", "https://certs.example.com/sns.pem", By::V2);
    sns::sign(&mut foreign_cert, By::V2);
    let plain_http = sns::notification(&bounce, "n-9", "http://sns.eu-west-1.amazonaws.com/x.pem", By::V2);
    for (what, message) in [
        ("a changed message", &tampered),
        ("another key", &impostor),
        ("another topic", &other_topic),
        ("a certificate not on sns.<region>.amazonaws.com", &foreign_cert),
        ("a certificate over plain http", &plain_http),
    ] {
        let (s, body) = post(&app, message).await;
        assert_eq!((s, body["error"]["code"].as_str()), (403, Some("forbidden")), "{what}: {body}");
    }
    // Validly signed, but older than an hour: a captured message sent again.
    let stale = sns::notification_at(
        &bounce,
        "n-10",
        CERT_URL,
        By::V2,
        jiff::Timestamp::now() - jiff::SignedDuration::from_mins(61),
    );
    let (s, body) = post(&app, &stale).await;
    assert_eq!(s, 403, "a stale message: {body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("older than 1h"), "{body}");
    let metrics = app.client.get(format!("{}/metrics", app.base)).send().await.unwrap().text().await.unwrap();
    assert!(
        metrics.lines().any(|l| l.starts_with("herald_receipts_total{") && l.contains("result=\"stale\"")),
        "counted: {metrics}"
    );
    // A key given twice, in the envelope or in SES's message, is read by nobody.
    let signed = sns::notification(&bounce, "n-11", CERT_URL, By::V2).to_string();
    let doubled = signed.replacen("{\"", "{\"Type\":\"Notification\",\"", 1);
    let resp = app.client.post(format!("{}/v1/receipts/ses", app.base)).body(doubled).send().await.unwrap();
    assert_eq!(resp.status(), 400);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert!(body["error"]["message"].as_str().unwrap().contains("twice"), "{body}");
    let mut doubled_message = bounce.to_string();
    doubled_message.insert_str(1, "\"notificationType\":\"Delivery\",");
    let mut inner = sns::notification(&json!(null), "n-12", CERT_URL, By::V2);
    inner["Message"] = json!(doubled_message);
    sns::sign(&mut inner, By::V2);
    let (s, body) = post(&app, &inner).await;
    assert_eq!(s, 400, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("twice"), "{body}");
    let (s, body) = post(&app, &json!({"Type": "Notification"})).await;
    assert_eq!(s, 400, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("body"), "{body}");
    let (_, it) = app.get(&format!("/v1/intents/{}", it["id"].as_str().unwrap())).await;
    assert_eq!((it["state"].as_str(), it["receipts"].as_array().unwrap().len()), (Some("sent"), 0), "{it}");
    assert!(app.get("/v1/suppressions").await.1["suppressions"].as_array().unwrap().is_empty());
    app.running.stop().await;
}

#[tokio::test]
async fn the_certificate_is_fetched_once_and_subscriptions_are_confirmed_only_when_configured() {
    let db = TestDb::new(common::Backend::Sqlite).await;
    let (smtp, fake) = (FakeSmtp::start().await, FakeSns::start().await);
    smtp.answer_like_ses();
    let cert_url = format!("{}/cert.pem", fake.base);
    let confirm_url = format!("{}/confirm?Action=ConfirmSubscription&Token=token-1", fake.base);
    let ses = format!("sns_base_url = \"{}\"\nconfirm_subscriptions = true\n", fake.base);
    let app = TestApp::new(&db).with_toml(&email_toml(&smtp, &ses)).spawn().await;

    let (s, body) = post(&app, &sns::confirmation(&confirm_url, &cert_url)).await;
    assert_eq!((s, body["subscription"].as_str()), (200, Some("confirmed")), "{body}");
    assert_eq!(fake.confirmations().len(), 1);
    assert_eq!(fake.confirmations()[0].get("Token").map(String::as_str), Some("token-1"));
    // A SubscribeURL elsewhere is never requested.
    let (s, _) = post(&app, &sns::confirmation("http://127.0.0.1:1/confirm", &cert_url)).await;
    assert_eq!(s, 403);

    let (it, ses_id) = sent_email(&app, &smtp, "PO-SES4", "noor@example.com").await;
    let mid = format!("<{}@herald.test>", it["key"].as_str().unwrap());
    for n in 0..2 {
        let m = sns::notification(
            &sns::ses_message("Delivery", &ses_id, &mid, "noor@example.com"),
            &format!("d-{n}"),
            &cert_url,
            By::V2,
        );
        assert_eq!(post(&app, &m).await.0, 200);
    }
    assert_eq!(fake.cert_fetches(), 1, "fetched once, then cached");
    app.running.stop().await;

    // Off: the confirmation is left to an operator, and SNS is not called.
    let db = TestDb::new(common::Backend::Sqlite).await;
    let ses = format!("sns_base_url = \"{}\"\n", fake.base);
    let app = TestApp::new(&db).with_toml(&email_toml(&smtp, &ses)).spawn().await;
    let (s, body) = post(&app, &sns::confirmation(&confirm_url, &cert_url)).await;
    assert_eq!((s, body["subscription"].as_str()), (200, Some("pending")), "{body}");
    assert_eq!(fake.confirmations().len(), 1, "not confirmed");
    app.running.stop().await;
}

#[tokio::test]
async fn a_receipt_for_an_intent_waiting_for_its_retry_ends_it_and_the_retry_never_runs() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let smtp = FakeSmtp::start().await;
        smtp.answer_like_ses();
        // SES takes the message, and its answer never comes: `unknown`, so no SES id was recorded.
        smtp.stall(&[SilentAfter::Message]);
        let clock = TestClock::at("2026-11-30T10:00:00Z");
        let app = TestApp::new(&db)
            .with_clock(clock.clone())
            .with_retry(4, "10s", "1m")
            .with_toml(&email_toml(&smtp, &with_cert_file()))
            .spawn()
            .await;
        let address = "lina@example.com";
        let (_, b, _) = app.post_event(&email_event("PO-SES5", address), None).await;
        let id = b["intents"][0]["id"].as_str().unwrap().to_string();
        let it = app.wait_state(&id, &["unknown"]).await;
        assert_eq!(it["attempts"][0]["provider_message_id"], Value::Null, "{backend:?}: {it}");
        let key = it["key"].as_str().unwrap().to_string();
        let jobs = format!("SELECT COUNT(*) FROM jobs WHERE intent_id = (SELECT id FROM intents WHERE key = '{key}')");
        assert_eq!(common::count(&db, &jobs).await, 1, "a retry is pending");

        // SES says it was delivered; the notification's headers carry Herald's Message-ID.
        let ses_id = smtp.to(address)[0].ses_id.clone().unwrap();
        let mid = format!("<{key}@herald.test>");
        let message = sns::ses_message("Delivery", &ses_id, &mid, address);
        let delivered = sns::notification_at(&message, "n-10", CERT_URL, By::V2, clock.now());
        let (s, body) = post(&app, &delivered).await;
        assert_eq!((s, body["ended_retry"].as_bool()), (200, Some(true)), "{backend:?}: {body}");
        let (_, it) = app.get(&format!("/v1/intents/{id}")).await;
        assert_eq!((it["state"].as_str(), it["delivery_status"].as_str()), (Some("sent"), Some("delivered")), "{it}");
        assert_eq!(it["receipts"][0]["ended_retry"], true);
        assert_eq!(common::count(&db, &jobs).await, 0, "the job is gone");

        // Past the retry's time, another message goes out; this one is not sent again.
        clock.set("2026-11-30T10:05:00Z");
        let (_, later, _) = app.post_event(&email_event("PO-SES5b", "other@example.com"), None).await;
        app.wait_state(later["intents"][0]["id"].as_str().unwrap(), &["sent"]).await;
        assert_eq!(smtp.to(address).len(), 1, "the retry never ran");
        let detail = db.store().await.intent_get("default", &id).await.unwrap().unwrap();
        let why = herald::why::timeline(("purchase_order", "PO-SES5"), "u-PO-SES5", &[detail]);
        assert!(why.contains("pending retry was called off"), "{why}");
        assert!(why.contains("now sent"), "{why}");
        app.running.stop().await;
    }
}

#[tokio::test]
async fn a_query_parameter_on_the_ses_endpoint_is_refused() {
    let db = TestDb::new(common::Backend::Sqlite).await;
    let smtp = FakeSmtp::start().await;
    let app = TestApp::new(&db).with_toml(&email_toml(&smtp, &with_cert_file())).spawn().await;
    // Signed by SNS, about mail Herald did not send: acknowledged as it is…
    let bounce = sns::ses_message("Bounce", "ses-id-unknown", "<nobody@herald.test>", "a@example.com");
    let message = sns::notification(&bounce, "n-q1", CERT_URL, By::V2);
    assert_eq!(post(&app, &message).await.0, 200);
    // …and refused, naming the parameter, with one it does not take or one given twice.
    for (query, named) in [("?Type=Notification", "Type"), ("?x=1&x=1", "x")] {
        let resp = app
            .client
            .post(format!("{}/v1/receipts/ses{query}", app.base))
            .header("content-type", "text/plain; charset=UTF-8")
            .body(message.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 400, "{query}");
        let body: Value = resp.json().await.unwrap();
        assert!(body["error"]["message"].as_str().unwrap().starts_with(&format!("{named}: ")), "{body}");
    }
    app.running.stop().await;
}
