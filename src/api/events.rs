//! `POST /v1/events`: the HTTP side of ingest — scope, content type, body
//! limit, the `Idempotency-Key` header, `?dry_run=true` — and the answer as a
//! response. The pipeline itself is [`crate::ingest`].

use super::query::{Params, QueryParams};
use super::{ApiError, AppState, Caller, Scope};
use crate::ingest::{Answer, DryRun, IngestError, Request};
use crate::intent::Reason;
use crate::recipient::mask_for_channel;
use crate::store::IngestResponse;
use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

const MAX_IDEMPOTENCY_KEY: usize = 255;

/// Post a domain event: Herald plans, renders and records its intents in one transaction.
#[utoipa::path(post, path = "/v1/events", operation_id = "post_event", tag = "events", security(("bearer" = ["events:write"])),
    params(("Idempotency-Key" = Option<String>, Header, max_length = 255, pattern = "^[!-~]+$",
        description = "The request's identity (1-255 visible ASCII characters); without it, the event and its audience are."),
        ("traceparent" = Option<String>, Header, description = "W3C trace context: the request's spans, and its \
            notifications' attempts in the worker, continue this trace. Invalid or absent: a trace of its own."),
        ("dry_run" = Option<bool>, Query, description = "`true`: plan and render, answer with the intents a real post \
            would record (200, `dry_run: true`), and write nothing. Refused as a real post would be. The suppression list \
            is not consulted (`not_checked`).")),
    request_body(content = crate::api::openapi::doc::EventRequest, content_type = "application/json"),
    responses(
        (status = 202, description = "At least one intent was created.", body = crate::api::openapi::doc::EventAccepted),
        (status = 200, description = "A stored request replayed (`replayed: true`, header `Idempotent-Replayed: true`), \
            a new request whose intents all exist already (`created: false` on each), or a dry run's answer.",
            body = crate::api::openapi::doc::EventAnswer,
            headers(("Idempotent-Replayed" = String, description = "`true` when the stored answer is replayed."))),
        (status = 400, response = crate::api::openapi::doc::BadRequest),
        (status = 401, response = crate::api::openapi::doc::Unauthorized),
        (status = 403, response = crate::api::openapi::doc::Forbidden),
        (status = 409, response = crate::api::openapi::doc::EventConflict),
        (status = 413, response = crate::api::openapi::doc::PayloadTooLarge),
        (status = 415, response = crate::api::openapi::doc::UnsupportedMediaType),
        (status = 422, response = crate::api::openapi::doc::Unprocessable),
        (status = 500, response = crate::api::openapi::doc::Internal),
    ))]
pub async fn post_event(
    State(app): State<AppState>,
    caller: Caller,
    Params(query): Params<EventQuery>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    caller.require(Scope::EventsWrite)?;
    require_json(&headers)?;
    let body = body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::PayloadTooLarge { limit: app.config.max_body_bytes }
        } else {
            ApiError::bad_request(format!("could not read the request body: {rejection}"))
        }
    })?;
    let key = idempotency_key(&headers)?;
    let trace = trace_of(&headers);
    let request = Request { tenant: &caller.tenant, idempotency_key: key.as_deref(), body: &body, trace };
    if query.dry_run == Some(true) {
        let dry = app.ingest.dry_run(request).await?;
        return Ok((StatusCode::OK, Json(dry_run_view(&dry))).into_response());
    }
    Ok(match app.ingest.ingest(request).await? {
        Answer::Created(response) => (StatusCode::ACCEPTED, Json(response)).into_response(),
        Answer::Existing(response) => (StatusCode::OK, Json(response)).into_response(),
        Answer::Replayed(response) => replayed(response),
    })
}

impl From<IngestError> for ApiError {
    fn from(e: IngestError) -> ApiError {
        match e {
            IngestError::Json(e) => e.into(),
            IngestError::InvalidField { field, message } => ApiError::invalid_field(&field, &message),
            e @ IngestError::UnknownEventType(_) => ApiError::UnknownEventType(e.to_string()),
            IngestError::IdempotencyMismatch => ApiError::IdempotencyMismatch,
            IngestError::EventConflict => ApiError::EventConflict,
            IngestError::Store(e) => ApiError::Internal(e),
        }
    }
}

