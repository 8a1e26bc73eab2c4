//! `POST /v1/events` body → [`Event`]. Every error names the field it is about,
//! in the path form a sender can find in its own payload (`recipients[1].phone`).

use super::{Channel, EntityRef, Event, OccurredAt, RecipientSpec};
use crate::recipient::{validate_email, validate_locale, validate_phone, validate_timezone, validate_webhook_url};
use serde_json::{Map, Value};

/// A field that is missing or invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct EventError {
    pub field: String,
    pub message: String,
}

fn err(field: impl Into<String>, message: impl Into<String>) -> EventError {
    EventError { field: field.into(), message: message.into() }
}

/// Names the template context reserves; `data` may not use them.
pub const RESERVED_DATA_NAMES: [&str; 3] = ["event", "entity", "recipient"];

/// The most recipients one event may name (docs/api.md, *Limits*).
pub const MAX_RECIPIENTS: usize = 1000;
/// The longest identifier (type, entity.type, entity.id, a recipient id), in bytes.
pub const MAX_ID_LEN: usize = 256;

pub fn parse_event(body: &Value) -> Result<Event, EventError> {
    let obj = body.as_object().ok_or_else(|| err("body", "must be a JSON object"))?;
    let known = ["type", "entity", "occurred_at", "data", "recipients", "channels"];
    if let Some(unknown) = obj.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(err(unknown.clone(), format!("unknown field; expected one of {}", known.join(", "))));
    }

    let event_type = identifier(obj, "type", "type")?;
    let entity = parse_entity(obj.get("entity"))?;
    let occurred_at = match obj.get("occurred_at") {
        None | Some(Value::Null) => {
            return Err(err("occurred_at", "is required (the sender's time of the event; never defaulted)"));
        }
        Some(Value::String(s)) => OccurredAt::parse(s).map_err(|m| err("occurred_at", m))?,
        Some(_) => return Err(err("occurred_at", "must be a string")),
    };
    let data = match obj.get("data") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => return Err(err("data", "must be an object")),
    };
    if let Some(name) = RESERVED_DATA_NAMES.iter().find(|n| data.contains_key(**n)) {
        return Err(err(
            format!("data.{name}"),
            format!("`{name}` is reserved for the template context (event, entity, recipient); rename it"),
        ));
    }
    let recipients = parse_recipients(obj.get("recipients"))?;
    let channels = parse_channels(obj.get("channels"))?;
    Ok(Event { event_type, entity, occurred_at, data, recipients, channels })
}

/// A non-empty string without `|` (the separator of the identity formula: a `|`
/// inside a field would let two different events share a key).
fn identifier(obj: &Map<String, Value>, name: &str, path: &str) -> Result<String, EventError> {
    match obj.get(name) {
        None | Some(Value::Null) => Err(err(path, "is required")),
        Some(Value::String(s)) => checked_identifier(s, path),
        Some(_) => Err(err(path, "must be a string")),
    }
}

fn checked_identifier(s: &str, path: &str) -> Result<String, EventError> {
    if s.trim().is_empty() {
        return Err(err(path, "must not be empty"));
    }
    if s.len() > MAX_ID_LEN {
        return Err(err(path, format!("must be at most {MAX_ID_LEN} bytes")));
    }
    if s.contains('|') || s.chars().any(char::is_control) {
        return Err(err(path, "must not contain '|' or control characters"));
    }
    Ok(s.to_string())
}

fn parse_entity(v: Option<&Value>) -> Result<EntityRef, EventError> {
    let obj = match v {
        None | Some(Value::Null) => {
            return Err(err("entity", "is required: {\"type\": …, \"id\": …}"));
        }
        Some(Value::Object(o)) => o,
        Some(_) => return Err(err("entity", "must be an object")),
    };
    if let Some(unknown) = obj.keys().find(|k| !["type", "id", "version"].contains(&k.as_str())) {
        return Err(err(format!("entity.{unknown}"), "unknown field; expected type, id, version"));
    }
    let kind = identifier(obj, "type", "entity.type")?;
    let id = identifier(obj, "id", "entity.id")?;
    let version = match obj.get("version") {
        None | Some(Value::Null) => None,
        // `3.0` and `3e0` are the integer 3 written another way.
        Some(v) => Some(
            v.as_u64()
                .or_else(|| {
                    v.as_f64().filter(|f| f.fract() == 0.0 && (0.0..i64::MAX as f64).contains(f)).map(|f| f as u64)
                })
                .filter(|n| i64::try_from(*n).is_ok())
                .ok_or_else(|| err("entity.version", "must be an integer from 0 to 2^63-1"))?,
        ),
    };
    Ok(EntityRef { kind, id, version })
}

