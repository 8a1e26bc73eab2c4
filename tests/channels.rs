//! Email over a real SMTP conversation, signed webhooks checked by an
//! independent verifier, SMS budgets, locales and frozen destinations.

mod common;

use common::peer::{Blackhole, Misbehaviour, Peer};
use common::smtp::{FakeSmtp, SilentAfter};
use common::webhook::FakeReceiver;
use common::{FakeSms, TestApp, TestDb, backends, sms_event};
use serde_json::{Value, json};
use std::time::Duration;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn email_event(entity: &str, email: &str) -> Value {
    let mut ev = sms_event(entity, "+15550000100");
    ev["recipients"] = json!([{"id": format!("u-{entity}"), "email": email}]);
    ev["channels"] = json!(["email"]);
    ev
}

fn email_toml(smtp: &FakeSmtp) -> String {
    format!(
        "[channels.email]\nsmtp_url = \"{}\"\nfrom = \"Herald <noreply@herald.test>\"\nmessage_id_domain = \"herald.test\"\ntimeout = \"1s\"\n",
        smtp.url
    )
}

fn id_of(body: &Value) -> String {
    body["intents"][0]["id"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn an_email_carries_the_key_as_message_id_and_both_parts() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let smtp = FakeSmtp::start().await;
        let app = TestApp::new(&db).with_toml(&email_toml(&smtp)).spawn().await;
        let (s, b, _) = app.post_event(&email_event("PO-MAIL", "asha@example.com"), None).await;
        assert_eq!(s, 202);
        let it = app.wait_state(&id_of(&b), &["sent"]).await;
        let mails = smtp.to("asha@example.com");
        assert_eq!(mails.len(), 1, "{backend:?}");
        let key = it["key"].as_str().unwrap();
        assert_eq!(mails[0].header("message-id").as_deref(), Some(format!("<{key}@herald.test>").as_str()));
        assert_eq!(mails[0].header("subject").as_deref(), Some("PO-MAIL was approved by Asha"));
        assert!(mails[0].header("content-type").unwrap_or_default().contains("multipart/alternative"));
        assert!(mails[0].raw.contains("text/html"), "the built-in template has an HTML part");
        assert_eq!(it["destination"], "a***@example.com");
        app.running.stop().await;
    }
}

#[tokio::test]
async fn a_mailbox_error_is_a_hard_bounce_and_a_4xx_is_retried() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let smtp = FakeSmtp::start().await;
        smtp.refuse("gone@example.com", &["550 5.1.1 mailbox unavailable"]);
        smtp.refuse("busy@example.com", &["451 4.3.0 try again later", "250 ok"]);
        let app = TestApp::new(&db).with_toml(&email_toml(&smtp)).spawn().await;
        let (_, b, _) = app.post_event(&email_event("PO-GONE", "gone@example.com"), None).await;
        let it = app.wait_state(&id_of(&b), &["dead"]).await;
        assert_eq!(it["reason"], "hard_bounce", "{backend:?}: {it}");
        assert_eq!(it["attempts"].as_array().unwrap().len(), 1);
        assert_eq!(it["attempts"][0]["provider_status"], 550);

        let (_, b, _) = app.post_event(&email_event("PO-BUSY", "busy@example.com"), None).await;
        let it = app.wait_state(&id_of(&b), &["sent"]).await;
        let attempts = it["attempts"].as_array().unwrap();
        assert_eq!(
            (attempts[0]["outcome"].as_str(), attempts[0]["error_class"].as_str()),
            (Some("retryable"), Some("provider_4xx"))
        );
        assert_eq!(attempts[1]["outcome"], "accepted");
        assert_eq!(smtp.to("busy@example.com").len(), 1);
        app.running.stop().await;
    }
}

#[tokio::test]
async fn an_unreachable_smtp_server_is_retried_not_dropped() {
    let db = TestDb::new(common::Backend::Sqlite).await;
    // a port nothing listens on
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let toml = format!("[channels.email]\nsmtp_url = \"smtp://{closed}\"\ntimeout = \"1s\"\n");
    let app = TestApp::new(&db).with_toml(&toml).with_retry(2, "10ms", "10ms").spawn().await;
    let (_, b, _) = app.post_event(&email_event("PO-NOSMTP", "x@example.com"), None).await;
    let it = app.wait_state(&id_of(&b), &["dead"]).await;
    assert_eq!(it["reason"], "retries_exhausted");
    assert_eq!(it["attempts"][0]["outcome"], "retryable", "{it}");
    app.running.stop().await;
}

