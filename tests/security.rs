//! Security properties end to end: event data cannot forge header lines on any
//! channel, and webhooks never reach loopback, private or link-local addresses
//! unless the deployment opts in.

mod common;
#[path = "console/support.rs"]
mod support;

use common::smtp::FakeSmtp;
use common::webhook::FakeReceiver;
use common::{Backend, FakeSms, TestApp, TestDb, backends, execute, sms_event};
use herald::channel::destination::{DestinationPolicy, Lookup};
use herald::channel::webhook::Webhook;
use herald::channel::{Delivery, Outcome, Provider};
use herald::intent::Reason;
use herald::render::Content;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
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

/// The directory sink's message id was the file's full path on the server
/// (`/tmp/…/outbox/KEY.email.txt`), shown to every reader of the intent: it
/// is the file's name only.
#[tokio::test]
async fn an_attempt_through_the_directory_sink_shows_no_server_path() {
    let db = TestDb::new(Backend::Sqlite).await;
    let outbox = tempfile::tempdir().unwrap();
    let toml = format!("[channels.email]\nsink = {:?}\ntimeout = \"1s\"\n", outbox.path().display().to_string());
    let app = TestApp::new(&db).with_toml(&toml).spawn().await;
    let mut ev = forged_event("PO-SINK-PATH", json!({"id": "u-sink", "email": "asha@example.com"}), "email");
    ev["data"]["approver"]["name"] = json!("Asha");
    let (s, b, _) = app.post_event(&ev, None).await;
    assert_eq!(s, 202, "{b}");
    let it = app.wait_state(&id_of(&b), &["sent"]).await;
    let file = format!("{}.email.txt", it["key"].as_str().unwrap());
    assert_eq!(it["attempts"][0]["provider_message_id"], file.as_str(), "{it}");
    assert!(outbox.path().join(&file).exists());
    assert!(!it.to_string().contains(&outbox.path().display().to_string()), "{it}");
    app.running.stop().await;
}

/// An attempt stored before the sink named only the file still holds the
/// server's full path: every view (the API, `herald why`, the console) shows
/// only the file's name.
#[tokio::test]
async fn an_attempt_stored_with_the_sinks_old_server_path_shows_only_the_file_name() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let outbox = tempfile::tempdir().unwrap();
        let toml = format!("[channels.email]\nsink = {:?}\ntimeout = \"1s\"\n", outbox.path().display().to_string());
        let app = TestApp::new(&db).with_toml(&toml).spawn().await;
        let mut ev = forged_event("PO-SINK-OLD", json!({"id": "u-sink-old", "email": "asha@example.com"}), "email");
        ev["data"]["approver"]["name"] = json!("Asha");
        let (s, b, _) = app.post_event(&ev, None).await;
        assert_eq!(s, 202, "{b}");
        let id = id_of(&b);
        let it = app.wait_state(&id, &["sent"]).await;
        let key = it["key"].as_str().unwrap().to_string();
        let file = format!("{key}.email.txt");
        // As an older Herald stored it.
        let old = outbox.path().join(&file).display().to_string();
        execute(&db, &format!("UPDATE attempts SET provider_message_id = '{old}' WHERE intent_id = (SELECT id FROM intents WHERE key = '{key}')")).await;
        // The temporary directory's own name: no view may show it, escaped or not.
        let dir = outbox.path().file_name().unwrap().to_str().unwrap().to_string();

        let (_, it) = app.get(&format!("/v1/intents/{id}")).await;
        assert_eq!(it["attempts"][0]["provider_message_id"], file.as_str(), "{backend:?}: {it}");
        assert!(!it.to_string().contains(&dir), "{it}");
        let detail = db.store().await.intent_get("default", &id).await.unwrap().unwrap();
        assert_eq!(detail.attempts[0].provider_message_id.as_deref(), Some(old.as_str()), "the row is as doctored");
        let why = herald::why::timeline(("purchase_order", "PO-SINK-OLD"), "u-sink-old", &[detail]);
        assert!(why.contains(&format!("provider id {file}")) && !why.contains(&dir), "{why}");
        let mut user = support::User::new(&app.base);
        assert_eq!(user.sign_in("").await.status, 303);
        let page = user.get(&format!("/console/intents/{key}")).await;
        assert_eq!(page.status, 200, "{}", page.body);
        assert!(page.body.contains(&file) && !page.body.contains(&dir), "{}", page.body);
        app.running.stop().await;
    }
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
    // lettre would hide a CR/LF inside an RFC 2047 encoded word (so the lines
    // above could never show it); a mail reader decodes the word and gets a
    // subject that breaks its line. The subject as read must be one line.
    let subject = mails[0].decoded_header("subject").expect("a subject");
    assert_eq!(subject, "PO-CRLF-SMTP was approved by Asha  Bcc: mallory@evil.example  X-Injected: yes");
    app.running.stop().await;
}

