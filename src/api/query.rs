//! Query strings, read strictly: a parameter an endpoint does not know
//! (`?curser=…` for `cursor`) or one given twice is a 400 naming it, never
//! silently ignored. Endpoints with parameters read them through [`Params`];
//! the others sit behind [`refuse_any`].

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

fn check_names(uri: &Uri, known: &[&str]) -> Result<(), ApiError> {
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
