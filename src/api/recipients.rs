//! The recipient directory: `PUT /v1/recipients/{id}` and `GET`.

use super::{ApiError, AppState, Caller, Scope, views};
use crate::clock::micros;
use crate::event::canonical_json;
use crate::event::json::read_strict;
use crate::preferences::Preferences;
use crate::recipient::{validate_email, validate_locale, validate_phone, validate_timezone, validate_webhook_url};
use crate::store::RecipientPut;
use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde_json::{Value, json};

const FIELDS: [&str; 6] = ["email", "phone", "locale", "timezone", "webhook_url", "preferences"];

/// Store a directory entry; every change bumps `preferences_version`.
#[utoipa::path(put, path = "/v1/recipients/{id}", operation_id = "put_recipient", tag = "recipients", security(("bearer" = ["recipients:write"])),
    params(("id" = String, Path, description = "The recipient's id (1-256 characters, no `|`).")),
    request_body(content = crate::api::openapi::doc::RecipientUpdate, content_type = "application/json"),
    responses(
        (status = 200, description = "The entry as stored, addresses masked.", body = crate::api::openapi::doc::Recipient),
        (status = 400, response = crate::api::openapi::doc::BadRequest),
        (status = 401, response = crate::api::openapi::doc::Unauthorized),
        (status = 403, response = crate::api::openapi::doc::Forbidden),
        (status = 413, response = crate::api::openapi::doc::PayloadTooLarge),
        (status = 500, response = crate::api::openapi::doc::Internal),
    ))]
pub async fn put_one(
    State(app): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    caller.require(Scope::RecipientsWrite)?;
    if id.is_empty() || id.len() > 256 || id.contains('|') {
        return Err(ApiError::invalid_field("id", "must be 1 to 256 characters without '|'"));
    }
    let json = read_strict(&body)?;
    let obj = json.as_object().ok_or_else(|| ApiError::bad_request("body must be a JSON object"))?;
    if let Some(unknown) = obj.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(ApiError::invalid_field(unknown, &format!("unknown field; expected one of {}", FIELDS.join(", "))));
    }
    let field = |name: &str, check: fn(&str) -> Result<String, String>| -> Result<Option<String>, ApiError> {
        match obj.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => check(s).map(Some).map_err(|m| ApiError::invalid_field(name, &m)),
            Some(_) => Err(ApiError::invalid_field(name, "must be a string")),
        }
    };
    let preferences = Preferences::parse(obj.get("preferences").unwrap_or(&Value::Null))
        .map_err(|e| ApiError::invalid_field(&e.field, &e.message))?;
    let put = RecipientPut {
        tenant: caller.tenant.as_str().to_string(),
        id,
        email: field("email", validate_email)?,
        phone: field("phone", validate_phone)?,
        locale: field("locale", validate_locale)?,
        timezone: field("timezone", validate_timezone)?,
        webhook_url: field("webhook_url", validate_webhook_url)?,
        preferences: canonical_json(&preferences.to_json()),
        now_us: micros(app.clock.now()),
    };
    if let Some(url) = &put.webhook_url {
        app.check_webhook_urls(&[("webhook_url".into(), url.clone())]).await?;
    }
    let row = app.store.recipient_put(put).await?;
    Ok((StatusCode::OK, Json(views::recipient(&row))))
}

/// A directory entry, addresses masked.
#[utoipa::path(get, path = "/v1/recipients/{id}", operation_id = "get_recipient", tag = "recipients", security(("bearer" = ["recipients:write"])),
    params(("id" = String, Path, description = "The recipient's id.")),
    responses(
        (status = 200, description = "The entry.", body = crate::api::openapi::doc::Recipient),
        (status = 400, response = crate::api::openapi::doc::BadRequest),
        (status = 401, response = crate::api::openapi::doc::Unauthorized),
        (status = 403, response = crate::api::openapi::doc::Forbidden),
        (status = 404, response = crate::api::openapi::doc::NotFound),
        (status = 500, response = crate::api::openapi::doc::Internal),
    ))]
pub async fn get_one(
    State(app): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Scope::RecipientsWrite)?;
    let rows = app.store.recipients_get(caller.tenant.as_str(), std::slice::from_ref(&id)).await?;
    let row = rows.first().ok_or_else(|| ApiError::NotFound(format!("no recipient {id:?}")))?;
    Ok(Json(views::recipient(row)))
}

/// `GET /v1/recipients/{id}/preferences/{version}`: the preferences a past
/// decision was made with.
/// The preferences a past decision was made with.
#[utoipa::path(get, path = "/v1/recipients/{id}/preferences/{version}", operation_id = "get_preferences_version", tag = "recipients",
    security(("bearer" = ["intents:read"])),
    params(("id" = String, Path, description = "The recipient's id."),
        ("version" = i64, Path, description = "A preferences version, as an intent names it.")),
    responses(
        (status = 200, description = "That version.", body = crate::api::openapi::doc::PreferencesVersion),
        (status = 400, response = crate::api::openapi::doc::BadRequest),
        (status = 401, response = crate::api::openapi::doc::Unauthorized),
        (status = 403, response = crate::api::openapi::doc::Forbidden),
        (status = 404, response = crate::api::openapi::doc::NotFound),
        (status = 500, response = crate::api::openapi::doc::Internal),
    ))]
pub async fn preferences_version(
    State(app): State<AppState>,
    caller: Caller,
    Path((id, version)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Scope::IntentsRead)?;
    let n: i64 = version.parse().map_err(|_| ApiError::invalid_field("version", "must be a whole number"))?;
    let found = app.store.recipient_preferences_get(caller.tenant.as_str(), &id, n).await?;
    let v = found.ok_or_else(|| ApiError::NotFound(format!("recipient {id:?} has no preferences version {n}")))?;
    Ok(Json(json!({
        "recipient_id": id,
        "version": v.version,
        "preferences": serde_json::from_str::<Value>(&v.preferences).unwrap_or(Value::Null),
        "created_at": crate::clock::rfc3339(v.created_at),
    })))
}
