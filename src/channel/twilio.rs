//! SMS through Twilio's Messages API (and gateways compatible with it):
//! `POST {base_url}/2010-04-01/Accounts/{sid}/Messages.json`, form-encoded,
//! HTTP Basic auth with the account SID and auth token.
//!
//! Twilio documents no idempotency key for creating a message, so a retry
//! after an `unknown` outcome cannot be recognised on its side: the worker
//! records such a retry as a possible duplicate ([`Provider::dedupes_retries`]).
//! The `StatusCallback` names the intent, so a delivery receipt still finds
//! the intent when the attempt that sent it never learnt the message's SID.

use super::{Delivery, Outcome, Provider, clean_id, http, short_error};
use crate::intent::Reason;
use crate::recipient::Kind;
use async_trait::async_trait;
use serde_json::Value;
use std::time::Duration;

/// Twilio's error codes that say the number itself is wrong or cannot take
/// an SMS: 21211 invalid `To`, 21217 and 21401 not a valid number, 21407 a
/// number Twilio does not serve, 21421 an invalid phone number, 21612 not
/// reachable by SMS, 21614 not a mobile number. Retrying cannot help.
const INVALID_NUMBER: [u64; 7] = [21211, 21217, 21401, 21407, 21421, 21612, 21614];

/// Who the messages are from: a sender, or a messaging service that picks one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sender {
    From(String),
    MessagingService(String),
}

pub struct Twilio {
    client: reqwest::Client,
    /// `{base_url}/2010-04-01/Accounts/{sid}/Messages.json`
    endpoint: String,
    account_sid: String,
    auth_token: String,
    sender: Sender,
    /// `{public_url}/v1/receipts/twilio`
    callback: String,
    timeout: Duration,
}

pub struct TwilioSettings {
    pub base_url: String,
    pub account_sid: String,
    pub auth_token: String,
    pub sender: Sender,
    /// Herald's own base URL as Twilio reaches it.
    pub public_base: String,
    pub timeout: Duration,
}

impl Twilio {
    pub fn new(s: TwilioSettings) -> Result<Twilio, reqwest::Error> {
        let base = s.base_url.trim_end_matches('/');
        Ok(Twilio {
            client: http::client(s.timeout)?,
            endpoint: format!("{base}/2010-04-01/Accounts/{}/Messages.json", s.account_sid),
            account_sid: s.account_sid,
            auth_token: s.auth_token,
            sender: s.sender,
            callback: format!("{}/v1/receipts/twilio", s.public_base.trim_end_matches('/')),
            timeout: s.timeout,
        })
    }

    /// The receipt URL of one intent.
    pub fn status_callback(&self, key: &str) -> String {
        format!("{}?key={key}", self.callback)
    }
}

#[async_trait]
impl Provider for Twilio {
    fn name(&self) -> &str {
        "twilio"
    }

    /// Message creation takes no idempotency key.
    fn dedupes_retries(&self) -> bool {
        false
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }

    async fn send(&self, d: &Delivery) -> Outcome {
        self.call(d).await.redacted(Kind::Phone, d.destination.as_deref())
    }
}

impl Twilio {
    /// One call; [`Provider::send`] keeps the destination out of its error text.
    async fn call(&self, d: &Delivery) -> Outcome {
        let Some(to) = &d.destination else {
            return Outcome::Permanent { reason: Reason::NoDestination, status: None, error: "no phone number".into() };
        };
        let callback = self.status_callback(&d.key);
        let (sender_field, sender) = match &self.sender {
            Sender::From(from) => ("From", from.as_str()),
            Sender::MessagingService(sid) => ("MessagingServiceSid", sid.as_str()),
        };
        let form = [
            ("To", to.as_str()),
            (sender_field, sender),
            ("Body", d.content.body.as_str()),
            ("StatusCallback", callback.as_str()),
        ];
        let req = self.client.post(&self.endpoint).basic_auth(&self.account_sid, Some(&self.auth_token)).form(&form);
        match http::send(req, d.deadline).await {
            Ok(resp) => classify_response(resp, d.deadline).await,
            Err(outcome) => outcome,
        }
    }
}

async fn classify_response(resp: reqwest::Response, deadline: tokio::time::Instant) -> Outcome {
    let status = resp.status();
    let code = Some(status.as_u16());
    let retry_after = http::retry_after(&resp);
    // A 2xx whose body is lost is still accepted: only the SID is missing,
    // and the status callback names the intent anyway.
    let text = http::body(resp, deadline).await.unwrap_or_default();
    let json: Option<Value> = serde_json::from_str(&text).ok();
    if status.is_success() {
        let sid = json.as_ref().and_then(|j| j.get("sid")).and_then(Value::as_str).and_then(clean_id);
        return Outcome::Accepted { status: code, message_id: sid };
    }
    let twilio_code = json.as_ref().and_then(|j| j.get("code")).and_then(Value::as_u64);
    let message = json.as_ref().and_then(|j| j.get("message")).and_then(Value::as_str);
    let error = short_error(&match (twilio_code, message) {
        (Some(c), Some(m)) => format!("HTTP {}: Twilio error {c}: {m}", status.as_u16()),
        _ => format!("HTTP {}: {text}", status.as_u16()),
    });
    if status.as_u16() == 429 {
        return Outcome::Retryable { class: Reason::Throttled, status: code, error, retry_after };
    }
    if status.is_server_error() {
        return Outcome::Retryable { class: Reason::Provider5xx, status: code, error, retry_after };
    }
    let reason = match twilio_code {
        Some(c) if INVALID_NUMBER.contains(&c) => Reason::InvalidDestination,
        _ => Reason::Rejected,
    };
    Outcome::Permanent { reason, status: code, error }
}
