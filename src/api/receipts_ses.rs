//! `POST /v1/receipts/ses`: Amazon SES's bounce, complaint and delivery
//! notifications, delivered by an SNS HTTPS subscription. No bearer token:
//! SNS's signature is the proof, the topic must be one configured, and the
//! intent a notification names decides the tenant it is about.

use super::receipts::{bounded, record_first};
use super::{ApiError, AppState};
use crate::clock::micros;
use crate::receipt::ses::{self, Parsed};
use crate::receipt::sns::{self, Envelope, SnsError};
use crate::store::{NewReceipt, ReceiptTarget};
use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use serde_json::{Value, json};

/// An SNS message from a topic SES publishes its notifications to.
#[utoipa::path(post, path = "/v1/receipts/ses", operation_id = "ses_receipt", tag = "receipts", security(()),
    request_body(content = crate::receipt::sns::Envelope, description = "SNS posts JSON with Content-Type text/plain.",
        content_type = "text/plain"),
    responses(
        (status = 200, description = "Recorded (or a repeat, which changes nothing); a subscription confirmed or logged; an SES event that says nothing of delivery, or about mail Herald did not send, acknowledged.", body = doc::SesAnswer),
        (status = 400, response = crate::api::openapi::doc::BadRequest),
        (status = 403, response = crate::api::openapi::doc::Forbidden),
        (status = 404, response = crate::api::openapi::doc::NotFound),
        (status = 413, response = crate::api::openapi::doc::PayloadTooLarge),
        (status = 500, response = crate::api::openapi::doc::Internal),
        (status = 502, response = crate::api::openapi::doc::BadGateway),
    ))]
pub async fn ses(State(app): State<AppState>, body: Bytes) -> Result<Json<Value>, ApiError> {
    let Some(config) = &app.config.receipts.ses else {
        return Err(ApiError::NotFound("receipts.ses is not configured".into()));
    };
    let envelope = sns::parse(&body).map_err(|e| ApiError::invalid_field("body", &e.to_string()))?;
    if !config.topic_arns.contains(&envelope.topic_arn) {
        tracing::warn!(topic = %bounded(&envelope.topic_arn), "an SNS message from a topic not configured; refused");
        return Err(ApiError::Forbidden("TopicArn is not one of receipts.ses.topic_arns".into()));
    }
    let base = config.sns_base_url.as_deref();
    sns::check_url(&envelope.signing_cert_url, base, "SigningCertURL").map_err(forbidden)?;
    let key = match &config.certificate_file {
        Some(path) => app.sns.from_file(path),
        None => app.sns.fetch(&envelope.signing_cert_url).await,
    }
    .map_err(|e| {
        tracing::error!(error = %e, "SNS signing certificate unavailable; the message is left for SNS to retry");
        ApiError::BadGateway("the SNS signing certificate could not be obtained".into())
    })?;
    sns::verify(&envelope, &key).map_err(|e| {
        tracing::warn!(error = %e, topic = %envelope.topic_arn, "an SNS message did not verify; refused");
        forbidden(e)
    })?;
    // Signed, and from SNS, but possibly captured and sent again.
    sns::check_fresh(&envelope.timestamp, app.clock.now()).map_err(|e| {
        if matches!(e, SnsError::Stale(_)) {
            tracing::warn!(error = %e, topic = %envelope.topic_arn, "a stale SNS message; refused");
            crate::ops::metrics::receipt("ses", "unknown", "stale");
        }
        forbidden(e)
    })?;
    match envelope.kind.as_str() {
        "Notification" => notification(&app, &envelope).await,
        "SubscriptionConfirmation" => subscription(&app, &envelope, config.confirm_subscriptions, base).await,
        _ => {
            tracing::info!(topic = %envelope.topic_arn, kind = %envelope.kind, "SNS message noted");
            Ok(Json(json!({"type": envelope.kind})))
        }
    }
}

fn forbidden(e: SnsError) -> ApiError {
    match e {
        SnsError::Malformed(m) => ApiError::invalid_field("body", &m),
        other => ApiError::Forbidden(other.to_string()),
    }
}

