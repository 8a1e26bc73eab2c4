//! Delivery receipts from providers: `POST /v1/receipts/twilio` (Twilio's
//! status callbacks, signed with the account's auth token) and
//! `POST /v1/receipts/generic` (Standard Webhooks, with its own secret). No
//! bearer token: the signature is the proof, and the intent a receipt names
//! decides the tenant it is about.

use super::{ApiError, AppState};
use crate::clock::micros;
use crate::receipt::generic::{self, Names};
use crate::receipt::{DeliveryStatus, twilio};
use crate::store::{NewReceipt, ReceiptOutcome, ReceiptTarget};
use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Uri};
use serde_json::{Value, json};

/// Twilio's status callback for a message Herald sent.
#[utoipa::path(post, path = "/v1/receipts/twilio", operation_id = "twilio_receipt", tag = "receipts", security(()),
    params(
        ("key" = Option<String>, Query, description = "The intent's key, as Herald wrote it into the StatusCallback."),
        ("X-Twilio-Signature" = String, Header, description = "base64(HMAC-SHA1(auth token, public URL + sorted parameters))."),
    ),
    request_body(content = doc::TwilioCallback, content_type = "application/x-www-form-urlencoded"),
    responses(
        (status = 200, description = "Recorded (or a repeat, which changes nothing).", body = doc::ReceiptAnswer),
        (status = 400, response = crate::api::openapi::doc::BadRequest),
        (status = 403, response = crate::api::openapi::doc::Forbidden),
        (status = 404, response = crate::api::openapi::doc::NotFound),
        (status = 413, response = crate::api::openapi::doc::PayloadTooLarge),
        (status = 415, response = crate::api::openapi::doc::UnsupportedMediaType),
        (status = 500, response = crate::api::openapi::doc::Internal),
    ))]
pub async fn twilio(
    State(app): State<AppState>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let accounts = app.config.channels.sms.as_ref().map(|s| s.twilio_accounts()).unwrap_or_default();
    let (false, Some(public)) = (accounts.is_empty(), app.config.public_base()) else {
        return Err(ApiError::NotFound("no Twilio provider is configured".into()));
    };
    let form = headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default();
    if !form.starts_with("application/x-www-form-urlencoded") {
        return Err(ApiError::UnsupportedMediaType(
            "a Twilio status callback is application/x-www-form-urlencoded".into(),
        ));
    }
    super::query::check_names(&uri, &["key"])?;
    let params: Vec<(String, String)> = url::form_urlencoded::parse(&body).into_owned().collect();
    // A field Herald reads given twice could be read either way; Twilio never sends one so.
    for name in ["AccountSid", "MessageSid", "MessageStatus", "ErrorCode"] {
        if params.iter().filter(|(k, _)| k == name).count() > 1 {
            return Err(ApiError::invalid_field(name, "given twice; a status callback gives each field once"));
        }
    }
    let param = |name: &str| params.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
    // The account it names chooses the token it must be signed with (with
    // failover there may be more than one).
    let Some(account) = accounts.iter().find(|a| a.account_sid.as_deref() == param("AccountSid")) else {
        return Err(ApiError::Forbidden("AccountSid is not one of this deployment's accounts".into()));
    };
    // The URL Twilio requested, as it knows it: behind a proxy the request's
    // own scheme and host are not what Twilio signed.
    let url = format!("{public}{}", uri.path_and_query().map_or(uri.path(), |p| p.as_str()));
    let signature = headers.get("x-twilio-signature").and_then(|v| v.to_str().ok()).unwrap_or_default();
    let token = account.auth_token.as_deref().unwrap_or_default();
    if !twilio::verify(token, &url, &params, signature) {
        tracing::warn!("a Twilio status callback did not verify; refused");
        return Err(ApiError::Forbidden(
            "X-Twilio-Signature does not verify against public_url and this account's auth token".into(),
        ));
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
        suppression_key: app.config.suppression.settled()?.clone(),
    };
    record(&app, receipt).await
}

/// A receipt from an in-house gateway, signed per Standard Webhooks with `receipts.generic.secret`.
#[utoipa::path(post, path = "/v1/receipts/generic", operation_id = "generic_receipt", tag = "receipts", security(()),
    params(
        ("webhook-id" = String, Header, description = "The receipt's id."),
        ("webhook-timestamp" = String, Header, description = "Unix seconds; within 5 minutes of Herald's clock."),
        ("webhook-signature" = String, Header, description = "v1,base64(HMAC-SHA256(key, \"id.timestamp.body\"))."),
    ),
    request_body(content = doc::GenericReceipt, content_type = "application/json"),
    responses(
        (status = 200, description = "Recorded (or a repeat, which changes nothing).", body = doc::ReceiptAnswer),
        (status = 400, response = crate::api::openapi::doc::BadRequest),
        (status = 403, response = crate::api::openapi::doc::Forbidden),
        (status = 404, response = crate::api::openapi::doc::NotFound),
        (status = 413, response = crate::api::openapi::doc::PayloadTooLarge),
        (status = 500, response = crate::api::openapi::doc::Internal),
    ))]
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
        .map_err(|e| {
            // Outside the window: a replay of a captured receipt, as a stale
            // SNS message is (the body is unread yet, so its status unknown).
            if e == generic::SignatureError::Stale {
                tracing::warn!("a stale generic receipt; refused");
                crate::ops::metrics::receipt("generic", "unknown", "stale");
            }
            ApiError::Forbidden(format!("the receipt's signature does not verify: {e}"))
        })?;
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
        suppression_key: app.config.suppression.settled()?.clone(),
    };
    record(&app, receipt).await
}

/// Records it; a repeat answers 200 like the first (the provider's retry is
/// satisfied) and changes nothing.
async fn record(app: &AppState, receipt: NewReceipt) -> Result<Json<Value>, ApiError> {
    record_first(app, receipt, Vec::new()).await
}

