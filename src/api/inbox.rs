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
