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

    /// The status, code and message a client would be answered with; an
    /// internal error says only that (its cause stays in the log).
    pub fn answer(&self) -> (u16, &'static str, String) {
        let (status, code) = self.status_and_code();
        (status.as_u16(), code, self.to_string())
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

/// What axum answers by itself — a path segment that is not UTF-8, a body
/// over the limit read by a plain `Bytes` extractor, a method a route does not
/// take — comes as plain text or nothing; it becomes Herald's error body here,
/// so every error a client sees has one shape. Headers (`Allow`) are kept; a
/// 5xx keeps none of its text.
pub async fn json_errors(
    axum::extract::State(limit): axum::extract::State<usize>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let resp = next.run(request).await;
    let status = resp.status();
    let is_json = resp
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let text = axum::body::to_bytes(body, 1024).await.map(|b| String::from_utf8_lossy(&b).into_owned());
    let text = text.unwrap_or_default();
    let (code, message) = match status {
        StatusCode::METHOD_NOT_ALLOWED => {
            ("method_not_allowed", "this endpoint does not take this method (see the Allow header)".to_string())
        }
        StatusCode::PAYLOAD_TOO_LARGE => ("payload_too_large", format!("request body is larger than {limit} bytes")),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ("unsupported_media_type", text),
        s if s.is_server_error() => {
            tracing::error!(status = s.as_u16(), "request failed before reaching a handler");
            ("internal", "internal error".to_string())
        }
        _ => ("invalid_request", text),
    };
    let body = Json(json!({"error": {"code": code, "message": message}})).into_response();
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    parts.headers.insert(axum::http::header::CONTENT_TYPE, axum::http::HeaderValue::from_static("application/json"));
    Response::from_parts(parts, body.into_body())
}
