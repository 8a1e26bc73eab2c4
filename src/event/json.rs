//! A request body read as JSON, strictly. `serde_json` keeps the last of two
//! equal keys in one object; another reader of the same bytes may keep the
//! first, and then the sender's system and Herald disagree about what the event
//! said. A repeated key is refused instead, naming where it is, and so is
//! nesting deeper than [`MAX_DEPTH`], a limit of Herald's own rather than the
//! parser's.

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::cell::{Cell, RefCell};
use std::fmt;

/// Arrays and objects inside one another, the body itself counting as 1.
pub const MAX_DEPTH: usize = 32;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonError {
    #[error("body is not valid JSON: {0}")]
    Malformed(String),
    #[error("{path}: the key appears twice in one object; send each key once")]
    DuplicateKey { path: String },
    #[error("{path}: nested deeper than {MAX_DEPTH} levels of arrays and objects")]
    TooDeep { path: String },
    #[error(
        "{path}: the number {text} cannot be held exactly (beyond a 64-bit integer, or more digits than a \
         double keeps), so two readers could see two different values; send it as a string"
    )]
    InexactNumber { path: String, text: String },
}

/// Parses `bytes` as one JSON value, refusing repeated keys, deep nesting and
/// numbers a double cannot hold as written.
pub fn read_strict(bytes: &[u8]) -> Result<Value, JsonError> {
    let problem = RefCell::new(None);
    let floats = Cell::new(false);
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let read =
        Node { depth: 1, problem: &problem, floats: &floats }.deserialize(&mut de).and_then(|v| de.end().map(|()| v));
    let value = read.map_err(|e| match problem.into_inner() {
        Some(p) => p.into_error(),
        None => JsonError::Malformed(e.to_string()),
    })?;
    // Integers within 64 bits are kept exactly; only a body that had another
    // number needs its text read again.
    if floats.get() {
        numbers::check(bytes)?;
    }
    Ok(value)
}

/// What went wrong, and the path to it, gathered innermost first while the
/// error travels back up through the nodes.
struct Problem {
    duplicate: bool,
    path: Vec<Step>,
}

enum Step {
    Key(String),
    Index(usize),
}

impl Problem {
    fn into_error(self) -> JsonError {
        let path = path_text(self.path.iter().rev());
        if self.duplicate { JsonError::DuplicateKey { path } } else { JsonError::TooDeep { path } }
    }
}

/// `data.po.number`, `recipients[1].id`, `body[0]`: steps from the outside in.
fn path_text<'s>(steps: impl Iterator<Item = &'s Step>) -> String {
    let mut path = String::new();
    for step in steps {
        match step {
            Step::Key(k) if path.is_empty() => path.push_str(k),
            Step::Key(k) => {
                path.push('.');
                path.push_str(k);
            }
            Step::Index(i) if path.is_empty() => path.push_str(&format!("body[{i}]")),
            Step::Index(i) => path.push_str(&format!("[{i}]")),
        }
    }
    if path.is_empty() {
        path.push_str("body");
    }
    path
}

/// One value at a known depth; builds it as `serde_json` would.
#[derive(Clone, Copy)]
struct Node<'p> {
    depth: usize,
    problem: &'p RefCell<Option<Problem>>,
    /// Set when serde_json read a number as a double: a fraction, an
    /// exponent, or an integer beyond 64 bits.
    floats: &'p Cell<bool>,
}

impl Node<'_> {
    fn child(self) -> Self {
        Node { depth: self.depth + 1, ..self }
    }

    fn fail<E: de::Error>(self, duplicate: bool, at: Option<Step>) -> E {
        *self.problem.borrow_mut() = Some(Problem { duplicate, path: at.into_iter().collect() });
        E::custom(if duplicate { "duplicate key" } else { "nested too deep" })
    }

    /// Adds this step to the path of a problem found further in.
    fn passing<E>(self, step: Step) -> impl FnOnce(E) -> E {
        move |e| {
            if let Some(p) = self.problem.borrow_mut().as_mut() {
                p.path.push(step);
            }
            e
        }
    }

    fn enter<E: de::Error>(self) -> Result<(), E> {
        if self.depth > MAX_DEPTH { Err(self.fail(false, None)) } else { Ok(()) }
    }
}

impl<'de> DeserializeSeed<'de> for Node<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(v.into())
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(v.into())
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        self.floats.set(true);
        Ok(v.into())
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.enter()?;
        let mut items = Vec::new();
        while let Some(v) = seq.next_element_seed(self.child()).map_err(self.passing(Step::Index(items.len())))? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.enter()?;
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(self.child()).map_err(self.passing(Step::Key(key.clone())))?;
            if out.contains_key(&key) {
                return Err(self.fail(true, Some(Step::Key(key))));
            }
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

/// Numbers as written. serde_json reads any number that is not a 64-bit
/// integer as the nearest double, so `123456789012345678901` and
/// `…902` would be one value, and `3.14159265358979323846` another number
/// than the sender's: two readers of the same body would see two events.
/// A number is accepted when the double holds it as written — its shortest
/// form (what Herald stores and renders) is the same decimal — and refused
/// otherwise, naming where it is, so the sender can send it as a string.
mod numbers {
    use super::{JsonError, Step, path_text};

