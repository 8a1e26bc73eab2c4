//! `POST /v1/events`: parse, plan and render, then ONE transaction.

use super::{ApiError, AppState, Caller, Scope};
use crate::clock::micros;
use crate::event::identity::sha256_hex;
use crate::event::json::read_strict;
use crate::event::{canonical_json, parse_event};
use crate::ops::metrics;
use crate::plan::{PlanInput, plan};
use crate::store::{Ingest, IngestOutcome, IngestResponse};
use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use std::collections::HashMap;

const MAX_IDEMPOTENCY_KEY: usize = 255;

/// Post a domain event: Herald plans, renders and records its intents in one transaction.
#[utoipa::path(post, path = "/v1/events", operation_id = "post_event", tag = "events", security(("bearer" = ["events:write"])),
    params(("Idempotency-Key" = Option<String>, Header, max_length = 255, pattern = "^[!-~]+$",
        description = "The request's identity (1-255 visible ASCII characters); without it, the event and its audience are.")),
    request_body(content = crate::api::openapi::doc::EventRequest, content_type = "application/json"),
    responses(
        (status = 202, description = "At least one intent was created.", body = crate::api::openapi::doc::EventAccepted),
        (status = 200, description = "A stored request replayed (`replayed: true`, header `Idempotent-Replayed: true`), \
            or a new request whose intents all exist already (`created: false` on each).", body = crate::api::openapi::doc::EventAccepted,
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
    let json = read_strict(&body)?;
    let event = parse_event(&json).map_err(|e| ApiError::invalid_field(&e.field, &e.message))?;
    let webhook_urls: Vec<(String, String)> = (event.recipients.iter().enumerate())
        .filter_map(|(i, r)| Some((format!("recipients[{i}].webhook_url"), r.webhook_url.clone()?)))
        .collect();
    app.check_webhook_urls(&webhook_urls).await?;
    let route = app.routes.get(&event.event_type).ok_or_else(|| {
        ApiError::UnknownEventType(format!("type: no route is configured for event type {:?}", event.event_type))
    })?;
    let event_key = event.event_key(&caller.tenant);
    let fingerprint = event.fingerprint();
    let identity = match idempotency_key(&headers)? {
        Some(k) => format!("key:{k}"),
        // Without a key the request is the event with its audience: an exact
        // repeat replays, another audience is a new request, and other content
        // is refused by the event's own record (409).
        None => format!("event:{event_key}#{fingerprint}"),
    };
    if let Some(response) = fast_replay(&app, caller.tenant.as_str(), &identity, &fingerprint).await? {
        return Ok(replayed(response));
    }

    let ids: Vec<String> = event.recipients.iter().map(|r| r.id.clone()).collect();
    let directory: HashMap<_, _> =
        app.store.recipients_get(caller.tenant.as_str(), &ids).await?.into_iter().map(|r| (r.id.clone(), r)).collect();
    let now = app.clock.now();
    let now_us = micros(now);
    let configured = |c| app.config.channel_configured(c);
    let intents = plan(&PlanInput {
        tenant: &caller.tenant,
        event: &event,
        route,
        templates: &app.templates,
        directory: &directory,
        configured: &configured,
        now,
    });
    let ingest = Ingest {
        tenant: caller.tenant.as_str().to_string(),
        identity,
        fingerprint: fingerprint.clone(),
        content_digest: event.content_digest(),
        event_key,
        event_type: event.event_type.clone(),
        entity_type: event.entity.kind.clone(),
        entity_id: event.entity.id.clone(),
        entity_version: event.entity.version.map(|v| v as i64),
        occurred_at: event.occurred_at.canonical(),
        event_body: canonical_json(&event.canonical()),
        intents,
        now_us,
    };
    let tenant = ingest.tenant.clone();
    let identity = ingest.identity.clone();
    // Derived from the request identity, so a retried request logs under the
    // same trace as the original.
    let trace_id = sha256_hex(format!("{tenant}|{identity}").as_bytes())[..16].to_string();
    let outcome = app.store.events_ingest(ingest).await?;
    let remember = |response: &IngestResponse| {
        let fast = app.fastpath.clone();
        let text = serde_json::to_string(&IngestResponse { replayed: true, ..response.clone() }).unwrap_or_default();
        let (tenant, identity, fingerprint) = (tenant.clone(), identity.clone(), fingerprint.clone());
        async move {
            if let Some(fast) = fast {
                fast.remember(&tenant, &identity, &fingerprint, &text).await;
            }
        }
    };
    match outcome {
        IngestOutcome::Accepted { response, any_created } => {
            for i in response.intents.iter() {
                tracing::info!(
                    trace_id = %trace_id,
                    intent = %i.key,
                    channel = %i.channel,
                    decision = %i.decision,
                    reason = i.reason.as_deref().unwrap_or(""),
                    state = %i.state,
                    created = i.created,
                    "intent recorded"
                );
                if i.created {
                    metrics::intent_created(&i.channel, &i.decision, i.reason.as_deref());
                    if i.state == "dead" {
                        metrics::dead_letter(i.reason.as_deref().unwrap_or("unknown"));
                    }
                }
            }
            if !any_created {
                metrics::idempotency_conflict("duplicate");
            }
            remember(&response).await;
            let status = if any_created { StatusCode::ACCEPTED } else { StatusCode::OK };
            Ok((status, Json(response)).into_response())
        }
        IngestOutcome::Replayed { response } => {
            metrics::idempotency_conflict("duplicate");
            remember(&response).await;
            Ok(replayed(response))
        }
        IngestOutcome::Mismatch => {
            metrics::idempotency_conflict("mismatch");
            Err(ApiError::IdempotencyMismatch)
        }
        IngestOutcome::Conflict => {
            metrics::idempotency_conflict("conflict");
            Err(ApiError::EventConflict)
        }
    }
}

/// A replay answered from Redis without the write path: the stored answer
/// for this identity and fingerprint, its intents read as they are now. Only
/// an exact repeat of an accepted request can match, so a conflicting request
/// never gets here; anything missing or unreadable falls through to the
/// database, which stays the authority.
async fn fast_replay(
    app: &AppState,
    tenant: &str,
    identity: &str,
    fingerprint: &str,
) -> Result<Option<IngestResponse>, ApiError> {
    let Some(fast) = &app.fastpath else { return Ok(None) };
    let Some(seen) = fast.lookup(tenant, identity).await else { return Ok(None) };
    if seen.fingerprint != fingerprint {
        return Ok(None);
    }
    let Ok(mut response) = serde_json::from_str::<IngestResponse>(&seen.response) else { return Ok(None) };
    let now = app.store.intents_status(tenant, &response.intent_keys()).await?;
    if now.len() != response.intents.len() {
        return Ok(None);
    }
    response.refresh(&now);
    metrics::idempotency_conflict("duplicate");
    Ok(Some(response))
}

fn replayed(response: IngestResponse) -> Response {
    let mut resp = (StatusCode::OK, Json(IngestResponse { replayed: true, ..response })).into_response();
    resp.headers_mut().insert("idempotent-replayed", HeaderValue::from_static("true"));
    resp
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
    let bad = || {
        ApiError::invalid_field(
            "Idempotency-Key",
            &format!("must be 1 to {MAX_IDEMPOTENCY_KEY} visible ASCII characters, without spaces"),
        )
    };
    let s = v.to_str().map_err(|_| bad())?;
    if s.is_empty() || s.len() > MAX_IDEMPOTENCY_KEY || !s.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(bad());
    }
    Ok(Some(s.to_string()))
}
