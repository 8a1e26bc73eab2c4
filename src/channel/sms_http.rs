//! The SMS provider over HTTP (DESIGN §5): `POST {url}` with the message and
//! `Idempotency-Key: KEY`, so a retry after an unknown outcome is safe wherever
//! the provider honours it.

use super::{Delivery, Outcome, Provider, clean_id, http, short_error};
use crate::intent::Reason;
use crate::recipient::Kind;
use async_trait::async_trait;
use serde_json::{Value, json};
use std::time::Duration;

pub struct SmsHttp {
    client: reqwest::Client,
    url: String,
    auth_token: Option<String>,
    timeout: Duration,
}

impl SmsHttp {
    pub fn new(url: String, auth_token: Option<String>, timeout: Duration) -> Result<SmsHttp, reqwest::Error> {
        Ok(SmsHttp { client: http::client(timeout)?, url, auth_token, timeout })
    }
}

#[async_trait]
impl Provider for SmsHttp {
    fn name(&self) -> &str {
        "http"
    }

    /// `Idempotency-Key: KEY` on every try.
    fn dedupes_retries(&self) -> bool {
        true
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }

    async fn send(&self, d: &Delivery) -> Outcome {
        self.call(d).await.redacted(Kind::Phone, d.destination.as_deref())
    }
}

impl SmsHttp {
    /// One call; [`Provider::send`] keeps the destination out of its error text.
    async fn call(&self, d: &Delivery) -> Outcome {
        let Some(to) = &d.destination else {
            return Outcome::Permanent { reason: Reason::NoDestination, status: None, error: "no phone number".into() };
        };
        let body = json!({
            "to": to,
            "body": d.content.body,
            "encoding": d.content.encoding,
            "segments": d.content.segments,
        });
        let mut req = self.client.post(&self.url).header("Idempotency-Key", &d.key).json(&body);
        if let Some(token) = &self.auth_token {
            req = req.bearer_auth(token);
        }
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
    // A 2xx whose body is lost is still accepted: only the provider's id is missing.
    let text = http::body(resp, deadline).await.unwrap_or_default();
    let json: Option<Value> = serde_json::from_str(&text).ok();
    if status.is_success() {
        let message_id = json.as_ref().and_then(|j| j.get("id")).and_then(|v| match v {
            Value::String(s) => clean_id(s),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        });
        return Outcome::Accepted { status: code, message_id };
    }
    let error = short_error(&format!("HTTP {}: {text}", status.as_u16()));
    if status.as_u16() == 429 {
        return Outcome::Retryable { class: Reason::Throttled, status: code, error, retry_after };
    }
    if status.is_server_error() {
        return Outcome::Retryable { class: Reason::Provider5xx, status: code, error, retry_after };
    }
    let invalid = json.as_ref().and_then(|j| j.get("error")).and_then(Value::as_str) == Some("invalid_destination");
    let reason = if invalid { Reason::InvalidDestination } else { Reason::Rejected };
    Outcome::Permanent { reason, status: code, error }
}
