//! The in-app inbox: one card per entity at its highest version (DESIGN rule 4).

use super::intents::{page_cursor, page_limit};
use super::{ApiError, AppState, Caller, Scope, views};
use crate::clock::micros;
use axum::Json;
use axum::extract::{Path, Query, State};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Debug, Deserialize)]
pub struct InboxQuery {
    cursor: Option<String>,
    limit: Option<u32>,
}

pub async fn list(
    State(app): State<AppState>,
    caller: Caller,
    Path(recipient): Path<String>,
    query: Result<Query<InboxQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    caller.require(Scope::IntentsRead)?;
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let limit = page_limit(q.limit)?;
    let cursor = page_cursor(q.cursor.as_deref())?;
    let page = app.store.inbox_list(caller.tenant.as_str(), &recipient, cursor.as_ref(), limit).await?;
    let cards: Vec<Value> = page.items.iter().map(views::card).collect();
    Ok(Json(json!({"cards": cards, "next": page.next})))
}

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
