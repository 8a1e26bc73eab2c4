//! Property tests of identity at the edge, through the same path a request
//! takes (`read_strict` → `parse_event` → keys and fingerprint):
//!
//! - two different instants never share a key, and one instant written with
//!   any offset and any number of fractional digits always does;
//! - a body re-serialised by another writer — other key order, other
//!   whitespace, other string escapes, other forms of the same numbers —
//!   keeps its fingerprint and its content digest.
//!
//! The writers here are the test's own, not Herald's.

use herald::event::json::read_strict;
use herald::event::{Channel, Event, Tenant, parse_event};
use jiff::Timestamp;
use jiff::tz::{Offset, TimeZone};
use proptest::prelude::*;
use serde_json::{Map, Number, Value, json};

fn parse(body: &str) -> Event {
    let value = read_strict(body.as_bytes()).unwrap_or_else(|e| panic!("{e}: {body}"));
    parse_event(&value).unwrap_or_else(|e| panic!("{e}: {body}"))
}

fn event_at(occurred_at: &str) -> String {
    json!({
        "type": "purchase_order.approved",
        "entity": {"type": "purchase_order", "id": "PO-1"},
        "occurred_at": occurred_at,
        "recipients": [{"id": "u-1"}],
    })
    .to_string()
}

// ---- instants ----

/// From 0001-01-02 to 9998-12-30: any offset keeps the written year in range.
fn instant() -> impl Strategy<Value = Timestamp> {
    let (lo, hi) = (-62_135_510_400_i64, 253_370_592_000_i64);
    prop_oneof![
        (lo..hi, 0..1_000_000_000_i32),
        // Around now, where real events are, with whole seconds and millis.
        (1_700_000_000_i64..1_900_000_000, prop_oneof![Just(0), (0..1000).prop_map(|ms| ms * 1_000_000)]),
    ]
    .prop_map(|(s, n)| Timestamp::new(s, n).unwrap())
}

/// A nonzero distance, from one nanosecond to centuries, either way.
fn distance() -> impl Strategy<Value = i128> {
    let magnitude = prop_oneof![
        1_i128..1_000,
        1_000_i128..1_000_000_000,
        1_000_000_000_i128..86_400_000_000_000,
        86_400_000_000_000_i128..3_000_000_000_000_000_000,
    ];
    (magnitude, any::<bool>()).prop_map(|(m, neg)| if neg { -m } else { m })
}

/// `ts` written at `offset_minutes` with `digits` fractional digits (at
/// least as many as it needs), `Z` for a zero offset when `zulu`.
fn written(ts: Timestamp, offset_minutes: i32, digits: usize, zulu: bool) -> String {
    let tz = TimeZone::fixed(Offset::from_seconds(offset_minutes * 60).unwrap());
    let dt = ts.to_zoned(tz).datetime();
    let nanos = format!("{:09}", dt.subsec_nanosecond());
    let needed = nanos.trim_end_matches('0').len();
    let fraction = if digits.max(needed) == 0 { String::new() } else { format!(".{}", &nanos[..digits.max(needed)]) };
    let zone = if offset_minutes == 0 && zulu {
        "Z".to_string()
    } else {
        let m = offset_minutes.abs();
        format!("{}{:02}:{:02}", if offset_minutes < 0 { '-' } else { '+' }, m / 60, m % 60)
    };
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}{fraction}{zone}",
        dt.year(),
        dt.month(),
        dt.day(),
        dt.hour(),
        dt.minute(),
        dt.second()
    )
}

fn writing() -> impl Strategy<Value = (i32, usize, bool)> {
    (prop_oneof![Just(0), -1439..=1439_i32, (-14..=14_i32).prop_map(|h| h * 60)], 0..=9_usize, any::<bool>())
}

