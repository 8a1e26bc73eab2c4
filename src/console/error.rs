//! How the console answers when something goes wrong: an HTML page with the
//! status it deserves. Like the API, a 5xx says nothing about internals.

use super::pages;
use crate::store::StoreError;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use minijinja::context;

#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    /// No session, or one that expired or whose token is gone.
    #[error("signed out")]
    SignedOut,
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    /// Bad input, naming the field.
    #[error("{field}: {message}")]
    Invalid { field: String, message: String },
    /// A form without this session's CSRF token.
    #[error("csrf")]
    Csrf,
    #[error("internal error")]
    Internal,
}

impl ConsoleError {
    pub fn invalid(field: &str, message: impl Into<String>) -> ConsoleError {
        ConsoleError::Invalid { field: field.to_string(), message: message.into() }
    }
}

impl From<StoreError> for ConsoleError {
    fn from(e: StoreError) -> ConsoleError {
        tracing::error!(error = %e, "console: store error");
        ConsoleError::Internal
    }
}

impl IntoResponse for ConsoleError {
    fn into_response(self) -> Response {
        let (status, title, message) = match &self {
            ConsoleError::SignedOut => {
                return (StatusCode::SEE_OTHER, [(header::LOCATION, "/console/sign-in")]).into_response();
            }
            ConsoleError::Forbidden(m) => (StatusCode::FORBIDDEN, "Not allowed", m.clone()),
            ConsoleError::NotFound(m) => (StatusCode::NOT_FOUND, "Not found", m.clone()),
            ConsoleError::Invalid { field, message } => {
                (StatusCode::BAD_REQUEST, "Check the form", format!("{field}: {message}"))
            }
            ConsoleError::Csrf => (
                StatusCode::FORBIDDEN,
                "Form refused",
                "This form did not carry the console's check that it came from your session \
                 (it may be older than your sign-in). Go back, reload the page and try again."
                    .to_string(),
            ),
            ConsoleError::Internal => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "Something went wrong",
                "Herald could not answer this page. The error is in its log; try again shortly.".to_string(),
            ),
        };
        let body = pages::render("error.html", context! { title, message, status => status.as_u16() });
        (status, body).into_response()
    }
}
