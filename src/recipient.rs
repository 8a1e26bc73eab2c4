//! Recipients: field validation shared by inline recipients and the directory,
//! the snapshot an intent freezes, and destination masking for every output.

use serde::{Deserialize, Serialize};

/// A directory entry (`PUT /v1/recipients/{id}`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirectoryEntry {
    pub email: Option<String>,
    pub phone: Option<String>,
    pub locale: Option<String>,
    pub timezone: Option<String>,
    pub webhook_url: Option<String>,
}

pub fn validate_email(s: &str) -> Result<String, String> {
    let s = s.trim();
    let (local, domain) = s.rsplit_once('@').ok_or("must be an email address like a@example.com")?;
    let domain_ok = domain.contains('.')
        && !domain.starts_with('.')
        && !domain.ends_with('.')
        && domain.chars().all(|c| c.is_alphanumeric() || c == '.' || c == '-');
    if local.is_empty()
        || local.len() > 64
        || !domain_ok
        || s.len() > 254
        || s.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(format!("{s:?} is not a valid email address"));
    }
    Ok(s.to_string())
}

/// E.164: `+`, a country code that does not start with 0, 8 to 15 digits in all.
/// Whether the number is *assigned* is the provider's to say (it answers
/// `invalid_destination`); here only the form is checked.
pub fn validate_phone(s: &str) -> Result<String, String> {
    let digits = s.strip_prefix('+').ok_or_else(|| format!("{s:?} must be in E.164 form, like +9779800000000"))?;
    let ok = (8..=15).contains(&digits.len()) && digits.bytes().all(|b| b.is_ascii_digit()) && !digits.starts_with('0');
    if !ok {
        return Err(format!("{s:?} must be in E.164 form: + and 8 to 15 digits, like +9779800000000"));
    }
    Ok(s.to_string())
}

/// A BCP 47-ish tag (`en`, `ne`, `pt-BR`): letters, digits and `-`/`_`, which
/// is also what makes it safe as a template directory name.
pub fn validate_locale(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.len() <= 35
        && s.starts_with(|c: char| c.is_ascii_alphabetic())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !ok {
        return Err(format!("{s:?} is not a locale tag like en or pt-BR"));
    }
    Ok(s.to_string())
}

pub fn validate_timezone(s: &str) -> Result<String, String> {
    jiff::tz::TimeZone::get(s).map_err(|_| format!("{s:?} is not an IANA time zone like Asia/Kathmandu"))?;
    Ok(s.to_string())
}

pub fn validate_webhook_url(s: &str) -> Result<String, String> {
    let url = reqwest::Url::parse(s).map_err(|e| format!("{s:?} is not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(format!("{s:?} must be an http(s) URL"));
    }
    Ok(s.to_string())
}

/// A destination as outputs show it: enough to recognise, not enough to use.
/// `asha@example.com` → `a***@example.com`; `+9779800000000` → `+97798******00`;
/// a webhook URL keeps its scheme and host. Every API view, the CLI and the
/// ops digest show destinations through this one function.
pub fn mask(destination: &str) -> String {
    if let Some((local, domain)) = destination.rsplit_once('@') {
        let first: String = local.chars().take(1).collect();
        return format!("{first}***@{domain}");
    }
    if destination.starts_with('+') {
        let chars: Vec<char> = destination.chars().collect();
        if chars.len() > 8 {
            let head: String = chars[..6].iter().collect();
            let tail: String = chars[chars.len() - 2..].iter().collect();
            return format!("{head}{}{tail}", "*".repeat(chars.len() - 8));
        }
        return "+***".into();
    }
    if let Ok(url) = reqwest::Url::parse(destination) {
        return format!("{}://{}/***", url.scheme(), url.host_str().unwrap_or("?"));
    }
    "***".into()
}

/// The fields of a recipient that are destinations, masked in place: for the
/// inline recipients of a stored event (`{"recipients": [{"email": …}]}`).
pub fn mask_inline_recipients(event: &mut serde_json::Value) {
    let Some(recipients) = event.get_mut("recipients").and_then(|r| r.as_array_mut()) else { return };
    for r in recipients.iter_mut().filter_map(|r| r.as_object_mut()) {
        for field in ["email", "phone", "webhook_url"] {
            if let Some(serde_json::Value::String(v)) = r.get_mut(field) {
                *v = mask(v);
            }
        }
    }
}

/// Provider text (an attempt's error) with the destination it was about
/// masked: an SMTP server or an SMS provider often echoes the address it
/// refused. A phone number is also found without its `+`.
pub fn scrub(text: &str, destination: Option<&str>) -> String {
    let Some(destination) = destination.filter(|d| !d.is_empty()) else { return text.to_string() };
    let masked = mask(destination);
    let mut out = text.replace(destination, &masked);
    if let Some(digits) = destination.strip_prefix('+').filter(|d| d.len() >= 8) {
        out = out.replace(digits, masked.trim_start_matches('+'));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_keep_only_enough_to_recognise() {
        assert_eq!(mask("asha@example.com"), "a***@example.com");
        assert_eq!(mask("+9779800000000"), "+97798******00");
        assert_eq!(mask("https://hooks.example.com/secret/path?x=1"), "https://hooks.example.com/***");
    }

    #[test]
    fn stored_events_and_provider_text_are_masked_too() {
        let mut event = serde_json::json!({"data": {"email": "kept@example.com"}, "recipients": [
            {"id": "u-1", "email": "asha@example.com", "phone": "+9779800000000", "webhook_url": "https://h.example.com/s3cret"},
            {"id": "u-2"}]});
        mask_inline_recipients(&mut event);
        assert_eq!(
            event["recipients"][0],
            serde_json::json!({"id": "u-1", "email": "a***@example.com", "phone": "+97798******00", "webhook_url": "https://h.example.com/***"})
        );
        assert_eq!(event["data"]["email"], "kept@example.com", "data is the sender's, not a destination");
        let e = scrub("550 5.1.1 <asha@example.com>: no such user", Some("asha@example.com"));
        assert_eq!(e, "550 5.1.1 <a***@example.com>: no such user");
        assert_eq!(scrub("9779800000000 is not assigned", Some("+9779800000000")), "97798******00 is not assigned");
        assert_eq!(scrub("HTTP 503", None), "HTTP 503");
    }

    #[test]
    fn phones_must_be_e164() {
        assert!(validate_phone("+9779800000000").is_ok());
        assert!(validate_phone("+15551234567").is_ok());
        assert!(validate_phone("9779800000000").is_err());
        assert!(validate_phone("+0123456789").is_err());
        assert!(validate_phone("+12 345").is_err());
        assert!(validate_phone("+1234567890123456").is_err());
    }

    #[test]
    fn emails_need_a_local_part_and_a_dotted_domain() {
        assert!(validate_email("a@example.com").is_ok());
        assert!(validate_email("a@localhost").is_err());
        assert!(validate_email("@example.com").is_err());
        assert!(validate_email("a b@example.com").is_err());
    }

    #[test]
    fn timezones_and_locales_are_checked() {
        assert!(validate_timezone("Asia/Kathmandu").is_ok());
        assert!(validate_timezone("Mars/Olympus").is_err());
        assert!(validate_locale("pt-BR").is_ok());
        assert!(validate_locale("../etc").is_err());
    }
}
