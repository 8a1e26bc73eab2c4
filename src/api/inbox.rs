//! The in-app inbox: one card per entity at its highest version (DESIGN rule 4).

use super::intents::{page_cursor, page_limit};
use super::query::{Params, QueryParams};
use super::{ApiError, AppState, Caller, Scope, views};
use crate::clock::micros;
use axum::Json;
use axum::extract::{Path, State};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Debug, Deserialize)]
pub struct InboxQuery {
    cursor: Option<String>,
    limit: Option<u32>,
}

impl QueryParams for InboxQuery {
    const NAMES: &'static [&'static str] = &["cursor", "limit"];
}

/// The in-app inbox: one card per entity at its highest version, newest activity first.
#[utoipa::path(get, path = "/v1/recipients/{id}/inbox", operation_id = "list_inbox", tag = "recipients", security(("bearer" = ["intents:read"])),
    params(("id" = String, Path, description = "The recipient's id."),
        ("cursor" = Option<String>, Query, description = "A previous page's `next`, as it was."),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 500, description = "Page size (default 50)."),
    ),
    responses(
        (status = 200, description = "A page of cards.", body = crate::api::openapi::doc::Inbox),
        (status = 400, response = crate::api::openapi::doc::BadRequest),
        (status = 401, response = crate::api::openapi::doc::Unauthorized),
        (status = 403, response = crate::api::openapi::doc::Forbidden),
        (status = 500, response = crate::api::openapi::doc::Internal),
    ))]
pub async fn list(
    State(app): State<AppState>,
    caller: Caller,
    Path(recipient): Path<String>,
    Params(q): Params<InboxQuery>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Scope::IntentsRead)?;
    let limit = page_limit(q.limit)?;
    let cursor = page_cursor(q.cursor.as_deref())?;
    let page = app.store.inbox_list(caller.tenant.as_str(), &recipient, cursor.as_ref(), limit).await?;
    let cards: Vec<Value> = page.items.iter().map(views::card).collect();
    Ok(Json(json!({"cards": cards, "next": page.next})))
}

/// Mark a card read.
#[utoipa::path(post, path = "/v1/recipients/{id}/inbox/{card}/read", operation_id = "mark_card_read", tag = "recipients",
    security(("bearer" = ["recipients:write"])),
    params(("id" = String, Path, description = "The recipient's id."), ("card" = String, Path, description = "The card's id.")),
    responses(
        (status = 200, description = "The card is read.", body = crate::api::openapi::doc::CardRead),
        (status = 400, response = crate::api::openapi::doc::BadRequest),
        (status = 401, response = crate::api::openapi::doc::Unauthorized),
        (status = 403, response = crate::api::openapi::doc::Forbidden),
        (status = 404, response = crate::api::openapi::doc::NotFound),
        (status = 500, response = crate::api::openapi::doc::Internal),
    ))]
pub async fn mark_read(
    State(app): State<AppState>,
    caller: Caller,
    Path((recipient, card)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Scope::RecipientsWrite)?;
    let now = micros(app.clock.now());
    if !app.store.inbox_mark_read(caller.tenant.as_str(), &recipient, &card, now).await? {
        return Err(ApiError::NotFound(format!("no card {card:?} in the inbox of {recipient:?}")));
    }
    Ok(Json(json!({"id": card, "read": true})))
}