/// A pin, not a guard that could catch a regression today: the body is JSON,
/// whose encoder escapes CR/LF in every string, and the only headers are the
/// ones Herald writes. It fails only if the SMS channel stops sending JSON.
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
/// A pin, like the SMS one: the body is JSON (CR/LF escaped by the encoder)
/// and the headers are Herald's own values; it fails only if that changes.
#[tokio::test]
async fn crlf_in_event_data_stays_inside_the_webhook_body() {
    let db = TestDb::new(Backend::Sqlite).await;
    let hooks = FakeReceiver::start(SECRET).await;
    let app = TestApp::new(&db).with_toml(&webhook_toml(true)).spawn().await;
    let url = format!("{}/hook/crlf", hooks.base);
    let ev = forged_event("PO-CRLF-HOOK", json!({"id": "u-hook", "webhook_url": url}), "webhook");
    let (_, b, _) = app.post_event(&ev, None).await;
    app.wait_state(&id_of(&b), &["sent"]).await;
    let got = hooks.received("crlf");
    assert_eq!(got.len(), 1);
    assert!(got[0].verified);
    assert_eq!(got[0].body["content"]["data"]["approver"]["name"], FORGED);
    // Headers carry only values Herald derives (the key, a timestamp, a signature).
    let mut names = got[0].header_names.clone();
    names.sort();
    let expected = ["content-length", "content-type", "host", "webhook-id", "webhook-signature", "webhook-timestamp"];
    assert_eq!(
        names.iter().filter(|n| !["accept", "accept-encoding"].contains(&n.as_str())).collect::<Vec<_>>(),
        expected.iter().collect::<Vec<_>>()
    );
    app.running.stop().await;
}

fn webhook_toml(allow_private: bool) -> String {
    let allow = if allow_private { "allow_private_destinations = true\n" } else { "" };
    format!("[channels.webhook]\nsecret = \"{SECRET}\"\ntimeout = \"1s\"\n{allow}")
}

/// Every way of writing an address inside the deployment that a URL parser accepts.
const INSIDE: [&str; 14] = [
    "http://127.0.0.1:9/hook",
    "http://169.254.169.254/latest/meta-data/",
    "http://10.0.0.5/hook",
    "http://192.168.1.1/hook",
    "http://[::1]/hook",
    "http://[::ffff:127.0.0.1]/hook",
    "http://0.0.0.0/hook",
    "http://[::]/hook",
    "http://2130706433/hook",
    "http://0177.0.0.1/hook",
    "http://localhost:8080/hook",
    "http://metrics.localhost/hook",
    "http://[fd12:3456::1]/hook",
    "http://224.0.0.251/hook",
];

#[tokio::test]
async fn a_webhook_url_pointing_inside_is_refused_at_input_naming_the_field() {
    let db = TestDb::new(Backend::Sqlite).await;
    let app = TestApp::new(&db).with_toml(&webhook_toml(false)).spawn().await;
    for url in INSIDE {
        let (s, e) = app.put("/v1/recipients/u-ssrf", &json!({"webhook_url": url})).await;
        let message = e["error"]["message"].as_str().unwrap_or_default();
        assert_eq!(s, 400, "{url}: {e}");
        assert!(message.starts_with("webhook_url:") && message.contains("allow_private_destinations"), "{e}");

        let mut ev = forged_event("PO-SSRF", json!({"id": "u-ssrf"}), "webhook");
        ev["recipients"] = json!([{"id": "u-ok"}, {"id": "u-ssrf", "webhook_url": url}]);
        let (s, e, _) = app.post_event(&ev, None).await;
        assert_eq!(s, 400, "{url}: {e}");
        assert!(e["error"]["message"].as_str().unwrap().starts_with("recipients[1].webhook_url:"), "{e}");
    }
    let (s, e) = app.put("/v1/recipients/u-ssrf", &json!({"webhook_url": "https://93.184.216.34/hook"})).await;
    assert_eq!(s, 200, "a public address is fine: {e}");
    app.running.stop().await;
}

