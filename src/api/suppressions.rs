//! The tenant's suppression list (scope `ops`): `GET /v1/suppressions` and
//! `DELETE /v1/suppressions/{id}`, an entry named by the id the list shows.
//!
//! Nothing here takes or shows an address or any hash of one: an endpoint
//! that answered differently for a listed address and another would let a
//! caller confirm guesses at a masked one (see `crate::suppression`). An
//! operator who knows the address finds its entry by its mask and source
//! intent; `herald suppressions remove ADDRESS` on the host takes the address.

use super::intents::{page_cursor, page_limit};
use super::query::{Params, QueryParams};
use super::{ApiError, AppState, Caller, Scope};
use crate::clock::rfc3339;
use crate::store::SuppressionRow;
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
        "id": s.id,
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

#[utoipa::path(delete, path = "/v1/suppressions/{id}", operation_id = "remove_suppression", tag = "suppressions", security(("bearer" = ["ops"])),
    params(("id" = String, Path, description = "The entry's id, as the list shows it.")),
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
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Scope::Ops)?;
    let tenant = caller.tenant.as_str();
    if !app.store.suppression_remove(tenant, &id).await? {
        return Err(ApiError::NotFound(
            "no entry of this id on the suppression list (entries are named by the id the list shows, never by address)"
                .into(),
        ));
    }
    tracing::info!(tenant, entry = %id, "suppression removed");
    Ok(Json(json!({"removed": id})))
}

/// The shapes of the suppression endpoints' bodies, for the OpenAPI document.
#[allow(dead_code)]
pub mod doc {
    use serde::Serialize;
    use utoipa::ToSchema;

    /// An address the tenant's messages no longer go to.
    #[derive(ToSchema, Serialize)]
    pub struct Suppression {
        /// The entry's id, derived from the intent that put it there (never
        /// from the address): what `DELETE /v1/suppressions/{id}` takes.
        pub id: Option<String>,
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
        /// The id of the entry removed.
        pub removed: String,
    }
}
