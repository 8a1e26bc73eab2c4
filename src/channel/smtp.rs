//! Email over SMTP (lettre, async, rustls, pooled). `Message-ID: <KEY@domain>`
//! makes a duplicate at the transport level recognisable as the same message.
//! TLS follows the URL: `smtps://` is implicit TLS, `smtp://…?tls=required`
//! is STARTTLS, plain `smtp://` is unencrypted (local relays, tests).

use super::{Delivery, Outcome, Provider, header_value, short_error};
use crate::intent::Reason;
use async_trait::async_trait;
use lettre::message::{Mailbox, MultiPart, header::ContentType};
use lettre::transport::smtp::Error as SmtpError;
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use std::time::Duration;

pub struct Smtp {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: Mailbox,
    message_id_domain: String,
}

#[derive(Debug, thiserror::Error)]
pub enum SmtpConfigError {
    #[error("channels.email.smtp_url: {0}")]
    Url(String),
    #[error("channels.email.from: {0}")]
    From(String),
}

impl Smtp {
    pub fn new(url: &str, from: &str, message_id_domain: &str, timeout: Duration) -> Result<Smtp, SmtpConfigError> {
        let transport = AsyncSmtpTransport::<Tokio1Executor>::from_url(url)
            .map_err(|e| SmtpConfigError::Url(e.to_string()))?
            .timeout(Some(timeout))
            .build();
        let from: Mailbox =
            from.parse().map_err(|e: lettre::address::AddressError| SmtpConfigError::From(e.to_string()))?;
        Ok(Smtp { transport, from, message_id_domain: message_id_domain.to_string() })
    }

    fn message(&self, d: &Delivery, to: &str) -> Result<Message, String> {
        let to: Mailbox = to.parse().map_err(|e: lettre::address::AddressError| format!("recipient address: {e}"))?;
        let builder = Message::builder()
            .from(self.from.clone())
            .to(to)
            // lettre encodes header values too; the subject is one line before it gets there.
            .subject(header_value(d.content.subject.as_deref().unwrap_or_default()))
            .message_id(Some(format!("<{}@{}>", d.key, self.message_id_domain)));
        let built = match &d.content.html {
            Some(html) => builder.multipart(MultiPart::alternative_plain_html(d.content.body.clone(), html.clone())),
            None => builder.header(ContentType::TEXT_PLAIN).body(d.content.body.clone()),
        };
        built.map_err(|e| e.to_string())
    }
}

#[async_trait]
impl Provider for Smtp {
    async fn send(&self, d: &Delivery) -> Outcome {
        let Some(to) = &d.destination else {
            return Outcome::Permanent {
                reason: Reason::NoDestination,
                status: None,
                error: "no email address".into(),
            };
        };
        let message = match self.message(d, to) {
            Ok(m) => m,
            Err(e) => {
                return Outcome::Permanent { reason: Reason::Rejected, status: None, error: short_error(&e) };
            }
        };
        match self.transport.send(message).await {
            Ok(resp) => Outcome::Accepted {
                status: resp.code().to_string().parse().ok(),
                message_id: Some(format!("<{}@{}>", d.key, self.message_id_domain)),
            },
            Err(e) => classify(&e),
        }
    }
}

/// 5xx permanent (550-class mailbox errors are hard bounces), 4xx retryable,
/// refused connections retryable, a timeout unknown: the server may have
/// queued the message before we stopped waiting.
pub fn classify(e: &SmtpError) -> Outcome {
    let status: Option<u16> = e.status().and_then(|c| c.to_string().parse().ok());
    let error = short_error(&e.to_string());
    if e.is_permanent() {
        let reason = if is_hard_bounce(status, &error) { Reason::HardBounce } else { Reason::Rejected };
        return Outcome::Permanent { reason, status, error };
    }
    if e.is_transient() {
        return Outcome::Retryable { class: Reason::Provider4xx, status, error, retry_after: None };
    }
    if e.is_timeout() {
        return Outcome::Unknown { error };
    }
    if refused(e) {
        return Outcome::Retryable { class: Reason::Unreachable, status, error, retry_after: None };
    }
    Outcome::Unknown { error }
}

/// 550/551/553, or the enhanced codes 5.1.x (bad address) and 5.2.1 (mailbox disabled).
fn is_hard_bounce(status: Option<u16>, text: &str) -> bool {
    matches!(status, Some(550 | 551 | 553)) || text.contains(" 5.1.") || text.contains("5.2.1")
}

fn refused(e: &SmtpError) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return matches!(io.kind(), std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound);
        }
        source = s.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivery(subject: &str) -> Delivery {
        Delivery {
            key: "0123456789abcdef0123456789abcdef".into(),
            tenant: "default".into(),
            recipient_id: "u-1".into(),
            destination: Some("asha@example.com".into()),
            entity_type: "purchase_order".into(),
            entity_id: "PO-1".into(),
            entity_version: None,
            occurred_at: "2026-11-29T04:30:00.000000000Z".into(),
            event_type: "purchase_order.approved".into(),
            payload_digest: None,
            content: crate::render::Content {
                subject: Some(subject.into()),
                body: "body".into(),
                html: None,
                encoding: None,
                segments: None,
            },
            attempt: 1,
        }
    }

    #[tokio::test]
    async fn neither_the_subject_nor_the_from_name_can_start_a_header_line() {
        // The From comes from config; a CR/LF in it stops the start (lettre refuses it).
        let forged = "\"Herald\r\nBcc: a@evil.example\" <noreply@herald.test>";
        let refused = Smtp::new("smtp://127.0.0.1:2525", forged, "herald.test", Duration::from_secs(1));
        assert!(matches!(refused, Err(SmtpConfigError::From(_))));
        let from = "Herald <noreply@herald.test>";
        let smtp = Smtp::new("smtp://127.0.0.1:2525", from, "herald.test", Duration::from_secs(1)).unwrap();
        let d = delivery("PO-1 approved\r\nBcc: b@evil.example");
        let raw = String::from_utf8(smtp.message(&d, "asha@example.com").unwrap().formatted()).unwrap();
        let head = raw.split("\r\n\r\n").next().unwrap();
        for line in head.split("\r\n") {
            assert!(!line.to_ascii_lowercase().starts_with("bcc:"), "forged line {line:?} in\n{raw}");
        }
    }

    #[test]
    fn mailbox_errors_are_hard_bounces() {
        assert!(is_hard_bounce(Some(550), "550 5.1.1 mailbox unavailable"));
        assert!(is_hard_bounce(Some(554), "permanent: 554 5.2.1 mailbox disabled"));
        assert!(!is_hard_bounce(Some(554), "554 5.7.1 message refused as spam"));
    }
}