#[tokio::test]
async fn a_stored_url_pointing_inside_dies_at_send_as_forbidden_destination() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let hooks = FakeReceiver::start(SECRET).await;
        let url = format!("{}/hook/inside", hooks.base);
        // Written while the deployment allowed private destinations...
        let app = TestApp::new(&db).with_toml(&webhook_toml(true)).spawn().await;
        assert_eq!(app.put("/v1/recipients/u-inside", &json!({"webhook_url": url})).await.0, 200);
        app.running.stop().await;
        // ...and sent after it stopped allowing them.
        let app = TestApp::new(&db).with_toml(&webhook_toml(false)).spawn().await;
        let mut ev = forged_event("PO-INSIDE", json!({"id": "u-inside"}), "webhook");
        ev["data"]["approver"]["name"] = json!("Asha");
        let (s, b, _) = app.post_event(&ev, None).await;
        assert_eq!(s, 202, "{b}");
        let it = app.wait_state(&id_of(&b), &["dead"]).await;
        assert_eq!(it["reason"], "forbidden_destination", "{backend:?}: {it}");
        let attempt = &it["attempts"][0];
        assert_eq!(
            (attempt["outcome"].as_str(), attempt["error_class"].as_str()),
            (Some("permanent"), Some("forbidden_destination"))
        );
        assert_eq!(it["attempts"].as_array().unwrap().len(), 1, "a refusal is not retried");
        assert!(hooks.received("inside").is_empty(), "nothing reached the address inside");
        app.running.stop().await;
    }
}

/// Answers a public address first and loopback afterwards: a rebinding DNS.
struct Rebinding(std::sync::atomic::AtomicUsize);

#[async_trait::async_trait]
impl Lookup for Rebinding {
    async fn lookup(&self, _name: &str) -> std::io::Result<Vec<std::net::IpAddr>> {
        let n = self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(vec![if n == 0 { "93.184.216.34" } else { "127.0.0.1" }.parse().unwrap()])
    }
}

#[tokio::test]
async fn a_name_that_rebinds_to_loopback_after_input_is_refused_on_the_connection() {
    let hooks = FakeReceiver::start(SECRET).await;
    let port = hooks.base.rsplit(':').next().unwrap();
    let url = format!("http://rebind.example:{port}/hook/rebound");
    let policy = DestinationPolicy::new(false, Arc::new(Rebinding(0.into())));
    assert_eq!(policy.check_input(&[("webhook_url".into(), url.clone())]).await, Ok(()), "public at input");
    let webhook = Webhook::new(SECRET, Duration::from_secs(1), &policy).unwrap();
    let outcome = webhook.send(&delivery(&url)).await;
    match outcome {
        Outcome::Permanent { reason: Reason::ForbiddenDestination, error, .. } => {
            assert!(error.contains("rebind.example resolves only to"), "{error}");
        }
        other => panic!("want a forbidden_destination refusal, got {other:?}"),
    }
    assert!(hooks.received("rebound").is_empty(), "the connection never reached loopback");
}

#[tokio::test]
async fn a_webhook_redirect_is_never_followed() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let hooks = FakeReceiver::start(SECRET).await;
        hooks.script("moved", &[307]);
        let app = TestApp::new(&db).with_toml(&webhook_toml(true)).spawn().await;
        let url = format!("{}/hook/moved", hooks.base);
        let mut ev = forged_event("PO-MOVED", json!({"id": "u-moved", "webhook_url": url}), "webhook");
        ev["data"]["approver"]["name"] = json!("Asha");
        let (_, b, _) = app.post_event(&ev, None).await;
        let it = app.wait_state(&id_of(&b), &["dead"]).await;
        assert_eq!(
            (it["reason"].as_str(), it["attempts"][0]["provider_status"].as_i64()),
            (Some("rejected"), Some(307))
        );
        assert_eq!(hooks.received("moved").len(), 1);
        assert!(hooks.received("moved-target").is_empty(), "{backend:?}: the redirect was followed");
        app.running.stop().await;
    }
}

fn delivery(url: &str) -> Delivery {
    Delivery {
        key: "0123456789abcdef0123456789abcdef".into(),
        tenant: "default".into(),
        recipient_id: "u-1".into(),
        destination: Some(url.into()),
        entity_type: "purchase_order".into(),
        entity_id: "PO-1".into(),
        entity_version: None,
        occurred_at: "2026-11-29T04:30:00.000000000Z".into(),
        event_type: "purchase_order.approved".into(),
        payload_digest: None,
        content: Content { subject: None, body: "{}".into(), html: None, encoding: None, segments: None },
        attempt: 1,
        deadline: tokio::time::Instant::now() + Duration::from_secs(1),
    }
}

