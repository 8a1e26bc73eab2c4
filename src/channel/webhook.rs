//! Webhooks signed by the Standard Webhooks convention: `webhook-id` (the
//! intent key, so a receiver can drop a retry it has already processed),
//! `webhook-timestamp` and `webhook-signature: v1,<base64 HMAC-SHA256>` over
//! `id.timestamp.body`, keyed with the bytes of a `whsec_` secret.

use super::destination::{DestinationPolicy, refusal_in};
use super::{Delivery, Outcome, Provider, http, short_error};
use crate::intent::Reason;
use crate::recipient::Kind;
use async_trait::async_trait;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;
use std::time::Duration;

pub struct Webhook {
    client: reqwest::Client,
    key: Vec<u8>,
    policy: DestinationPolicy,
    timeout: Duration,
}

#[derive(Debug, thiserror::Error)]
#[error("channels.webhook.secret: {0}")]
pub struct SecretError(String);

/// The key bytes of a `whsec_<base64>` secret.
pub fn decode_secret(secret: &str) -> Result<Vec<u8>, SecretError> {
    let b64 = secret.strip_prefix("whsec_").ok_or_else(|| SecretError("must start with whsec_".into()))?;
    let key = STANDARD.decode(b64).map_err(|e| SecretError(format!("the part after whsec_ is not base64: {e}")))?;
    if key.len() < 16 {
        return Err(SecretError("must hold at least 16 bytes of key".into()));
    }
    Ok(key)
}

/// `v1,<base64 HMAC-SHA256(key, "{id}.{timestamp}.{body}")>`.
pub fn sign(key: &[u8], id: &str, timestamp: i64, body: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC accepts a key of any length");
    mac.update(format!("{id}.{timestamp}.{body}").as_bytes());
    format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
}

impl Webhook {
    /// A client that never follows a redirect and never goes through a proxy
    /// (which would resolve the name where the guard cannot see), and that
    /// connects only through the policy's guarded resolver.
    pub fn new(secret: &str, timeout: Duration, policy: &DestinationPolicy) -> Result<Webhook, SecretError> {
        let key = decode_secret(secret)?;
        let mut builder = reqwest::Client::builder()
            .connect_timeout(super::connect_timeout(timeout))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy();
        if let Some(resolver) = policy.resolver() {
            builder = builder.dns_resolver(resolver);
        }
        let client = builder.build().map_err(|e| SecretError(format!("cannot build the HTTP client: {e}")))?;
        Ok(Webhook { client, key, policy: policy.clone(), timeout })
    }

    /// `{type, entity, content, key}`; the content is the frozen rendering,
    /// parsed back into JSON when the template produced JSON.
    fn body(d: &Delivery) -> String {
        let content: Value =
            serde_json::from_str(&d.content.body).unwrap_or_else(|_| Value::String(d.content.body.clone()));
        json!({
            "type": d.event_type,
            "entity": {"type": d.entity_type, "id": d.entity_id, "version": d.entity_version},
            "content": content,
            "key": d.key,
        })
        .to_string()
    }
}

#[async_trait]
impl Provider for Webhook {
    fn name(&self) -> &str {
        "webhook"
    }

    /// `webhook-id` is the intent key on every try.
    fn dedupes_retries(&self) -> bool {
        true
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }

    async fn send(&self, d: &Delivery) -> Outcome {
        self.call(d).await.redacted(Kind::Url, d.destination.as_deref())
    }
}

impl Webhook {
    /// One call; [`Provider::send`] keeps the destination out of its error text.
    async fn call(&self, d: &Delivery) -> Outcome {
        let Some(url) = &d.destination else {
            return Outcome::Permanent { reason: Reason::NoDestination, status: None, error: "no webhook_url".into() };
        };
        let forbidden =
            |error: String| Outcome::Permanent { reason: Reason::ForbiddenDestination, status: None, error };
        if let Err(why) = self.policy.check_before_send(url) {
            return forbidden(why);
        }
        let body = Webhook::body(d);
        let timestamp = jiff::Timestamp::now().as_second();
        let signature = sign(&self.key, &d.key, timestamp, &body);
        let req = self
            .client
            .post(url)
            .header("content-type", "application/json")
            .header("webhook-id", &d.key)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(body);
        // Refused by the guarded resolver: nothing was sent, and the error is
        // Herald's own words, nothing of the target's.
        let refused = |e: &reqwest::Error| refusal_in(e).map(|r| forbidden(short_error(&r.to_string())));
        let resp = match http::send_checked(req, d.deadline, refused).await {
            Ok(r) => r,
            Err(outcome) => return outcome,
        };
        let status = resp.status();
        let code = Some(status.as_u16());
        if status.is_success() {
            return Outcome::Accepted { status: code, message_id: None };
        }
        let retry_after = http::retry_after(&resp);
        let text = http::body(resp, d.deadline).await.unwrap_or_default();
        let error = short_error(&format!("HTTP {}: {text}", status.as_u16()));
        match status.as_u16() {
            429 => Outcome::Retryable { class: Reason::Throttled, status: code, error, retry_after },
            500..=599 => Outcome::Retryable { class: Reason::Provider5xx, status: code, error, retry_after },
            // 410: the receiver says this endpoint is gone for good. A 3xx
            // lands here too: redirects are not followed.
            _ => Outcome::Permanent { reason: Reason::Rejected, status: code, error },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_standard_webhooks_example_signature() {
        // The worked example of the Standard Webhooks specification.
        let key = decode_secret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let sig = sign(&key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, r#"{"test": 2432232314}"#);
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn a_bad_secret_is_refused() {
        assert!(decode_secret("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").is_err());
        assert!(decode_secret("whsec_!!!").is_err());
        assert!(decode_secret("whsec_YWJj").is_err());
    }
}
