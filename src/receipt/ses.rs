//! Amazon SES's notifications (the `Message` of an SNS notification): bounce,
//! complaint and delivery, in Herald's words, and which message they are about.
//!
//! SES names the message by the id it answered the SMTP `DATA` with
//! (`250 Ok <id>`), which Herald recorded on the attempt. When that answer
//! never arrived (an `unknown` attempt) there is no id to match, so the
//! message's own `Message-ID: <KEY@domain>` is looked for in the headers the
//! notification carries.

use super::DeliveryStatus;
use serde_json::Value;

/// What one SES notification says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SesReceipt {
    pub status: DeliveryStatus,
    /// SES's words for it: `Bounce/Permanent/General`, `Complaint/abuse`, `Delivery`.
    pub provider_status: String,
    /// The first recipient's diagnostic code or the feedback type, bounded.
    pub reason: Option<String>,
    /// `mail.messageId`: the id SES answered `DATA` with.
    pub ses_message_id: String,
    /// Every `Message-ID` the notification's headers give.
    pub message_ids: Vec<String>,
}

/// A notification Herald reads, or why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    Receipt(SesReceipt),
    /// A kind of event that says nothing of delivery (`Send`, `Open`, `DeliveryDelay`…).
    Ignored(String),
}

/// `message` is the SNS notification's `Message`; an error names the field.
pub fn parse(message: &str) -> Result<Parsed, (String, String)> {
    let bad = |field: &str, msg: &str| (format!("Message.{field}"), msg.to_string());
    let v: Value = crate::event::json::read_strict(message.as_bytes()).map_err(|e| match e {
        crate::event::json::JsonError::Malformed(_) => {
            ("Message".to_string(), "is not an SES notification (JSON)".to_string())
        }
        strict => ("Message".to_string(), strict.to_string()),
    })?;
    // `notificationType` from identity notifications, `eventType` from a configuration set's event publishing.
    let kind = v["notificationType"]
        .as_str()
        .or(v["eventType"].as_str())
        .ok_or_else(|| bad("notificationType", "is required (or eventType): Bounce, Complaint or Delivery"))?;
    let text = |v: &Value| v.as_str().map(bounded);
    let (status, provider_status, reason) = match kind {
        "Bounce" => {
            let b = &v["bounce"];
            let kind = b["bounceType"].as_str().ok_or_else(|| bad("bounce.bounceType", "is required"))?;
            let sub = b["bounceSubType"].as_str().unwrap_or("");
            // A transient or undetermined bounce is SES giving up on this
            // message, not a verdict on the address.
            let status = if kind == "Permanent" { DeliveryStatus::Bounced } else { DeliveryStatus::Undelivered };
            let reason = text(&b["bouncedRecipients"][0]["diagnosticCode"]);
            (status, format!("Bounce/{kind}/{sub}"), reason)
        }
        "Complaint" => {
            let c = &v["complaint"];
            let feedback = c["complaintFeedbackType"].as_str().unwrap_or("");
            (DeliveryStatus::Complained, format!("Complaint/{feedback}"), text(&c["complaintFeedbackType"]))
        }
        "Delivery" => (DeliveryStatus::Delivered, "Delivery".into(), text(&v["delivery"]["smtpResponse"])),
        "Reject" => (DeliveryStatus::Failed, "Reject".into(), text(&v["reject"]["reason"])),
        other => return Ok(Parsed::Ignored(bounded(other))),
    };
    let mail = &v["mail"];
    let ses_message_id = mail["messageId"]
        .as_str()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| bad("mail.messageId", "is required"))?
        .to_string();
    let mut message_ids: Vec<String> =
        mail["commonHeaders"]["messageId"].as_str().map(String::from).into_iter().collect();
    for h in mail["headers"].as_array().into_iter().flatten() {
        if h["name"].as_str().is_some_and(|n| n.eq_ignore_ascii_case("message-id"))
            && let Some(value) = h["value"].as_str()
        {
            message_ids.push(value.to_string());
        }
    }
    Ok(Parsed::Receipt(SesReceipt {
        status,
        provider_status: bounded(&provider_status),
        reason,
        ses_message_id,
        message_ids,
    }))
}