#[derive(Debug, Deserialize)]
pub struct EventQuery {
    dry_run: Option<bool>,
}

impl QueryParams for EventQuery {
    const NAMES: &'static [&'static str] = &["dry_run"];
}

/// What a dry run leaves out, in the answer's words (see `Ingestor::dry_run`).
const DRY_RUN_NOTE: &str = "The suppression list was not checked: each address is planned as if it were not on it. \
     A real post checks it, and records its decision as an intent.";

/// A dry run as the API shows it: each intent with its masked destination and
/// rendered content; one that exists already as it stands.
fn dry_run_view(dry: &DryRun) -> Value {
    let intents: Vec<Value> = dry
        .intents
        .iter()
        .map(|i| {
            let existing = dry.existing.iter().find(|e| e.key == i.key);
            // Shadow or live as the deployment, route and channel decide it
            // now; an intent that exists keeps the mode it was planned in.
            let (decision, reason, state, mode) = match existing {
                Some(e) => (e.decision, e.reason.as_deref(), e.state, e.mode),
                None => (i.decision, i.reason.map(Reason::as_str), i.state, i.mode),
            };
            let (digest, content) = match &i.payload {
                Some((digest, text)) => (Some(digest.as_str()), serde_json::from_str(text).unwrap_or(Value::Null)),
                None => (None, Value::Null),
            };
            json!({
                "key": i.key,
                "channel": i.channel,
                "recipient_id": i.recipient_id,
                "exists": existing.is_some(),
                "decision": decision,
                "reason": reason,
                "detail": i.detail,
                "state": state,
                "mode": mode,
                "destination": i.destination.as_deref().map(|d| mask_for_channel(i.channel, d)),
                "template": {"id": i.template_id, "revision": i.template_revision, "locale": i.locale},
                "payload_digest": digest,
                "content": content,
            })
        })
        .collect();
    json!({
        "dry_run": true,
        "event_key": dry.event_key,
        "replay": dry.replay,
        "not_checked": ["suppression_list"],
        "note": DRY_RUN_NOTE,
        "intents": intents,
    })
}

fn replayed(response: IngestResponse) -> Response {
    let mut resp = (StatusCode::OK, Json(IngestResponse { replayed: true, ..response })).into_response();
    resp.headers_mut().insert("idempotent-replayed", HeaderValue::from_static("true"));
    resp
}

/// The caller's W3C trace context. An invalid header is ignored, as the
/// recommendation asks, and the request starts a trace of its own.
pub(super) fn trace_of(headers: &HeaderMap) -> Option<crate::ops::trace::TraceParent> {
    (headers.get(crate::ops::trace::TRACEPARENT))
        .and_then(|v| v.to_str().ok())
        .and_then(crate::ops::trace::TraceParent::parse)
}

/// `application/json`, or any `application/…+json`.
fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
    let ct = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let mime = ct.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    if mime == "application/json" || (mime.starts_with("application/") && mime.ends_with("+json")) {
        return Ok(());
    }
    let got = if ct.is_empty() { "no Content-Type".to_string() } else { format!("Content-Type {ct:?}") };
    Err(ApiError::UnsupportedMediaType(format!(
        "send the event as JSON with Content-Type: application/json (got {got})"
    )))
}

/// One header of 1 to 255 visible ASCII characters (no spaces): two headers
/// would leave it to the reader which one is the request's identity.
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let mut values = headers.get_all("idempotency-key").iter();
    let Some(v) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(ApiError::invalid_field("Idempotency-Key", "given more than once; send one"));
    }
    checked_idempotency_key(v.as_bytes()).map(Some)
}

/// An `Idempotency-Key` as any front door takes it: 1 to 255 visible ASCII
/// characters, without spaces.
pub fn checked_idempotency_key(raw: &[u8]) -> Result<String, ApiError> {
    if raw.is_empty() || raw.len() > MAX_IDEMPOTENCY_KEY || !raw.iter().all(|b| b.is_ascii_graphic()) {
        return Err(ApiError::invalid_field(
            "Idempotency-Key",
            &format!("must be 1 to {MAX_IDEMPOTENCY_KEY} visible ASCII characters, without spaces"),
        ));
    }
    Ok(String::from_utf8_lossy(raw).into_owned())
}
