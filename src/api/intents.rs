//! `GET /v1/intents/{id or key}` and `GET /v1/intents?entity=TYPE:ID&recipient=ID&state=…`.

use super::query::{Params, QueryParams};
use super::{ApiError, AppState, Caller, Scope, views};
use crate::event::NotificationKey;
use crate::intent::State as IntentState;
use crate::store::{Cursor, IntentFilter};
use axum::Json;
use axum::extract::{Path, State};
use serde::Deserialize;
use serde_json::{Value, json};

pub const DEFAULT_PAGE: u32 = 50;
pub const MAX_PAGE: u32 = 500;

/// One intent with its frozen content and every attempt.
#[utoipa::path(get, path = "/v1/intents/{id}", operation_id = "get_intent", tag = "intents", security(("bearer" = ["intents:read"])),
    params(("id" = String, Path, description = "The intent's id, which is its key.")),
    responses(
        (status = 200, description = "The intent.", body = crate::api::openapi::doc::IntentDetail),
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
    caller.require(Scope::IntentsRead)?;
    let not_found = || ApiError::NotFound(format!("no intent {id:?}"));
    // The id of an intent is its key: one identifier, derived from the event.
    let key = NotificationKey::parse(&id).ok_or_else(not_found)?;
    let detail = app.store.intent_get(caller.tenant.as_str(), key.as_str()).await?.ok_or_else(not_found)?;
    Ok(Json(views::intent_detail(&detail)))
}

#[derive(Debug, Deserialize)]
pub struct ListQuery {
    entity: Option<String>,
    recipient: Option<String>,
    state: Option<String>,
    cursor: Option<String>,
    limit: Option<u32>,
}

impl QueryParams for ListQuery {
    const NAMES: &'static [&'static str] = &["entity", "recipient", "state", "cursor", "limit"];
}

/// Intents, newest first.
#[utoipa::path(get, path = "/v1/intents", operation_id = "list_intents", tag = "intents", security(("bearer" = ["intents:read"])),
    params(
        ("entity" = Option<String>, Query, description = "TYPE:ID, like purchase_order:PO-4482."),
        ("recipient" = Option<String>, Query, description = "A recipient id."),
        ("state" = Option<crate::api::openapi::doc::StateName>, Query, description = "An intent state."),
        ("cursor" = Option<String>, Query, description = "A previous page's `next`, as it was."),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 500, description = "Page size (default 50)."),
    ),
    responses(
        (status = 200, description = "A page of intents.", body = crate::api::openapi::doc::IntentPage),
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
    caller.require(Scope::IntentsRead)?;
    let entity = match q.entity {
        None => None,
        Some(e) => {
            let (kind, id) = e
                .split_once(':')
                .filter(|(k, i)| !k.is_empty() && !i.is_empty())
                .ok_or_else(|| ApiError::invalid_field("entity", "must be TYPE:ID, like purchase_order:PO-4482"))?;
            Some((kind.to_string(), id.to_string()))
        }
    };
    let state = match q.state.as_deref() {
        None => None,
        Some(s) => Some(IntentState::parse(s).ok_or_else(|| {
            let known: Vec<_> = IntentState::ALL.iter().map(|s| s.as_str()).collect();
            ApiError::invalid_field("state", &format!("unknown state {s:?}; expected one of {}", known.join(", ")))
        })?),
    };
    let filter = IntentFilter {
        tenant: Some(caller.tenant.as_str().to_string()),
        entity,
        recipient_id: q.recipient,
        state,
        cursor: page_cursor(q.cursor.as_deref())?,
        limit: page_limit(q.limit)?,
    };
    let page = app.store.intents_list(filter).await?;
    let intents: Vec<Value> = page.items.iter().map(views::intent).collect();
    Ok(Json(json!({"intents": intents, "next": page.next})))
}

/// `?cursor=`: only what a previous page's `next` was.
pub fn page_cursor(cursor: Option<&str>) -> Result<Option<Cursor>, ApiError> {
    cursor
        .map(|c| {
            Cursor::parse(c).ok_or_else(|| {
                ApiError::invalid_field("cursor", "is not a cursor Herald handed out; pass a page's `next` as it is")
            })
        })
        .transpose()
}

pub fn page_limit(limit: Option<u32>) -> Result<u32, ApiError> {
    match limit {
        None => Ok(DEFAULT_PAGE),
        Some(n) if (1..=MAX_PAGE).contains(&n) => Ok(n),
        Some(_) => Err(ApiError::invalid_field("limit", &format!("must be between 1 and {MAX_PAGE}"))),
    }
}