/// Records it against its target or, when that names no intent, the first of
/// `alternatives` that does.
pub(super) async fn record_first(
    app: &AppState,
    receipt: NewReceipt,
    alternatives: Vec<ReceiptTarget>,
) -> Result<Json<Value>, ApiError> {
    let (source, status) = (receipt.source.clone(), receipt.status);
    // A provider's reason is free text (an SES diagnostic echoes the address,
    // and whatever else the receiving server wrote): scrubbed before it is
    // stored, as the receipt's reason and as a suppression's detail.
    let receipt = NewReceipt { reason: crate::redact::scrub_opt(receipt.reason.as_deref()), ..receipt };
    let mut outcome = app.store.receipt_record(receipt.clone()).await?;
    for target in alternatives {
        if outcome != ReceiptOutcome::NotFound {
            break;
        }
        outcome = app.store.receipt_record(NewReceipt { target, ..receipt.clone() }).await?;
    }
    match outcome {
        ReceiptOutcome::NotFound => {
            crate::ops::metrics::receipt(&source, status.as_str(), "not_found");
            Err(ApiError::NotFound("the receipt names no intent Herald sent on this channel".into()))
        }
        ReceiptOutcome::Refused { intent_key, why } => {
            crate::ops::metrics::receipt(&source, status.as_str(), "refused");
            tracing::warn!(
                trace_id = %intent_key, intent = %intent_key, source, status = %status, why = why.explain(),
                "delivery receipt refused"
            );
            Err(ApiError::NotFound(format!(
                "the receipt names intent {intent_key}, but {}: refused, nothing changed",
                why.explain()
            )))
        }
        ReceiptOutcome::Recorded {
            intent_key,
            delivery_status,
            applied,
            duplicate,
            dead,
            suppressed,
            ended_retry,
            ..
        } => {
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
                dead = dead.map(|r| r.as_str()), suppressed, ended_retry, "delivery receipt"
            );
            Ok(Json(json!({
                "intent_id": intent_key,
                "delivery_status": delivery_status.map(DeliveryStatus::as_str),
                "applied": applied,
                "duplicate": duplicate,
                "ended_retry": ended_retry,
            })))
        }
    }
}

/// A provider's word as stored: printable and short.
pub(super) fn bounded(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).take(64).collect()
}

/// The shapes of the receipt endpoints' bodies, for the OpenAPI document.
#[allow(dead_code)]
pub mod doc {
    use crate::receipt::DeliveryStatus;
    use serde::{Deserialize, Serialize};
    use std::borrow::Cow;
    use utoipa::openapi::RefOr;
    use utoipa::openapi::schema::{ObjectBuilder, Schema, SchemaType, Type};
    use utoipa::{PartialSchema, ToSchema};

    /// A message's delivery status: read from [`DeliveryStatus`] itself, so the
    /// document cannot drift from the code.
    #[derive(Serialize, Deserialize)]
    pub struct DeliveryStatusName;

    impl PartialSchema for DeliveryStatusName {
        fn schema() -> RefOr<Schema> {
            ObjectBuilder::new()
                .schema_type(SchemaType::Type(Type::String))
                .description(Some("A message's delivery status, as its provider's receipts report it."))
                .enum_values(Some(DeliveryStatus::ALL.iter().map(|s| s.as_str())))
                .into()
        }
    }

    impl ToSchema for DeliveryStatusName {
        fn name() -> Cow<'static, str> {
            Cow::Borrowed("DeliveryStatusName")
        }
    }

    /// The fields of Twilio's status callback Herald reads (it signs them all).
    #[derive(ToSchema, Serialize, Deserialize)]
    pub struct TwilioCallback {
        #[serde(rename = "AccountSid")]
        pub account_sid: String,
        #[serde(rename = "MessageSid")]
        pub message_sid: String,
        /// queued, sent, delivered, undelivered, failed, …
        #[serde(rename = "MessageStatus")]
        pub message_status: String,
        /// 30005 or 30006 make an undelivered or failed message a bounce.
        #[serde(rename = "ErrorCode")]
        pub error_code: Option<String>,
    }

    /// Names its intent by `key` or by `provider_message_id`.
    #[derive(ToSchema, Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[schema(example = json!({"key": "61be97aa0c3e4f5d8a9b0c1d2e3f4a5b", "status": "bounced", "reason": "550 5.1.1 user unknown"}))]
    pub struct GenericReceipt {
        pub key: Option<String>,
        pub provider_message_id: Option<String>,
        pub status: DeliveryStatusName,
        pub reason: Option<String>,
    }

    #[derive(ToSchema, Serialize)]
    pub struct ReceiptAnswer {
        pub intent_id: String,
        /// The intent's delivery status after this receipt.
        pub delivery_status: Option<DeliveryStatusName>,
        /// It moved the status forward.
        pub applied: bool,
        /// The same receipt had been recorded before.
        pub duplicate: bool,
        /// The intent was waiting for a retry and ends here instead.
        pub ended_retry: bool,
    }

    /// One receipt, as an intent lists it.
    #[derive(ToSchema, Serialize)]
    pub struct Receipt {
        /// twilio, ses or generic.
        pub source: String,
        pub status: DeliveryStatusName,
        /// The provider's own word for it.
        pub provider_status: String,
        pub provider_message_id: Option<String>,
        /// The provider's reason, with every address and number masked.
        pub reason: Option<String>,
        #[schema(format = DateTime)]
        pub received_at: Option<String>,
        /// Whether it moved the delivery status (a late one does not).
        pub applied: bool,
        /// Whether it ended a retry the intent was waiting for (the provider
        /// had the message after all).
        pub ended_retry: bool,
    }
}
