//! The operator console at `/console`: server-rendered pages (minijinja, the
//! templating Herald already renders messages with) that answer "what happened
//! to this notification?" and replay dead letters, for a signed-in operator of
//! one tenant. The pages and their stylesheet are compiled into the binary;
//! nothing is fetched at run time and no page needs a script.

mod dead_letters;
mod error;
mod health;
mod pages;
mod search;
mod session;
mod shadow_compare;
mod sign_in;
mod templates;
mod throttle;

pub use error::ConsoleError;
pub use session::SessionKeys;
pub use throttle::SignInThrottle;

use crate::api::AppState;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};

/// Console forms are a few short fields.
const FORM_LIMIT: usize = 16 * 1024;

/// The console's routes, or none when `console.enabled` is false.
pub fn router(enabled: bool) -> Router<AppState> {
    if !enabled {
        return Router::new();
    }
    Router::new()
        .route("/console", get(|| async { Redirect::to("/console/search") }))
        .route("/console/", get(|| async { Redirect::to("/console/search") }))
        .route("/console/console.css", get(stylesheet))
        .route("/console/sign-in", get(sign_in::form).post(sign_in::submit))
        .route("/console/sign-out", post(sign_in::sign_out))
        .route("/console/search", get(search::search))
        .route("/console/intents/{key}", get(search::intent))
        .route("/console/dead-letters", get(dead_letters::groups))
        .route("/console/dead-letters/replay", get(dead_letters::confirm).post(dead_letters::replay))
        .route("/console/templates", get(templates::templates))
        .route("/console/health", get(health::health))
        // A send log is larger than a form of a few fields: its own limit.
        .route(
            "/console/shadow/compare",
            get(shadow_compare::form)
                .post(shadow_compare::compare)
                .layer(DefaultBodyLimit::max(crate::api::COMPARE_MAX_BYTES + FORM_LIMIT)),
        )
        // Not a fallback: the API router has that, and it answers in JSON.
        .route("/console/{*rest}", get(|| async { ConsoleError::NotFound("There is no such console page.".into()) }))
        .layer(axum::middleware::from_fn(refuse_control_characters))
        .layer(DefaultBodyLimit::max(FORM_LIMIT))
        .layer(axum::middleware::map_response(security_headers))
}

/// As in the API: a path or query that decodes to a control character is a
/// page naming where (400), never a database error.
async fn refuse_control_characters(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    match crate::api::query::control_character_in(request.uri()) {
        None => next.run(request).await,
        Some(field) => ConsoleError::invalid(&field, crate::api::query::CONTROL_CHARACTERS).into_response(),
    }
}

async fn stylesheet() -> Response {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], pages::STYLESHEET).into_response()
}

/// No script may run, nothing is loaded from elsewhere, the console is never
/// framed, and pages are not cached (they show live state and CSRF tokens).
/// An email's HTML is shown in a sandboxed frame that inherits this policy,
/// so its remote images and scripts stay unloaded.
async fn security_headers(mut resp: Response) -> Response {
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; \
             form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    resp
}
