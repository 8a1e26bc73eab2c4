//! The HTTP API (DESIGN §4). Handlers parse input into typed values at the edge;
//! errors become responses in exactly one place, [`ApiError`].

mod auth;
mod dead_letters;
mod error;
mod events;
mod inbox;
mod intents;
mod ops;
mod query;
mod receipts;
mod recipients;
mod suppressions;
mod views;

pub use auth::{Caller, Scope, TokenTable};
pub use error::ApiError;

/// An intent with its content and attempts, as the API shows it.
pub fn intent_json(d: &crate::store::IntentDetail) -> serde_json::Value {
    views::intent_detail(d)
}

/// An intent as `GET /v1/dead-letters` shows a dead letter: with its tenant and
/// the stored event (inline recipients masked).
pub fn dead_letter_json(d: &crate::store::IntentDetail) -> serde_json::Value {
    views::dead_letter_of(d)
}

use crate::channel::destination::DestinationPolicy;
use crate::clock::Clock;
use crate::config::{Config, Route};
use crate::ops::dlq_digest::OpsDigest;
use crate::ops::fastpath::FastPath;
use crate::render::TemplateSet;
use crate::store::Store;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde_json::json;
use std::collections::HashMap;
use std::sync::Arc;

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    pub store: Arc<dyn Store>,
    pub config: Arc<Config>,
    pub templates: Arc<TemplateSet>,
    pub routes: Arc<HashMap<String, Route>>,
    pub tokens: Arc<TokenTable>,
    pub clock: Arc<dyn Clock>,
    pub fastpath: Option<Arc<FastPath>>,
    pub ops_digest: Arc<OpsDigest>,
    /// Which webhook destinations input may name.
    pub destinations: Arc<DestinationPolicy>,
}

impl AppState {
    pub fn new(
        store: Arc<dyn Store>,
        config: Arc<Config>,
        templates: Arc<TemplateSet>,
        clock: Arc<dyn Clock>,
        fastpath: Option<Arc<FastPath>>,
        ops_digest: Arc<OpsDigest>,
        routes: Arc<HashMap<String, Route>>,
    ) -> AppState {
        let tokens = TokenTable::from_config(&config.auth.tokens);
        let destinations = Arc::new(DestinationPolicy::from_config(&config));
        AppState {
            store,
            config,
            templates,
            routes,
            tokens: Arc::new(tokens),
            clock,
            fastpath,
            ops_digest,
            destinations,
        }
    }
}

impl AppState {
    /// Refuses a `webhook_url` that points inside the deployment (a 400
    /// naming the field), unless `allow_private_destinations` is set.
    pub async fn check_webhook_urls(&self, urls: &[(String, String)]) -> Result<(), ApiError> {
        self.destinations.check_input(urls).await.map_err(|(field, message)| ApiError::invalid_field(&field, &message))
    }
}

/// The routes by event type, shared by the API and the digest closer.
pub fn routes_by_event(config: &Config) -> Arc<HashMap<String, Route>> {
    Arc::new(config.routes.iter().map(|r| (r.event.clone(), r.clone())).collect())
}

pub fn router(state: AppState) -> Router {
    let limit = state.config.max_body_bytes;
    Router::new()
        // Endpoints without query parameters: any is refused (a 400 naming it).
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(ops::scrape))
        .route("/v1/ops/dlq-digest", post(ops::dlq_digest))
        .route("/v1/dead-letters/replay", post(dead_letters::replay))
        .route("/v1/events", post(events::post_event))
        .route("/v1/intents/{id}", get(intents::get_one))
        .route("/v1/recipients/{id}", put(recipients::put_one).get(recipients::get_one))
        .route("/v1/recipients/{id}/preferences/{version}", get(recipients::preferences_version))
        .route("/v1/recipients/{id}/inbox/{card}/read", post(inbox::mark_read))
        .route("/v1/receipts/generic", post(receipts::generic))
        .route("/v1/suppressions/{address}", axum::routing::delete(suppressions::remove))
        .route_layer(axum::middleware::from_fn(query::refuse_any))
        // Endpoints with query parameters read them through `query::Params`,
        // which refuses the ones they do not know.
        .route("/v1/dead-letters", get(dead_letters::list))
        .route("/v1/dead-letters/summary", get(dead_letters::summary))
        .route("/v1/intents", get(intents::list))
        .route("/v1/recipients/{id}/inbox", get(inbox::list))
        .route("/v1/suppressions", get(suppressions::list))
        // Receipts are signed, not authorised by a token; Twilio's callback
        // URL carries the intent's key as its query.
        .route("/v1/receipts/twilio", post(receipts::twilio))
        .fallback(|| async { ApiError::NotFound("no such endpoint".into()) })
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}

async fn healthz() -> impl IntoResponse {
    Json(json!({"status": "ok"}))
}

async fn readyz(State(app): State<AppState>) -> impl IntoResponse {
    match app.store.ping().await {
        Ok(()) => (StatusCode::OK, Json(json!({"status": "ready"}))),
        Err(e) => {
            tracing::warn!(error = %e, "readiness check: database unreachable");
            (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"status": "database unreachable"})))
        }
    }
}
