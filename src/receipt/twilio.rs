//! Twilio's status callbacks: the `X-Twilio-Signature` they carry, and their
//! `MessageStatus` in Herald's words.

use super::DeliveryStatus;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use sha1::Sha1;

/// Twilio's signature: base64(HMAC-SHA1(auth token, the full URL Twilio
/// requested followed by each POST parameter's name and value, sorted)).
pub fn signature(auth_token: &str, url: &str, params: &[(String, String)]) -> String {
    STANDARD.encode(mac(auth_token, url, params).finalize().into_bytes())
}

/// Whether `given` is the signature of this request, compared in constant time.
pub fn verify(auth_token: &str, url: &str, params: &[(String, String)], given: &str) -> bool {
    let Ok(bytes) = STANDARD.decode(given.trim()) else { return false };
    mac(auth_token, url, params).verify_slice(&bytes).is_ok()
}

fn mac(auth_token: &str, url: &str, params: &[(String, String)]) -> Hmac<Sha1> {
    let mut sorted: Vec<&(String, String)> = params.iter().collect();
    sorted.sort();
    let mut mac = Hmac::<Sha1>::new_from_slice(auth_token.as_bytes()).expect("HMAC accepts a key of any length");
    mac.update(url.as_bytes());
    for (name, value) in sorted {
        mac.update(name.as_bytes());
        mac.update(value.as_bytes());
    }
    mac
}

/// Twilio's delivery error codes that say the number is no good for SMS at
/// all: 30005 unknown destination handset, 30006 a landline or unreachable
/// carrier. Reported as a bounce, so the number is suppressed.
const DEAD_NUMBER: [&str; 2] = ["30005", "30006"];

/// `MessageStatus` (with its `ErrorCode`) in Herald's words; None for a
/// status that is not about an outgoing message's delivery.
pub fn status(message_status: &str, error_code: Option<&str>) -> Option<DeliveryStatus> {
    Some(match message_status {
        "accepted" | "scheduled" | "queued" => DeliveryStatus::Queued,
        "sending" | "sent" => DeliveryStatus::Sent,
        "delivered" | "read" => DeliveryStatus::Delivered,
        "undelivered" | "failed" if error_code.is_some_and(|c| DEAD_NUMBER.contains(&c)) => DeliveryStatus::Bounced,
        "undelivered" => DeliveryStatus::Undelivered,
        "failed" | "canceled" => DeliveryStatus::Failed,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    /// The example of Twilio's own documentation ("Validating requests").
    #[test]
    fn twilios_documented_example_signature() {
        let p = params(&[
            ("CallSid", "CA1234567890ABCDE"),
            ("Caller", "+14158675309"),
            ("Digits", "1234"),
            ("From", "+14158675309"),
            ("To", "+18005551212"),
        ]);
        let url = "https://mycompany.com/myapp.php?foo=1&bar=2";
        assert_eq!(signature("12345", url, &p), "RSOYDt4T1cUTdK1PDd93/VVr8B8=");
        assert!(verify("12345", url, &p, "RSOYDt4T1cUTdK1PDd93/VVr8B8="));
    }

    #[test]
    fn anything_changed_fails_verification() {
        let p = params(&[("MessageSid", "SM1"), ("MessageStatus", "delivered")]);
        let url = "https://h.example.com/v1/receipts/twilio?key=abc";
        let good = signature("tok", url, &p);
        assert!(verify("tok", url, &p, &good));
        assert!(!verify("other", url, &p, &good));
        assert!(!verify("tok", "https://h.example.com/v1/receipts/twilio?key=abd", &p, &good));
        let forged = params(&[("MessageSid", "SM1"), ("MessageStatus", "failed")]);
        assert!(!verify("tok", url, &forged, &good));
        assert!(!verify("tok", url, &p, "not base64!"));
        assert!(!verify("tok", url, &p, ""));
    }

    #[test]
    fn message_statuses_map_to_delivery_statuses() {
        assert_eq!(status("queued", None), Some(DeliveryStatus::Queued));
        assert_eq!(status("sent", None), Some(DeliveryStatus::Sent));
        assert_eq!(status("delivered", None), Some(DeliveryStatus::Delivered));
        assert_eq!(status("undelivered", Some("30003")), Some(DeliveryStatus::Undelivered));
        assert_eq!(status("undelivered", Some("30005")), Some(DeliveryStatus::Bounced));
        assert_eq!(status("failed", Some("30006")), Some(DeliveryStatus::Bounced));
        assert_eq!(status("failed", None), Some(DeliveryStatus::Failed));
        assert_eq!(status("received", None), None, "an inbound message is no receipt");
    }
}
