//! The HTTP API (DESIGN §4). Handlers parse input into typed values at the edge;
//! errors become responses in exactly one place, [`ApiError`].

mod auth;
mod dead_letters;
mod error;
mod events;
mod inbox;
mod intents;
mod openapi;
mod ops;
pub(crate) mod query;
mod receipts;
mod receipts_ses;
mod recipients;
mod rejected;
mod shadow;
mod suppressions;
mod views;

pub use auth::{Caller, ClientAddr, Scope, TokenTable, auth_failed};
pub use dead_letters::REPLAY_LIMIT;
pub use error::ApiError;
pub use events::checked_idempotency_key;
pub use openapi::document as openapi_document;
pub use rejected::{Body as RejectedBody, view as rejected_json};
pub use shadow::COMPARE_MAX_BYTES;

/// An intent with its content and attempts, as the API shows it.
pub fn intent_json(d: &crate::store::IntentDetail) -> serde_json::Value {
    views::intent_detail(d)
}

/// An intent as `GET /v1/dead-letters` shows a dead letter: with its tenant and
/// the stored event (inline recipients masked).
pub fn dead_letter_json(d: &crate::store::IntentDetail) -> serde_json::Value {
    views::dead_letter_of(d)
}

/// A replay from the dead letters as the API shows it.
pub fn replay_json(r: &crate::store::ReplayRow) -> serde_json::Value {
    views::replay(r)
}

use crate::channel::destination::DestinationPolicy;
use crate::clock::Clock;
use crate::config::{Config, Route};
use crate::ingest::Ingestor;
use crate::ops::dlq_digest::OpsDigest;
use crate::ops::fastpath::FastPath;
use crate::render::TemplateSet;
use crate::store::Store;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::{Json, Router};
use serde_json::json;
use std::collections::HashMap;
use std::sync::Arc;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// What every handler can reach: one pointer to [`Shared`], so that the
/// clone axum makes of the state for each extraction (the middleware's and
/// the handler's, every request) is one count, not one per part.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// The parts of [`AppState`].
#[derive(Clone)]
pub struct Shared {
    pub store: Arc<dyn Store>,
    pub config: Arc<Config>,
    pub templates: Arc<TemplateSet>,
    pub routes: Arc<HashMap<String, Route>>,
    pub tokens: Arc<TokenTable>,
    pub clock: Arc<dyn Clock>,
    /// The ingest pipeline `POST /v1/events` hands its requests to.
    pub ingest: Arc<Ingestor>,
    pub ops_digest: Arc<OpsDigest>,
    /// Which webhook destinations input may name.
    pub destinations: Arc<DestinationPolicy>,
    /// The failover providers' circuit breakers (`/readyz` shows them).
    pub breakers: Arc<crate::channel::failover::Breakers>,
    /// SNS signing certificates, cached, and subscription confirmations.
    pub sns: Arc<crate::receipt::sns::Sns>,
    /// Signs the operator console's session cookies.
    pub console: Arc<crate::console::SessionKeys>,
    /// Console sign-ins refused per client address after too many wrong tokens.
    pub sign_in_throttle: Arc<crate::console::SignInThrottle>,
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
        let ingest = Arc::new(Ingestor::new(
            store.clone(),
            config.clone(),
            templates.clone(),
            routes.clone(),
            clock.clone(),
            fastpath,
            destinations.clone(),
        ));
        let console = Arc::new(crate::console::SessionKeys::from_config(&config));
        let sign_in_throttle = Arc::new(crate::console::SignInThrottle::from_config(&config));
        AppState(Arc::new(Shared {
            console,
            sign_in_throttle,
            store,
            config,
            templates,
            routes,
            tokens: Arc::new(tokens),
            clock,
            ingest,
            ops_digest,
            destinations,
            breakers: Arc::default(),
            sns: Arc::default(),
        }))
    }

    pub fn with_breakers(mut self, breakers: Arc<crate::channel::failover::Breakers>) -> AppState {
        Arc::make_mut(&mut self.0).breakers = breakers;
        self
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
    let (routes, _) = described_routes().split_for_parts();
    // The console is merged after the API's layers: its errors are pages, not JSON.
    let console = crate::console::router(state.config.console.enabled);
    routes
        .fallback(|| async { ApiError::NotFound("no such endpoint".into()) })
        .layer(axum::middleware::from_fn(query::refuse_control_characters))
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn_with_state(limit, error::json_errors))
        .merge(console)
        .with_state(state)
}

