//! Amazon SNS's HTTPS deliveries: the JSON envelope, the string SNS signs for
//! each message type, the signature (SignatureVersion 1 is SHA1withRSA, 2 is
//! SHA256withRSA, both PKCS#1 v1.5) and the certificate it is checked with.
//!
//! A certificate is trusted for what its URL says about it: only
//! `https://sns.<region>.amazonaws.com/…` (fetched over TLS, whose host check
//! is what makes it Amazon's), or one file the operator configured for a
//! deployment that cannot reach AWS. Fetched keys are cached by URL.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use rsa::RsaPublicKey;
use rsa::pkcs1v15::{Signature, VerifyingKey};
use rsa::pkcs8::DecodePublicKey;
use rsa::signature::Verifier;
use serde::Deserialize;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use x509_cert::Certificate;
use x509_cert::der::{DecodePem, Encode};

/// SNS's HTTPS message (a `Notification` whose `Message` is SES's JSON,
/// or a `SubscriptionConfirmation`), signed by SNS: every message type's
/// fields, each type using some.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "PascalCase")]
// The name the OpenAPI document has always given it.
#[schema(as = SnsMessage)]
pub struct Envelope {
    #[serde(rename = "Type")]
    pub kind: String,
    pub message_id: String,
    pub topic_arn: String,
    pub message: String,
    pub timestamp: String,
    /// 1 (SHA1withRSA) or 2 (SHA256withRSA).
    pub signature_version: String,
    pub signature: String,
    #[serde(rename = "SigningCertURL")]
    pub signing_cert_url: String,
    pub subject: Option<String>,
    pub token: Option<String>,
    #[serde(rename = "SubscribeURL")]
    pub subscribe_url: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnsError {
    #[error("{0}")]
    Malformed(String),
    #[error("SignatureVersion {0:?} is not 1 or 2")]
    Version(String),
    #[error("{0}")]
    CertUrl(String),
    #[error("the signature does not verify with the signing certificate")]
    Mismatch,
    #[error("{0}")]
    Stale(String),
}

/// The body, read strictly (a key given twice is refused, as in an event):
/// an error names the field.
pub fn parse(body: &[u8]) -> Result<Envelope, SnsError> {
    let value = crate::event::json::read_strict(body).map_err(|e| SnsError::Malformed(e.to_string()))?;
    serde_json::from_value(value).map_err(|e| SnsError::Malformed(format!("not an SNS message: {e}")))
}

/// How old a signed SNS message may be. SNS delivers within seconds and
/// retries a failed delivery for about an hour; a validly signed message
/// older than that is a replay of a captured one, not a late delivery.
pub const MAX_AGE: jiff::SignedDuration = jiff::SignedDuration::from_hours(1);
/// How far ahead of Herald's clock a message's `Timestamp` may be (clocks drift).
pub const MAX_AHEAD: jiff::SignedDuration = jiff::SignedDuration::from_mins(5);

/// Whether the message's signed `Timestamp` is recent enough to act on.
pub fn check_fresh(timestamp: &str, now: jiff::Timestamp) -> Result<(), SnsError> {
    let at: jiff::Timestamp = timestamp
        .parse()
        .map_err(|_| SnsError::Malformed(format!("Timestamp: {timestamp:?} is not an RFC 3339 time")))?;
    let age = now.duration_since(at);
    if age > MAX_AGE {
        return Err(SnsError::Stale(format!(
            "the message's Timestamp {at} is older than {} (a replay, not a delivery)",
            crate::config::format_duration(MAX_AGE.unsigned_abs())
        )));
    }
    if -age > MAX_AHEAD {
        return Err(SnsError::Stale(format!("the message's Timestamp {at} is ahead of Herald's clock")));
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignatureVersion {
    /// SHA1withRSA.
    V1,
    /// SHA256withRSA.
    V2,
}

impl Envelope {
    pub fn version(&self) -> Result<SignatureVersion, SnsError> {
        match self.signature_version.as_str() {
            "1" => Ok(SignatureVersion::V1),
            "2" => Ok(SignatureVersion::V2),
            other => Err(SnsError::Version(other.into())),
        }
    }

    /// The string SNS signs: chosen fields of the message type, in this
    /// order, each as its name, a newline, its value and a newline.
    pub fn string_to_sign(&self) -> Result<String, SnsError> {
        let missing = |f: &str| SnsError::Malformed(format!("{f}: required by a {} message", self.kind));
        let fields: Vec<(&str, &str)> = match self.kind.as_str() {
            "Notification" => {
                let mut f = vec![("Message", self.message.as_str()), ("MessageId", self.message_id.as_str())];
                f.extend(self.subject.as_deref().map(|s| ("Subject", s)));
                f.extend([("Timestamp", self.timestamp.as_str()), ("TopicArn", &self.topic_arn), ("Type", &self.kind)]);
                f
            }
            "SubscriptionConfirmation" | "UnsubscribeConfirmation" => vec![
                ("Message", self.message.as_str()),
                ("MessageId", &self.message_id),
                ("SubscribeURL", self.subscribe_url.as_deref().ok_or_else(|| missing("SubscribeURL"))?),
                ("Timestamp", &self.timestamp),
                ("Token", self.token.as_deref().ok_or_else(|| missing("Token"))?),
                ("TopicArn", &self.topic_arn),
                ("Type", &self.kind),
            ],
            other => return Err(SnsError::Malformed(format!("Type: {other:?} is not an SNS message type"))),
        };
        Ok(fields.iter().map(|(name, value)| format!("{name}\n{value}\n")).collect())
    }
}

/// Whether `url` may name an SNS certificate or subscription link: by default
/// `https://sns.<region>.amazonaws.com/…` exactly; with `base` configured
/// (a test's fake, a gateway), URLs under that base instead.
pub fn check_url(url: &str, base: Option<&str>, field: &str) -> Result<(), SnsError> {
    let bad = |why: &str| SnsError::CertUrl(format!("{field}: {why}"));
    if let Some(base) = base {
        let base = base.trim_end_matches('/');
        return match url.strip_prefix(base) {
            Some(rest) if rest.starts_with('/') => Ok(()),
            _ => Err(bad(&format!("is not under the configured sns_base_url {base}"))),
        };
    }
    let parsed = url::Url::parse(url).map_err(|_| bad("is not a URL"))?;
    if parsed.scheme() != "https" {
        return Err(bad("is not https"));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() || parsed.port().is_some() {
        return Err(bad("carries credentials or a port"));
    }
    let host = parsed.host_str().unwrap_or_default();
    let region = host.strip_prefix("sns.").and_then(|h| h.strip_suffix(".amazonaws.com"));
    let is_region =
        |r: &str| !r.is_empty() && r.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !region.is_some_and(is_region) {
        return Err(bad("is not on sns.<region>.amazonaws.com"));
    }
    Ok(())
}

/// The RSA key of a PEM certificate.
pub fn key_of_pem(pem: &[u8]) -> Result<RsaPublicKey, String> {
    let cert = Certificate::from_pem(pem).map_err(|e| format!("not a PEM certificate: {e}"))?;
    let spki = cert.tbs_certificate.subject_public_key_info.to_der().map_err(|e| e.to_string())?;
    RsaPublicKey::from_public_key_der(&spki).map_err(|e| format!("its key is not an RSA key: {e}"))
}

/// Whether `signature` (base64) is the envelope's, by `key`.
pub fn verify(envelope: &Envelope, key: &RsaPublicKey) -> Result<(), SnsError> {
    let text = envelope.string_to_sign()?;
    let bytes = STANDARD.decode(envelope.signature.trim()).map_err(|_| SnsError::Mismatch)?;
    let signature = Signature::try_from(bytes.as_slice()).map_err(|_| SnsError::Mismatch)?;
    let ok = match envelope.version()? {
        SignatureVersion::V1 => VerifyingKey::<sha1::Sha1>::new(key.clone()).verify(text.as_bytes(), &signature),
        SignatureVersion::V2 => VerifyingKey::<sha2::Sha256>::new(key.clone()).verify(text.as_bytes(), &signature),
    };
    ok.map_err(|_| SnsError::Mismatch)
}

/// How many fetched certificates are kept (SNS rotates them rarely; a bound
/// keeps a stream of forged URLs from growing the map).
const CACHED: usize = 16;
/// A certificate is a couple of kilobytes.
const MAX_CERT_BYTES: usize = 64 * 1024;

/// SNS as Herald reaches it: signing keys by certificate URL, fetched once
/// each, and subscription confirmations.
pub struct Sns {
    client: reqwest::Client,
    keys: Mutex<HashMap<String, RsaPublicKey>>,
}

impl Default for Sns {
    fn default() -> Self {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        Sns { client, keys: Mutex::default() }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("reaching SNS failed: {0}")]
    Fetch(String),
    #[error("the signing certificate is unusable: {0}")]
    Unusable(String),
}

impl Sns {
    /// The key of the configured file, read once.
    pub fn from_file(&self, path: &std::path::Path) -> Result<RsaPublicKey, FetchError> {
        let id = format!("file:{}", path.display());
        if let Some(key) = self.cached(&id) {
            return Ok(key);
        }
        let pem = std::fs::read(path).map_err(|e| FetchError::Unusable(format!("{}: {e}", path.display())))?;
        let key = key_of_pem(&pem).map_err(FetchError::Unusable)?;
        self.keep(id, key.clone());
        Ok(key)
    }

    /// The key of the certificate at `url` (already checked with [`check_url`]).
    pub async fn fetch(&self, url: &str) -> Result<RsaPublicKey, FetchError> {
        if let Some(key) = self.cached(url) {
            return Ok(key);
        }
        let fail = |e: String| FetchError::Fetch(e);
        let resp = self.client.get(url).send().await.map_err(|e| fail(e.without_url().to_string()))?;
        if !resp.status().is_success() {
            return Err(fail(format!("answered {}", resp.status())));
        }
        if resp.content_length().is_some_and(|n| n > MAX_CERT_BYTES as u64) {
            return Err(fail("larger than a certificate".into()));
        }
        let pem = resp.bytes().await.map_err(|e| fail(e.without_url().to_string()))?;
        if pem.len() > MAX_CERT_BYTES {
            return Err(fail("larger than a certificate".into()));
        }
        let key = key_of_pem(&pem).map_err(FetchError::Unusable)?;
        tracing::info!(url, "SNS signing certificate fetched and cached");
        self.keep(url.to_string(), key.clone());
        Ok(key)
    }

    /// Confirms a subscription: a GET of its `SubscribeURL` (already checked
    /// with [`check_url`]) that SNS answers 200.
    pub async fn confirm(&self, subscribe_url: &str) -> Result<(), FetchError> {
        let resp =
            self.client.get(subscribe_url).send().await.map_err(|e| FetchError::Fetch(e.without_url().to_string()))?;
        if !resp.status().is_success() {
            return Err(FetchError::Fetch(format!("SNS answered the confirmation with {}", resp.status())));
        }
        Ok(())
    }

    fn cached(&self, id: &str) -> Option<RsaPublicKey> {
        self.keys.lock().unwrap_or_else(|p| p.into_inner()).get(id).cloned()
    }

    fn keep(&self, id: String, key: RsaPublicKey) {
        let mut keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        if keys.len() >= CACHED {
            keys.clear();
        }
        keys.insert(id, key);
    }

    /// How many certificates are cached (tests).
    pub fn len(&self) -> usize {
        self.keys.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope(kind: &str) -> Envelope {
        Envelope {
            kind: kind.into(),
            message_id: "m-1".into(),
            topic_arn: "arn:aws:sns:eu-west-1:123456789012:ses".into(),
            message: "hello\nworld".into(),
            timestamp: "2026-11-30T10:00:00.000Z".into(),
            signature_version: "2".into(),
            signature: String::new(),
            signing_cert_url: "https://sns.eu-west-1.amazonaws.com/SimpleNotificationService-x.pem".into(),
            subject: None,
            token: Some("tok".into()),
            subscribe_url: Some("https://sns.eu-west-1.amazonaws.com/?Action=ConfirmSubscription".into()),
        }
    }

    #[test]
    fn each_message_type_signs_its_own_fields_in_order() {
        let n = envelope("Notification");
        assert_eq!(
            n.string_to_sign().unwrap(),
            "Message\nhello\nworld\nMessageId\nm-1\nTimestamp\n2026-11-30T10:00:00.000Z\n\
             TopicArn\narn:aws:sns:eu-west-1:123456789012:ses\nType\nNotification\n"
        );
        let with_subject = Envelope { subject: Some("S".into()), ..n };
        assert!(with_subject.string_to_sign().unwrap().contains("MessageId\nm-1\nSubject\nS\nTimestamp\n"));
        let c = envelope("SubscriptionConfirmation").string_to_sign().unwrap();
        assert!(c.starts_with("Message\nhello\nworld\nMessageId\nm-1\nSubscribeURL\nhttps://sns."), "{c}");
        assert!(c.ends_with(
            "Token\ntok\nTopicArn\narn:aws:sns:eu-west-1:123456789012:ses\nType\nSubscriptionConfirmation\n"
        ));
        let no_token = Envelope { token: None, ..envelope("SubscriptionConfirmation") };
        assert!(matches!(no_token.string_to_sign(), Err(SnsError::Malformed(m)) if m.starts_with("Token")));
        assert!(envelope("Gossip").string_to_sign().is_err());
    }

    #[test]
    fn only_sns_hosts_may_serve_certificates() {
        let ok = |u: &str| check_url(u, None, "SigningCertURL").is_ok();
        assert!(ok("https://sns.us-east-1.amazonaws.com/SimpleNotificationService-abc.pem"));
        assert!(ok("https://sns.ap-southeast-2.amazonaws.com/x.pem"));
        assert!(!ok("http://sns.us-east-1.amazonaws.com/x.pem"), "not https");
        assert!(!ok("https://sns.us-east-1.amazonaws.com.evil.example/x.pem"));
        assert!(!ok("https://evil.example/sns.us-east-1.amazonaws.com/x.pem"));
        assert!(!ok("https://sqs.us-east-1.amazonaws.com/x.pem"));
        assert!(!ok("https://sns..amazonaws.com/x.pem"));
        assert!(!ok("https://user@sns.us-east-1.amazonaws.com/x.pem"));
        assert!(!ok("https://sns.us-east-1.amazonaws.com:8443/x.pem"));
        assert!(!ok("not a url"));
        let fake = Some("http://127.0.0.1:9000/");
        assert!(check_url("http://127.0.0.1:9000/cert.pem", fake, "SigningCertURL").is_ok());
        assert!(check_url("http://127.0.0.1:90001/cert.pem", fake, "SigningCertURL").is_err());
        assert!(check_url("https://sns.us-east-1.amazonaws.com/x.pem", fake, "SigningCertURL").is_err());
    }
}
