//! Signing in (a token with `ops` or `admin`, exchanged for a session cookie)
//! and out.

use super::error::ConsoleError;
use super::pages;
use super::session::{Operator, PRE_SESSION_COOKIE, SESSION_COOKIE, may_operate};
use super::throttle::Failure;
use crate::api::{AppState, ClientAddr, auth_failed};
use axum::Form;
use axum::extract::State;
use axum::extract::rejection::FormRejection;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{AppendHeaders, IntoResponse, Redirect, Response};
use minijinja::context;
use serde::Deserialize;

/// The sign-in page, with a fresh pre-session its form's CSRF token is tied to.
pub async fn form(State(app): State<AppState>, operator: Result<Operator, ConsoleError>) -> Response {
    if operator.is_ok() {
        return Redirect::to("/console/search").into_response();
    }
    page(&app, StatusCode::OK, None)
}

fn page(app: &AppState, status: StatusCode, problem: Option<&str>) -> Response {
    let Some(pre) = app.console.pre_session(app.clock.now().as_second()) else {
        return ConsoleError::Internal.into_response();
    };
    let csrf = app.console.csrf(&pre);
    let auth_off = !app.tokens.enabled();
    let body = pages::render("sign_in.html", context! { csrf, auth_off, problem });
    (status, [(header::SET_COOKIE, app.console.pre_session_cookie(&pre))], body).into_response()
}

#[derive(Debug, Deserialize)]
pub struct SignIn {
    #[serde(default)]
    token: String,
    #[serde(default)]
    csrf: String,
}

/// The sign-in page again, refusing: too many wrong tokens from this address.
fn throttled(app: &AppState, retry_after_s: i64) -> Response {
    let problem = format!(
        "Too many failed sign-ins from your address. Try again in {retry_after_s} seconds; until then every \
         sign-in from it is refused, a right token too."
    );
    let mut resp = page(app, StatusCode::TOO_MANY_REQUESTS, Some(&problem));
    resp.headers_mut().insert(header::RETRY_AFTER, retry_after_s.into());
    resp
}

pub async fn submit(
    State(app): State<AppState>,
    ClientAddr(client): ClientAddr,
    headers: HeaderMap,
    form: Result<Form<SignIn>, FormRejection>,
) -> Result<Response, ConsoleError> {
    let Form(form) = form.map_err(|e| ConsoleError::invalid("form", e.body_text()))?;
    let now = app.clock.now().as_second();
    let pre = app
        .console
        .read(&headers, PRE_SESSION_COOKIE)
        .and_then(|v| app.console.open_pre_session(v, now))
        .ok_or(ConsoleError::Csrf)?;
    if !app.console.csrf_ok(&pre, &form.csrf) {
        return Err(ConsoleError::Csrf);
    }
    let (name, fingerprint) = if app.tokens.enabled() {
        // Throttled: refused before the token is looked at (see throttle.rs).
        if let Err(retry_after) = app.sign_in_throttle.check(client, now) {
            return Ok(throttled(&app, retry_after));
        }
        let token = form.token.trim();
        if token.is_empty() {
            return Ok(page(&app, StatusCode::BAD_REQUEST, Some("token: paste an API token to sign in.")));
        }
        let Some((caller, fingerprint)) = app.tokens.caller_of(token) else {
            auth_failed("console", Some(token), client);
            if let Failure::NowThrottled(seconds) = app.sign_in_throttle.failed(client, now) {
                // Once per window, however many more attempts it refuses.
                tracing::warn!(
                    client = client.map_or_else(|| "unknown".to_string(), |ip| ip.to_string()),
                    seconds,
                    "console: too many failed sign-ins from this address; its sign-ins are refused for the window"
                );
            }
            return Ok(page(&app, StatusCode::UNAUTHORIZED, Some("token: this Herald knows no such token.")));
        };
        if !may_operate(&caller) {
            tracing::info!(token = ?caller.name, "console: sign-in refused, no ops or admin scope");
            return Ok(page(
                &app,
                StatusCode::FORBIDDEN,
                Some("token: this token lacks the ops scope; the console needs ops (or admin)."),
            ));
        }
        // Only a sign-in that succeeds clears the count: a valid token
        // refused for its scope must not let guessing start over.
        app.sign_in_throttle.succeeded(client);
        (caller.name.unwrap_or_default(), fingerprint)
    } else {
        // Without tokens, Herald listens on loopback only and anyone there
        // may do anything; the session still carries a CSRF token.
        ("local".to_string(), "none".to_string())
    };
    let session = app.console.issue(&name, &fingerprint, now).ok_or(ConsoleError::Internal)?;
    tracing::info!(token = %name, "console: signed in");
    Ok((
        AppendHeaders([
            (header::SET_COOKIE, app.console.cookie(SESSION_COOKIE, Some(&session), None)),
            (header::SET_COOKIE, app.console.cookie(PRE_SESSION_COOKIE, None, None)),
        ]),
        Redirect::to("/console/search"),
    )
        .into_response())
}

#[derive(Debug, Deserialize)]
pub struct SignOut {
    #[serde(default)]
    csrf: String,
}

pub async fn sign_out(
    State(app): State<AppState>,
    operator: Operator,
    form: Result<Form<SignOut>, FormRejection>,
) -> Result<Response, ConsoleError> {
    let Form(form) = form.map_err(|e| ConsoleError::invalid("form", e.body_text()))?;
    operator.check_csrf(&app.console, &form.csrf)?;
    Ok(([(header::SET_COOKIE, app.console.cookie(SESSION_COOKIE, None, None))], Redirect::to("/console/sign-in"))
        .into_response())
}