#[tokio::test]
async fn webhooks_are_signed_and_a_gone_endpoint_is_permanent() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let hooks = FakeReceiver::start(SECRET).await;
        hooks.script("flaky", &[503, 200]);
        hooks.script("gone", &[410]);
        // The receiver listens on loopback.
        let toml =
            format!("[channels.webhook]\nsecret = \"{SECRET}\"\ntimeout = \"1s\"\nallow_private_destinations = true\n");
        let app = TestApp::new(&db).with_toml(&toml).spawn().await;
        let post = |name: &'static str| {
            let mut ev = sms_event(&format!("PO-HOOK-{name}"), "+15550000101");
            ev["recipients"] = json!([{"id": "u-hook", "webhook_url": format!("{}/hook/{name}", hooks.base)}]);
            ev["channels"] = json!(["webhook"]);
            ev
        };
        let (_, b, _) = app.post_event(&post("flaky"), None).await;
        let it = app.wait_state(&id_of(&b), &["sent"]).await;
        let got = hooks.received("flaky");
        assert_eq!(got.len(), 2, "{backend:?}");
        assert!(got.iter().all(|r| r.verified), "every delivery verifies against the secret");
        assert!(got.iter().all(|r| r.id == it["key"].as_str().unwrap()), "webhook-id is the key on every try");
        assert_eq!(got[0].body["key"], it["key"]);
        assert_eq!(got[0].body["type"], "purchase_order.approved");
        assert_eq!(got[0].body["entity"]["id"], "PO-HOOK-flaky");
        assert_eq!(got[0].body["content"]["data"]["po"]["number"], "PO-HOOK-flaky", "default content is the event");

        let (_, b, _) = app.post_event(&post("gone"), None).await;
        let it = app.wait_state(&id_of(&b), &["dead"]).await;
        assert_eq!(
            (it["reason"].as_str(), it["attempts"][0]["provider_status"].as_i64()),
            (Some("rejected"), Some(410))
        );
        assert_eq!(hooks.received("gone").len(), 1);
        app.running.stop().await;
    }
}

fn write_template(dir: &std::path::Path, files: &[(&str, &str)]) {
    for (rel, text) in files {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
}

#[tokio::test]
async fn an_sms_over_its_budget_is_recorded_not_sent_unless_the_template_allows_it() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let dir = tempfile::tempdir().unwrap();
        write_template(
            &dir.path().join("po_approved"),
            &[
                ("template.toml", "revision = \"2\"\ndefault_locale = \"en\"\nsms_max_segments = 1\n"),
                ("en/sms.j2", "{{ po.number }} approved"),
                ("en/in_app.j2", "{{ po.number }}"),
                ("ne/sms.j2", "{{ po.number }} अब स्वीकृत भयो। कृपया विवरण हेर्नुहोस् र आवश्यक कारबाही गर्नुहोस्, धन्यवाद।"),
            ],
        );
        let app = TestApp::new(&db).with_sms(&sms).with_templates_dir(dir.path()).spawn().await;
        let mut ev = sms_event("PO-LONG", "+15550000102");
        ev["recipients"][0]["locale"] = json!("ne");
        let (_, b, _) = app.post_event(&ev, None).await;
        assert_eq!(
            (b["intents"][0]["state"].as_str(), b["intents"][0]["reason"].as_str()),
            (Some("dead"), Some("sms_too_long"))
        );
        let (_, it) = app.get(&format!("/v1/intents/{}", id_of(&b))).await;
        assert_eq!((it["content"]["encoding"].as_str(), it["content"]["segments"].as_i64()), (Some("UCS-2"), Some(2)));
        assert_eq!(it["template"]["locale"], "ne");
        // a locale the template lacks falls back to the default, and says so
        let mut ev = sms_event("PO-FR", "+15550000103");
        ev["recipients"][0]["locale"] = json!("fr");
        let (_, b, _) = app.post_event(&ev, None).await;
        let it = app.wait_state(&id_of(&b), &["sent"]).await;
        assert_eq!(it["template"]["locale"], "en", "{backend:?}");
        assert_eq!(it["template"]["revision"], "2");
        let wire = &sms.sent_to("+15550000103")[0].body;
        assert_eq!((wire["encoding"].as_str(), wire["segments"].as_i64()), (Some("GSM-7"), Some(1)));
        app.running.stop().await;
        assert!(sms.sent_to("+15550000102").is_empty());

        std::fs::write(
            dir.path().join("po_approved/template.toml"),
            "revision = \"3\"\ndefault_locale = \"en\"\nsms_over_budget = \"send\"\n",
        )
        .unwrap();
        let db = TestDb::new(backend).await;
        let app = TestApp::new(&db).with_sms(&sms).with_templates_dir(dir.path()).spawn().await;
        let mut ev = sms_event("PO-LONG2", "+15550000104");
        ev["recipients"][0]["locale"] = json!("ne");
        let (_, b, _) = app.post_event(&ev, None).await;
        app.wait_state(&id_of(&b), &["sent"]).await;
        assert_eq!(sms.sent_to("+15550000104")[0].body["segments"], 2);
        app.running.stop().await;
    }
}

