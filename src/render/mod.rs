//! Rendering (DESIGN rule 6, §6a): templates are loaded once, rendered with
//! strict undefined when the intent is created, and the result is frozen.

pub mod check;
mod errors;
pub mod sms;
mod templates;

pub use templates::{MissingFile, OverBudget, TemplateMeta, TemplateSet, TemplateSetError};

use crate::event::{Channel, Event, RecipientSpec, canonical_json, identity::sha256_hex};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// The frozen, rendered message. Stored once, addressed by [`Content::digest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Content {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    pub body: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub html: Option<String>,
    /// SMS only: `GSM-7` or `UCS-2`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoding: Option<String>,
    /// SMS only: the number of segments the provider will bill.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segments: Option<u32>,
}

impl Content {
    pub fn to_json(&self) -> String {
        canonical_json(&serde_json::to_value(self).unwrap_or(Value::Null))
    }

    /// SHA-256 of the canonical JSON: equal content is stored once.
    pub fn digest(&self) -> String {
        sha256_hex(self.to_json().as_bytes())
    }

    /// (digest, canonical JSON) as the store keeps it, serialised once.
    pub fn stored(&self) -> (String, String) {
        let json = self.to_json();
        (sha256_hex(json.as_bytes()), json)
    }
}

/// The outcome of rendering one (event, channel, recipient).
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    pub locale: String,
    pub revision: String,
    pub content: Content,
    /// Set when an SMS renders over the template's segment budget.
    pub over_budget: Option<OverBudget>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    #[error("no template {0:?} is loaded")]
    UnknownTemplate(String),
    #[error("template {template} has no {file} in locale {locale} (nor in its default locale)")]
    MissingFile { template: String, locale: String, file: String },
    /// `message` names the variable, file and line, never a value: it becomes
    /// the dead intent's `detail`. `cause` is minijinja's own text, which may
    /// quote one (`templates check` shows it: it renders fixtures).
    #[error("{message}")]
    Template { message: String, cause: Option<String> },
}

impl RenderError {
    /// The message with its cause, for `templates check`.
    pub fn with_cause(&self) -> String {
        match self {
            RenderError::Template { message, cause: Some(cause) } => format!("{message} ({cause})"),
            other => other.to_string(),
        }
    }
}

/// The template context: `data` at the top level plus the reserved `event`,
/// `entity` and `recipient` objects. Borrowed from the event, so rendering an
/// event for many recipients and channels never copies its `data`.
#[derive(Serialize)]
pub struct Context<'a> {
    #[serde(flatten)]
    data: &'a Map<String, Value>,
    event: EventContext<'a>,
    entity: EntityContext<'a>,
    recipient: RecipientContext<'a>,
}

#[derive(Serialize)]
struct EventContext<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    occurred_at: String,
}

#[derive(Serialize)]
struct EntityContext<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    id: &'a str,
    version: Option<u64>,
}

#[derive(Serialize)]
struct RecipientContext<'a> {
    id: &'a str,
    locale: &'a str,
}

pub fn context<'a>(event: &'a Event, recipient: &'a RecipientSpec, locale: &'a str) -> Context<'a> {
    Context {
        data: &event.data,
        event: EventContext { kind: &event.event_type, occurred_at: event.occurred_at.canonical() },
        entity: EntityContext { kind: &event.entity.kind, id: &event.entity.id, version: event.entity.version },
        recipient: RecipientContext { id: &recipient.id, locale },
    }
}

/// Webhook content when the template has no `webhook.j2`: the event itself.
pub fn default_webhook_body(event: &Event) -> String {
    canonical_json(&json!({
        "type": event.event_type,
        "entity": {"type": event.entity.kind, "id": event.entity.id, "version": event.entity.version},
        "occurred_at": event.occurred_at.canonical(),
        "data": Value::Object(event.data.clone()),
    }))
}

/// The template files a channel must have in the template's default locale
/// (and in any locale that has one of them): a webhook falls back to the
/// event as JSON, and an email's HTML part is optional.
pub fn required_files(channel: Channel) -> &'static [&'static str] {
    match channel {
        Channel::Webhook => &[],
        other => files_for(other),
    }
}

/// The template files a channel needs, the first of which decides whether a
/// locale has the channel at all.
pub fn files_for(channel: Channel) -> &'static [&'static str] {
    match channel {
        Channel::Email => &["email.subject.j2", "email.txt.j2"],
        Channel::Sms => &["sms.j2"],
        Channel::InApp => &["in_app.j2"],
        Channel::Webhook => &["webhook.j2"],
    }
}