/// Confirmed when configured to (the link must be SNS's own), else logged
/// with the link for an operator to follow.
async fn subscription(
    app: &AppState,
    envelope: &Envelope,
    confirm: bool,
    base: Option<&str>,
) -> Result<Json<Value>, ApiError> {
    let url = envelope.subscribe_url.as_deref().unwrap_or_default();
    sns::check_url(url, base, "SubscribeURL").map_err(forbidden)?;
    if !confirm {
        tracing::warn!(
            topic = %envelope.topic_arn, subscribe_url = %url,
            "SNS asks to confirm a subscription; receipts.ses.confirm_subscriptions is off, so confirm it by \
             opening the SubscribeURL"
        );
        crate::ops::metrics::receipt("ses", "subscription", "pending");
        return Ok(Json(json!({"type": envelope.kind, "subscription": "pending"})));
    }
    app.sns.confirm(url).await.map_err(|e| {
        tracing::error!(error = %e, topic = %envelope.topic_arn, "confirming the SNS subscription failed");
        ApiError::BadGateway("SNS did not take the subscription's confirmation".into())
    })?;
    tracing::info!(topic = %envelope.topic_arn, "SNS subscription confirmed");
    crate::ops::metrics::receipt("ses", "subscription", "confirmed");
    Ok(Json(json!({"type": envelope.kind, "subscription": "confirmed"})))
}

async fn notification(app: &AppState, envelope: &Envelope) -> Result<Json<Value>, ApiError> {
    let parsed = ses::parse(&envelope.message).map_err(|(field, message)| ApiError::invalid_field(&field, &message))?;
    let receipt = match parsed {
        Parsed::Receipt(r) => r,
        Parsed::Ignored(kind) => {
            crate::ops::metrics::receipt("ses", "ignored", "ignored");
            return Ok(Json(json!({"type": envelope.kind, "ignored": kind})));
        }
    };
    // The message's own Message-ID names its intent when SES's id never
    // reached Herald (the DATA answer was lost: an `unknown` attempt).
    let domains = app.config.channels.email.as_ref().map(|e| e.message_id_domains()).unwrap_or_default();
    let alternatives: Vec<ReceiptTarget> =
        receipt.message_ids.iter().filter_map(|id| ses::key_in(id, &domains)).map(ReceiptTarget::Key).collect();
    let new = NewReceipt {
        target: ReceiptTarget::ProviderMessageId(receipt.ses_message_id.clone()),
        channel: Some("email".into()),
        source: "ses".into(),
        provider_message_id: crate::channel::clean_id(&receipt.ses_message_id),
        status: receipt.status,
        provider_status: receipt.provider_status,
        reason: receipt.reason,
        now_us: micros(app.clock.now()),
        suppression_key: app.config.suppression.settled()?.clone(),
    };
    match record_first(app, new, alternatives).await {
        // A topic can carry mail Herald did not send (another application on
        // the same SES identity): acknowledged, or SNS would retry it for hours.
        Err(ApiError::NotFound(_)) => Ok(Json(json!({"type": envelope.kind, "matched": false}))),
        other => other,
    }
}

/// The shape of an SNS message, for the OpenAPI document.
#[allow(dead_code)]
pub mod doc {
    use serde::Serialize;
    use utoipa::ToSchema;

    /// A receipt's answer (as the other receipt endpoints give it), or what
    /// became of a message that was not one.
    #[derive(ToSchema, Serialize)]
    pub struct SesAnswer {
        pub intent_id: Option<String>,
        pub delivery_status: Option<crate::api::receipts::doc::DeliveryStatusName>,
        pub applied: Option<bool>,
        pub duplicate: Option<bool>,
        /// The SNS message type, when it was not a receipt.
        #[serde(rename = "type")]
        pub kind: Option<String>,
        /// `confirmed`, or `pending` when confirmations are left to an operator.
        pub subscription: Option<String>,
        /// The SES event type, when it says nothing of delivery.
        pub ignored: Option<String>,
        /// False when the notification names no message Herald sent.
        pub matched: Option<bool>,
    }
}
