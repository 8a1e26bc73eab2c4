//! A fake SNS for the tests: it signs messages the way SNS does (with the
//! test-only key in `tests/fixtures/sns/`), serves its certificate, counting
//! the fetches, and records subscription confirmations.

use axum::extract::{Query, State};
use base64::Engine;
use rsa::RsaPrivateKey;
use rsa::pkcs1v15::SigningKey;
use rsa::pkcs8::DecodePrivateKey;
use rsa::signature::{SignatureEncoding, Signer};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub const TOPIC: &str = "arn:aws:sns:eu-west-1:123456789012:herald-ses";
pub const CERT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/sns/signing-cert.pem");
const KEY: &str = include_str!("../fixtures/sns/signing-key.pem");
const OTHER_KEY: &str = include_str!("../fixtures/sns/other-key.pem");

#[derive(Default)]
struct Seen {
    cert_fetches: usize,
    confirmations: Vec<HashMap<String, String>>,
}

#[derive(Clone)]
pub struct FakeSns {
    pub base: String,
    seen: Arc<Mutex<Seen>>,
}

impl FakeSns {
    pub async fn start() -> FakeSns {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let app = axum::Router::new()
            .route("/cert.pem", axum::routing::get(cert))
            .route("/confirm", axum::routing::get(confirm))
            .with_state(seen.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeSns { base, seen }
    }

    pub fn cert_fetches(&self) -> usize {
        self.seen.lock().unwrap().cert_fetches
    }

    pub fn confirmations(&self) -> Vec<HashMap<String, String>> {
        self.seen.lock().unwrap().confirmations.clone()
    }
}

async fn cert(State(seen): State<Arc<Mutex<Seen>>>) -> String {
    seen.lock().unwrap().cert_fetches += 1;
    std::fs::read_to_string(CERT).unwrap()
}

async fn confirm(State(seen): State<Arc<Mutex<Seen>>>, Query(q): Query<HashMap<String, String>>) -> &'static str {
    seen.lock().unwrap().confirmations.push(q);
    "<ConfirmSubscriptionResponse/>"
}

/// Who signs, and how.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum By {
    V1,
    V2,
    /// SignatureVersion 2, by a key that is not the certificate's.
    Impostor,
}

/// An SNS Notification carrying `message` (SES's JSON), signed.
pub fn notification(message: &Value, message_id: &str, cert_url: &str, how: By) -> Value {
    notification_at(message, message_id, cert_url, how, jiff::Timestamp::now())
}

/// The same, sent by SNS at `at`.
pub fn notification_at(message: &Value, message_id: &str, cert_url: &str, how: By, at: jiff::Timestamp) -> Value {
    let mut m = json!({
        "Type": "Notification",
        "MessageId": message_id,
        "TopicArn": TOPIC,
        "Message": message.to_string(),
        "Timestamp": format!("{at:.3}"),
        "SigningCertURL": cert_url,
        "UnsubscribeURL": "https://sns.eu-west-1.amazonaws.com/?Action=Unsubscribe",
    });
    sign(&mut m, how);
    m
}

/// A SubscriptionConfirmation whose SubscribeURL is `subscribe_url`.
pub fn confirmation(subscribe_url: &str, cert_url: &str) -> Value {
    let mut m = json!({
        "Type": "SubscriptionConfirmation",
        "MessageId": "c-1",
        "Token": "token-1",
        "TopicArn": TOPIC,
        "Message": "You have chosen to subscribe to the topic. To confirm, visit the SubscribeURL.",
        "SubscribeURL": subscribe_url,
        "Timestamp": format!("{:.3}", jiff::Timestamp::now()),
        "SigningCertURL": cert_url,
    });
    sign(&mut m, By::V2);
    m
}

/// Signs `m` as SNS does, over the fields its type signs (in order); call
/// again after changing a field to re-sign it.
pub fn sign(m: &mut Value, how: By) {
    let fields: &[&str] = match m["Type"].as_str().unwrap() {
        "Notification" => &["Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"],
        _ => &["Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type"],
    };
    let text: String = fields.iter().filter_map(|f| m[*f].as_str().map(|v| format!("{f}\n{v}\n"))).collect();
    let key = RsaPrivateKey::from_pkcs8_pem(if how == By::Impostor { OTHER_KEY } else { KEY }).unwrap();
    let signature = match how {
        By::V1 => SigningKey::<sha1::Sha1>::new(key).sign(text.as_bytes()).to_vec(),
        _ => SigningKey::<sha2::Sha256>::new(key).sign(text.as_bytes()).to_vec(),
    };
    m["SignatureVersion"] = json!(if how == By::V1 { "1" } else { "2" });
    m["Signature"] = json!(base64::engine::general_purpose::STANDARD.encode(signature));
}

/// SES's notification of `kind` about the message SES knows as `ses_id`,
/// whose own Message-ID header was `message_id`.
pub fn ses_message(kind: &str, ses_id: &str, message_id: &str, address: &str) -> Value {
    let mail = json!({
        "timestamp": "2026-11-30T09:59:58.000Z",
        "source": "noreply@herald.test",
        "messageId": ses_id,
        "destination": [address],
        "headersTruncated": false,
        "headers": [{"name": "Message-ID", "value": message_id}, {"name": "To", "value": address}],
        "commonHeaders": {"to": [address], "subject": "PO approved"},
    });
    match kind {
        "Bounce" => json!({"notificationType": "Bounce", "mail": mail, "bounce": {
            "bounceType": "Permanent", "bounceSubType": "General", "feedbackId": "f-1",
            "timestamp": "2026-11-30T10:00:00.000Z",
            "bouncedRecipients": [{"emailAddress": address, "action": "failed", "status": "5.1.1",
                                   "diagnosticCode": format!("smtp; 550 5.1.1 <{address}>: user unknown")}]}}),
        "Complaint" => json!({"notificationType": "Complaint", "mail": mail, "complaint": {
            "complainedRecipients": [{"emailAddress": address}], "complaintFeedbackType": "abuse",
            "timestamp": "2026-11-30T10:00:00.000Z", "feedbackId": "f-2"}}),
        _ => json!({"notificationType": "Delivery", "mail": mail, "delivery": {
            "timestamp": "2026-11-30T10:00:00.000Z", "recipients": [address],
            "smtpResponse": "250 2.6.0 Message received", "processingTimeMillis": 500}}),
    }
}
