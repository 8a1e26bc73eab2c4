//! Identity (DESIGN §3, contract): the canonical instant, the notification key and
//! the canonical JSON the request fingerprint is taken over.

pub use super::occurred_at::OccurredAt;

use super::Channel;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::fmt;

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The tenant an API token belongs to; `default` when auth is off.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Tenant(String);

impl Tenant {
    pub fn new(name: impl Into<String>) -> Tenant {
        Tenant(name.into())
    }

    pub fn default_tenant() -> Tenant {
        Tenant("default".into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// 32 lowercase hex characters, derived from the event: the same event, channel
/// and recipient always give the same key, whoever sends it and however often.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NotificationKey(String);

impl NotificationKey {
    pub fn derive(event_key: &str, channel: Channel, recipient_id: &str) -> NotificationKey {
        let input = format!("{event_key}|{}|{recipient_id}", channel.as_str());
        NotificationKey(sha256_hex(input.as_bytes())[..32].to_string())
    }

    /// Accepts a string that has the key's shape (used for path parameters).
    pub fn parse(s: &str) -> Option<NotificationKey> {
        let ok = s.len() == 32 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        ok.then(|| NotificationKey(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for NotificationKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// JSON with object keys sorted and no insignificant whitespace. Written out here
/// rather than relying on `serde_json`'s map order, which a `preserve_order`
/// feature anywhere in the dependency tree would silently change.
pub fn canonical_json(value: &Value) -> String {
    let mut out = Vec::with_capacity(256);
    write_canonical(value, &mut out);
    // Every byte above was written by serde_json or is ASCII punctuation.
    String::from_utf8(out).expect("canonical JSON is UTF-8")
}

/// Written straight into one buffer: every request's fingerprint and every
/// rendered message's digest pass through here, and a string per key and per
/// scalar (`Value::to_string` goes through `fmt`) was a tenth of a replayed
/// request's instructions.
fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_scalar(k.as_str(), out);
                out.push(b':');
                write_canonical(v, out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(v, out);
            }
            out.push(b']');
        }
        Value::Number(n) => out.extend_from_slice(canonical_number(n).as_bytes()),
        scalar => write_scalar(scalar, out),
    }
}

/// A string, `true`, `false` or `null` in serde_json's compact form.
fn write_scalar<T: serde::Serialize + ?Sized>(value: &T, out: &mut Vec<u8>) {
    // Writing to memory has no I/O to fail, and a string or a JSON scalar
    // always serialises.
    serde_json::to_writer(out, value).expect("a JSON scalar serialises into memory");
}

/// One spelling per value: a double that holds a whole number within 64 bits
/// is written as that integer, so `5`, `5.0`, `50e-1` and `-0.0` (as `0`)
/// are one fingerprint whichever JSON writer the sender's retry went through.
/// Any other double is written in its shortest round-trip form.
pub fn canonical_number(n: &serde_json::Number) -> String {
    if let Some(f) = n.as_f64().filter(|f| n.is_f64() && f.fract() == 0.0) {
        // 2^63 and 2^64 are exact doubles; within them the cast is exact.
        if (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&f) {
            return (f as i64).to_string();
        }
        if (0.0..18_446_744_073_709_551_616.0).contains(&f) {
            return (f as u64).to_string();
        }
    }
    n.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_key_is_the_design_formula() {
        // sha256("default|purchase_order.approved|purchase_order|PO-4482|2026-11-29T04:30:00.000000000Z|sms|u-19")
        let event_key = "default|purchase_order.approved|purchase_order|PO-4482|2026-11-29T04:30:00.000000000Z";
        let key = NotificationKey::derive(event_key, Channel::Sms, "u-19");
        let want = sha256_hex(format!("{event_key}|sms|u-19").as_bytes());
        assert_eq!(key.as_str(), &want[..32]);
        assert_eq!(key.as_str().len(), 32);
        assert!(NotificationKey::parse(key.as_str()).is_some());
    }

    #[test]
    fn keys_differ_by_channel_and_recipient() {
        let ek = "t|e|x|1|2026-01-01T00:00:00.000000000Z";
        let a = NotificationKey::derive(ek, Channel::Sms, "u-1");
        assert_ne!(a, NotificationKey::derive(ek, Channel::Email, "u-1"));
        assert_ne!(a, NotificationKey::derive(ek, Channel::Sms, "u-2"));
    }

    #[test]
    fn canonical_json_sorts_keys_at_every_depth() {
        let a = json!({"b": 1, "a": {"z": [1, {"y": 2, "x": 1}], "c": "é"}});
        assert_eq!(canonical_json(&a), r#"{"a":{"c":"é","z":[1,{"x":1,"y":2}]},"b":1}"#);
    }

    #[test]
    fn a_number_has_one_canonical_spelling() {
        let canon = |text: &str| canonical_json(&serde_json::from_str(text).unwrap());
        for (forms, want) in [
            (&["5", "5.0", "5e0", "50E-1", "0.5e+1"][..], "5"),
            (&["0", "-0", "0.0", "-0.0", "0e5"][..], "0"),
            (&["-12", "-12.0", "-1.2e1"][..], "-12"),
            (&["9007199254740992", "9007199254740992.0", "9.007199254740992e15"][..], "9007199254740992"),
            (&["18446744073709551615"][..], "18446744073709551615"),
            (&["-9223372036854775808", "-9.223372036854775808e18"][..], "-9223372036854775808"),
            (&["0.1", "1e-1", "0.10"][..], "0.1"),
            (&["1e300", "1.0e300"][..], "1e+300"),
        ] {
            for form in forms {
                assert_eq!(canon(form), want, "{form}");
            }
        }
    }

    /// The form every stored fingerprint and digest was taken over: keys
    /// sorted, each key and scalar as `Value::to_string` writes it.
    fn canonical_by_reference(value: &Value) -> String {
        match value {
            Value::Object(map) => {
                let mut entries: Vec<_> = map.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                let inner: Vec<String> = (entries.into_iter())
                    .map(|(k, v)| format!("{}:{}", Value::from(k.as_str()), canonical_by_reference(v)))
                    .collect();
                format!("{{{}}}", inner.join(","))
            }
            Value::Array(items) => {
                format!("[{}]", items.iter().map(canonical_by_reference).collect::<Vec<_>>().join(","))
            }
            Value::Number(n) => canonical_number(n),
            scalar => scalar.to_string(),
        }
    }

    fn any_json() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        // Quotes, backslashes, control characters and non-ASCII: what escaping is about.
        let text = prop_oneof![any::<String>(), r#"[\"\\/\x00-\x1f\x7f\u2028é😀a-z]{0,8}"#];
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
            text.clone().prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 48, 6, move |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::btree_map(text.clone(), inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        #[test]
        fn canonical_json_is_byte_for_byte_the_reference_form(value in any_json()) {
            proptest::prop_assert_eq!(canonical_json(&value), canonical_by_reference(&value));
        }
    }

    #[test]
    fn key_shape_is_checked() {
        assert!(NotificationKey::parse("ABC").is_none());
        assert!(NotificationKey::parse(&"g".repeat(32)).is_none());
        assert!(NotificationKey::parse(&"a".repeat(32)).is_some());
    }
}
