//! Free text from outside Herald, with every address and number masked.
//!
//! A provider writes what it likes into a bounce diagnostic, a receipt's
//! reason or an error body — the recipient's address, the sender's number, a
//! support mailbox — and a bus message that could not become an event holds
//! whatever its sender put there, in whatever shape. Unlike
//! [`crate::recipient::redact`], which keeps one known destination out of a
//! text, this masks *every* email address and every phone-like number, with
//! the destinations' own mask (`a***@example.com`, `+97798******00`).
//!
//! It is applied where such text enters Herald (before it is stored) and
//! again where stored text is shown, for rows written before it existed.

use crate::event::Channel;
use crate::recipient::{Kind, mask, redact_addresses, redact_for_channel};
use serde_json::Value;

/// The fewest digits a run must have to be masked as a number: a local phone
/// number has seven.
const PHONE_DIGITS: usize = 7;

/// `text` with every email address and every phone-like number masked.
///
/// A number is a run of digits, optionally after `+` or `(`, with at most two
/// of ` -.()` between digits (`+977 980-000-0000`, `(980) 000.0000`); a run
/// holding seven digits or more is masked, whatever it stands for. Two forms
/// that are not numbers are kept, because diagnostics are read by them: an
/// ISO date (`2026-12-02`) and an IPv4 address (`203.0.113.5`). Neither holds
/// seven digits in a row.
pub fn scrub_text(text: &str) -> String {
    // Numbers first: an address's mask keeps the first character of its
    // local part, which a number run before it would otherwise take in.
    redact_addresses(&scrub_numbers(text))
}

/// Stored provider text (an attempt's error, a receipt's reason) as every
/// view shows it: the intent's own destination kept out however the provider
/// wrote it (a webhook URL's path included), then every other address and
/// number masked — for rows stored before the text was scrubbed on its way in.
pub fn provider_text(text: &str, channel: Channel, destination: Option<&str>) -> String {
    scrub_text(&redact_for_channel(text, channel, destination))
}

/// [`scrub_text`] for text that may be absent.
pub fn scrub_opt(text: Option<&str>) -> Option<String> {
    text.map(scrub_text)
}

fn scrub_numbers(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let after_digit = i > 0 && (chars[i - 1].is_ascii_digit() || chars[i - 1] == '.');
        if let Some(len) = (!after_digit).then(|| kept_form_at(&chars[i..])).flatten() {
            out.extend(&chars[i..i + len]);
            i += len;
            continue;
        }
        let bracket_before_kept = chars[i] == '(' && kept_form_at(&chars[i + 1..]).is_some();
        let starts = chars[i].is_ascii_digit()
            || (matches!(chars[i], '+' | '(') && chars.get(i + 1).is_some_and(char::is_ascii_digit));
        if !starts || bracket_before_kept {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let last = run_end(&chars, i);
        let digits: String = chars[i..=last].iter().filter(|c| c.is_ascii_digit()).collect();
        if digits.len() >= PHONE_DIGITS {
            out.push_str(&mask_number(&digits));
        } else {
            out.extend(&chars[i..=last]);
        }
        i = last + 1;
    }
    out
}

/// The index of the last digit of the run starting at `start`: digits, with
/// at most two separators between two of them.
fn run_end(chars: &[char], start: usize) -> usize {
    let mut last = if chars[start].is_ascii_digit() { start } else { start + 1 };
    let mut at = last + 1;
    while at < chars.len() {
        if chars[at].is_ascii_digit() {
            last = at;
            at += 1;
            continue;
        }
        let separators = chars[at..].iter().take_while(|c| " -.()".contains(**c)).count();
        if separators > 2 || !chars.get(at + separators).is_some_and(char::is_ascii_digit) {
            break;
        }
        // `08:17:24 (2026-12-02…`: the date is not this number's tail.
        if kept_form_at(&chars[at + separators..]).is_some() && !chars[at + separators - 1].eq(&'.') {
            break;
        }
        at += separators;
    }
    last
}

