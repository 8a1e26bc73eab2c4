//! How stored rows look from outside: times in RFC 3339, content as the JSON
//! object it was frozen as, and every destination masked — an intent's, a
//! directory entry's, a stored event's inline recipients', and any echo of
//! one in a provider's error text. No view shows a raw address or number.

use crate::channel::sink::shown_message_id;
use crate::clock::rfc3339;
use crate::intent::State;
use crate::receipt::DeliveryStatus;
use crate::recipient::{Kind, mask, mask_for_channel, mask_inline_recipients};
use crate::redact::provider_text;
use crate::store::{AttemptRow, DeadLetter, InboxCard, IntentDetail, IntentRow, ReceiptRow, RecipientRow, ReplayRow};
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
        "destination": row.destination.as_deref().map(|d| mask_for_channel(row.channel, d)),
        "event_type": row.event_type,
        "occurred_at": row.occurred_at,
        "entity": {"type": row.entity_type, "id": row.entity_id, "version": row.entity_version},
        "template": {"id": row.template_id, "revision": row.template_revision, "locale": row.locale},
        "payload_digest": row.payload_digest,
        "decision": row.decision,
        "reason": row.reason,
        "detail": row.detail.as_deref().map(|d| crate::suppression::named_detail(&row.tenant, d)),
        "state": row.state,
        "mode": row.mode,
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
    if row.state == State::Shadowed {
        v["would_have_sent"] = json!({
            "at": rfc3339(row.updated_at),
            "channel": row.channel,
            "to": row.destination.as_deref().map(|d| mask_for_channel(row.channel, d)),
            "payload_digest": row.payload_digest,
        });
    }
    v
}

pub fn intent_detail(d: &IntentDetail) -> Value {
    let mut v = intent(&d.intent);
    v["content"] = content_value(d.content.as_deref());
    v["attempts"] = d.attempts.iter().map(|a| attempt(a, &d.intent)).collect();
    v["messages_may_have_reached"] = json!(crate::deliver::duplicate::messages_may_have_reached(&d.attempts));
    with_receipts(&mut v, &d.receipts, &d.intent);
    v["replays"] = d.replays.iter().map(replay).collect();
    v
}

/// A replay from the dead letters: when, who asked, and the reason it had
/// been dead for.
pub fn replay(r: &ReplayRow) -> Value {
    json!({"at": rfc3339(r.replayed_at), "previous_reason": r.previous_reason, "requested_by": r.requested_by})
}

/// The delivery status (the furthest the receipts reached) and every receipt;
/// a provider's reason may echo the destination or anyone's address or
/// number, so they are kept out.
fn with_receipts(v: &mut Value, receipts: &[ReceiptRow], intent: &IntentRow) {
    let applied = receipts.iter().filter(|r| r.applied).filter_map(|r| DeliveryStatus::parse(&r.status));
    v["delivery_status"] = json!(crate::receipt::current(applied).map(DeliveryStatus::as_str));
    v["receipts"] = receipts
        .iter()
        .map(|r| {
            json!({
                "source": r.source,
                "status": r.status,
                "provider_status": r.provider_status,
                "provider_message_id": r.provider_message_id,
                "reason": r.reason.as_deref().map(|e| provider_text(e, intent.channel, intent.destination.as_deref())),
                "received_at": rfc3339(r.received_at),
                "applied": r.applied,
                "ended_retry": r.ended_retry,
            })
        })
        .collect();
}

/// A dead letter: the intent, its tenant, the frozen content, the original
/// event (its inline recipients masked) and every attempt.
pub fn dead_letter(d: &DeadLetter, attempts: &[AttemptRow], receipts: &[ReceiptRow]) -> Value {
    let mut v = intent(&d.intent);
    v["tenant"] = Value::String(d.intent.tenant.clone());
    v["content"] = content_value(d.content.as_deref());
    let mut event = content_value(d.event_body.as_deref());
    mask_inline_recipients(&mut event);
    v["event"] = event;
    v["attempts"] = attempts.iter().map(|a| attempt(a, &d.intent)).collect();
    with_receipts(&mut v, receipts, &d.intent);
    v
}

/// An intent read on its own (`herald dlq show`), shown as a dead letter.
pub fn dead_letter_of(d: &IntentDetail) -> Value {
    let letter = DeadLetter { intent: d.intent.clone(), content: d.content.clone(), event_body: d.event_body.clone() };
    dead_letter(&letter, &d.attempts, &d.receipts)
}

/// One attempt of `intent`; its destination, and every other address and
/// number, is kept out of the provider's text however it was echoed (the
/// channel and the worker already did so when they made the text; this
/// covers text stored before they did).
pub fn attempt(a: &AttemptRow, intent: &IntentRow) -> Value {
    json!({
        "n": a.n,
        "started_at": rfc3339(a.started_at),
        "finished_at": a.finished_at.and_then(rfc3339),
        "provider": a.provider,
        "outcome": a.outcome,
        "possible_duplicate": a.possible_duplicate,
        "error_class": a.error_class,
        "provider_status": a.provider_status,
        "provider_message_id": a.provider_message_id.as_deref().map(|m| shown_message_id(a.provider.as_deref(), m)),
        "error": a.error.as_deref().map(|e| provider_text(e, intent.channel, intent.destination.as_deref())),
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

/// A directory entry. Its addresses are masked too: the sender's own system
/// is where they are read in full; what Herald holds it only uses, so a
/// leaked `recipients:write` token cannot read the directory out.
pub fn recipient(r: &RecipientRow) -> Value {
    json!({
        "id": r.id,
        "email": r.email.as_deref().map(|e| mask(Kind::Email, e)),
        "phone": r.phone.as_deref().map(|p| mask(Kind::Phone, p)),
        "locale": r.locale,
        "timezone": r.timezone,
        "webhook_url": r.webhook_url.as_deref().map(|u| mask(Kind::Url, u)),
        "preferences": serde_json::from_str::<Value>(&r.preferences).unwrap_or(Value::Null),
        "preferences_version": r.preferences_version,
        "updated_at": rfc3339(r.updated_at),
    })
}