/// The console's GET routes, as written in `src/console/mod.rs` (the
/// console is not in the OpenAPI document: it answers HTML).
fn console_get_routes() -> std::collections::BTreeSet<String> {
    let source = include_str!("../src/console/mod.rs");
    source
        .split(".route(\"")
        .skip(1)
        .filter_map(|rest| rest.split_once("\","))
        .filter(|(_, handlers)| handlers.trim_start().starts_with("get("))
        .map(|(path, _)| path.to_string())
        .collect()
}

/// Every GET route of the router, as written in `src/api/mod.rs`.
/// The GET routes, from the OpenAPI document the router is built from.
fn get_routes_in_the_router() -> std::collections::BTreeSet<String> {
    let doc = herald::api::openapi_document();
    doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(_, item)| item.get("get").is_some())
        .map(|(p, _)| p.clone())
        .collect()
}

#[tokio::test]
async fn no_json_endpoint_shows_a_raw_address_or_phone_number() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let (sms, smtp, hooks) = (FakeSms::start().await, FakeSmtp::start().await, FakeReceiver::start(SECRET).await);
        // Distinctive destinations, each refused with a reply that echoes it
        // (the way a peer writes it, not the way it was posted).
        let (email, phone) = ("walker.raw@example.org", "+15557654321");
        let (dir_email, dir_phone) = ("directory.raw@example.org", "+15551112222");
        let hook_url = format!("{}/hook/secret-walk-path", hooks.base);
        smtp.refuse(email, &["550 5.1.1 <Walker.Raw@EXAMPLE.org>: mailbox unavailable"]);
        smtp.refuse(dir_email, &["550 5.1.1 <directory.raw@example.org>: mailbox unavailable"]);
        sms.script(phone, vec![common::Reply::status(400, json!({"error": "+1 (555) 765-4321 is not assigned"}))]);
        // The receiver's refusal echoes the path ("Cannot POST /hook/secret-walk-path").
        hooks.script("secret-walk-path", &[410]);
        // Webhook URLs that never connect (.invalid does not resolve): the HTTP
        // client's error names the URL as it normalised it — host lowercased,
        // space escaped, dot segments gone — and with its user and password.
        let unreachable = [
            "https://Hook.Invalid/CaseSecretPath",
            "https://hook.invalid/a b/SpaceSecret",
            "https://u:pw@hook.invalid/x/UserinfoSecret",
            "https://hook.invalid/%7Esecret~tilde/../DotSecret",
        ];
        let toml = format!(
            "{}[channels.email]\nsmtp_url = \"{}\"\ntimeout = \"1s\"\n[ops]\ndigest_webhook = \"{}/hook/ops\"\n",
            webhook_toml(true),
            smtp.url,
            hooks.base
        );
        let app = TestApp::new(&db).with_sms(&sms).with_toml(&toml).spawn().await;
        let raw = [
            email,
            phone,
            &phone[1..],
            "765-4321",
            dir_email,
            dir_phone,
            &dir_phone[1..],
            &hook_url,
            "secret-walk-path",
            "CaseSecretPath",
            "SpaceSecret",
            "UserinfoSecret",
            "u:pw@",
            "DotSecret",
            "secret~tilde",
        ];
        let mut seen: Vec<(String, String)> = Vec::new();

        let put_body = json!({"email": dir_email, "phone": dir_phone, "webhook_url": hook_url});
        let (s, put) = app.put("/v1/recipients/u-walk-dir", &put_body).await;
        assert_eq!(s, 200, "{put}");
        seen.push(("PUT /v1/recipients/{id}".into(), put.to_string()));
        let mut ev = sms_event("PO-WALK", phone);
        ev["recipients"] =
            json!([{"id": "u-walk", "email": email, "phone": phone, "webhook_url": hook_url}, {"id": "u-walk-dir"}]);
        for (i, url) in unreachable.iter().enumerate() {
            ev["recipients"]
                .as_array_mut()
                .unwrap()
                .push(json!({"id": format!("u-walk-hook-{i}"), "webhook_url": url}));
        }
        ev["channels"] = json!(["email", "sms", "webhook", "in_app"]);
        let (s, posted, _) = app.post_event(&ev, None).await;
        assert_eq!(s, 202, "{posted}");
        seen.push(("POST /v1/events".into(), posted.to_string()));
        let ids: Vec<String> =
            posted["intents"].as_array().unwrap().iter().map(|i| i["id"].as_str().unwrap().into()).collect();
        for id in &ids {
            app.wait_state(id, &["dead", "sent", "suppressed"]).await;
        }

        // A bus message refused (its key reused with another event), as the
        // consumer records it: the whole event, inline addresses and all.
        let rejected_id = herald::store::RejectedMessage::id_of("walk", 1);
        let row = herald::store::RejectedMessage {
            id: rejected_id.clone(),
            tenant: "default".into(),
            stream: "walk".into(),
            consumer: "herald".into(),
            subject: "walk.events".into(),
            stream_seq: 1,
            deliveries: 1,
            status: 422,
            code: "idempotency_key_mismatch".into(),
            message: "this Idempotency-Key was used before with a different request body".into(),
            body: Some(ev.to_string()),
            created_at: 1_700_000_000_000_000,
        };
        db.store().await.rejected_record(row).await.unwrap();

        let paths: Vec<(&str, String)> = vec![
            ("/healthz", "/healthz".into()),
            ("/readyz", "/readyz".into()),
            ("/metrics", "/metrics".into()),
            ("/v1/openapi.json", "/v1/openapi.json".into()),
            ("/v1/dead-letters", "/v1/dead-letters".into()),
            ("/v1/dead-letters", "/v1/dead-letters?all_tenants=true".into()),
            ("/v1/dead-letters/summary", "/v1/dead-letters/summary".into()),
            ("/v1/intents", "/v1/intents?entity=purchase_order:PO-WALK".into()),
            ("/v1/intents/{id}", format!("/v1/intents/{}", ids[0])),
            ("/v1/recipients/{id}", "/v1/recipients/u-walk-dir".into()),
            ("/v1/recipients/{id}/preferences/{version}", "/v1/recipients/u-walk-dir/preferences/1".into()),
            ("/v1/recipients/{id}/inbox", "/v1/recipients/u-walk/inbox".into()),
            ("/v1/suppressions", "/v1/suppressions".into()),
            ("/v1/rejected", "/v1/rejected".into()),
            ("/v1/rejected/{id}", format!("/v1/rejected/{rejected_id}")),
            ("/v1/shadow/report", "/v1/shadow/report".into()),
        ];
        let listed: std::collections::BTreeSet<String> = paths.iter().map(|(route, _)| route.to_string()).collect();
        assert_eq!(listed, get_routes_in_the_router(), "a GET route this test does not walk (or walks in vain)");
        let mut walked = paths.clone();
        walked.extend(ids.iter().skip(1).map(|id| ("/v1/intents/{id}", format!("/v1/intents/{id}"))));
        for (route, path) in walked {
            let resp = app.client.get(format!("{}{path}", app.base)).send().await.unwrap();
            assert_eq!(resp.status(), 200, "{path}");
            seen.push((route.to_string(), resp.text().await.unwrap()));
        }
        // The console's pages, as the local operator (no tokens) reads them.
        let mut user = support::User::new(&app.base);
        let form = user.get("/console/sign-in").await;
        assert_eq!(user.post("/console/sign-in", &[("csrf", &form.csrf())]).await.status, 303);
        seen.push(("/console/sign-in".into(), form.body));
        let console: Vec<(&str, String, u16)> = vec![
            ("/console", "/console".into(), 303),
            ("/console/", "/console/".into(), 303),
            ("/console/console.css", "/console/console.css".into(), 200),
            // Signed in, the form sends you on (its body is walked above).
            ("/console/sign-in", "/console/sign-in".into(), 303),
            ("/console/search", "/console/search?q=purchase_order%3APO-WALK".into(), 200),
            ("/console/search", "/console/search?q=u-walk&by=recipient".into(), 200),
            ("/console/intents/{key}", format!("/console/intents/{}", ids[0]), 200),
            ("/console/dead-letters", "/console/dead-letters".into(), 200),
            ("/console/dead-letters/replay", format!("/console/dead-letters/replay?id={}", ids[0]), 200),
            ("/console/dead-letters/replay", "/console/dead-letters/replay?reason=hard_bounce".into(), 200),
            ("/console/templates", "/console/templates".into(), 200),
            ("/console/health", "/console/health".into(), 200),
            ("/console/{*rest}", "/console/no-such-page".into(), 404),
        ];
        let listed: std::collections::BTreeSet<String> =
            console.iter().map(|(route, _, _)| route.to_string()).collect();
        assert_eq!(listed, console_get_routes(), "a console GET route this test does not walk (or walks in vain)");
        let mut walked = console.clone();
        walked.extend(ids.iter().skip(1).map(|id| ("/console/intents/{key}", format!("/console/intents/{id}"), 200)));
        for (route, path, status) in walked {
            let page = user.get(&path).await;
            assert_eq!(page.status, status, "{path}: {}", page.body);
            seen.push((route.to_string(), page.body));
        }
        let dead = app.get("/v1/dead-letters").await.1;
        assert_eq!(
            dead["dead_letters"].as_array().unwrap().len(),
            5 + unreachable.len(),
            "{backend:?}: every refusal is a dead letter: {dead}"
        );
        let errors: Vec<&str> = (dead["dead_letters"].as_array().unwrap().iter())
            .flat_map(|d| d["attempts"].as_array().unwrap().iter().filter_map(|a| a["error"].as_str()))
            .collect();
        assert!(errors.iter().any(|e| e.contains("Cannot POST")), "the receiver's own text is kept: {errors:?}");
        let digest = app.client.post(format!("{}/v1/ops/dlq-digest", app.base)).send().await.unwrap();
        assert_eq!(digest.status(), 200);
        seen.push(("POST /v1/ops/dlq-digest".into(), digest.text().await.unwrap()));
        let replay = app.client.post(format!("{}/v1/dead-letters/replay", app.base)).json(&json!({"ids": ids})).send();
        seen.push(("POST /v1/dead-letters/replay".into(), replay.await.unwrap().text().await.unwrap()));
        for r in hooks.received("ops") {
            seen.push(("the digest on the ops webhook".into(), r.body.to_string()));
        }

        // `herald why` and `herald dlq show` print the same rows.
        let store = db.store().await;
        for id in &ids {
            let d = store.intent_get("default", id).await.unwrap().unwrap();
            seen.push(("herald dlq show".into(), herald::api::dead_letter_json(&d).to_string()));
            let who = (d.intent.entity_type.as_str(), d.intent.entity_id.as_str());
            let history = herald::why::history(store.as_ref(), "default", who, &d.intent.recipient_id).await.unwrap();
            seen.push(("herald why".into(), herald::why::timeline(who, &d.intent.recipient_id, &history)));
        }
        for (what, body) in &seen {
            let lower = body.to_lowercase();
            for needle in raw {
                assert!(
                    !lower.contains(&needle.to_lowercase()),
                    "{backend:?}: {what} shows {needle:?} in the clear:\n{body}"
                );
            }
        }
        assert!(seen.iter().any(|(_, b)| b.contains("w***@example.org")), "the masked form is shown");
        app.running.stop().await;
    }
}