/// A number as a destination's mask shows it: enough to recognise a phone
/// number of ten digits or more; nothing of a shorter one.
fn mask_number(digits: &str) -> String {
    if digits.len() >= 10 { mask(Kind::Phone, &format!("+{digits}")) } else { "+***".into() }
}

/// The length of a date or an IPv4 address starting here, when one does and
/// no digit follows it (`2026-12-02-55` is no date).
fn kept_form_at(chars: &[char]) -> Option<usize> {
    let len = iso_date(chars).or_else(|| ipv4(chars))?;
    let next_is_digit = |k: usize| chars.get(k).is_some_and(char::is_ascii_digit);
    let continues = next_is_digit(len) || (chars.get(len).is_some_and(|c| "-.".contains(*c)) && next_is_digit(len + 1));
    (!continues).then_some(len)
}

fn number_at(chars: &[char], at: usize, len: usize) -> Option<u32> {
    let part = chars.get(at..at + len)?;
    part.iter().all(char::is_ascii_digit).then(|| part.iter().collect::<String>().parse().ok())?
}

/// `YYYY-MM-DD` with a month and a day that exist.
fn iso_date(chars: &[char]) -> Option<usize> {
    let (month, day) = (number_at(chars, 5, 2)?, number_at(chars, 8, 2)?);
    let shape = number_at(chars, 0, 4).is_some() && chars.get(4) == Some(&'-') && chars.get(7) == Some(&'-');
    (shape && (1..=12).contains(&month) && (1..=31).contains(&day)).then_some(10)
}

/// Four parts of one to three digits, each at most 255, between dots.
fn ipv4(chars: &[char]) -> Option<usize> {
    let mut at = 0;
    for part in 0..4 {
        if part > 0 {
            (chars.get(at) == Some(&'.')).then_some(())?;
            at += 1;
        }
        let len = chars[at..].iter().take(3).take_while(|c| c.is_ascii_digit()).count();
        (len > 0 && number_at(chars, at, len)? <= 255).then_some(())?;
        at += len;
    }
    Some(at)
}

/// A stored body as it is shown back: the JSON it holds, or, when it holds
/// none (a malformed message is why many are rejected), its text.
#[derive(Debug, Clone, PartialEq)]
pub enum ShownBody {
    Json(Value),
    Text(String),
}

impl ShownBody {
    /// `json` or `text`, as the views name the form.
    pub fn format(&self) -> &'static str {
        match self {
            ShownBody::Json(_) => "json",
            ShownBody::Text(_) => "text",
        }
    }

    /// The body as a JSON value: the JSON itself, or the text as a string.
    pub fn into_value(self) -> Value {
        match self {
            ShownBody::Json(v) => v,
            ShownBody::Text(t) => Value::String(t),
        }
    }
}

/// A stored body shown back (a rejected bus message): JSON of any shape with
/// every key and value that looks like an address or a number masked — an
/// inline recipient's fields by their kind, any other string as text, a URL
/// to its scheme and host, a number of seven digits or more as a masked
/// string. A body that is not JSON is scrubbed as text, URLs included.
pub fn scrub_body(body: &str) -> ShownBody {
    match serde_json::from_str::<Value>(body) {
        Ok(mut value) => {
            crate::recipient::mask_inline_recipients(&mut value);
            scrub_json(&mut value);
            ShownBody::Json(value)
        }
        Err(_) => ShownBody::Text(scrub_text(&mask_urls(body))),
    }
}

