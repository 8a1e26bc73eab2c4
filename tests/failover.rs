//! Failover between two SMS providers (two fakes on loopback): a retry moves
//! to the backup only after a definite non-acceptance, stays on the primary
//! after an `unknown`, and a circuit breaker skips a failing primary for its
//! cool-down (judged by the test's clock), then tries it again. Email fails
//! over by the same rules, between two SMTP servers.

mod common;

use common::smtp::{FakeSmtp, SilentAfter};
use common::{FakeSms, Reply, TestApp, TestClock, TestDb, backends, sms_event};
use serde_json::{Value, json};
use std::time::Duration;

fn id_of(body: &Value) -> String {
    body["intents"][0]["id"].as_str().unwrap().to_string()
}

fn failover_toml(primary: &str, backup: &str, failures: u32, extra_route: &str) -> String {
    format!(
        "[channels.sms]\nproviders = [\"primary\", \"backup\"]\nbreaker_failures = {failures}\nbreaker_cool_down = \"30s\"\n\
         [channels.sms.named.primary]\nurl = \"{primary}\"\ntimeout = \"300ms\"\n\
         [channels.sms.named.backup]\nurl = \"{backup}\"\ntimeout = \"300ms\"\n{extra_route}"
    )
}

fn closed_port_url() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/sms", l.local_addr().unwrap());
    drop(l);
    url
}

fn providers_of(it: &Value) -> Vec<String> {
    it["attempts"].as_array().unwrap().iter().map(|a| a["provider"].as_str().unwrap_or("-").to_string()).collect()
}

#[tokio::test]
async fn a_primary_refusing_connections_sends_everything_through_the_backup() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let backup = FakeSms::start().await;
        let app = TestApp::new(&db).with_toml(&failover_toml(&closed_port_url(), &backup.url, 100, "")).spawn().await;
        for n in 0..3 {
            let number = format!("+97798000001{n}0");
            let (_, b, _) = app.post_event(&sms_event(&format!("PO-FO{n}"), &number), None).await;
            let it = app.wait_state(&id_of(&b), &["sent"]).await;
            assert_eq!(providers_of(&it), ["primary", "backup"], "{backend:?}: {it}");
            assert_eq!((it["attempts"][0]["error_class"].as_str()), Some("unreachable"));
            assert_eq!(it["attempts"][1]["possible_duplicate"], false, "nothing was sent to the primary");
            let sent = backup.sent_to(&number);
            assert_eq!(sent.len(), 1);
            assert_eq!(sent[0].idempotency_key.as_deref(), it["key"].as_str(), "the same intent key");
        }
        app.running.stop().await;
    }
}

#[tokio::test]
async fn after_a_timeout_the_retry_stays_on_the_primary_unless_the_route_fails_over_on_unknown() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let (primary, backup) = (FakeSms::start().await, FakeSms::start().await);
        let (number, alert_number) = ("+9779800000201", "+9779800000202");
        for n in [number, alert_number] {
            primary.script(n, vec![Reply::ok("p-1").slow(Duration::from_millis(900)), Reply::ok("p-1")]);
        }
        let alert_route = "[[routes]]\nevent = \"alert.fired\"\ntemplate = \"po_approved\"\nchannels = [\"sms\"]\n\
                           failover_on_unknown = true\n";
        let app =
            TestApp::new(&db).with_toml(&failover_toml(&primary.url, &backup.url, 100, alert_route)).spawn().await;
        let (_, b, _) = app.post_event(&sms_event("PO-FO-T", number), None).await;
        let it = app.wait_state(&id_of(&b), &["sent"]).await;
        assert_eq!(providers_of(&it), ["primary", "primary"], "{backend:?}: {it}");
        assert_eq!(it["attempts"][0]["outcome"], "unknown");
        assert_eq!(it["attempts"][1]["possible_duplicate"], false, "the primary dedupes by Idempotency-Key");
        assert!(backup.sent_to(number).is_empty());

        let mut alert = sms_event("ALERT-1", alert_number);
        alert["type"] = json!("alert.fired");
        let (s, b, _) = app.post_event(&alert, None).await;
        assert_eq!(s, 202, "{b}");
        let it = app.wait_state(&id_of(&b), &["sent"]).await;
        assert_eq!(providers_of(&it), ["primary", "backup"], "{backend:?}: {it}");
        assert_eq!(it["attempts"][1]["possible_duplicate"], true, "the backup cannot recognise the primary's message");
        app.running.stop().await;
    }
}

