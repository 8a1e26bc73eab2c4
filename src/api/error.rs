//! The one place errors become HTTP responses: `{"error": {"code", "message"}}`.
//! A 5xx says only that something failed and where to look (the log, by a
//! correlation id); its cause never reaches the client.

use crate::event::json::JsonError;
use crate::store::StoreError;
use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 400, with the field named in the message.
    #[error("{message}")]
    BadRequest { code: &'static str, message: String },
    #[error("request body is larger than {limit} bytes")]
    PayloadTooLarge { limit: usize },
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("{0}")]
    UnknownEventType(String),
    #[error("this Idempotency-Key was used before with a different request body")]
    IdempotencyMismatch,
    #[error(
        "this event (type, entity and occurred_at) was accepted before with other data or entity.version; \
         an event's content cannot change — a changed event needs its own occurred_at"
    )]
    EventConflict,
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    Forbidden(String),
    /// A downstream service (the ops webhook) refused; says which, not why inside.
    #[error("{0}")]
    BadGateway(String),
    #[error("internal error")]
    Internal(#[from] StoreError),
}

impl ApiError {
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::BadRequest { code: "invalid_request", message: message.into() }
    }

    pub fn invalid_field(field: &str, message: &str) -> ApiError {
        ApiError::BadRequest { code: "invalid_field", message: format!("{field}: {message}") }
    }

    fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            ApiError::BadRequest { code, .. } => (StatusCode::BAD_REQUEST, code),
            ApiError::PayloadTooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            ApiError::UnsupportedMediaType(_) => (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type"),
            ApiError::UnknownEventType(_) => (StatusCode::UNPROCESSABLE_ENTITY, "unknown_event_type"),
            ApiError::IdempotencyMismatch => (StatusCode::UNPROCESSABLE_ENTITY, "idempotency_key_mismatch"),
            ApiError::EventConflict => (StatusCode::CONFLICT, "event_conflict"),
            ApiError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            ApiError::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "unauthorized"),
            ApiError::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden"),
            ApiError::BadGateway(_) => (StatusCode::BAD_GATEWAY, "bad_gateway"),
            ApiError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
        }
    }
}

impl From<JsonError> for ApiError {
    fn from(e: JsonError) -> ApiError {
        let code = match e {
            JsonError::Malformed(_) => "malformed_json",
            JsonError::DuplicateKey { .. } => "duplicate_key",
            JsonError::TooDeep { .. } => "too_deep",
            JsonError::InexactNumber { .. } => "inexact_number",
        };
        ApiError::BadRequest { code, message: e.to_string() }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        let message = match &self {
            ApiError::Internal(cause) => {
                // A reference the operator can find in the log; not derived
                // from anything the client sent.
                let reference = format!("{:016x}", jiff::Timestamp::now().as_nanosecond() as u64);
                tracing::error!(error = %cause, reference, "request failed");
                format!(
                    "internal error (reference {reference}); the request may be retried with the same Idempotency-Key"
                )
            }
            other => other.to_string(),
        };
        let mut resp = (status, Json(json!({"error": {"code": code, "message": message}}))).into_response();
        if status == StatusCode::UNAUTHORIZED {
            resp.headers_mut().insert("www-authenticate", axum::http::HeaderValue::from_static("Bearer"));
        }
        resp
    }
}