fn keys(e: &Event) -> (String, String) {
    let tenant = Tenant::new("acme");
    (e.event_key(&tenant), e.notification_key(&tenant, Channel::Sms, "u-1").as_str().to_string())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn one_instant_written_any_way_is_one_key(ts in instant(), a in writing(), b in writing()) {
        let (ta, tb) = (written(ts, a.0, a.1, a.2), written(ts, b.0, b.1, b.2));
        let (ea, eb) = (parse(&event_at(&ta)), parse(&event_at(&tb)));
        prop_assert_eq!(keys(&ea), keys(&eb), "{} / {}", ta, tb);
        prop_assert_eq!(ea.fingerprint(), eb.fingerprint(), "{} / {}", ta, tb);
    }

    #[test]
    fn two_different_instants_never_share_a_key(ts in instant(), d in distance(), a in writing(), b in writing()) {
        let other = ts.as_nanosecond().checked_add(d).and_then(|n| Timestamp::from_nanosecond(n).ok());
        prop_assume!(other.is_some_and(|o| o > Timestamp::new(-62_135_510_400, 0).unwrap()
            && o < Timestamp::new(253_370_592_000, 0).unwrap()));
        let other = other.unwrap();
        let (ta, tb) = (written(ts, a.0, a.1, a.2), written(other, b.0, b.1, b.2));
        let (ka, kb) = (keys(&parse(&event_at(&ta))), keys(&parse(&event_at(&tb))));
        prop_assert_ne!(&ka.0, &kb.0, "{} / {}", ta, tb);
        prop_assert_ne!(&ka.1, &kb.1, "{} / {}", ta, tb);
    }
}

// ---- bodies ----

/// Numbers every form of which reads back exactly: 64-bit integers, and
/// doubles (any finite one is held exactly by its shortest decimal).
fn number() -> impl Strategy<Value = Number> {
    prop_oneof![
        any::<i64>().prop_map(Number::from),
        any::<u64>().prop_map(Number::from),
        (-1000_i64..1000).prop_map(Number::from),
        any::<f64>().prop_filter_map("finite", Number::from_f64),
        (-1_000_000_i64..1_000_000, 0_u32..4)
            .prop_map(|(n, e)| Number::from_f64(n as f64 / 10f64.powi(e as i32)).unwrap()),
        // Integral doubles: `5.0` is the integer 5 written another way.
        (-1_000_000_i64..1_000_000).prop_map(|n| Number::from_f64(n as f64).unwrap()),
    ]
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]{0,8}",
        any::<String>(),
        prop::collection::vec(
            prop_oneof![Just('"'), Just('\\'), Just('/'), Just('\n'), Just('\u{1}'), Just('é'), Just('😀')],
            0..6
        )
        .prop_map(|v| v.into_iter().collect()),
    ]
}

fn data_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number().prop_map(Value::Number),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(text(), inner, 0..6).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn data() -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::btree_map(text(), data_value(), 0..6)
        .prop_map(|m| m.into_iter().filter(|(k, _)| !["event", "entity", "recipient"].contains(&k.as_str())).collect())
}

/// Another writer: keys shuffled, whitespace anywhere it is allowed, some
/// characters escaped as `\uXXXX` (or `\/`), numbers in another form that
/// denotes the same value.
struct Rewriter {
    state: u64,
}

impl Rewriter {
    fn next(&mut self) -> u64 {
        // xorshift64*: enough to choose forms; the seed comes from proptest.
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        self.state.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn ws(&mut self, out: &mut String) {
        for _ in 0..self.below(3) {
            out.push([' ', '\n', '\t', '\r'][self.below(4) as usize]);
        }
    }

    fn string(&mut self, s: &str, out: &mut String) {
        out.push('"');
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '/' if self.chance(50) => out.push_str("\\/"),
                c if (c as u32) < 0x20 || self.chance(20) => {
                    let mut units = [0u16; 2];
                    for u in c.encode_utf16(&mut units) {
                        if self.chance(50) {
                            out.push_str(&format!("\\u{u:04x}"));
                        } else {
                            out.push_str(&format!("\\u{u:04X}"));
                        }
                    }
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }

    /// The same value: `5` as `5.0`, `5e0`, `50E-1`, `0.5e+1`; a double in
    /// exponent form, with padding zeros, or as a plain decimal.
    ///
    /// An integer beyond 2^53 keeps its plain digits: written with a point or
    /// an exponent it is a double, which cannot hold it, and Herald refuses it
    /// (`inexact_number`) rather than guess — docs/api.md, *Limits*.
    fn number(&mut self, n: &Number, out: &mut String) {
        let text = n.to_string();
        let beyond_a_double = n.as_i64().map(|i| i.unsigned_abs()).or(n.as_u64()).is_some_and(|m| m > 1 << 53);
        if beyond_a_double {
            out.push_str(&text);
            return;
        }
        let (sign, digits, exp) = decimal_parts(&text);
        let form = self.below(5);
        let written = match form {
            0 => text,
            // Mantissa d.ddd with an exponent.
            1 if !digits.is_empty() => {
                let e = exp + digits.len() as i64 - 1;
                let tail = if digits.len() > 1 { format!(".{}", &digits[1..]) } else { String::new() };
                format!("{sign}{}{tail}e{e}", &digits[..1])
            }
            // All digits, a trailing zero, and the exponent to match.
            2 if !digits.is_empty() => format!("{sign}{digits}0E{}", exp - 1),
            // Leading "0." form.
            3 if !digits.is_empty() => format!("{sign}0.{digits}e{:+}", exp + digits.len() as i64),
            // Integers (and integral doubles) with a ".0".
            4 if exp >= 0 && digits.len() as i64 + exp <= 19 && !digits.is_empty() => {
                format!("{sign}{digits}{}.0", "0".repeat(exp as usize))
            }
            _ => text,
        };
        out.push_str(&written);
    }

    fn value(&mut self, v: &Value, out: &mut String) {
        match v {
            Value::Null => out.push_str("null"),
            Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Value::Number(n) => self.number(n, out),
            Value::String(s) => self.string(s, out),
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    self.ws(out);
                    self.value(item, out);
                    self.ws(out);
                }
                out.push(']');
            }
            Value::Object(map) => {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                for i in (1..entries.len()).rev() {
                    entries.swap(i, self.below(i as u64 + 1) as usize);
                }
                out.push('{');
                for (i, (k, v)) in entries.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    self.ws(out);
                    self.string(k, out);
                    self.ws(out);
                    out.push(':');
                    self.ws(out);
                    self.value(v, out);
                    self.ws(out);
                }
                out.push('}');
            }
        }
    }
}