#[tokio::test]
async fn a_retry_goes_to_the_destination_frozen_at_ingest() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let old = "+15550000105";
        sms.script(old, vec![common::Reply::status(503, json!({})), common::Reply::ok("ok")]);
        let app = TestApp::new(&db).with_sms(&sms).with_retry(3, "300ms", "300ms").spawn().await;
        let put = |phone: &str| {
            app.client
                .put(format!("{}/v1/recipients/u-dir", app.base))
                .json(&json!({"phone": phone, "locale": "en"}))
                .send()
        };
        assert_eq!(put(old).await.unwrap().status(), 200);
        let mut ev = sms_event("PO-DIR", old);
        ev["recipients"] = json!([{"id": "u-dir"}]);
        let (_, b, _) = app.post_event(&ev, None).await;
        // change the directory while the intent waits for its retry
        common::eventually("the first try to reach the provider", || async { sms.has(old) }).await;
        assert_eq!(put("+15550000999").await.unwrap().status(), 200);
        app.wait_state(&id_of(&b), &["sent"]).await;
        assert_eq!(sms.sent_to(old).len(), 2, "{backend:?}");
        assert!(sms.sent_to("+15550000999").is_empty());
        app.running.stop().await;
    }
}

#[tokio::test]
async fn the_directory_validates_each_field_by_name() {
    let db = TestDb::new(common::Backend::Sqlite).await;
    let app = TestApp::new(&db).spawn().await;
    for (body, field) in [
        (json!({"phone": "0800"}), "phone"),
        (json!({"email": "nope"}), "email"),
        (json!({"timezone": "Mars/Base"}), "timezone"),
        (json!({"webhook_url": "ftp://x"}), "webhook_url"),
        (json!({"locale": "../../etc"}), "locale"),
        (json!({"preferences": []}), "preferences"),
        (json!({"nickname": "x"}), "nickname"),
    ] {
        let resp = app.client.put(format!("{}/v1/recipients/u-v", app.base)).json(&body).send().await.unwrap();
        assert_eq!(resp.status(), 400, "{body}");
        let err: Value = resp.json().await.unwrap();
        assert!(err["error"]["message"].as_str().unwrap().starts_with(field), "{err}");
    }
    let (s, _) = app.get("/v1/recipients/u-none").await;
    assert_eq!(s, 404);
    let resp = app
        .client
        .put(format!("{}/v1/recipients/u-v", app.base))
        .json(&json!({"email": "v@example.com", "timezone": "Asia/Kathmandu"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let (s, r) = app.get("/v1/recipients/u-v").await;
    assert_eq!((s, r["timezone"].as_str(), r["preferences_version"].as_i64()), (200, Some("Asia/Kathmandu"), Some(1)));
    app.running.stop().await;
}

/// Seconds between an attempt's start (its claim) and its recorded finish.
fn took(attempt: &Value) -> f64 {
    let at = |k: &str| attempt[k].as_str().unwrap().parse::<jiff::Timestamp>().unwrap();
    at("finished_at").duration_since(at("started_at")).as_secs_f64()
}

/// The client hung up on the stalled session within the 1s timeout (give or
/// take a busy machine), and the attempt was recorded inside the 3s lease.
fn assert_stalled_sessions_abandoned_in_time(smtp: &FakeSmtp, attempt: &Value) {
    let stalled = smtp.stalled_for();
    assert_eq!(stalled.len(), 1, "{stalled:?}");
    assert!(stalled[0] < Duration::from_millis(1500), "held {:?} past the 1s timeout", stalled[0]);
    assert!(took(attempt) < 2.5, "{attempt}");
}

#[tokio::test]
async fn an_smtp_server_silent_after_its_greeting_is_abandoned_in_time_as_retryable() {
    let db = TestDb::new(common::Backend::Sqlite).await;
    let smtp = FakeSmtp::start().await;
    smtp.stall(&[SilentAfter::Greeting]);
    let app = TestApp::new(&db).with_toml(&email_toml(&smtp)).spawn().await;
    let (_, b, _) = app.post_event(&email_event("PO-GREET", "greet@example.com"), None).await;
    let it = app.wait_state(&id_of(&b), &["sent"]).await;
    let first = &it["attempts"][0];
    assert_eq!(
        (first["outcome"].as_str(), first["error_class"].as_str()),
        (Some("retryable"), Some("timeout")),
        "{it}"
    );
    assert_stalled_sessions_abandoned_in_time(&smtp, first);
    assert_eq!(it["attempts"][1]["outcome"], "accepted");
    assert_eq!(smtp.to("greet@example.com").len(), 1);
    app.running.stop().await;
}

#[tokio::test]
async fn an_smtp_server_silent_after_the_data_command_never_got_the_message_so_it_is_retryable() {
    let db = TestDb::new(common::Backend::Sqlite).await;
    let smtp = FakeSmtp::start().await;
    smtp.stall(&[SilentAfter::DataCommand]);
    let app = TestApp::new(&db).with_toml(&email_toml(&smtp)).spawn().await;
    let (_, b, _) = app.post_event(&email_event("PO-DATACMD", "datacmd@example.com"), None).await;
    let it = app.wait_state(&id_of(&b), &["sent"]).await;
    let first = &it["attempts"][0];
    assert_eq!(
        (first["outcome"].as_str(), first["error_class"].as_str()),
        (Some("retryable"), Some("timeout")),
        "{it}"
    );
    assert_stalled_sessions_abandoned_in_time(&smtp, first);
    assert_eq!(smtp.to("datacmd@example.com").len(), 1, "the stalled session never received the message");
    app.running.stop().await;
}

#[tokio::test]
async fn an_smtp_server_silent_after_the_message_is_unknown_and_retried_with_the_same_message_id() {
    let db = TestDb::new(common::Backend::Sqlite).await;
    let smtp = FakeSmtp::start().await;
    smtp.stall(&[SilentAfter::Message]);
    let app = TestApp::new(&db).with_toml(&email_toml(&smtp)).spawn().await;
    let (_, b, _) = app.post_event(&email_event("PO-DATA", "data@example.com"), None).await;
    let it = app.wait_state(&id_of(&b), &["sent"]).await;
    let first = &it["attempts"][0];
    assert_eq!((first["outcome"].as_str(), first["error_class"].as_str()), (Some("unknown"), Some("timeout")), "{it}");
    assert_stalled_sessions_abandoned_in_time(&smtp, first);
    assert_eq!(it["attempts"][1]["outcome"], "accepted");
    // The server had the message when it went silent: the retry is a
    // duplicate on the wire, recognisable by its Message-ID.
    let ids: Vec<_> = smtp.to("data@example.com").iter().map(|m| m.header("message-id")).collect();
    assert_eq!(ids.len(), 2);
    assert!(ids[0].is_some() && ids[0] == ids[1], "{ids:?}");
    app.running.stop().await;
}

#[tokio::test]
async fn an_smtp_connect_that_never_completes_is_retryable() {
    let db = TestDb::new(common::Backend::Sqlite).await;
    let hole = Blackhole::start().await;
    let toml = format!("[channels.email]\nsmtp_url = \"smtp://{}\"\ntimeout = \"1s\"\n", hole.addr);
    let app = TestApp::new(&db).with_toml(&toml).with_retry(1, "10ms", "10ms").spawn().await;
    let (_, b, _) = app.post_event(&email_event("PO-HOLE", "hole@example.com"), None).await;
    let it = app.wait_state(&id_of(&b), &["dead"]).await;
    let first = &it["attempts"][0];
    assert_eq!(first["outcome"], "retryable", "nothing was sent: {it}");
    assert!(took(first) < 2.5, "abandoned inside the 3s lease: {first}");
    app.running.stop().await;
}

#[tokio::test]
async fn emails_in_a_row_share_one_smtp_session() {
    let db = TestDb::new(common::Backend::Sqlite).await;
    let smtp = FakeSmtp::start().await;
    let app = TestApp::new(&db).with_toml(&email_toml(&smtp)).spawn().await;
    for n in 0..3 {
        let (_, b, _) = app.post_event(&email_event(&format!("PO-REUSE-{n}"), "reuse@example.com"), None).await;
        app.wait_state(&id_of(&b), &["sent"]).await;
    }
    assert_eq!(smtp.to("reuse@example.com").len(), 3);
    assert_eq!(smtp.sessions(), 1, "the connection is kept for the next message");
    app.running.stop().await;
}

#[tokio::test]
async fn a_kept_smtp_session_the_server_closed_is_replaced_without_a_failed_attempt() {
    let db = TestDb::new(common::Backend::Sqlite).await;
    let smtp = FakeSmtp::start().await;
    smtp.hang_up_after_each_message();
    let app = TestApp::new(&db).with_toml(&email_toml(&smtp)).spawn().await;
    for n in 0..2 {
        let (_, b, _) = app.post_event(&email_event(&format!("PO-CLOSED-{n}"), "closed@example.com"), None).await;
        let it = app.wait_state(&id_of(&b), &["sent"]).await;
        assert_eq!(it["attempts"].as_array().unwrap().len(), 1, "{it}");
    }
    assert_eq!(smtp.to("closed@example.com").len(), 2);
    assert_eq!(smtp.sessions(), 2);
    app.running.stop().await;
}

/// Webhook deliveries to peers that misbehave, each classified by whether the
/// request can have reached the receiver.
#[tokio::test]
async fn webhook_transport_failures_are_retryable_before_the_request_and_unknown_after() {
    let db = TestDb::new(common::Backend::Sqlite).await;
    let hang = Peer::start(Misbehaviour::AcceptAndHang).await;
    let read_hang = Peer::start(Misbehaviour::ReadThenHang).await;
    let read_drop = Peer::start(Misbehaviour::ReadThenDrop).await;
    let hole = Blackhole::start().await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    // The misbehaving peers listen on loopback.
    let toml =
        format!("[channels.webhook]\nsecret = \"{SECRET}\"\ntimeout = \"1s\"\nallow_private_destinations = true\n");
    let app = TestApp::new(&db).with_toml(&toml).with_retry(1, "10ms", "10ms").spawn().await;
    let cases = [
        ("accepts-never-answers", hang.url("/hook"), "unknown", "timeout"),
        ("reads-never-answers", read_hang.url("/hook"), "unknown", "timeout"),
        ("reads-then-drops", read_drop.url("/hook"), "unknown", "connection_lost"),
        ("nobody-listens", format!("http://{closed}/hook"), "retryable", "unreachable"),
        ("connect-never-completes", format!("http://{}/hook", hole.addr), "retryable", "unreachable"),
        ("no-such-host", "http://herald-test.invalid/hook".to_string(), "retryable", "unreachable"),
    ];
    let mut ids = Vec::new();
    for (name, url, _, _) in &cases {
        let mut ev = sms_event(&format!("PO-NET-{name}"), "+15550000120");
        ev["recipients"] = json!([{"id": format!("u-{name}"), "webhook_url": url}]);
        ev["channels"] = json!(["webhook"]);
        let (s, b, _) = app.post_event(&ev, None).await;
        assert_eq!(s, 202, "{name}: {b}");
        ids.push(id_of(&b));
    }
    for ((name, _, outcome, class), id) in cases.iter().zip(&ids) {
        let it = app.wait_state(id, &["dead"]).await;
        let a = &it["attempts"][0];
        assert_eq!((a["outcome"].as_str(), a["error_class"].as_str()), (Some(*outcome), Some(*class)), "{name}: {a}");
        assert!(took(a) < 2.5, "{name}: abandoned inside the 3s lease: {a}");
    }
    assert_eq!((read_hang.requests(), read_drop.requests()), (1, 1));
    for held in hang.held_for().into_iter().chain(read_hang.held_for()) {
        assert!(held < Duration::from_millis(1500), "a silent peer was held {held:?} past the 1s timeout");
    }
    app.running.stop().await;
}