fn parse_recipients(v: Option<&Value>) -> Result<Vec<RecipientSpec>, EventError> {
    let items = match v {
        None | Some(Value::Null) => return Err(err("recipients", "is required: a non-empty list")),
        Some(Value::Array(a)) => a,
        Some(_) => return Err(err("recipients", "must be a list")),
    };
    if items.is_empty() {
        return Err(err("recipients", "must not be empty"));
    }
    if items.len() > MAX_RECIPIENTS {
        return Err(err("recipients", format!("at most {MAX_RECIPIENTS} per event")));
    }
    let mut out: Vec<RecipientSpec> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let r = parse_recipient(item, &format!("recipients[{i}]"))?;
        if out.iter().any(|o| o.id == r.id) {
            return Err(err(format!("recipients[{i}].id"), format!("{:?} is listed twice", r.id)));
        }
        out.push(r);
    }
    Ok(out)
}

fn parse_recipient(v: &Value, path: &str) -> Result<RecipientSpec, EventError> {
    let obj = v.as_object().ok_or_else(|| err(path, "must be an object with an id"))?;
    let known = ["id", "email", "phone", "locale", "timezone", "webhook_url"];
    if let Some(unknown) = obj.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(err(format!("{path}.{unknown}"), format!("unknown field; expected one of {}", known.join(", "))));
    }
    let field = |name: &str| -> Result<Option<&str>, EventError> {
        match obj.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.as_str())),
            Some(_) => Err(err(format!("{path}.{name}"), "must be a string")),
        }
    };
    let checked = |name: &str, check: fn(&str) -> Result<String, String>| -> Result<Option<String>, EventError> {
        field(name)?.map(|s| check(s).map_err(|m| err(format!("{path}.{name}"), m))).transpose()
    };
    Ok(RecipientSpec {
        id: identifier(obj, "id", &format!("{path}.id"))?,
        email: checked("email", validate_email)?,
        phone: checked("phone", validate_phone)?,
        locale: checked("locale", validate_locale)?,
        timezone: checked("timezone", validate_timezone)?,
        webhook_url: checked("webhook_url", validate_webhook_url)?,
    })
}

