//! How stored rows look from outside: times in RFC 3339, destinations masked,
//! content as the JSON object it was frozen as.

use crate::clock::rfc3339;
use crate::recipient::mask;
use crate::store::{AttemptRow, InboxCard, IntentDetail, IntentRow, RecipientRow};
use serde_json::{Value, json};

fn content_value(text: Option<&str>) -> Value {
    text.and_then(|t| serde_json::from_str(t).ok()).unwrap_or(Value::Null)
}

pub fn intent(row: &IntentRow) -> Value {
    let mut v = json!({
        "id": row.key,
        "key": row.key,
        "channel": row.channel,
        "recipient_id": row.recipient_id,
        "destination": row.destination.as_deref().map(mask),
        "event_type": row.event_type,
        "occurred_at": row.occurred_at,
        "entity": {"type": row.entity_type, "id": row.entity_id, "version": row.entity_version},
        "template": {"id": row.template_id, "revision": row.template_revision, "locale": row.locale},
        "payload_digest": row.payload_digest,
        "decision": row.decision,
        "reason": row.reason,
        "detail": row.detail,
        "state": row.state,
        "attempt_count": row.attempts,
        "created_at": rfc3339(row.created_at),
        "updated_at": rfc3339(row.updated_at),
        "preferences_version": row.preferences_version,
    });
    // The link says what it is: the newer version that superseded this intent,
    // or the digest this member was batched into.
    if let Some(link) = &row.link_key {
        let name = if row.reason.as_deref() == Some("superseded") { "superseded_by" } else { "digest_id" };
        v[name] = Value::String(link.clone());
    }
    v
}

pub fn intent_detail(d: &IntentDetail) -> Value {
    let mut v = intent(&d.intent);
    v["content"] = content_value(d.content.as_deref());
    v["attempts"] = d.attempts.iter().map(attempt).collect();
    v
}

pub fn attempt(a: &AttemptRow) -> Value {
    json!({
        "n": a.n,
        "started_at": rfc3339(a.started_at),
        "finished_at": a.finished_at.and_then(rfc3339),
        "outcome": a.outcome,
        "error_class": a.error_class,
        "provider_status": a.provider_status,
        "provider_message_id": a.provider_message_id,
        "error": a.error,
        "retry_after_seconds": a.retry_after.map(|us| us as f64 / 1e6),
        "next_try_at": a.retry_at.and_then(rfc3339),
    })
}

pub fn card(c: &InboxCard) -> Value {
    json!({
        "id": c.card_id,
        "entity": {"type": c.entity_type, "id": c.entity_id},
        "version": c.version,
        "content": content_value(c.content.as_deref()),
        "collapsed": c.collapsed,
        "read": c.read_at.is_some(),
        "intent_id": c.intent_key,
        "updated_at": rfc3339(c.updated_at),
    })
}

/// The directory entry as its owner wrote it (unmasked: the caller holds
/// `recipients:write` and wrote these values).
pub fn recipient(r: &RecipientRow) -> Value {
    json!({
        "id": r.id,
        "email": r.email,
        "phone": r.phone,
        "locale": r.locale,
        "timezone": r.timezone,
        "webhook_url": r.webhook_url,
        "preferences": serde_json::from_str::<Value>(&r.preferences).unwrap_or(Value::Null),
        "preferences_version": r.preferences_version,
        "updated_at": rfc3339(r.updated_at),
    })
}
