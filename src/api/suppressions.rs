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
        "detail": s.detail,
        "created_at": rfc3339(s.created_at),
    })
}

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
