//! Delivery receipts from providers: `POST /v1/receipts/twilio` (Twilio's
//! status callbacks, signed with the account's auth token) and
//! `POST /v1/receipts/generic` (Standard Webhooks, with its own secret). No
//! bearer token: the signature is the proof, and the intent a receipt names
//! decides the tenant it is about.

use super::{ApiError, AppState};
use crate::clock::micros;
use crate::config::SmsProvider;
use crate::receipt::generic::{self, Names};
use crate::receipt::{DeliveryStatus, twilio};
use crate::store::{NewReceipt, ReceiptOutcome, ReceiptTarget};
use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Uri};
use serde_json::{Value, json};

pub async fn twilio(
    State(app): State<AppState>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let sms = app.config.channels.sms.as_ref().filter(|s| s.provider == SmsProvider::Twilio);
    let (Some(sms), Some(public)) = (sms, app.config.public_base()) else {
        return Err(ApiError::NotFound("no Twilio provider is configured".into()));
    };
    let form = headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default();
    if !form.starts_with("application/x-www-form-urlencoded") {
        return Err(ApiError::UnsupportedMediaType(
            "a Twilio status callback is application/x-www-form-urlencoded".into(),
        ));
    }
    let params: Vec<(String, String)> = url::form_urlencoded::parse(&body).into_owned().collect();
    // The URL Twilio requested, as it knows it: behind a proxy the request's
    // own scheme and host are not what Twilio signed.
    let url = format!("{public}{}", uri.path_and_query().map_or(uri.path(), |p| p.as_str()));
    let signature = headers.get("x-twilio-signature").and_then(|v| v.to_str().ok()).unwrap_or_default();
    let token = sms.auth_token.as_deref().unwrap_or_default();
    if !twilio::verify(token, &url, &params, signature) {
        tracing::warn!("a Twilio status callback did not verify; refused");
        return Err(ApiError::Forbidden(
            "X-Twilio-Signature does not verify against public_url and this account's auth token".into(),
        ));
    }
    let param = |name: &str| params.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    if param("AccountSid") != sms.account_sid.as_deref() {
        return Err(ApiError::Forbidden("AccountSid is not this deployment's account".into()));
    }
    let sid = param("MessageSid").ok_or_else(|| ApiError::invalid_field("MessageSid", "is required"))?;
    let message_status =
        param("MessageStatus").ok_or_else(|| ApiError::invalid_field("MessageStatus", "is required"))?;
    let error_code = param("ErrorCode").filter(|c| !c.is_empty());
    let status = twilio::status(message_status, error_code).ok_or_else(|| {
        ApiError::invalid_field("MessageStatus", &format!("{message_status:?} is not an outgoing message's status"))
    })?;
    let key = url::form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes())
        .find(|(k, _)| k == "key")
        .map(|(_, v)| v.into_owned());
    let target = match key {
        Some(key) => ReceiptTarget::Key(key),
        None => ReceiptTarget::ProviderMessageId(sid.to_string()),
    };
    let receipt = NewReceipt {
        target,
        channel: Some("sms".into()),
        source: "twilio".into(),
        provider_message_id: crate::channel::clean_id(sid),
        status,
        provider_status: bounded(message_status),
        reason: error_code.map(|c| format!("Twilio error {}", bounded(c))),
        now_us: micros(app.clock.now()),
    };
    record(&app, receipt).await
}

pub async fn generic(State(app): State<AppState>, headers: HeaderMap, body: Bytes) -> Result<Json<Value>, ApiError> {
    let Some(config) = &app.config.receipts.generic else {
        return Err(ApiError::NotFound("receipts.generic is not configured".into()));
    };
    let key = crate::channel::webhook::decode_secret(&config.secret)
        .map_err(|_| ApiError::NotFound("receipts.generic is not configured".into()))?;
    let text = std::str::from_utf8(&body).map_err(|_| ApiError::invalid_field("body", "is not UTF-8"))?;
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let now = app.clock.now().as_second();
    generic::verify(&key, header("webhook-id"), header("webhook-timestamp"), header("webhook-signature"), text, now)
        .map_err(|e| ApiError::Forbidden(format!("the receipt's signature does not verify: {e}")))?;
    let parsed = generic::parse(text).map_err(|(field, message)| ApiError::invalid_field(&field, &message))?;
    let (target, provider_message_id) = match parsed.names {
        Names::Key(k) => (ReceiptTarget::Key(k), None),
        Names::ProviderMessageId(id) => (ReceiptTarget::ProviderMessageId(id.clone()), Some(id)),
    };
    let receipt = NewReceipt {
        target,
        channel: None,
        source: "generic".into(),
        provider_message_id,
        status: parsed.status,
        provider_status: parsed.status.as_str().into(),
        reason: parsed.reason,
        now_us: micros(app.clock.now()),
    };
    record(&app, receipt).await
}

/// Records it; a repeat answers 200 like the first (the provider's retry is
/// satisfied) and changes nothing.
async fn record(app: &AppState, receipt: NewReceipt) -> Result<Json<Value>, ApiError> {
    let (source, status) = (receipt.source.clone(), receipt.status);
    match app.store.receipt_record(receipt).await? {
        ReceiptOutcome::NotFound => {
            crate::ops::metrics::receipt(&source, status.as_str(), "not_found");
            Err(ApiError::NotFound("the receipt names no intent Herald sent on this channel".into()))
        }
        ReceiptOutcome::Recorded { intent_key, delivery_status, applied, duplicate, dead, suppressed, .. } => {
            let result = if duplicate {
                "duplicate"
            } else if applied {
                "applied"
            } else {
                "late"
            };
            crate::ops::metrics::receipt(&source, status.as_str(), result);
            if let Some(reason) = dead {
                crate::ops::metrics::dead_letter(reason.as_str());
            }
            tracing::info!(
                trace_id = %intent_key, intent = %intent_key, source, status = %status, result,
                dead = dead.map(|r| r.as_str()), suppressed, "delivery receipt"
            );
            Ok(Json(json!({
                "intent_id": intent_key,
                "delivery_status": delivery_status.map(DeliveryStatus::as_str),
                "applied": applied,
                "duplicate": duplicate,
            })))
        }
    }
}

/// A provider's word as stored: printable and short.
fn bounded(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).take(64).collect()
}
