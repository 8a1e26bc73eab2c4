//! Security properties end to end: event data cannot forge header lines on any
//! channel, and webhooks never reach loopback, private or link-local addresses
//! unless the deployment opts in.

mod common;

use common::smtp::FakeSmtp;
use common::{Backend, FakeSms, TestApp, TestDb, sms_event};
use serde_json::{Value, json};

/// A name that tries to end the subject line and start a forged header.
const FORGED: &str = "Asha\r\nBcc: mallory@evil.example\r\nX-Injected: yes";

fn id_of(body: &Value) -> String {
    body["intents"][0]["id"].as_str().unwrap().to_string()
}

/// The example event for one recipient on one channel, with an approver name
/// that carries CR/LF into the subject, the SMS and the webhook body.
fn forged_event(entity: &str, recipient: Value, channel: &str) -> Value {
    let mut ev = sms_event(entity, "+15550000400");
    ev["data"]["approver"]["name"] = json!(FORGED);
    ev["recipients"] = json!([recipient]);
    ev["channels"] = json!([channel]);
    ev
}

/// The header block of a message: its lines up to the first empty one.
fn header_lines(text: &str) -> Vec<String> {
    text.split('\n').map(|l| l.trim_end_matches('\r').to_string()).take_while(|l| !l.is_empty()).collect()
}

fn assert_no_forged_header(head: &[String]) {
    // A line starting with white space continues (folds) the one before it.
    for line in head.iter().filter(|l| !l.starts_with([' ', '\t'])) {
        let name = line.split(':').next().unwrap_or_default().trim().to_ascii_lowercase();
        assert!(name != "bcc" && name != "x-injected", "a forged header line: {line:?} in {head:#?}");
    }
}

#[tokio::test]
async fn crlf_in_event_data_cannot_forge_a_header_in_the_directory_sink() {
    let db = TestDb::new(Backend::Sqlite).await;
    let outbox = tempfile::tempdir().unwrap();
    let toml = format!("[channels.email]\nsink = {:?}\ntimeout = \"1s\"\n", outbox.path().display().to_string());
    let app = TestApp::new(&db).with_toml(&toml).spawn().await;
    let ev = forged_event("PO-CRLF-SINK", json!({"id": "u-sink", "email": "asha@example.com"}), "email");
    let (s, b, _) = app.post_event(&ev, None).await;
    assert_eq!(s, 202, "{b}");
    let it = app.wait_state(&id_of(&b), &["sent"]).await;
    let file = outbox.path().join(format!("{}.email.txt", it["key"].as_str().unwrap()));
    let text = std::fs::read_to_string(&file).unwrap();
    let head = header_lines(&text);
    assert_no_forged_header(&head);
    let subject: Vec<_> = head.iter().filter(|l| l.starts_with("Subject:")).collect();
    assert_eq!(subject.len(), 1, "{head:#?}");
    assert!(subject[0].contains("Asha") && subject[0].contains("mallory@evil.example"), "the text stays, on one line");
    app.running.stop().await;
}

#[tokio::test]
async fn crlf_in_event_data_cannot_forge_a_header_over_smtp() {
    let db = TestDb::new(Backend::Sqlite).await;
    let smtp = FakeSmtp::start().await;
    let toml = format!(
        "[channels.email]\nsmtp_url = \"{}\"\nfrom = \"Herald <noreply@herald.test>\"\ntimeout = \"1s\"\n",
        smtp.url
    );
    let app = TestApp::new(&db).with_toml(&toml).spawn().await;
    let ev = forged_event("PO-CRLF-SMTP", json!({"id": "u-smtp", "email": "asha@example.com"}), "email");
    let (_, b, _) = app.post_event(&ev, None).await;
    app.wait_state(&id_of(&b), &["sent"]).await;
    let mails = smtp.to("asha@example.com");
    assert_eq!(mails.len(), 1);
    assert_eq!(mails[0].to, vec!["asha@example.com".to_string()], "no forged recipient reached the envelope");
    let head: Vec<String> = mails[0].raw.split("\r\n\r\n").next().unwrap().split("\r\n").map(String::from).collect();
    assert_no_forged_header(&head);
    assert!(mails[0].header("bcc").is_none() && mails[0].header("x-injected").is_none());
    app.running.stop().await;
}

#[tokio::test]
async fn crlf_in_event_data_stays_inside_the_sms_json() {
    let db = TestDb::new(Backend::Sqlite).await;
    let sms = FakeSms::start().await;
    let app = TestApp::new(&db).with_sms(&sms).spawn().await;
    let phone = "+15550000401";
    let ev = forged_event("PO-CRLF-SMS", json!({"id": "u-sms", "phone": phone}), "sms");
    let (_, b, _) = app.post_event(&ev, None).await;
    app.wait_state(&id_of(&b), &["sent"]).await;
    let got = sms.sent_to(phone);
    assert_eq!(got.len(), 1);
    // The CR/LF arrive as characters of the JSON string, never as the end of a line.
    assert!(got[0].body["body"].as_str().unwrap().contains(FORGED), "{}", got[0].body);
    assert!(!got[0].header_names.iter().any(|h| h == "bcc" || h == "x-injected"), "{:?}", got[0].header_names);
    app.running.stop().await;
}
