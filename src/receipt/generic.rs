//! The generic receipt endpoint's wire format, for in-house gateways: a JSON
//! body `{"key" | "provider_message_id", "status", "reason"}`, signed per
//! Standard Webhooks with the endpoint's own secret.

use super::DeliveryStatus;
use crate::channel::webhook::sign;
use serde_json::Value;

/// How far a signature's timestamp may be from the clock: a captured request
/// cannot be replayed later than this.
pub const TOLERANCE_SECONDS: i64 = 300;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("missing header {0}")]
    Missing(&'static str),
    #[error("webhook-timestamp is not a Unix time in seconds")]
    BadTimestamp,
    #[error("webhook-timestamp is more than {TOLERANCE_SECONDS}s from now")]
    Stale,
    #[error("no signature in webhook-signature verifies")]
    Mismatch,
}

/// Checks a Standard Webhooks signature: `webhook-signature` holds one or
/// more space-separated `v1,<base64>`, any of which may match
/// HMAC-SHA256(key, "id.timestamp.body").
pub fn verify(
    key: &[u8],
    id: Option<&str>,
    timestamp: Option<&str>,
    signatures: Option<&str>,
    body: &str,
    now_seconds: i64,
) -> Result<(), SignatureError> {
    let id = id.ok_or(SignatureError::Missing("webhook-id"))?;
    let timestamp = timestamp.ok_or(SignatureError::Missing("webhook-timestamp"))?;
    let signatures = signatures.ok_or(SignatureError::Missing("webhook-signature"))?;
    let at: i64 = timestamp.trim().parse().map_err(|_| SignatureError::BadTimestamp)?;
    let expected = sign(key, id, at, body);
    let matches = signatures.split(' ').any(|s| constant_time_eq(s.as_bytes(), expected.as_bytes()));
    if !matches {
        return Err(SignatureError::Mismatch);
    }
    // After the signature: `Stale` is a receipt the gateway did sign, sent
    // again too late (a replay), and counted as such; an unsigned old one is
    // only a mismatch.
    if (now_seconds - at).abs() > TOLERANCE_SECONDS {
        return Err(SignatureError::Stale);
    }
    Ok(())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Which intent a receipt names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Names {
    Key(String),
    ProviderMessageId(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenericReceipt {
    pub names: Names,
    pub status: DeliveryStatus,
    pub reason: Option<String>,
}

/// The body, read strictly: an error names the field.
pub fn parse(body: &str) -> Result<GenericReceipt, (String, String)> {
    let bad = |field: &str, msg: &str| (field.to_string(), msg.to_string());
    // Strictly, as an event: a key given twice could be read either way.
    let value: Value = crate::event::json::read_strict(body.as_bytes()).map_err(|e| match e {
        crate::event::json::JsonError::Malformed(m) => bad("body", &format!("not JSON: {m}")),
        strict => bad("body", &strict.to_string()),
    })?;
    let Value::Object(map) = value else { return Err(bad("body", "must be a JSON object")) };
    if let Some(field) = map.keys().find(|k| !["key", "provider_message_id", "status", "reason"].contains(&k.as_str()))
    {
        return Err(bad(field, "is not a field of a receipt (key, provider_message_id, status, reason)"));
    }
    let text = |field: &str, max: usize| -> Result<Option<String>, (String, String)> {
        match map.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if !s.is_empty() && s.chars().count() <= max && !s.chars().any(char::is_control) => {
                Ok(Some(s.clone()))
            }
            Some(Value::String(_)) => Err(bad(field, &format!("must be 1 to {max} characters, no control characters"))),
            Some(_) => Err(bad(field, "must be a string")),
        }
    };
    let names = match (text("key", 32)?, text("provider_message_id", 200)?) {
        (Some(key), _) => Names::Key(key),
        (None, Some(id)) => Names::ProviderMessageId(id),
        (None, None) => return Err(bad("key", "a receipt names its intent by key or provider_message_id")),
    };
    let status = text("status", 32)?.ok_or_else(|| bad("status", "is required"))?;
    let status = DeliveryStatus::parse(&status).ok_or_else(|| {
        let known: Vec<&str> = DeliveryStatus::ALL.iter().map(|s| s.as_str()).collect();
        bad("status", &format!("{status:?} is not one of {}", known.join(", ")))
    })?;
    Ok(GenericReceipt { names, status, reason: text("reason", 200)? })
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &[u8] = b"a receipt secret";

    #[test]
    fn a_signed_receipt_verifies_and_anything_else_does_not() {
        let body = r#"{"key":"k","status":"delivered"}"#;
        let sig = sign(KEY, "msg_1", 1_000, body);
        let check = |id, ts: &str, sigs: &str, body, now| verify(KEY, Some(id), Some(ts), Some(sigs), body, now);
        assert_eq!(check("msg_1", "1000", &sig, body, 1_000), Ok(()));
        assert_eq!(check("msg_1", "1000", &format!("v1,bogus {sig}"), body, 1_200), Ok(()), "any of several");
        assert_eq!(check("msg_2", "1000", &sig, body, 1_000), Err(SignatureError::Mismatch));
        assert_eq!(
            check("msg_1", "1000", &sig, r#"{"key":"k","status":"bounced"}"#, 1_000),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(check("msg_1", "1000", &sig, body, 1_000 + 301), Err(SignatureError::Stale));
        assert_eq!(check("msg_2", "1000", &sig, body, 1_000 + 301), Err(SignatureError::Mismatch), "unsigned first");
        assert_eq!(check("msg_1", "soon", &sig, body, 1_000), Err(SignatureError::BadTimestamp));
        assert_eq!(verify(KEY, None, Some("1"), Some(&sig), body, 1), Err(SignatureError::Missing("webhook-id")));
    }

    #[test]
    fn a_body_names_its_intent_and_a_known_status() {
        let r = parse(r#"{"key":"abc","status":"bounced","reason":"550 mailbox unavailable"}"#).unwrap();
        assert_eq!(r.names, Names::Key("abc".into()));
        assert_eq!((r.status, r.reason.as_deref()), (DeliveryStatus::Bounced, Some("550 mailbox unavailable")));
        let r = parse(r#"{"provider_message_id":"m-1","status":"delivered"}"#).unwrap();
        assert_eq!(r.names, Names::ProviderMessageId("m-1".into()));
        for (body, field) in [
            (r#"{"status":"delivered"}"#, "key"),
            (r#"{"key":"a","status":"arrived"}"#, "status"),
            (r#"{"key":"a"}"#, "status"),
            (r#"{"key":"a","status":"sent","extra":1}"#, "extra"),
            (r#"{"key":7,"status":"sent"}"#, "key"),
            (r#"[1]"#, "body"),
        ] {
            assert_eq!(parse(body).unwrap_err().0, field, "{body}");
        }
    }
}