/// `-1.25e3` → ("-", "125", 1): sign, significant digits, exponent of the last.
fn decimal_parts(text: &str) -> (&'static str, String, i64) {
    let (sign, rest) = match text.strip_prefix('-') {
        Some(r) => ("-", r),
        None => ("", text),
    };
    let (mantissa, exp) = match rest.find(['e', 'E']) {
        Some(at) => (&rest[..at], rest[at + 1..].parse::<i64>().unwrap()),
        None => (rest, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all = format!("{whole}{fraction}");
    let significant = all.trim_start_matches('0');
    let trimmed = significant.trim_end_matches('0');
    if trimmed.is_empty() {
        return (sign, String::new(), 0);
    }
    (sign, trimmed.to_string(), exp - fraction.len() as i64 + (significant.len() - trimmed.len()) as i64)
}

fn body_of(data: &Map<String, Value>, version: Option<u64>) -> Value {
    let mut entity = json!({"type": "purchase_order", "id": "PO-7"});
    if let Some(v) = version {
        entity["version"] = json!(v);
    }
    json!({
        "type": "purchase_order.approved",
        "entity": entity,
        "occurred_at": "2026-11-29T10:15:00+05:45",
        "data": data,
        "recipients": [{"id": "u-19"}, {"id": "u-20", "email": "a@example.com", "phone": "+9779800000000"}],
        "channels": ["email", "sms"],
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn a_reserialised_body_keeps_its_fingerprint(data in data(), version in proptest::option::of(any::<u32>()), seed in any::<u64>()) {
        let body = body_of(&data, version.map(u64::from));
        let original = serde_json::to_string(&body).unwrap();
        let mut rewritten = String::new();
        Rewriter { state: seed | 1 }.value(&body, &mut rewritten);
        let (a, b) = (parse(&original), parse(&rewritten));
        prop_assert_eq!(a.fingerprint(), b.fingerprint(), "\n{}\n{}", original, rewritten);
        prop_assert_eq!(a.content_digest(), b.content_digest());
        prop_assert_eq!(keys(&a), keys(&b));
    }

    /// And it is not a fingerprint of nothing: other data is another fingerprint.
    #[test]
    fn other_data_is_another_fingerprint(data in data(), key in "[a-z]{1,8}", n in any::<i64>()) {
        let mut other = data.clone();
        let changed = match other.get(&key) {
            Some(Value::Number(m)) if m.as_i64() == Some(n) => json!(n.wrapping_add(1)),
            _ => json!(n),
        };
        other.insert(key, changed);
        let (a, b) = (body_of(&data, None).to_string(), body_of(&other, None).to_string());
        prop_assert_ne!(parse(&a).fingerprint(), parse(&b).fingerprint());
        prop_assert_ne!(parse(&a).content_digest(), parse(&b).content_digest());
    }
}