/// The intent key in a `Message-ID` Herald wrote (`<KEY@domain>`, one of
/// `domains`).
pub fn key_in(message_id: &str, domains: &[&str]) -> Option<String> {
    let inner = message_id.trim().strip_prefix('<')?.strip_suffix('>')?;
    let (key, domain) = inner.split_once('@')?;
    let is_key = key.len() == 32 && key.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    (is_key && domains.iter().any(|d| d.eq_ignore_ascii_case(domain))).then(|| key.to_string())
}

/// The id SES gives a message it accepted over SMTP: `250 Ok <id>`.
pub fn id_in_data_reply(first_line: &str) -> Option<&str> {
    let id = first_line.trim().strip_prefix("Ok ")?.trim();
    let ok = !id.is_empty() && id.len() <= 200 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    ok.then_some(id)
}

fn bounded(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).take(200).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn receipt(v: Value) -> SesReceipt {
        match parse(&v.to_string()).unwrap() {
            Parsed::Receipt(r) => r,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_permanent_bounce_is_a_bounce_and_a_transient_one_is_not() {
        let mail = json!({"messageId": "0100-abc", "commonHeaders": {"messageId": "<k@h>"},
                          "headers": [{"name": "Message-ID", "value": "<m@h>"}, {"name": "To", "value": "x"}]});
        let r = receipt(json!({"notificationType": "Bounce", "mail": mail,
            "bounce": {"bounceType": "Permanent", "bounceSubType": "General",
                       "bouncedRecipients": [{"emailAddress": "a@x.test", "diagnosticCode": "smtp; 550 5.1.1 no such user"}]}}));
        assert_eq!((r.status, r.provider_status.as_str()), (DeliveryStatus::Bounced, "Bounce/Permanent/General"));
        assert_eq!(r.reason.as_deref(), Some("smtp; 550 5.1.1 no such user"));
        assert_eq!(
            (r.ses_message_id.as_str(), r.message_ids.clone()),
            ("0100-abc", vec!["<k@h>".into(), "<m@h>".into()])
        );
        let r = receipt(json!({"eventType": "Bounce", "mail": {"messageId": "m"},
            "bounce": {"bounceType": "Transient", "bounceSubType": "MailboxFull"}}));
        assert_eq!(r.status, DeliveryStatus::Undelivered);
    }

    #[test]
    fn complaints_and_deliveries_map_and_other_events_are_ignored() {
        let r = receipt(json!({"notificationType": "Complaint", "mail": {"messageId": "m"},
            "complaint": {"complaintFeedbackType": "abuse"}}));
        assert_eq!((r.status, r.provider_status.as_str()), (DeliveryStatus::Complained, "Complaint/abuse"));
        let r = receipt(json!({"notificationType": "Delivery", "mail": {"messageId": "m"},
            "delivery": {"smtpResponse": "250 2.6.0 ok"}}));
        assert_eq!((r.status, r.reason.as_deref()), (DeliveryStatus::Delivered, Some("250 2.6.0 ok")));
        assert_eq!(parse(r#"{"eventType":"Open","mail":{"messageId":"m"}}"#), Ok(Parsed::Ignored("Open".into())));
        for (body, field) in [
            (r#"{"mail":{"messageId":"m"}}"#, "Message.notificationType"),
            (r#"{"notificationType":"Delivery","mail":{}}"#, "Message.mail.messageId"),
            (r#"{"notificationType":"Bounce","mail":{"messageId":"m"},"bounce":{}}"#, "Message.bounce.bounceType"),
            ("not json", "Message"),
        ] {
            assert_eq!(parse(body).unwrap_err().0, field, "{body}");
        }
    }

    #[test]
    fn herald_finds_its_own_message_ids_and_the_ses_id_in_the_data_answer() {
        let key = "0123456789abcdef0123456789abcdef";
        assert_eq!(key_in(&format!("<{key}@herald.test>"), &["herald.test"]), Some(key.into()));
        assert_eq!(key_in(&format!("<{key}@HERALD.test>"), &["herald.test"]), Some(key.into()));
        assert_eq!(key_in(&format!("<{key}@other.test>"), &["herald.test"]), None);
        assert_eq!(key_in("<short@herald.test>", &["herald.test"]), None);
        assert_eq!(id_in_data_reply("Ok 0100018c1b2c3d4e-5f6a-7b8c-000000"), Some("0100018c1b2c3d4e-5f6a-7b8c-000000"));
        assert_eq!(id_in_data_reply("2.0.0 Ok: queued as 4ABC"), None, "a queue id is not SES's message id");
        assert_eq!(id_in_data_reply("queued"), None);
    }
}