/// Every route, each with the `#[utoipa::path]` that describes it: the router
/// and the OpenAPI document are both built from this one list.
pub(crate) fn described_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        // Endpoints without query parameters: any is refused (a 400 naming it).
        .routes(routes!(healthz))
        .routes(routes!(readyz))
        .routes(routes!(openapi::serve))
        .routes(routes!(ops::scrape))
        .routes(routes!(ops::dlq_digest))
        .routes(routes!(dead_letters::replay))
        .routes(routes!(intents::get_one))
        .routes(routes!(recipients::put_one, recipients::get_one))
        .routes(routes!(recipients::preferences_version))
        .routes(routes!(inbox::mark_read))
        .routes(routes!(receipts::generic))
        .routes(routes!(receipts_ses::ses))
        .routes(routes!(suppressions::remove))
        .routes(routes!(rejected::get_one))
        .route_layer(axum::middleware::from_fn(query::refuse_any))
        // Endpoints with query parameters read them through `query::Params`,
        // which refuses the ones they do not know.
        .routes(routes!(events::post_event))
        .routes(routes!(dead_letters::list))
        .routes(routes!(dead_letters::summary))
        .routes(routes!(intents::list))
        .routes(routes!(inbox::list))
        .routes(routes!(suppressions::list))
        .routes(routes!(rejected::list))
        .routes(routes!(shadow::report))
        .routes({
            // A send log is larger than an event: its own limit.
            let (schemas, paths, route) = routes!(shadow::compare);
            (schemas, paths, route.layer(DefaultBodyLimit::max(shadow::COMPARE_MAX_BYTES)))
        })
        // Twilio's callback URL carries the intent's key as its query.
        .routes(routes!(receipts::twilio))
}

/// Liveness: the process answers.
#[utoipa::path(get, path = "/healthz", operation_id = "healthz", tag = "operations", security(()),
    responses((status = 200, description = "Herald is up.", body = openapi::doc::Status, example = json!({"status": "ok"})),
        (status = 400, response = openapi::doc::BadRequest)))]
async fn healthz() -> impl IntoResponse {
    Json(json!({"status": "ok"}))
}

/// Readiness: the database answers.
#[utoipa::path(get, path = "/readyz", operation_id = "readyz", tag = "operations", security(()),
    responses((status = 200, description = "The database is reachable.", body = openapi::doc::Status, example = json!({"status": "ready"})),
        (status = 503, description = "The database is unreachable.", body = openapi::doc::Status, example = json!({"status": "database unreachable"})),
        (status = 400, response = openapi::doc::BadRequest)))]
async fn readyz(State(app): State<AppState>) -> impl IntoResponse {
    match app.store.ping().await {
        Ok(()) => {
            // A provider whose circuit is open does not make this process
            // unready (it still takes events, and failover has another one):
            // it is shown, for whoever looks.
            let states = app.breakers.states();
            if states.is_empty() {
                return (StatusCode::OK, Json(json!({"status": "ready"})));
            }
            let providers: serde_json::Map<String, serde_json::Value> =
                states.into_iter().map(|(name, state)| (name, json!(state.as_str()))).collect();
            (StatusCode::OK, Json(json!({"status": "ready", "providers": providers})))
        }
        Err(e) => {
            tracing::warn!(error = %e, "readiness check: database unreachable");
            (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"status": "database unreachable"})))
        }
    }
}