/// Masks in place every key and value of `value` that looks like an address
/// or a number, at any depth.
pub fn scrub_json(value: &mut Value) {
    match value {
        Value::String(s) => *s = scrub_string(s),
        Value::Number(n) => {
            let text = n.to_string();
            let scrubbed = scrub_text(&text);
            if scrubbed != text {
                *value = Value::String(scrubbed);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(scrub_json),
        Value::Object(map) => {
            let entries = std::mem::take(map);
            for (key, mut v) in entries {
                scrub_json(&mut v);
                map.insert(scrub_string(&key), v);
            }
        }
        Value::Bool(_) | Value::Null => {}
    }
}

/// [`scrub_text`] with every URL cut to its scheme and host first: for text
/// that may hold a URL whoever wrote it (a value in a rejected bus message's
/// body, the API's error that refused it).
pub fn scrub_string(s: &str) -> String {
    scrub_text(&mask_urls(s))
}

/// Every `scheme://…` URL in `text` (`https`, `ftp`, any scheme) cut to its
/// scheme and host: its path and query can be a webhook's secret. A URL ends
/// at a space, a quote, `<`, `>` or the end; a tab or a line break does not
/// end it (a URL parser drops them, so the rest is still the secret).
pub fn mask_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    while let Some(found) = text[last..].find("://") {
        let separator = last + found;
        let start = scheme_start(&text[last..separator]).map_or(separator, |s| last + s);
        let end = text[separator..]
            .find(|c: char| (c.is_whitespace() && !matches!(c, '\t' | '\n' | '\r')) || "\"'<>".contains(c))
            .map_or(text.len(), |len| separator + len);
        out.push_str(&text[last..start]);
        out.push_str(&mask(Kind::Url, &text[start..end]));
        last = end;
    }
    out.push_str(&text[last..]);
    out
}

/// Where the URL scheme that ends `before` starts: a letter, then letters,
/// digits, `+`, `-` or `.` (RFC 3986); `None` when `before` ends in none.
fn scheme_start(before: &str) -> Option<usize> {
    let tail =
        before.len() - before.bytes().rev().take_while(|b| b.is_ascii_alphanumeric() || b"+-.".contains(b)).count();
    before[tail..].find(|c: char| c.is_ascii_alphabetic()).map(|at| tail + at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn a_bounce_diagnostic_keeps_its_words_and_loses_its_addresses() {
        assert_eq!(
            scrub_text("550 5.1.1 <asha@example.com> … +9779800000001"),
            "550 5.1.1 <a***@example.com> … +97798******01"
        );
        assert_eq!(
            scrub_text("from +1 (415) 555-0778 to 9779800000021: refused; mail Support.Desk@Provider.example"),
            "from +14155****78 to +97798******21: refused; mail S***@Provider.example"
        );
        assert_eq!(scrub_text("call 555 0778"), "call +***");
        assert_eq!(scrub_text("Twilio error 30005"), "Twilio error 30005");
        assert_eq!(scrub_text("HTTP 400: code 21211"), "HTTP 400: code 21211");
    }

    #[test]
    fn dates_times_and_ip_addresses_are_not_numbers() {
        let kept = "421 4.7.0 [203.0.113.5] deferred at 2026-12-02 08:17:24 (2026-12-02T08:17:24Z)";
        assert_eq!(scrub_text(kept), kept);
        // …unless they are not really one: no month 98, no part over 255,
        // and a date that goes on is a number.
        assert_eq!(scrub_text("1234-56-78"), "+***");
        assert_eq!(scrub_text("980.000.700.1234"), "+98000******34");
        assert_eq!(scrub_text("2026-12-02-5512"), "+20261*****12");
    }

    #[test]
    fn a_json_body_of_any_shape_is_masked() {
        let body = json!({
            "recipients": {"u-1": {"email": "asha@example.com", "phone": 14155550778_u64}, "keyed@example.com": [["+9779800000032"]]},
            "hook": "see https://hooks.example.com/services/T0/B0/SECRET now",
            "data": {"total": 1200, "at": "2026-12-02T08:17:24Z", "price": 12.5}
        });
        let ShownBody::Json(shown) = scrub_body(&body.to_string()) else { panic!("JSON shown as text") };
        assert_eq!(shown["recipients"]["u-1"], json!({"email": "a***@example.com", "phone": "+14155****78"}));
        assert_eq!(shown["recipients"]["k***@example.com"], json!([["+97798******32"]]));
        assert_eq!(shown["hook"], "see https://hooks.example.com/*** now");
        assert_eq!(shown["data"], body["data"], "short numbers and dates are kept");
        assert_eq!(
            scrub_body("to asha@example.com, phone +9779800000035 https://h.example.com/x?secret=1"),
            ShownBody::Text("to a***@example.com, phone +97798******35 https://h.example.com/***".into())
        );
    }

    #[test]
    fn a_url_of_any_scheme_loses_its_path_even_with_a_stray_tab() {
        assert_eq!(
            scrub_string("recipients[0].webhook_url: \"ftp://u:pw@files.example.com/T0/SECRET\" must be http(s)"),
            "recipients[0].webhook_url: \"ftp://files.example.com/***\" must be http(s)"
        );
        assert_eq!(
            scrub_string("at https://hooks.slack.com/services/T0\tB0/SECRET now"),
            "at https://hooks.slack.com/*** now"
        );
        assert_eq!(scrub_string("(HTTPS://h.example.com/x?k=1)"), "(https://h.example.com/***");
        assert_eq!(scrub_string("git+ssh://git.example.com/repo.git"), "git+ssh://git.example.com/***");
        assert_eq!(scrub_string("a :// b"), "a *** b");
        assert_eq!(scrub_string("no url here: 2026-12-02"), "no url here: 2026-12-02");
    }

    /// An email address as a reader would see one: a local-part character,
    /// `@`, a domain character.
    fn has_email_like(s: &str) -> bool {
        let local = |c: char| c.is_ascii_alphanumeric() || "._%+-".contains(c);
        let domain = |c: char| c.is_ascii_alphanumeric() || ".-".contains(c);
        let chars: Vec<char> = s.chars().collect();
        (1..chars.len().saturating_sub(1)).any(|i| chars[i] == '@' && local(chars[i - 1]) && domain(chars[i + 1]))
    }

    fn has_seven_digits(s: &str) -> bool {
        s.chars().collect::<Vec<_>>().windows(PHONE_DIGITS).any(|w| w.iter().all(char::is_ascii_digit))
    }

    fn fragment() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-zA-Z0-9._%+-]{1,12}@[a-zA-Z0-9-]{1,10}(\\.[a-zA-Z]{2,4}){1,2}",
            "\\+?[0-9]{7,15}",
            "\\+?[0-9]{1,3}[ .-]\\(?[0-9]{3}\\)?[ .-]?[0-9]{3}[ .-][0-9]{4}",
            "[0-9]{4}-[0-9]{2}-[0-9]{2}",
            "[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}\\.[0-9]{1,3}",
            "[0-9]{1,6}",
            "[ <>()\\[\\];:,.@+*-]{1,3}",
            "[a-zA-Z ]{1,8}",
            "\\PC{0,6}",
        ]
    }

    proptest! {
        #[test]
        fn no_address_or_number_survives(parts in proptest::collection::vec(fragment(), 0..12)) {
            let text = parts.concat();
            let scrubbed = scrub_text(&text);
            prop_assert!(!has_email_like(&scrubbed), "{text:?} → {scrubbed:?}");
            prop_assert!(!has_seven_digits(&scrubbed), "{text:?} → {scrubbed:?}");
            prop_assert_eq!(scrub_text(&scrubbed), scrubbed.clone(), "scrubbing again changes nothing");
        }

        #[test]
        fn no_address_or_number_survives_in_a_json_body(parts in proptest::collection::vec(fragment(), 1..8)) {
            let body = json!({"recipients": {(parts[0].clone()): parts.clone()}, "n": 14155550778_u64}).to_string();
            let shown = scrub_body(&body).into_value().to_string();
            prop_assert!(!has_email_like(&shown), "{body} → {shown}");
            prop_assert!(!has_seven_digits(&shown), "{body} → {shown}");
        }
    }
}
