//! Query strings, read strictly: a parameter an endpoint does not know
//! (`?curser=…` for `cursor`) or one given twice is a 400 naming it, never
//! silently ignored. Endpoints with parameters read them through [`Params`];
//! the others sit behind [`refuse_any`]. And no path or query may decode to
//! a control character ([`refuse_control_characters`]).

use super::ApiError;
use axum::extract::{FromRequestParts, Query, Request};
use axum::http::Uri;
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;

/// A query struct and the names of its parameters.
pub trait QueryParams: DeserializeOwned {
    const NAMES: &'static [&'static str];
}

/// `T`, read from a query string that holds only `T::NAMES`, each at most once.
pub struct Params<T>(pub T);

impl<S: Send + Sync, T: QueryParams> FromRequestParts<S> for Params<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Params<T>, ApiError> {
        check_names(&parts.uri, T::NAMES)?;
        let Query(params) = Query::<T>::try_from_uri(&parts.uri).map_err(|e| ApiError::bad_request(e.body_text()))?;
        Ok(Params(params))
    }
}

/// For the endpoints that take no query parameters at all.
pub async fn refuse_any(request: Request, next: Next) -> Response {
    match check_names(request.uri(), &[]) {
        Ok(()) => next.run(request).await,
        Err(e) => e.into_response(),
    }
}

/// Every endpoint, before anything reads the path or query: a NUL or any
/// other control character belongs in no key, id or filter Herald takes, and
/// Postgres refuses a NUL in a text parameter, so such a request was a 500 on
/// Postgres and a 404 on SQLite. It is a 400 naming the path or the parameter.
pub async fn refuse_control_characters(request: Request, next: Next) -> Response {
    match control_character_in(request.uri()) {
        None => next.run(request).await,
        Some(field) => ApiError::invalid_field(&field, CONTROL_CHARACTERS).into_response(),
    }
}

/// What [`control_character_in`] answers with.
pub const CONTROL_CHARACTERS: &str = "must not contain control characters (such as %00)";

/// Where the URI, once percent-decoded, holds a control character: `path`,
/// or the query parameter's name.
pub fn control_character_in(uri: &Uri) -> Option<String> {
    let control = |s: &str| s.chars().any(char::is_control);
    if control(&percent_encoding::percent_decode_str(uri.path()).decode_utf8_lossy()) {
        return Some("path".into());
    }
    url::form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes())
        .find(|(name, value)| control(name) || control(value))
        .map(|(name, _)| if control(&name) { "query".into() } else { name.into_owned() })
}

/// Refuses a query parameter this endpoint does not take, or one given twice.
pub(super) fn check_names(uri: &Uri, known: &[&str]) -> Result<(), ApiError> {
    let mut seen: Vec<String> = Vec::new();
    for (name, _) in url::form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes()) {
        if !known.contains(&name.as_ref()) {
            let takes = match known {
                [] => "this endpoint takes none".to_string(),
                names => format!("this endpoint takes {}", names.join(", ")),
            };
            return Err(ApiError::invalid_field(&name, &format!("unknown query parameter; {takes}")));
        }
        if seen.iter().any(|s| *s == name) {
            return Err(ApiError::invalid_field(&name, "given twice; give each query parameter once"));
        }
        seen.push(name.into_owned());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(uri: &str, known: &[&str]) -> Result<(), String> {
        check_names(&uri.parse().unwrap(), known).map_err(|e| e.to_string())
    }

    #[test]
    fn a_control_character_anywhere_in_the_path_or_query_is_named() {
        let at = |uri: &str| control_character_in(&uri.parse().unwrap());
        assert_eq!(at("/v1/recipients/u-20/inbox?limit=5"), None);
        assert_eq!(at("/v1/recipients/caf%C3%A9"), None, "percent-encoded text is fine");
        assert_eq!(at("/v1/recipients/a%00b").as_deref(), Some("path"));
        assert_eq!(at("/v1/recipients/a%0Ab/inbox").as_deref(), Some("path"));
        assert_eq!(at("/v1/intents?entity=po:PO%00").as_deref(), Some("entity"));
        assert_eq!(at("/v1/intents?limit=1&recipient=u%1F").as_deref(), Some("recipient"));
        assert_eq!(at("/v1/intents?a%00=1").as_deref(), Some("query"));
    }

    #[test]
    fn only_known_parameters_each_once() {
        assert_eq!(check("/x?limit=1&cursor=c", &["cursor", "limit"]), Ok(()));
        assert_eq!(check("/x", &[]), Ok(()));
        assert_eq!(check("/x?", &[]), Ok(()));
        assert!(check("/x?curser=c", &["cursor", "limit"]).unwrap_err().starts_with("curser: unknown query parameter"));
        assert!(check("/x?a=1", &[]).unwrap_err().contains("takes none"));
        assert!(check("/x?limit=1&limit=2", &["limit"]).unwrap_err().starts_with("limit: given twice"));
        assert!(check("/x?li%6Dit=1&limit=2", &["limit"]).unwrap_err().starts_with("limit: given twice"));
    }
}
