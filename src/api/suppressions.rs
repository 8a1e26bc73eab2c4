//! The tenant's suppression list (scope `ops`): `GET /v1/suppressions` and
//! `DELETE /v1/suppressions/{address}` — the address as written (an email or
//! an E.164 number), or the entry's `address_hash` as the list shows it.

use super::intents::{page_cursor, page_limit};
use super::query::{Params, QueryParams};
use super::{ApiError, AppState, Caller, Scope};
use crate::clock::rfc3339;
use crate::store::SuppressionRow;
use crate::suppression::{hash_of_input, is_hash};
use axum::Json;
use axum::extract::{Path, State};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Debug, Deserialize)]
pub struct ListQuery {
    cursor: Option<String>,
    limit: Option<u32>,
}

impl QueryParams for ListQuery {
    const NAMES: &'static [&'static str] = &["cursor", "limit"];
}

pub fn view(s: &SuppressionRow) -> Value {
    json!({
        "address_hash": s.address_hash,
        "address": s.masked,
        "channel": s.channel,
        "domain": s.domain,
        "reason": s.reason,
        "source_intent": s.source_intent,
        // Scrubbed when the receipt arrived; again here for older rows.
        "detail": crate::redact::scrub_opt(s.detail.as_deref()),
        "created_at": rfc3339(s.created_at),
    })
}

#[utoipa::path(get, path = "/v1/suppressions", operation_id = "list_suppressions", tag = "suppressions", security(("bearer" = ["ops"])),
    params(
        ("cursor" = Option<String>, Query, description = "A previous page's `next`, as it was."),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 500, description = "Page size (default 50)."),
    ),
    responses(
        (status = 200, description = "The tenant's suppression list, newest first.", body = doc::SuppressionPage),
        (status = 400, response = crate::api::openapi::doc::BadRequest),
        (status = 401, response = crate::api::openapi::doc::Unauthorized),
        (status = 403, response = crate::api::openapi::doc::Forbidden),
        (status = 500, response = crate::api::openapi::doc::Internal),
    ))]
pub async fn list(
    State(app): State<AppState>,
    caller: Caller,
    Params(q): Params<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Scope::Ops)?;
    let limit = page_limit(q.limit)?;
    let cursor = page_cursor(q.cursor.as_deref())?;
    let page = app.store.suppressions_list(caller.tenant.as_str(), cursor.as_ref(), limit).await?;
    let items: Vec<Value> = page.items.iter().map(view).collect();
    Ok(Json(json!({"suppressions": items, "next": page.next})))
}

#[utoipa::path(delete, path = "/v1/suppressions/{address}", operation_id = "remove_suppression", tag = "suppressions", security(("bearer" = ["ops"])),
    params(("address" = String, Path, description = "The address (an email, or an E.164 number with + written %2B), or the entry's address_hash.")),
    responses(
        (status = 200, description = "Removed.", body = doc::SuppressionRemoved),
        (status = 400, response = crate::api::openapi::doc::BadRequest),
        (status = 401, response = crate::api::openapi::doc::Unauthorized),
        (status = 403, response = crate::api::openapi::doc::Forbidden),
        (status = 404, response = crate::api::openapi::doc::NotFound),
        (status = 500, response = crate::api::openapi::doc::Internal),
    ))]
pub async fn remove(
    State(app): State<AppState>,
    caller: Caller,
    Path(address): Path<String>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Scope::Ops)?;
    let tenant = caller.tenant.as_str();
    let hash = if is_hash(&address) { address.clone() } else { hash_of_input(tenant, &address) };
    if !app.store.suppression_remove(tenant, &hash).await? {
        return Err(ApiError::NotFound("no such address on the suppression list".into()));
    }
    tracing::info!(tenant, address_hash = %hash, "suppression removed");
    Ok(Json(json!({"removed": hash})))
}

/// The shapes of the suppression endpoints' bodies, for the OpenAPI document.
#[allow(dead_code)]
pub mod doc {
    use serde::Serialize;
    use utoipa::ToSchema;

    /// An address the tenant's messages no longer go to.
    #[derive(ToSchema, Serialize)]
    pub struct Suppression {
        /// The entry's key: SHA-256 of the tenant and the address.
        pub address_hash: String,
        /// The address, masked.
        pub address: String,
        pub channel: String,
        /// An email's domain.
        pub domain: Option<String>,
        /// address_bounced or address_complained.
        pub reason: String,
        /// The intent whose receipt put it there.
        pub source_intent: String,
        /// The provider's reason, every address and number in it masked.
        pub detail: Option<String>,
        #[schema(format = DateTime)]
        pub created_at: Option<String>,
    }

    #[derive(ToSchema, Serialize)]
    pub struct SuppressionPage {
        pub suppressions: Vec<Suppression>,
        pub next: Option<String>,
    }

    #[derive(ToSchema, Serialize)]
    pub struct SuppressionRemoved {
        /// The address_hash of the entry removed.
        pub removed: String,
    }
}
