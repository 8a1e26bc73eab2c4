//! A request body read as JSON, strictly. `serde_json` keeps the last of two
//! equal keys in one object; another reader of the same bytes may keep the
//! first, and then the sender's system and Herald disagree about what the event
//! said. A repeated key is refused instead, naming where it is, and so is
//! nesting deeper than [`MAX_DEPTH`], a limit of Herald's own rather than the
//! parser's.

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::cell::RefCell;
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
}

/// Parses `bytes` as one JSON value, refusing repeated keys and deep nesting.
pub fn read_strict(bytes: &[u8]) -> Result<Value, JsonError> {
    let problem = RefCell::new(None);
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let read = Node { depth: 1, problem: &problem }.deserialize(&mut de).and_then(|v| de.end().map(|()| v));
    read.map_err(|e| match problem.into_inner() {
        Some(p) => p.into_error(),
        None => JsonError::Malformed(e.to_string()),
    })
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
        let mut path = String::new();
        for step in self.path.iter().rev() {
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
        if self.duplicate { JsonError::DuplicateKey { path } } else { JsonError::TooDeep { path } }
    }
}

/// One value at a known depth; builds it as `serde_json` would.
#[derive(Clone, Copy)]
struct Node<'p> {
    depth: usize,
    problem: &'p RefCell<Option<Problem>>,
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

    #[test]
    fn malformed_json_and_trailing_bytes_are_malformed() {
        assert!(matches!(read_strict(b"{"), Err(JsonError::Malformed(_))));
        assert!(matches!(read_strict(b"{} {}"), Err(JsonError::Malformed(_))));
        assert!(matches!(read_strict(b""), Err(JsonError::Malformed(_))));
    }
}
