//! Bus messages that could not become an event (scope `ops`):
//! `GET /v1/rejected` and `GET /v1/rejected/{id}`, each the caller's tenant's.

use super::intents::{page_cursor, page_limit};
use super::query::{Params, QueryParams};
use super::{ApiError, AppState, Caller, Scope};
use crate::clock::rfc3339;
use crate::store::RejectedMessage;
use axum::Json;
use axum::extract::{Path, State};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Debug, Deserialize)]
pub struct ListQuery {
    cursor: Option<String>,
    limit: Option<u32>,
}

impl QueryParams for ListQuery {
    const NAMES: &'static [&'static str] = &["cursor", "limit"];
}

/// How a rejected message's body is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    /// Left out (lists).
    Omitted,
    /// Masked, whatever its shape: the messages most likely to be rejected
    /// are the malformed ones (recipients as an object, a phone as a number),
    /// so every key and value that looks like an address or a number is
    /// masked, at any depth; a body that is not JSON is scrubbed as text.
    /// JSON is shown as JSON (as a dead letter's event is), text as a
    /// string, and `body_format` says which.
    Masked,
}

/// A rejected message as the API, the CLI and the console show it. The error
/// message is scrubbed too, URLs cut to scheme and host: it may quote the
/// value that was refused (an address, a webhook URL whose path is a secret).
pub fn view(r: &RejectedMessage, body: Body) -> Value {
    let mut v = json!({
        "id": r.id,
        "stream": r.stream,
        "consumer": r.consumer,
        "subject": r.subject,
        "stream_seq": r.stream_seq,
        "deliveries": r.deliveries,
        "error": {"status": r.status, "code": r.code, "message": crate::redact::scrub_string(&r.message)},
        "rejected_at": rfc3339(r.created_at),
    });
    match (body, r.body.as_deref()) {
        (Body::Omitted, _) => {}
        (_, None) => v["body"] = Value::Null,
        (Body::Masked, Some(b)) => {
            let shown = crate::redact::scrub_body(b);
            v["body_format"] = shown.format().into();
            v["body"] = shown.into_value();
        }
    }
    v
}

#[utoipa::path(get, path = "/v1/rejected", operation_id = "list_rejected", tag = "rejected", security(("bearer" = ["ops"])),
    params(
        ("cursor" = Option<String>, Query, description = "A previous page's `next`, as it was."),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 500, description = "Page size (default 50)."),
    ),
    responses(
        (status = 200, description = "The tenant's rejected bus messages, newest first (without bodies).", body = doc::RejectedPage),
        (status = 400, response = crate::api::openapi::doc::BadRequest),
        (status = 401, response = crate::api::openapi::doc::Unauthorized),
        (status = 403, response = crate::api::openapi::doc::Forbidden),
        (status = 500, response = crate::api::openapi::doc::Internal),
    ))]
pub async fn list(
    State(app): State<AppState>,
    caller: Caller,
    Params(q): Params<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Scope::Ops)?;
    let limit = page_limit(q.limit)?;
    let cursor = page_cursor(q.cursor.as_deref())?;
    let page = app.store.rejected_list(Some(caller.tenant.as_str()), cursor.as_ref(), limit).await?;
    let items: Vec<Value> = page.items.iter().map(|r| view(r, Body::Omitted)).collect();
    Ok(Json(json!({"rejected": items, "next": page.next})))
}

#[utoipa::path(get, path = "/v1/rejected/{id}", operation_id = "get_rejected", tag = "rejected", security(("bearer" = ["ops"])),
    params(("id" = String, Path, description = "The rejected message's id, as the list shows it.")),
    responses(
        (status = 200, description = "One rejected message, with its body unless retention removed it.", body = doc::Rejected),
        (status = 400, response = crate::api::openapi::doc::BadRequest),
        (status = 401, response = crate::api::openapi::doc::Unauthorized),
        (status = 403, response = crate::api::openapi::doc::Forbidden),
        (status = 404, response = crate::api::openapi::doc::NotFound),
        (status = 500, response = crate::api::openapi::doc::Internal),
    ))]
pub async fn get_one(
    State(app): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Scope::Ops)?;
    match app.store.rejected_get(caller.tenant.as_str(), &id).await? {
        Some(r) => Ok(Json(view(&r, Body::Masked))),
        None => Err(ApiError::NotFound("no such rejected message".into())),
    }
}

/// The shapes of the rejected-message endpoints' bodies, for the OpenAPI document.
#[allow(dead_code)]
pub mod doc {
    use serde::Serialize;
    use utoipa::ToSchema;

    /// The error the API would have answered the same request with.
    #[derive(ToSchema, Serialize)]
    pub struct RejectedError {
        /// The HTTP status (503 for `max_deliver_exceeded`).
        pub status: u16,
        pub code: String,
        pub message: String,
    }

    /// A bus message that could not become an event, terminated on the bus.
    #[derive(ToSchema, Serialize)]
    pub struct Rejected {
        /// Derived from the stream and its sequence.
        pub id: String,
        pub stream: String,
        pub consumer: String,
        pub subject: String,
        pub stream_seq: i64,
        /// How many times the bus had delivered it.
        pub deliveries: i64,
        pub error: RejectedError,
        #[schema(format = DateTime)]
        pub rejected_at: Option<String>,
        /// The message body (only on `GET /v1/rejected/{id}`): the JSON it
        /// holds, of whatever shape, or a string when it holds no JSON (see
        /// `body_format`). Every key and value that looks like an address or
        /// a number is masked at any depth (text is scrubbed as text); null
        /// after retention.
        pub body: Option<serde_json::Value>,
        /// How `body` is shown (only with a body).
        pub body_format: Option<BodyFormat>,
    }

    /// `json`: the body parsed as JSON and is shown as that JSON; `text`:
    /// it did not (a malformed message), and is shown as a string.
    #[derive(ToSchema, Serialize)]
    #[serde(rename_all = "lowercase")]
    pub enum BodyFormat {
        Json,
        Text,
    }

    #[derive(ToSchema, Serialize)]
    pub struct RejectedPage {
        pub rejected: Vec<Rejected>,
        pub next: Option<String>,
    }
}
