//! The deployment operator's endpoints (scope `admin`): `/metrics` shows the
//! whole deployment's queue, and `POST /v1/ops/dlq-digest` posts to the
//! operators' webhook; a tenant's `ops` token reaches neither.

use super::{ApiError, AppState, Caller, Scope};
use crate::clock::micros;
use crate::ops::dlq_digest::DigestError;
use crate::ops::metrics;
use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

/// Prometheus text. Queue figures are read from the database at scrape time.
#[utoipa::path(get, path = "/metrics", operation_id = "metrics", tag = "operations", security(("bearer" = ["admin"])),
    responses(
        (status = 200, description = "Prometheus text exposition.", content_type = "text/plain", body = String),
        (status = 400, response = crate::api::openapi::doc::BadRequest),
        (status = 401, response = crate::api::openapi::doc::Unauthorized),
        (status = 403, response = crate::api::openapi::doc::Forbidden),
    ))]
pub async fn scrape(State(app): State<AppState>, caller: Caller) -> Result<Response, ApiError> {
    caller.require(Scope::Admin)?;
    let now = micros(app.clock.now());
    match app.store.queue_stats(None, now).await {
        Ok(stats) => metrics::queue(stats, now),
        Err(e) => tracing::warn!(error = %e, "queue figures unavailable for this scrape"),
    }
    let body = metrics::render();
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body).into_response())
}

/// The daily digest (every tenant's dead letters since the last one), now.
#[utoipa::path(post, path = "/v1/ops/dlq-digest", operation_id = "post_dlq_digest", tag = "operations", security(("bearer" = ["admin"])),
    responses(
        (status = 200, description = "The digest, as posted to the ops webhook.", body = crate::api::openapi::doc::DlqDigest),
        (status = 400, response = crate::api::openapi::doc::BadRequest),
        (status = 401, response = crate::api::openapi::doc::Unauthorized),
        (status = 403, response = crate::api::openapi::doc::Forbidden),
        (status = 500, response = crate::api::openapi::doc::Internal),
        (status = 502, response = crate::api::openapi::doc::BadGateway),
    ))]
pub async fn dlq_digest(State(app): State<AppState>, caller: Caller) -> Result<Response, ApiError> {
    caller.require(Scope::Admin)?;
    match app.ops_digest.post_now().await {
        Ok(body) => Ok((StatusCode::OK, Json::<Value>(body)).into_response()),
        Err(DigestError::NotConfigured) => {
            Err(ApiError::invalid_field("ops.digest_webhook", "is not configured; nowhere to post the digest"))
        }
        Err(DigestError::Post(why)) => {
            Err(ApiError::BadGateway(format!("the ops webhook did not accept the digest: {why}")))
        }
        Err(DigestError::Store(e)) => Err(ApiError::Internal(e)),
    }
}
