//! The SMS provider over HTTP (DESIGN §5): `POST {url}` with the message and
//! `Idempotency-Key: KEY`, so a retry after an unknown outcome is safe wherever
//! the provider honours it.

use super::{Delivery, Outcome, Provider, clean_id, parse_retry_after, short_error};
use crate::intent::Reason;
use async_trait::async_trait;
use serde_json::{Value, json};
use std::time::Duration;

pub struct SmsHttp {
    client: reqwest::Client,
    url: String,
    auth_token: Option<String>,
}

impl SmsHttp {
    pub fn new(url: String, auth_token: Option<String>, timeout: Duration) -> Result<SmsHttp, reqwest::Error> {
        let client =
            reqwest::Client::builder().timeout(timeout).connect_timeout(timeout.min(Duration::from_secs(5))).build()?;
        Ok(SmsHttp { client, url, auth_token })
    }
}

#[async_trait]
impl Provider for SmsHttp {
    async fn send(&self, d: &Delivery) -> Outcome {
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
        match req.send().await {
            Ok(resp) => classify_response(resp).await,
            Err(e) => classify_error(&e),
        }
    }
}

/// A transport error: refused before anything was sent is retryable; a timeout
/// or a broken connection after the request left is unknown (DESIGN rule 8).
pub fn classify_error(e: &reqwest::Error) -> Outcome {
    if e.is_connect() {
        return Outcome::Retryable {
            class: Reason::Unreachable,
            status: None,
            error: short_error(&format!("connection failed: {e}")),
            retry_after: None,
        };
    }
    let what =
        if e.is_timeout() { "timed out after the request was sent" } else { "failed after the request was sent" };
    Outcome::Unknown { error: short_error(&format!("{what}: {e}")) }
}

async fn classify_response(resp: reqwest::Response) -> Outcome {
    let status = resp.status();
    let code = Some(status.as_u16());
    let retry_after = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| parse_retry_after(v, jiff::Timestamp::now()));
    let text = match resp.text().await {
        Ok(t) => t,
        // The provider answered with a status; only its body was lost.
        Err(e) if status.is_success() => {
            return Outcome::Accepted { status: code, message_id: None }.with_note(&e);
        }
        Err(e) => e.to_string(),
    };
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

impl Outcome {
    fn with_note(self, e: &reqwest::Error) -> Outcome {
        tracing::warn!(error = %e, "provider accepted the message but its response body could not be read");
        self
    }
}