    /// One array or object around the current position.
    enum Frame {
        /// The key being read, once its string has been seen.
        Object(Option<String>),
        Array(usize),
    }

    /// Walks text that has already parsed as JSON.
    pub(super) fn check(bytes: &[u8]) -> Result<(), JsonError> {
        let mut stack: Vec<Frame> = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'{' => stack.push(Frame::Object(None)),
                b'[' => stack.push(Frame::Array(0)),
                b'}' | b']' => {
                    stack.pop();
                }
                b',' => {
                    if let Some(Frame::Array(n)) = stack.last_mut() {
                        *n += 1;
                    }
                }
                b'"' => {
                    let end = string_end(bytes, i);
                    let is_key = bytes[end..].iter().find(|b| !b.is_ascii_whitespace()) == Some(&b':');
                    if let (true, Some(Frame::Object(key))) = (is_key, stack.last_mut()) {
                        *key = serde_json::from_slice(&bytes[i..end]).ok();
                    }
                    i = end;
                    continue;
                }
                b'-' | b'0'..=b'9' => {
                    let len = bytes[i..].iter().take_while(|b| b"0123456789+-.eE".contains(b)).count();
                    let text = String::from_utf8_lossy(&bytes[i..i + len]).into_owned();
                    if !held_exactly(&text) {
                        return Err(JsonError::InexactNumber { path: path_of(&stack), text });
                    }
                    i += len;
                    continue;
                }
                _ => {}
            }
            i += 1;
        }
        Ok(())
    }

    /// Just past the closing quote of the string opening at `start`.
    fn string_end(bytes: &[u8], start: usize) -> usize {
        let mut i = start + 1;
        while i < bytes.len() {
            match bytes[i] {
                b'\\' => i += 2,
                b'"' => return i + 1,
                _ => i += 1,
            }
        }
        bytes.len()
    }

    fn path_of(stack: &[Frame]) -> String {
        let steps: Vec<Step> = stack
            .iter()
            .map(|f| match f {
                Frame::Object(key) => Step::Key(key.clone().unwrap_or_default()),
                Frame::Array(n) => Step::Index(*n),
            })
            .collect();
        path_text(steps.iter())
    }

    /// An integer within 64 bits (serde_json keeps it exactly), or a number
    /// whose nearest double writes back as the same decimal.
    pub(super) fn held_exactly(text: &str) -> bool {
        if !text.contains(['.', 'e', 'E']) {
            return text.parse::<i64>().is_ok() || text.parse::<u64>().is_ok();
        }
        match text.parse::<f64>() {
            // The shortest round-trip form. Where two forms are equally short
            // and equally near (a tie), Rust's formatter and ryu (serde_json's
            // writer, and most JSON libraries') may pick different ones; both
            // read back as the same double, so either is as written.
            Ok(v) if v.is_finite() => {
                let written = decimal(text);
                written == decimal(&format!("{v:e}"))
                    || serde_json::Number::from_f64(v).is_some_and(|n| written == decimal(&n.to_string()))
            }
            _ => false,
        }
    }

    /// A decimal as (negative, significant digits, exponent of the last one):
    /// `1.10` and `11e-1` are both (false, "11", -1); zero is (sign, "", 0).
    fn decimal(text: &str) -> (bool, String, i64) {
        let (negative, rest) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let (mantissa, exponent) = match rest.find(['e', 'E']) {
            Some(at) => (&rest[..at], rest[at + 1..].parse::<i64>().unwrap_or(0)),
            None => (rest, 0),
        };
        let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        let digits = format!("{whole}{fraction}");
        let significant = digits.trim_start_matches('0');
        let trimmed = significant.trim_end_matches('0');
        if trimmed.is_empty() {
            return (negative, String::new(), 0);
        }
        let last = exponent - fraction.len() as i64 + (significant.len() - trimmed.len()) as i64;
        (negative, trimmed.to_string(), last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(levels: usize) -> String {
        format!("{}1{}", "[".repeat(levels), "]".repeat(levels))
    }

    #[test]
    fn a_body_reads_as_serde_json_reads_it() {
        let text = r#"{"a": [1, -2, 3.5, "x", null, true, {"b": {}}], "c": "é\u00e9"}"#;
        assert_eq!(read_strict(text.as_bytes()).unwrap(), serde_json::from_str::<Value>(text).unwrap());
    }

    #[test]
    fn a_repeated_key_is_named_by_its_path() {
        let err = |t: &str| read_strict(t.as_bytes()).unwrap_err();
        assert_eq!(err(r#"{"type": "a", "type": "b"}"#), JsonError::DuplicateKey { path: "type".into() });
        assert_eq!(
            err(r#"{"data": {"po": {"number": 1, "number": 2}}}"#),
            JsonError::DuplicateKey { path: "data.po.number".into() }
        );
        assert_eq!(
            err(r#"{"recipients": [{"id": "u-1"}, {"id": "u-2", "id": "u-3"}]}"#),
            JsonError::DuplicateKey { path: "recipients[1].id".into() }
        );
        // the same key in two different objects is fine
        assert!(read_strict(br#"{"a": {"id": 1}, "b": {"id": 1}}"#).is_ok());
    }

    #[test]
    fn nesting_is_bounded_by_herald_not_by_the_parser() {
        assert!(read_strict(nested(MAX_DEPTH).as_bytes()).is_ok());
        let err = read_strict(nested(MAX_DEPTH + 1).as_bytes()).unwrap_err();
        let JsonError::TooDeep { path } = err else { panic!("{err:?}") };
        assert_eq!(path, format!("body{}", "[0]".repeat(MAX_DEPTH)));
        // far deeper than serde_json's own limit: still our error, not a stack overflow
        assert!(matches!(read_strict(nested(100_000).as_bytes()), Err(JsonError::TooDeep { .. })));
        let deep_data = format!(r#"{{"data": {{"x": {}}}}}"#, nested(MAX_DEPTH));
        let JsonError::TooDeep { path } = read_strict(deep_data.as_bytes()).unwrap_err() else { panic!() };
        assert!(path.starts_with("data.x[0]"), "{path}");
    }

    fn inexact(text: &str) -> Option<String> {
        match read_strict(text.as_bytes()) {
            Err(JsonError::InexactNumber { path, .. }) => Some(path),
            Err(other) => panic!("{text}: {other}"),
            Ok(_) => None,
        }
    }

    /// Found by the property tests: -1939163217843407.25 is a double, and
    /// .2 and .3 are equally short and equally near it. serde_json writes one,
    /// Rust's formatter the other; a body from either writer is as written.
    #[test]
    fn a_tie_between_two_shortest_forms_is_accepted_in_either() {
        let v: f64 = "-1939163217843407.25".parse().unwrap();
        let ryu = serde_json::Number::from_f64(v).unwrap().to_string();
        let rust = format!("{v}");
        for text in [ryu.as_str(), rust.as_str(), "-1939163217843407.2", "-1939163217843407.3"] {
            if text.parse::<f64>().unwrap() == v && (text == ryu || text == rust) {
                assert_eq!(inexact(&format!("{{\"x\": {text}}}")), None, "{text}");
            }
        }
        assert_eq!(inexact(&format!("{{\"x\": {ryu}}}")), None, "serde_json's own form: {ryu}");
        assert_eq!(inexact(r#"{"x": 0.30000000000000005}"#).as_deref(), Some("x"), "no writer's form");
    }

    #[test]
    fn a_number_a_double_cannot_hold_as_written_is_refused_naming_it() {
        // Beyond 64 bits, ...901 and ...902 would both read as 1.2345678901234568e20.
        assert_eq!(
            inexact(r#"{"data": {"po": {"number": 123456789012345678901}}}"#).as_deref(),
            Some("data.po.number")
        );
        assert_eq!(inexact(r#"{"a": [1, -99999999999999999999]}"#).as_deref(), Some("a[1]"));
        // More significant digits than a double keeps.
        assert_eq!(inexact(r#"{"pi": 3.14159265358979323846}"#).as_deref(), Some("pi"));
        assert_eq!(inexact(r#"{"x": 9007199254740993.0}"#).as_deref(), Some("x"));
        assert_eq!(inexact(r#"{"x": 0.30000000000000005}"#).as_deref(), Some("x"));
        assert_eq!(inexact("1e-400"), Some("body".into()), "an underflow to zero is not what was written");
        let err = read_strict(br#"{"n": 123456789012345678901}"#).unwrap_err().to_string();
        assert!(err.contains("123456789012345678901") && err.contains("string"), "{err}");
    }

    #[test]
    fn a_number_a_double_holds_exactly_is_read_as_written() {
        for text in [
            "0",
            "-0",
            "18446744073709551615",
            "-9223372036854775808",
            "0.1",
            "1.10",
            "-0.0",
            "1e5",
            "1E+5",
            "2.5e-3",
            "0.30000000000000004",
            "3.141592653589793",
            "123456789012345.6",
            "1.7976931348623157e308",
            "5e-324",
            "{\"a\": [1.5, {\"b\": \"1.11111111111111111111\"}]}",
        ] {
            assert_eq!(inexact(text), None, "{text}");
        }
    }

    proptest::proptest! {
        #[test]
        fn every_double_as_serde_json_writes_it_reads_back_as_itself(bits in proptest::prelude::any::<u64>()) {
            let v = f64::from_bits(bits);
            proptest::prop_assume!(v.is_finite());
            let text = Value::from(v).to_string();
            let read = read_strict(text.as_bytes());
            proptest::prop_assert!(read.is_ok(), "{}: {:?}", text, read);
            proptest::prop_assert_eq!(read.unwrap().as_f64(), Some(v), "{}", text);
        }
    }

    #[test]
    fn malformed_json_and_trailing_bytes_are_malformed() {
        assert!(matches!(read_strict(b"{"), Err(JsonError::Malformed(_))));
        assert!(matches!(read_strict(b"{} {}"), Err(JsonError::Malformed(_))));
        assert!(matches!(read_strict(b""), Err(JsonError::Malformed(_))));
    }
}