/// A webhook URL is masked as a URL, whatever characters it holds: an `@`
/// in its path does not make it an email address.
#[tokio::test]
async fn a_webhook_url_is_masked_as_a_url_whatever_it_holds() {
    let db = TestDb::new(Backend::Sqlite).await;
    let app = TestApp::new(&db).with_toml(&webhook_toml(true)).spawn().await;
    let url = "https://hooks.example.com/@/services/T0/B0/XSECRETX";
    let (s, put) = app.put("/v1/recipients/u-at", &json!({"webhook_url": url, "email": "a@example.com"})).await;
    assert_eq!(s, 200, "{put}");
    assert_eq!(put["webhook_url"], "https://hooks.example.com/***", "{put}");
    assert_eq!(put["email"], "a***@example.com", "{put}");
    let mut ev = forged_event("PO-AT", json!({"id": "u-at"}), "webhook");
    ev["data"]["approver"]["name"] = json!("Asha");
    let (_, b, _) = app.post_event(&ev, None).await;
    let it = app.get(&format!("/v1/intents/{}", id_of(&b))).await.1;
    assert_eq!(it["destination"], "https://hooks.example.com/***", "{it}");
    app.running.stop().await;
}

#[tokio::test]
async fn a_failed_digest_post_never_names_the_ops_webhook_url() {
    let db = TestDb::new(Backend::Sqlite).await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let digest = herald::ops::dlq_digest::OpsDigest {
        store: db.store().await,
        clock: Arc::new(herald::clock::SystemClock),
        webhook: Some(format!("http://{closed}/services/T000/B000/s3cr3t-hook")),
        at: "08:30".parse().unwrap(),
        tz: jiff::tz::TimeZone::UTC,
        client: reqwest::Client::new(),
    };
    let error = digest.post_now().await.unwrap_err().to_string();
    assert!(error.contains("did not accept") && !error.contains("s3cr3t-hook"), "{error}");
}
