//! Email over SMTP. Herald drives lettre's SMTP connection a step at a time,
//! with its own small pool of idle sessions, so that every step is bounded by
//! the call's deadline and a failure is classified by how far the dialogue
//! got. Until the message itself is being written the server cannot have it
//! (RFC 5321 §3.3: nothing is delivered before the final dot is answered), so
//! a timeout or a lost connection there is retryable; from the first byte of
//! the message on it is `unknown`. `Message-ID: <KEY@domain>` makes a message
//! sent twice after an unknown outcome recognisable as the same message.
//!
//! TLS follows the URL: `smtps://` is implicit TLS, `smtp://…?tls=required`
//! is STARTTLS (`?tls=opportunistic` when offered), plain `smtp://` is
//! unencrypted (local relays, tests). `smtp://user:pass@host` authenticates.

use super::{Delivery, Outcome, Provider, header_value, short_error};
use crate::intent::Reason;
use crate::recipient::Kind;
use async_trait::async_trait;
use lettre::Message;
use lettre::address::Envelope;
use lettre::message::{Mailbox, MultiPart, header::ContentType};
use lettre::transport::smtp::Error as SmtpError;
use lettre::transport::smtp::authentication::{Credentials, Mechanism};
use lettre::transport::smtp::client::{AsyncSmtpConnection, TlsParameters};
use lettre::transport::smtp::commands::{Data, Mail, Rcpt};
use lettre::transport::smtp::extension::{ClientId, Extension, MailBodyParameter, MailParameter};
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::{Instant, timeout_at};

/// Idle sessions kept for the next message, and for how long.
const MAX_IDLE: usize = 16;
const IDLE_FOR: Duration = Duration::from_secs(60);

pub struct Smtp {
    server: Server,
    from: Mailbox,
    message_id_domain: String,
    timeout: Duration,
    idle: Mutex<Vec<(AsyncSmtpConnection, Instant)>>,
}

struct Server {
    host: String,
    port: u16,
    security: Security,
    hello: ClientId,
    credentials: Option<Credentials>,
}

enum Security {
    Plain,
    Implicit(TlsParameters),
    StartTls(TlsParameters),
    Opportunistic(TlsParameters),
}

#[derive(Debug, thiserror::Error)]
pub enum SmtpConfigError {
    #[error("channels.email.smtp_url: {0}")]
    Url(String),
    #[error("channels.email.from: {0}")]
    From(String),
}

impl Server {
    fn parse(url: &str) -> Result<Server, SmtpConfigError> {
        let bad = |m: String| SmtpConfigError::Url(m);
        let url = reqwest::Url::parse(url).map_err(|e| bad(format!("not a URL: {e}")))?;
        let host = url.host_str().filter(|h| !h.is_empty()).ok_or_else(|| bad("names no host".into()))?.to_string();
        let tls = url.query_pairs().find(|(k, _)| k == "tls").map(|(_, v)| v.into_owned());
        let params = || TlsParameters::new(host.clone()).map_err(|e| bad(format!("TLS: {e}")));
        let (security, default_port) = match (url.scheme(), tls.as_deref()) {
            ("smtp", None) => (Security::Plain, 25),
            ("smtp", Some("required")) => (Security::StartTls(params()?), 587),
            ("smtp", Some("opportunistic")) => (Security::Opportunistic(params()?), 587),
            ("smtps", None) => (Security::Implicit(params()?), 465),
            (scheme, tls) => {
                return Err(bad(format!(
                    "scheme {scheme:?} with tls={tls:?} is not smtp://, smtp://…?tls=required|opportunistic or smtps://"
                )));
            }
        };
        let name = url.path().trim_matches('/');
        let hello = if name.is_empty() { ClientId::default() } else { ClientId::Domain(name.to_string()) };
        let credentials = match url.password() {
            Some(password) => {
                let decode = |s: &str| {
                    percent_encoding::percent_decode_str(s)
                        .decode_utf8()
                        .map(|s| s.into_owned())
                        .map_err(|_| bad("the user or password is not valid UTF-8 once decoded".into()))
                };
                Some(Credentials::new(decode(url.username())?, decode(password)?))
            }
            None => None,
        };
        Ok(Server { host, port: url.port().unwrap_or(default_port), security, hello, credentials })
    }
}

