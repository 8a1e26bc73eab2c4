//! Recipients: field validation shared by inline recipients and the directory,
//! the snapshot an intent freezes, and destination masking for every output.

pub mod keyed;

use crate::event::Channel;
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

/// Exactly one mailbox, as an SMTP `RCPT TO` takes it: an RFC 5321 / 5322
/// addr-spec whose local part is a dot-atom (no quoted string, no comment)
/// and whose domain is dot-separated labels of letters, digits and inner
/// hyphens (no address literal). Nothing else is taken, not even around it:
/// no list (`a@x.example,b@y.example`), no display name (`A <a@x.example>`),
/// no white space — what is stored is what the field held, and it is sent to
/// as one address.
pub fn validate_email(s: &str) -> Result<String, String> {
    let one = || format!("{s:?} is not one email address like a@example.com (no name, list, quotes or spaces)");
    let (local, domain) = s.split_once('@').ok_or_else(one)?;
    let atext = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-/=?^_`{|}~".contains(c);
    let local_ok = local.len() <= 64 && local.split('.').all(|atom| !atom.is_empty() && atom.chars().all(atext));
    let label_ok = |l: &str| {
        (1..=63).contains(&l.len())
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    let labels: Vec<&str> = domain.split('.').collect();
    let domain_ok = domain.len() <= 253 && labels.len() >= 2 && labels.iter().all(|l| label_ok(l));
    if !local_ok || !domain_ok || s.len() > 254 {
        return Err(one());
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

/// An http(s) URL with a host, as written, without control characters: a
/// URL parser would quietly drop or escape them, but the text is stored and
/// shown as given (and Postgres refuses a NUL). A space is taken, as it always
/// was: the parser escapes it when the URL is called.
///
/// The error says what is wrong and never quotes the URL: its path is often
/// the webhook's secret, and a rejected bus message's error is shown to
/// `ops` readers later.
pub fn validate_webhook_url(s: &str) -> Result<String, String> {
    if s.chars().any(char::is_control) {
        return Err("must not contain control characters (a tab or a line break?)".into());
    }
    let url = reqwest::Url::parse(s).map_err(|e| format!("is not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err("must be an http(s) URL with a host".into());
    }
    Ok(s.to_string())
}

/// What a destination is, known from the channel or field that holds it —
/// never guessed from the text (a webhook URL may hold an `@`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Email,
    Phone,
    Url,
}

impl Kind {
    /// The kind of an intent's destination; `None` for in-app, which has none.
    pub fn of_channel(channel: Channel) -> Option<Kind> {
        match channel {
            Channel::Email => Some(Kind::Email),
            Channel::Sms => Some(Kind::Phone),
            Channel::Webhook => Some(Kind::Url),
            Channel::InApp => None,
        }
    }

    /// The kind of a recipient field (`email`, `phone`, `webhook_url`).
    pub fn of_field(field: &str) -> Option<Kind> {
        match field {
            "email" => Some(Kind::Email),
            "phone" => Some(Kind::Phone),
            "webhook_url" => Some(Kind::Url),
            _ => None,
        }
    }
}

/// A destination as outputs show it: enough to recognise, not enough to use.
/// `asha@example.com` → `a***@example.com`; `+9779800000000` →
/// `+97798******00`; a webhook URL keeps its scheme and host. Every API view,
/// the CLI and the ops digest show destinations through this one function.
pub fn mask(kind: Kind, destination: &str) -> String {
    match kind {
        Kind::Email => mask_email(destination),
        Kind::Phone => mask_phone(destination),
        Kind::Url => mask_url(destination),
    }
}

/// An intent's destination, masked by its channel's kind.
pub fn mask_for_channel(channel: Channel, destination: &str) -> String {
    Kind::of_channel(channel).map_or_else(|| "***".into(), |kind| mask(kind, destination))
}

fn mask_email(address: &str) -> String {
    match address.rsplit_once('@') {
        Some((local, domain)) => format!("{}***@{domain}", local.chars().take(1).collect::<String>()),
        None => "***".into(),
    }
}

fn mask_phone(phone: &str) -> String {
    let chars: Vec<char> = phone.chars().collect();
    if !phone.starts_with('+') || chars.len() <= 8 {
        return "+***".into();
    }
    let head: String = chars[..6].iter().collect();
    let tail: String = chars[chars.len() - 2..].iter().collect();
    format!("{head}{}{tail}", "*".repeat(chars.len() - 8))
}

fn mask_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(u) => format!("{}://{}/***", u.scheme(), u.host_str().unwrap_or("?")),
        Err(_) => "***".into(),
    }
}

/// The fields of a recipient that are destinations, masked in place: for the
/// inline recipients of a stored event (`{"recipients": [{"email": …}]}`).
pub fn mask_inline_recipients(event: &mut serde_json::Value) {
    let Some(recipients) = event.get_mut("recipients").and_then(|r| r.as_array_mut()) else { return };
    for r in recipients.iter_mut().filter_map(|r| r.as_object_mut()) {
        for field in ["email", "phone", "webhook_url"] {
            if let (Some(kind), Some(serde_json::Value::String(v))) = (Kind::of_field(field), r.get_mut(field)) {
                *v = mask(kind, v);
            }
        }
    }
}

/// Provider text (an attempt's error) with the destination kept out of it,
/// however the provider wrote it back: a channel redacts where it makes the
/// error text, and every view again (for text stored before it did).
///
/// - email: every address in the text is masked, whatever its case (a
///   server may echo `<ASHA@Example.com>`), and whichever it is;
/// - phone: every run of digits (spaces, dashes, dots and brackets allowed
///   between them) ending in the same seven digits as the number;
/// - URL: the URL in any form it can be written (as given, as an HTTP client
///   normalises it), its path and query (escaped or not), its user and
///   password, and each path segment of eight characters or more — all
///   regardless of case.
pub fn redact(text: &str, kind: Kind, destination: &str) -> String {
    match kind {
        Kind::Email => redact_addresses(text),
        Kind::Phone => redact_phone(text, destination),
        Kind::Url => redact_url(text, destination),
    }
}

/// [`redact`] by an intent's channel; text of a channel without a
/// destination is returned as it is.
pub fn redact_for_channel(text: &str, channel: Channel, destination: Option<&str>) -> String {
    match (Kind::of_channel(channel), destination.filter(|d| !d.is_empty())) {
        (Some(kind), Some(destination)) => redact(text, kind, destination),
        (Some(Kind::Email), None) => redact_addresses(text),
        _ => text.to_string(),
    }
}

fn is_address_char(c: char) -> bool {
    !c.is_whitespace() && !"<>()[]\"',;:".contains(c)
}

pub(crate) fn redact_addresses(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '@' {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let start = (0..i).rev().take_while(|&j| is_address_char(chars[j]) && chars[j] != '@').last();
        let end = (i + 1..chars.len()).take_while(|&j| is_address_char(chars[j]) && chars[j] != '@').last();
        match (start, end) {
            (Some(start), Some(end)) => {
                let address: String = chars[start..=end].iter().collect();
                for _ in start..i {
                    out.pop();
                }
                out.push_str(&mask_email(&address));
                i = end + 1;
            }
            _ => {
                out.push('@');
                i += 1;
            }
        }
    }
    out
}

fn redact_phone(text: &str, phone: &str) -> String {
    let digits_of = |s: &str| s.chars().filter(char::is_ascii_digit).collect::<String>();
    let own = digits_of(phone);
    let tail = |d: &str| d.get(d.len().saturating_sub(7)..).unwrap_or_default().to_string();
    if own.len() < 7 {
        return text.to_string();
    }
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let starts = chars[i].is_ascii_digit()
            || (matches!(chars[i], '+' | '(') && chars.get(i + 1).is_some_and(char::is_ascii_digit));
        if !starts {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        // The run: digits, with at most two separators between them (`) `).
        let mut end = i + 1;
        let mut last_digit = if chars[i].is_ascii_digit() { i } else { i + 1 };
        while end < chars.len() {
            if chars[end].is_ascii_digit() {
                last_digit = end;
                end += 1;
                continue;
            }
            let separators = chars[end..].iter().take_while(|c| " -.()".contains(**c)).count();
            if separators > 2 || !chars.get(end + separators).is_some_and(char::is_ascii_digit) {
                break;
            }
            end += separators;
        }
        let run: String = chars[i..=last_digit].iter().collect();
        let digits = digits_of(&run);
        if digits.len() >= 7 && tail(&digits) == tail(&own) {
            out.push_str(&mask_phone(phone));
        } else {
            out.push_str(&run);
        }
        i = last_digit + 1;
    }
    out
}

fn redact_url(text: &str, destination: &str) -> String {
    let decode = |s: &str| percent_encoding::percent_decode_str(s).decode_utf8_lossy().into_owned();
    let mut secrets: Vec<String> = vec![destination.to_string()];
    if let Ok(url) = reqwest::Url::parse(destination) {
        secrets.push(url.to_string());
        let mut path = url.path().to_string();
        if let Some(q) = url.query() {
            path = format!("{path}?{q}");
            secrets.push(q.to_string());
            secrets.push(decode(q));
        }
        if path.len() > 1 {
            secrets.push(decode(&path));
            secrets.push(path);
        }
        for part in [url.username(), url.password().unwrap_or_default()] {
            if !part.is_empty() {
                secrets.push(part.to_string());
                secrets.push(decode(part));
            }
        }
        for segment in url.path_segments().into_iter().flatten() {
            secrets.push(segment.to_string());
            secrets.push(decode(segment));
        }
    }
    // The raw text too: what was given may say more than the parsed URL
    // keeps (a `../` segment, an escape the parser kept or dropped).
    let after_host = destination.split_once("://").map_or(destination, |(_, rest)| rest);
    if let Some((_, raw_path)) = after_host.split_once('/') {
        secrets.extend(raw_path.split(['/', '?', '#', '&', '=']).map(String::from));
        secrets.extend(raw_path.split(['/', '?', '#', '&', '=']).map(decode));
    }
    let mut secrets: Vec<String> = secrets
        .into_iter()
        .filter(|s| s.chars().count() >= 8 || (s.contains('/') && s.len() > 1) || s.contains(':'))
        .collect();
    // The longest first, so a whole URL goes before the path inside it.
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    secrets.dedup();
    let masked = mask_url(destination);
    let mut out = text.to_string();
    for secret in &secrets {
        let replacement = if secret.contains("://") { masked.as_str() } else { "***" };
        out = replace_ignoring_case(&out, secret, replacement);
    }
    out
}

/// `text` with every occurrence of `needle` replaced, comparing ASCII
/// letters without case.
fn replace_ignoring_case(text: &str, needle: &str, replacement: &str) -> String {
    if needle.is_empty() {
        return text.to_string();
    }
    let (hay, pin) = (text.to_ascii_lowercase(), needle.to_ascii_lowercase());
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for (at, _) in hay.match_indices(&pin) {
        if at < last {
            continue;
        }
        out.push_str(&text[last..at]);
        out.push_str(replacement);
        last = at + pin.len();
    }
    out.push_str(&text[last..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_keep_only_enough_to_recognise() {
        assert_eq!(mask(Kind::Email, "asha@example.com"), "a***@example.com");
        assert_eq!(mask(Kind::Phone, "+9779800000000"), "+97798******00");
        assert_eq!(mask(Kind::Url, "https://hooks.example.com/secret/path?x=1"), "https://hooks.example.com/***");
    }

    #[test]
    fn the_mask_follows_the_field_not_the_text() {
        // An @ in a webhook's path does not make it an email address.
        let url = "https://hooks.example.com/@/services/T0/B0/XSECRETX";
        assert_eq!(mask(Kind::Url, url), "https://hooks.example.com/***");
        assert_eq!(mask_for_channel(Channel::Webhook, url), "https://hooks.example.com/***");
        assert_eq!(mask(Kind::Url, "https://u:pw@hook.invalid/x"), "https://hook.invalid/***");
        // Nothing the kind cannot make sense of is shown at all.
        assert_eq!(mask(Kind::Phone, "9779800000000"), "+***");
        assert_eq!(mask(Kind::Email, "not-an-address"), "***");
        assert_eq!(mask(Kind::Url, "not a url"), "***");
        assert_eq!(mask_for_channel(Channel::InApp, "anything"), "***");
    }

    #[test]
    fn stored_events_and_provider_text_are_masked_too() {
        let mut event = serde_json::json!({"data": {"email": "kept@example.com"}, "recipients": [
            {"id": "u-1", "email": "asha@example.com", "phone": "+9779800000000", "webhook_url": "https://h.example.com/s3cret"},
            {"id": "u-2", "webhook_url": "https://h.example.com/@/XSECRETX"}]});
        mask_inline_recipients(&mut event);
        assert_eq!(
            event["recipients"][0],
            serde_json::json!({"id": "u-1", "email": "a***@example.com", "phone": "+97798******00", "webhook_url": "https://h.example.com/***"})
        );
        assert_eq!(event["recipients"][1]["webhook_url"], "https://h.example.com/***");
        assert_eq!(event["data"]["email"], "kept@example.com", "data is the sender's, not a destination");
    }

    #[test]
    fn an_address_is_kept_out_of_provider_text_in_any_case() {
        let e = redact("550 5.1.1 <asha@example.com>: no such user", Kind::Email, "asha@example.com");
        assert_eq!(e, "550 5.1.1 <a***@example.com>: no such user");
        let e = redact("550 5.1.1 <ASHA@Example.COM>: no such user (also x.y@b.org)", Kind::Email, "asha@example.com");
        assert_eq!(e, "550 5.1.1 <A***@Example.COM>: no such user (also x***@b.org)");
        assert_eq!(redact("user@ is odd, @ alone too", Kind::Email, "a@b.c"), "user@ is odd, @ alone too");
    }

    #[test]
    fn a_phone_number_is_kept_out_of_provider_text_however_written() {
        let phone = "+9779800000000";
        for (text, want) in [
            ("9779800000000 is not assigned", "+97798******00 is not assigned"),
            ("+9779800000000 is not assigned", "+97798******00 is not assigned"),
            ("number +977 980-000-0000 refused", "number +97798******00 refused"),
            ("(980) 000.0000 refused", "+97798******00 refused"),
            ("HTTP 400: code 21211", "HTTP 400: code 21211"),
        ] {
            assert_eq!(redact(text, Kind::Phone, phone), want, "{text}");
        }
    }

    #[test]
    fn a_webhook_url_is_kept_out_of_provider_text_in_every_form() {
        for (url, text) in [
            (
                "https://Hook.Invalid/CaseSecretPath",
                "error sending request for url (https://hook.invalid/CaseSecretPath)",
            ),
            (
                "https://hook.invalid/a b/SpaceSecret",
                "error sending request for url (https://hook.invalid/a%20b/SpaceSecret)",
            ),
            ("https://u:pw@hook.invalid/x/UserinfoSecret", "for url (https://u:pw@hook.invalid/x/UserinfoSecret)"),
            (
                "https://hook.invalid/%7Esecret~tilde/../DotSecret",
                "for url (https://hook.invalid/DotSecret): dns error",
            ),
            ("https://hook.invalid/%7Esecret~tilde/../DotSecret", "no such route ~secret~tilde"),
            ("http://127.0.0.1:9/hook/secret-walk-path", "HTTP 410: Cannot POST /hook/secret-walk-path"),
            ("http://127.0.0.1:9/hook/secret-walk-path", "HTTP 404: no route SECRET-WALK-PATH"),
            ("https://h.example.com/in?token=s3cr3tvalue", "bad token s3cr3tvalue"),
        ] {
            let out = redact(text, Kind::Url, url);
            for secret in [
                "casesecretpath",
                "spacesecret",
                "userinfosecret",
                "u:pw@",
                "dotsecret",
                "secret~tilde",
                "secret-walk-path",
                "s3cr3tvalue",
            ] {
                assert!(!out.to_lowercase().contains(secret), "{url}: {text} → {out}");
            }
        }
        assert_eq!(redact("HTTP 503: try later", Kind::Url, "https://h.example.com/hook"), "HTTP 503: try later");
        assert_eq!(redact_for_channel("HTTP 503", Channel::Sms, None), "HTTP 503");
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

    /// One mailbox, as SMTP's RCPT TO takes it: `victim@evil.example,a@example.com`
    /// was taken as one address, masked as one, and died later at SMTP.
    #[test]
    fn an_email_is_exactly_one_mailbox() {
        let good = [
            "a@example.com",
            "asha@example.com",
            "Asha.K@Example.COM",
            "first.last+tag@mail.example.co.uk",
            "o'brien@example.ie",
            "x_y-z@sub-domain.example.org",
            "!#$%&'*+-/=?^_`{|}~@example.com",
            "a@b.c",
            "user@xn--bcher-kva.example",
            "1234@123.example",
            &format!("{}@example.com", "a".repeat(64)),
            &format!("a@{}.com", "b".repeat(63)),
        ];
        for address in good {
            assert_eq!(validate_email(address).as_deref(), Ok(address), "{address:?} is one mailbox");
        }
        let bad = [
            "victim@evil.example,a@example.com",
            "victim@evil.example, a@example.com",
            "victim@evil.example;a@example.com",
            "a@example.com,",
            "Victim <victim@evil.example>",
            "<victim@evil.example>",
            "victim@evil.example (Victim)",
            "a(comment)@example.com",
            "\"a b\"@example.com",
            "\"a,b\"@example.com",
            "\"\"@example.com",
            "a\\@b@example.com",
            "a@b@example.com",
            " a@example.com",
            "a@example.com ",
            "a@example.com\n",
            "a\tb@example.com",
            "a\u{0}@example.com",
            ".a@example.com",
            "a.@example.com",
            "a..b@example.com",
            "a@example..com",
            "a@.example.com",
            "a@example.com.",
            "a@-example.com",
            "a@example-.com",
            "a@exa_mple.com",
            "a@[127.0.0.1]",
            "a@127.0.0.1:25",
            "a@example.com:25",
            "a@example.com/path",
            "a@localhost",
            "a@",
            "@",
            "",
            "a",
            "asha@exämple.com",
            "äsha@example.com",
            "a@example.com\u{202e}",
            "a\u{200b}@example.com",
            "a@example.c\u{fe0f}om",
            &format!("{}@example.com", "a".repeat(65)),
            &format!("a@{}.com", "b".repeat(64)),
            &format!("a@{}com", format!("{}.", "b".repeat(63)).repeat(4)),
        ];
        for address in bad {
            assert!(validate_email(address).is_err(), "{address:?} was taken as one mailbox");
        }
    }

    #[test]
    fn timezones_and_locales_are_checked() {
        assert!(validate_timezone("Asia/Kathmandu").is_ok());
        assert!(validate_timezone("Mars/Olympus").is_err());
        assert!(validate_locale("pt-BR").is_ok());
        assert!(validate_locale("../etc").is_err());
    }
}
