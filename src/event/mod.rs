//! The event at the HTTP edge: parsed once into typed values, so that nothing
//! further in sees raw JSON. Identity (DESIGN §3) lives in [`identity`].

pub mod identity;
pub mod json;
mod occurred_at;
mod parse;

pub use identity::{NotificationKey, OccurredAt, Tenant, canonical_json};
pub use parse::{EventError, parse_event};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::fmt;

/// The delivery channels Herald knows. A route or an event may only name these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Channel {
    Email,
    Sms,
    InApp,
    Webhook,
}

impl Channel {
    pub const ALL: [Channel; 4] = [Channel::Email, Channel::Sms, Channel::InApp, Channel::Webhook];

    pub fn as_str(self) -> &'static str {
        match self {
            Channel::Email => "email",
            Channel::Sms => "sms",
            Channel::InApp => "in_app",
            Channel::Webhook => "webhook",
        }
    }

    pub fn parse(s: &str) -> Option<Channel> {
        Channel::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

crate::intent::text_column!(Channel);

impl PartialEq<&str> for Channel {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl fmt::Display for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the event is about: `purchase_order:PO-4482`, optionally at a version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EntityRef {
    #[serde(rename = "type")]
    pub kind: String,
    pub id: String,
    pub version: Option<u64>,
}

/// A recipient as the event names it; fields given here override the directory
/// for this event only. Every field was validated at the edge.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RecipientSpec {
    pub id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phone: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub locale: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub webhook_url: Option<String>,
}

/// A validated domain event.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub event_type: String,
    pub entity: EntityRef,
    pub occurred_at: OccurredAt,
    pub data: Map<String, Value>,
    pub recipients: Vec<RecipientSpec>,
    pub channels: Option<Vec<Channel>>,
}

impl Event {
    /// The event in canonical form: the thing the request fingerprint hashes and
    /// the dead-letter view shows. `occurred_at` is in its canonical UTC form.
    pub fn canonical(&self) -> Value {
        let mut entity = Map::new();
        entity.insert("type".into(), self.entity.kind.clone().into());
        entity.insert("id".into(), self.entity.id.clone().into());
        if let Some(v) = self.entity.version {
            entity.insert("version".into(), v.into());
        }
        let mut out = Map::new();
        out.insert("type".into(), self.event_type.clone().into());
        out.insert("entity".into(), Value::Object(entity));
        out.insert("occurred_at".into(), self.occurred_at.canonical().into());
        out.insert("data".into(), Value::Object(self.data.clone()));
        let recipients = serde_json::to_value(&self.recipients).unwrap_or(Value::Null);
        out.insert("recipients".into(), recipients);
        if let Some(channels) = &self.channels {
            let names = channels.iter().map(|c| Value::from(c.as_str())).collect();
            out.insert("channels".into(), Value::Array(names));
        }
        Value::Object(out)
    }

    /// SHA-256 (hex) of the canonical form: key order, spacing and the offset an
    /// instant is written in do not change it.
    pub fn fingerprint(&self) -> String {
        identity::sha256_hex(canonical_json(&self.canonical()).as_bytes())
    }

    /// SHA-256 (hex) of the event's content alone — type, entity with its
    /// version, occurred_at and data, in canonical form — without the audience
    /// (recipients, channels). Once an event key is accepted its content is
    /// frozen; the audience is not.
    pub fn content_digest(&self) -> String {
        Event::content_digest_of(self.canonical())
    }

    /// [`Event::content_digest`] from the canonical form already built (ingest
    /// builds it once for the fingerprint, the stored body and this).
    pub fn content_digest_of(mut canonical: Value) -> String {
        if let Value::Object(map) = &mut canonical {
            map.remove("recipients");
            map.remove("channels");
        }
        identity::sha256_hex(canonical_json(&canonical).as_bytes())
    }

    /// `tenant|type|entity.type|entity.id|occurred_at`: what identifies the
    /// event, and with the fingerprint the request when no `Idempotency-Key`
    /// is sent.
    pub fn event_key(&self, tenant: &Tenant) -> String {
        [tenant.as_str(), &self.event_type, &self.entity.kind, &self.entity.id, &self.occurred_at.canonical()].join("|")
    }

    pub fn notification_key(&self, tenant: &Tenant, channel: Channel, recipient_id: &str) -> NotificationKey {
        NotificationKey::derive(&self.event_key(tenant), channel, recipient_id)
    }
}