#[tokio::test]
async fn the_circuit_opens_after_failures_in_a_row_and_closes_once_the_primary_answers() {
    let db = TestDb::new(common::Backend::Sqlite).await;
    let (primary, backup) = (FakeSms::start().await, FakeSms::start().await);
    for n in ["+9779800000301", "+9779800000302"] {
        primary.script(n, vec![Reply::status(503, json!({"error": "down"}))]);
    }
    let clock = TestClock::at("2026-11-30T10:00:00Z");
    let app = TestApp::new(&db)
        .with_clock(clock.clone())
        .with_toml(&failover_toml(&primary.url, &backup.url, 2, ""))
        .spawn()
        .await;
    let readyz = || async { app.get("/readyz").await.1 };
    assert_eq!(readyz().await["providers"], json!({"primary": "closed", "backup": "closed"}));
    for (n, number) in ["+9779800000301", "+9779800000302"].iter().enumerate() {
        let (_, b, _) = app.post_event(&sms_event(&format!("PO-CB{n}"), number), None).await;
        // The retry is due by the test's clock: move it on once the first try failed.
        let id = id_of(&b);
        let it = common::eventually("the first try to be recorded", || async {
            let it = app.get(&format!("/v1/intents/{id}")).await.1;
            (it["state"] == "queued" && !it["attempts"][0]["finished_at"].is_null()).then_some(it)
        })
        .await;
        assert_eq!(it["attempts"][0]["provider_status"], 503, "{it}");
        clock.set(&format!("2026-11-30T10:00:0{}Z", n + 1));
        let it = app.wait_state(&id_of(&b), &["sent"]).await;
        assert_eq!(providers_of(&it), ["primary", "backup"], "{it}");
    }
    assert_eq!(readyz().await["providers"]["primary"], "open");
    let metrics = app.client.get(format!("{}/metrics", app.base)).send().await.unwrap().text().await.unwrap();
    // The metrics recorder is one per test process, and the other tests here
    // name their providers "primary" too: the gauge may already show another
    // test's breaker, so check the counter of openings, which only rises.
    assert!(metrics.contains("herald_provider_circuit_opened_total{provider=\"primary\"}"), "{metrics}");
    assert!(metrics.contains("herald_provider_circuit_open{provider=\"primary\"}"), "{metrics}");
    // Open: a new intent goes straight to the backup; the primary is not called.
    let healthy = "+9779800000303";
    let (_, b, _) = app.post_event(&sms_event("PO-CB2", healthy), None).await;
    let it = app.wait_state(&id_of(&b), &["sent"]).await;
    assert_eq!(providers_of(&it), ["backup"], "{it}");
    assert!(primary.sent_to(healthy).is_empty());
    // After the cool-down the primary is tried again, answers, and the circuit closes.
    clock.set("2026-11-30T10:00:31Z");
    assert_eq!(readyz().await["providers"]["primary"], "half_open");
    let healthy = "+9779800000304";
    let (_, b, _) = app.post_event(&sms_event("PO-CB3", healthy), None).await;
    let it = app.wait_state(&id_of(&b), &["sent"]).await;
    assert_eq!(providers_of(&it), ["primary"], "{it}");
    assert_eq!(readyz().await["providers"]["primary"], "closed");
    app.running.stop().await;
}

/// Two SMTP servers as `mail_primary` and `mail_backup` (names of their own:
/// the metrics of this test process are shared with the SMS tests above).
fn email_failover_toml(primary: &str, backup: &str) -> String {
    format!(
        "[channels.email]\nproviders = [\"mail_primary\", \"mail_backup\"]\nbreaker_failures = 100\n\
         [channels.email.named.mail_primary]\nsmtp_url = \"{primary}\"\nfrom = \"Herald <noreply@herald.test>\"\n\
         message_id_domain = \"herald.test\"\ntimeout = \"500ms\"\n\
         [channels.email.named.mail_backup]\nsmtp_url = \"{backup}\"\nfrom = \"Herald <noreply@herald.test>\"\n\
         message_id_domain = \"herald.test\"\ntimeout = \"500ms\"\n"
    )
}

fn email_event(entity: &str, email: &str) -> Value {
    let mut ev = sms_event(entity, "+15550000100");
    ev["recipients"] = json!([{"id": format!("u-{entity}"), "email": email}]);
    ev["channels"] = json!(["email"]);
    ev
}

#[tokio::test]
async fn an_smtp_primary_refusing_connections_sends_mail_through_the_backup() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let backup = FakeSmtp::start().await;
        let closed = closed_port_url().replace("http://", "smtp://").replace("/sms", "");
        let app = TestApp::new(&db).with_toml(&email_failover_toml(&closed, &backup.url)).spawn().await;
        for n in 0..2 {
            let address = format!("fo{n}@example.com");
            let (s, b, _) = app.post_event(&email_event(&format!("PO-EFO{n}"), &address), None).await;
            assert_eq!(s, 202, "{b}");
            let it = app.wait_state(&id_of(&b), &["sent"]).await;
            assert_eq!(providers_of(&it), ["mail_primary", "mail_backup"], "{backend:?}: {it}");
            assert_eq!(it["attempts"][0]["error_class"], "unreachable");
            let mails = backup.to(&address);
            assert_eq!(mails.len(), 1);
            let message_id = format!("<{}@herald.test>", it["key"].as_str().unwrap());
            assert_eq!(mails[0].header("Message-ID"), Some(message_id), "the same intent key, frozen content");
        }
        app.running.stop().await;
    }
}

#[tokio::test]
async fn after_an_smtp_answer_never_came_the_retry_stays_on_the_primary() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let (primary, backup) = (FakeSmtp::start().await, FakeSmtp::start().await);
        // The first session takes the message and never answers: `unknown`.
        primary.stall(&[SilentAfter::Message]);
        let app = TestApp::new(&db).with_toml(&email_failover_toml(&primary.url, &backup.url)).spawn().await;
        let address = "stay@example.com";
        let (_, b, _) = app.post_event(&email_event("PO-EFO-T", address), None).await;
        let it = app.wait_state(&id_of(&b), &["sent"]).await;
        assert_eq!(providers_of(&it), ["mail_primary", "mail_primary"], "{backend:?}: {it}");
        assert_eq!(it["attempts"][0]["outcome"], "unknown");
        assert_eq!(it["attempts"][1]["possible_duplicate"], false, "the same Message-ID: the server can tell");
        assert!(backup.to(address).is_empty(), "nothing went to the backup");
        let copies = primary.to(address);
        assert_eq!(copies.len(), 2);
        assert_eq!(copies[0].header("Message-ID"), copies[1].header("Message-ID"));
        app.running.stop().await;
    }
}