impl Smtp {
    pub fn new(url: &str, from: &str, message_id_domain: &str, timeout: Duration) -> Result<Smtp, SmtpConfigError> {
        let server = Server::parse(url)?;
        let from: Mailbox =
            from.parse().map_err(|e: lettre::address::AddressError| SmtpConfigError::From(e.to_string()))?;
        Ok(Smtp {
            server,
            from,
            message_id_domain: message_id_domain.to_string(),
            timeout,
            idle: Mutex::new(Vec::new()),
        })
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

    /// Connect, greeting, EHLO, TLS and AUTH: a new session, nothing sent yet.
    async fn open(&self) -> Result<AsyncSmtpConnection, SmtpError> {
        let s = &self.server;
        let implicit = match &s.security {
            Security::Implicit(p) => Some(p.clone()),
            _ => None,
        };
        let connect_within = super::connect_timeout(self.timeout);
        let mut conn = AsyncSmtpConnection::connect_tokio1(
            (s.host.as_str(), s.port),
            Some(connect_within),
            &s.hello,
            implicit,
            None,
        )
        .await?;
        match &s.security {
            Security::StartTls(p) => conn.starttls(p.clone(), &s.hello).await?,
            Security::Opportunistic(p) if conn.can_starttls() => conn.starttls(p.clone(), &s.hello).await?,
            _ => {}
        }
        if let Some(credentials) = &s.credentials {
            conn.auth(&[Mechanism::Plain, Mechanism::Login], credentials).await?;
        }
        Ok(conn)
    }

    /// An idle session that is not too old to trust.
    fn take_idle(&self) -> Option<AsyncSmtpConnection> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        while let Some((conn, since)) = idle.pop() {
            if since.elapsed() < IDLE_FOR {
                return Some(conn);
            }
        }
        None
    }

    fn keep_idle(&self, conn: AsyncSmtpConnection) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        idle.retain(|(_, since)| since.elapsed() < IDLE_FOR);
        if !conn.has_broken() && idle.len() < MAX_IDLE {
            idle.push((conn, Instant::now()));
        }
    }
}

#[async_trait]
impl Provider for Smtp {
    fn name(&self) -> &str {
        "smtp"
    }

    /// `Message-ID: <KEY@domain>` is the same on every try.
    fn dedupes_retries(&self) -> bool {
        true
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }

    async fn send(&self, d: &Delivery) -> Outcome {
        self.call(d).await.redacted(Kind::Email, d.destination.as_deref())
    }
}

impl Smtp {
    /// One call; [`Provider::send`] keeps the destination out of its error text.
    async fn call(&self, d: &Delivery) -> Outcome {
        let Some(to) = &d.destination else {
            return Outcome::Permanent {
                reason: Reason::NoDestination,
                status: None,
                error: "no email address".into(),
            };
        };
        let message = match self.message(d, to) {
            Ok(m) => m,
            Err(e) => return Outcome::Permanent { reason: Reason::Rejected, status: None, error: short_error(&e) },
        };
        let (envelope, body) = (message.envelope().clone(), message.formatted());
        let mut pooled = self.take_idle();
        let mut conn = loop {
            let reused = pooled.is_some();
            let mut conn = match pooled.take() {
                Some(conn) => conn,
                None => match timeout_at(d.deadline, self.open()).await {
                    Ok(Ok(conn)) => conn,
                    Ok(Err(e)) => return not_sent(&e, "opening the SMTP session"),
                    Err(_) => return not_sent_in_time(self.timeout, "opening the SMTP session"),
                },
            };
            let params = match mail_parameters(&conn, &envelope, &body) {
                Ok(p) => p,
                Err(why) => return Outcome::Permanent { reason: Reason::Rejected, status: None, error: why.into() },
            };
            match timeout_at(d.deadline, envelope_and_data(&mut conn, &envelope, params)).await {
                Ok(Ok(())) => break conn,
                // A kept session the server has closed since: nothing went
                // out on it, so open a fresh one.
                Ok(Err(e)) if reused && !e.is_permanent() => continue,
                Ok(Err(e)) => return not_sent(&e, "before the message was written"),
                Err(_) => return not_sent_in_time(self.timeout, "before the message was written"),
            }
        };
        match timeout_at(d.deadline, conn.message(&body)).await {
            Ok(Ok(reply)) => {
                self.keep_idle(conn);
                // SES answers with the id its notifications will name the
                // message by; any other server, with its own words: then the
                // message is known by its Message-ID.
                let ses_id = reply.first_line().and_then(crate::receipt::ses::id_in_data_reply);
                Outcome::Accepted {
                    status: reply.code().to_string().parse().ok(),
                    message_id: Some(match ses_id {
                        Some(id) => id.to_string(),
                        None => format!("<{}@{}>", d.key, self.message_id_domain),
                    }),
                }
            }
            Ok(Err(e)) => reply(&e).unwrap_or_else(|| Outcome::Unknown {
                class: Reason::ConnectionLost,
                error: short_error(&format!("the connection failed while the message was being handed over: {e}")),
            }),
            Err(_) => Outcome::Unknown {
                class: Reason::Timeout,
                error: format!("no answer to the message within {:?}; the server may have taken it", self.timeout),
            },
        }
    }
}