fn parse_channels(v: Option<&Value>) -> Result<Option<Vec<Channel>>, EventError> {
    let items = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(a)) => a,
        Some(_) => return Err(err("channels", "must be a list of channel names")),
    };
    if items.is_empty() {
        return Err(err("channels", "must not be empty when given (omit it to use the route's channels)"));
    }
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let name = item.as_str().unwrap_or_default();
        let ch = Channel::parse(name).ok_or_else(|| {
            err(format!("channels[{i}]"), format!("unknown channel {item}; expected email, sms, in_app or webhook"))
        })?;
        if !out.contains(&ch) {
            out.push(ch);
        }
    }
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample() -> Value {
        json!({
            "type": "purchase_order.approved",
            "entity": {"type": "purchase_order", "id": "PO-4482", "version": 3},
            "occurred_at": "2026-11-29T10:15:00+05:45",
            "data": {"po": {"number": "PO-4482"}},
            "recipients": [{"id": "u-19"}, {"id": "u-20", "email": "a@example.com", "phone": "+9779800000000", "locale": "ne", "timezone": "Asia/Kathmandu"}],
            "channels": ["email", "sms", "in_app"]
        })
    }

    fn field_of(v: Value) -> String {
        parse_event(&v).unwrap_err().field
    }

    #[test]
    fn the_design_example_parses() {
        let e = parse_event(&sample()).unwrap();
        assert_eq!(e.entity.version, Some(3));
        assert_eq!(e.recipients[1].phone.as_deref(), Some("+9779800000000"));
        assert_eq!(e.channels.unwrap(), vec![Channel::Email, Channel::Sms, Channel::InApp]);
    }

    #[test]
    fn each_bad_field_is_named() {
        let mut v = sample();
        v.as_object_mut().unwrap().remove("occurred_at");
        assert_eq!(field_of(v), "occurred_at");
        let mut v = sample();
        v["occurred_at"] = json!("yesterday");
        assert_eq!(field_of(v), "occurred_at");
        let mut v = sample();
        v["entity"].as_object_mut().unwrap().remove("id");
        assert_eq!(field_of(v), "entity.id");
        let mut v = sample();
        v["entity"]["version"] = json!(-1);
        assert_eq!(field_of(v), "entity.version");
        let mut v = sample();
        v["recipients"][1]["phone"] = json!("98000");
        assert_eq!(field_of(v), "recipients[1].phone");
        let mut v = sample();
        v["recipients"][0]["email"] = json!("not-an-address");
        assert_eq!(field_of(v), "recipients[0].email");
        let mut v = sample();
        v["recipients"][1]["timezone"] = json!("Mars/Olympus");
        assert_eq!(field_of(v), "recipients[1].timezone");
        let mut v = sample();
        v["channels"] = json!(["email", "pigeon"]);
        assert_eq!(field_of(v), "channels[1]");
        let mut v = sample();
        v["recipients"] = json!([]);
        assert_eq!(field_of(v), "recipients");
        let mut v = sample();
        v["surprise"] = json!(1);
        assert_eq!(field_of(v), "surprise");
    }

    #[test]
    fn reserved_names_in_data_are_refused() {
        for name in RESERVED_DATA_NAMES {
            let mut v = sample();
            v["data"][name] = json!({"id": 1});
            assert_eq!(field_of(v), format!("data.{name}"));
        }
    }

    #[test]
    fn a_separator_in_an_identity_field_is_refused() {
        let mut v = sample();
        v["entity"]["id"] = json!("PO|1");
        assert_eq!(field_of(v), "entity.id");
        let mut v = sample();
        v["recipients"][0]["id"] = json!("u|1");
        assert_eq!(field_of(v), "recipients[0].id");
    }

    #[test]
    fn the_documented_limits_hold() {
        let many = |n: usize| (0..n).map(|i| json!({"id": format!("u-{i}")})).collect::<Vec<_>>();
        let mut v = sample();
        v["recipients"] = Value::Array(many(MAX_RECIPIENTS));
        assert!(parse_event(&v).is_ok());
        v["recipients"] = Value::Array(many(MAX_RECIPIENTS + 1));
        assert_eq!(parse_event(&v).unwrap_err().message, "at most 1000 per event");
        let mut v = sample();
        v["entity"]["id"] = json!("x".repeat(MAX_ID_LEN));
        assert!(parse_event(&v).is_ok());
        v["entity"]["id"] = json!("x".repeat(MAX_ID_LEN + 1));
        assert_eq!(field_of(v), "entity.id");
    }

    #[test]
    fn a_recipient_listed_twice_is_refused() {
        let mut v = sample();
        v["recipients"] = json!([{"id": "u-1"}, {"id": "u-1"}]);
        assert_eq!(field_of(v), "recipients[1].id");
    }

    #[test]
    fn key_order_and_offset_do_not_change_the_fingerprint() {
        let a = parse_event(&sample()).unwrap();
        let text = r#"{"channels":["email","sms","in_app"],"recipients":[{"id":"u-19"},{"timezone":"Asia/Kathmandu","locale":"ne","phone":"+9779800000000","email":"a@example.com","id":"u-20"}],
            "data":{"po":{"number":"PO-4482"}},"occurred_at":"2026-11-29T04:30:00Z","entity":{"version":3,"id":"PO-4482","type":"purchase_order"},"type":"purchase_order.approved"}"#;
        let b = parse_event(&serde_json::from_str(text).unwrap()).unwrap();
        assert_eq!(a.fingerprint(), b.fingerprint());
        let mut c = sample();
        c["data"]["po"]["number"] = json!("PO-CHANGED");
        assert_ne!(a.fingerprint(), parse_event(&c).unwrap().fingerprint());
    }

    #[test]
    fn the_content_digest_covers_data_and_version_but_not_the_audience() {
        let a = parse_event(&sample()).unwrap();
        let mut audience = sample();
        audience["recipients"].as_array_mut().unwrap().push(json!({"id": "u-21"}));
        audience["channels"] = json!(["email"]);
        let b = parse_event(&audience).unwrap();
        assert_eq!(a.content_digest(), b.content_digest());
        assert_ne!(a.fingerprint(), b.fingerprint());
        for (path, value) in [("/data/po/number", json!("PO-X")), ("/entity/version", json!(4))] {
            let mut c = sample();
            *c.pointer_mut(path).unwrap() = value;
            assert_ne!(a.content_digest(), parse_event(&c).unwrap().content_digest(), "{path}");
        }
        let mut unversioned = sample();
        unversioned["entity"].as_object_mut().unwrap().remove("version");
        assert_ne!(a.content_digest(), parse_event(&unversioned).unwrap().content_digest());
    }
}
