//! The one workload every figure is about: distinct single-recipient,
//! single-SMS events. A client posts [`event_body`]; the limit writes
//! [`EventRows`], the rows Herald's ingest writes for that same event (a request
//! record with its stored response, the event record, one intent holding the
//! event body and the rendered SMS, one job), built the way DESIGN §3 derives
//! them.

use serde_json::json;
use sha2::{Digest, Sha256};

pub const TENANT: &str = "default";
pub const EVENT_TYPE: &str = "purchase_order.approved";
pub const ENTITY_TYPE: &str = "purchase_order";
const OCCURRED_AT: &str = "2026-11-29T10:15:00+05:45";
const OCCURRED_AT_UTC: &str = "2026-11-29T04:30:00.000000000Z";

fn entity_id(i: usize) -> String {
    format!("PO-{i}")
}

fn phone(i: usize) -> String {
    format!("+1555{:07}", i % 10_000_000)
}

fn sha256_hex(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

/// Event `i` as a client posts it (the example event of DESIGN §4, for one
/// recipient with a phone, SMS only).
pub fn event_body(i: usize) -> String {
    json!({
        "type": EVENT_TYPE,
        "entity": {"type": ENTITY_TYPE, "id": entity_id(i), "version": 1},
        "occurred_at": OCCURRED_AT,
        "data": {"po": {"number": entity_id(i), "total": "1,20,000"}, "approver": {"name": "Asha"}},
        "recipients": [{"id": format!("u-{i}"), "phone": phone(i)}],
        "channels": ["sms"]
    })
    .to_string()
}

/// The rows of event `i`, as Herald stores them.
pub struct EventRows {
    pub event_key: String,
    pub identity: String,
    pub fingerprint: String,
    pub event_body: String,
    pub response: String,
    pub content_digest: String,
    pub content: String,
    pub intent_key: String,
    pub entity_id: String,
    pub recipient_id: String,
    pub destination: String,
}

impl EventRows {
    pub fn new(i: usize) -> EventRows {
        let entity_id = entity_id(i);
        let recipient_id = format!("u-{i}");
        let event_key = format!("{TENANT}|{EVENT_TYPE}|{ENTITY_TYPE}|{entity_id}|{OCCURRED_AT_UTC}");
        let intent_key = sha256_hex(&format!("{event_key}|sms|{recipient_id}"))[..32].to_string();
        // The validated event in canonical form (serde_json sorts keys).
        let event_body = json!({
            "type": EVENT_TYPE,
            "entity": {"type": ENTITY_TYPE, "id": entity_id, "version": 1},
            "occurred_at": OCCURRED_AT_UTC,
            "data": {"po": {"number": entity_id, "total": "1,20,000"}, "approver": {"name": "Asha"}},
            "recipients": [{"id": recipient_id, "phone": phone(i)}],
            "channels": ["sms"]
        })
        .to_string();
        let content =
            json!({"body": format!("{entity_id} approved by Asha (total 1,20,000)."), "encoding": "GSM-7", "segments": 1})
                .to_string();
        let response = json!({
            "event_key": event_key,
            "replayed": false,
            "intents": [{"id": intent_key, "key": intent_key, "channel": "sms", "recipient_id": recipient_id,
                         "decision": "send", "reason": null, "state": "queued", "created": true}]
        })
        .to_string();
        EventRows {
            identity: format!("event:{event_key}"),
            event_key,
            fingerprint: sha256_hex(&event_body),
            event_body,
            response,
            content_digest: sha256_hex(&content),
            content,
            intent_key,
            entity_id,
            recipient_id,
            destination: phone(i),
        }
    }
}