/// MAIL FROM, RCPT TO, DATA: up to the server's go-ahead (354).
async fn envelope_and_data(
    conn: &mut AsyncSmtpConnection,
    envelope: &Envelope,
    params: Vec<MailParameter>,
) -> Result<(), SmtpError> {
    conn.command(Mail::new(envelope.from().cloned(), params)).await?;
    for to in envelope.to() {
        conn.command(Rcpt::new(to.clone(), vec![])).await?;
    }
    conn.command(Data).await?;
    Ok(())
}

/// SMTPUTF8 for internationalised addresses, 8BITMIME for a non-ASCII body,
/// when the server offers them (RFC 6531, RFC 6152).
fn mail_parameters(
    conn: &AsyncSmtpConnection,
    envelope: &Envelope,
    body: &[u8],
) -> Result<Vec<MailParameter>, &'static str> {
    let mut params = Vec::new();
    let info = conn.server_info();
    let addresses = envelope.from().into_iter().chain(envelope.to());
    if addresses.map(|a| a.as_ref()).any(|a: &str| !a.is_ascii()) {
        if !info.supports_feature(Extension::SmtpUtfEight) {
            return Err("the address is not ASCII and the server does not offer SMTPUTF8");
        }
        params.push(MailParameter::SmtpUtfEight);
    }
    if !body.is_ascii() {
        if !info.supports_feature(Extension::EightBitMime) {
            return Err("the message is not ASCII and the server does not offer 8BITMIME");
        }
        params.push(MailParameter::Body(MailBodyParameter::EightBitMime));
    }
    Ok(params)
}

/// The server answered with a refusal: 5xx permanent (550-class mailbox
/// errors are hard bounces), 4xx retryable.
fn reply(e: &SmtpError) -> Option<Outcome> {
    let status: Option<u16> = e.status().and_then(|c| c.to_string().parse().ok());
    let error = short_error(&e.to_string());
    if e.is_permanent() {
        let reason = if is_hard_bounce(status, &error) { Reason::HardBounce } else { Reason::Rejected };
        return Some(Outcome::Permanent { reason, status, error });
    }
    if e.is_transient() {
        return Some(Outcome::Retryable { class: Reason::Provider4xx, status, error, retry_after: None });
    }
    None
}

/// A failure before the message was written: the server cannot have it.
fn not_sent(e: &SmtpError, when: &str) -> Outcome {
    reply(e).unwrap_or_else(|| Outcome::Retryable {
        class: Reason::Unreachable,
        status: None,
        error: short_error(&format!("{when} failed, nothing was sent: {e}")),
        retry_after: None,
    })
}

fn not_sent_in_time(timeout: Duration, when: &str) -> Outcome {
    Outcome::Retryable {
        class: Reason::Timeout,
        status: None,
        error: format!("no answer within {timeout:?} {when}; nothing was sent"),
        retry_after: None,
    }
}

/// 550/551/553, or the enhanced codes 5.1.x (bad address) and 5.2.1 (mailbox disabled).
fn is_hard_bounce(status: Option<u16>, text: &str) -> bool {
    matches!(status, Some(550 | 551 | 553)) || text.contains(" 5.1.") || text.contains("5.2.1")
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
            deadline: tokio::time::Instant::now() + Duration::from_secs(5),
        }
    }

    /// lettre encodes a subject with CR/LF into RFC 2047 words, so these lines
    /// would look clean without `header_value`; `tests/security.rs` decodes the
    /// subject an SMTP peer receives, which is the check that can fail.
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

    #[test]
    fn the_url_picks_port_security_and_credentials() {
        let s = Server::parse("smtp://relay.local").unwrap();
        assert!((s.port, matches!(s.security, Security::Plain)) == (25, true));
        let s = Server::parse("smtp://mx.example.com?tls=required").unwrap();
        assert!((s.port, matches!(s.security, Security::StartTls(_))) == (587, true));
        let s = Server::parse("smtps://u%40x:p%2Fw@mx.example.com:2465/herald.example").unwrap();
        assert!((s.port, matches!(s.security, Security::Implicit(_))) == (2465, true));
        assert!(s.credentials.is_some());
        assert!(matches!(s.hello, ClientId::Domain(ref d) if d == "herald.example"));
        assert!(Server::parse("http://mx.example.com").is_err());
        assert!(Server::parse("smtp://mx.example.com?tls=sometimes").is_err());
    }
}
