//! Dead letters (DESIGN rule 5): readable — the event, the frozen content and
//! every attempt — and replayable, as the same intents with the same key.

use super::intents::{page_cursor, page_limit};
use super::query::{Params, QueryParams};
use super::{ApiError, AppState, Caller, Scope, views};
use crate::clock::micros;
use crate::event::OccurredAt;
use crate::event::json::read_strict;
use crate::intent::Reason;
use crate::store::{AttemptRow, DeadLetterFilter, ReceiptRow, Replay, ReplaySelector};
use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};

/// The most one reason-wide replay requeues; call again for the rest.
pub const REPLAY_LIMIT: i64 = 10_000;

#[derive(Debug, Deserialize)]
pub struct ListQuery {
    reason: Option<String>,
    since: Option<String>,
    cursor: Option<String>,
    limit: Option<u32>,
    tenant: Option<String>,
    #[serde(default)]
    all_tenants: bool,
}

impl QueryParams for ListQuery {
    const NAMES: &'static [&'static str] = &["reason", "since", "cursor", "limit", "tenant", "all_tenants"];
}

/// Whose dead letters: the caller's tenant's (scope `ops`), or — for the
/// deployment operator (scope `admin`) — another tenant's (`tenant=T`) or
/// every tenant's (`all_tenants=true`).
/// (Query strings and `#[serde(flatten)]` do not mix: a flattened struct
/// reads every value as a string.)
pub(super) struct Whose {
    pub(super) tenant: Option<String>,
    pub(super) all_tenants: bool,
}

impl Whose {
    /// The tenant to filter on, `None` for all; checks the scope it needs.
    pub(super) fn tenant(self, caller: &Caller) -> Result<Option<String>, ApiError> {
        match (self.tenant, self.all_tenants) {
            (None, false) => {
                caller.require(Scope::Ops)?;
                Ok(Some(caller.tenant.as_str().to_string()))
            }
            (Some(_), true) => {
                Err(ApiError::invalid_field("all_tenants", "give either tenant or all_tenants, not both"))
            }
            // Naming its own tenant is what a tenant's ops token does anyway.
            (Some(tenant), false) if tenant == caller.tenant.as_str() && caller.require(Scope::Ops).is_ok() => {
                Ok(Some(tenant))
            }
            (Some(tenant), false) => {
                caller.require(Scope::Admin)?;
                Ok(Some(tenant))
            }
            (None, true) => {
                caller.require(Scope::Admin)?;
                Ok(None)
            }
        }
    }
}

/// `since`, read by the same strict reader as `occurred_at`: no leap second
/// folded onto :59, an offset required.
fn parse_since(since: Option<&str>) -> Result<Option<i64>, ApiError> {
    since
        .map(|s| OccurredAt::parse(s).map(|t| micros(t.timestamp())).map_err(|m| ApiError::invalid_field("since", &m)))
        .transpose()
}

fn check_reason(reason: &str) -> Result<(), ApiError> {
    if Reason::parse(reason).is_none() && reason != "unknown" {
        return Err(ApiError::invalid_field("reason", &format!("unknown reason {reason:?}")));
    }
    Ok(())
}

/// Dead letters: the intent, its frozen content, the original event and every attempt.
#[utoipa::path(get, path = "/v1/dead-letters", operation_id = "list_dead_letters", tag = "dead letters", security(("bearer" = ["ops"]), ("bearer" = ["admin"])),
    params(
        ("reason" = Option<String>, Query, description = "A reason, like hard_bounce."),
        ("since" = Option<String>, Query, format = DateTime, description = "RFC 3339 with an offset."),
        ("cursor" = Option<String>, Query, description = "A previous page's `next`, as it was."),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 500, description = "Page size (default 50)."),
        ("tenant" = Option<String>, Query, description = "Another tenant's (scope admin; one's own needs only ops)."),
        ("all_tenants" = Option<bool>, Query, description = "Every tenant's (scope admin)."),
    ),
    responses(
        (status = 200, description = "A page of dead letters.", body = crate::api::openapi::doc::DeadLetterPage),
        (status = 400, response = crate::api::openapi::doc::BadRequest),
        (status = 401, response = crate::api::openapi::doc::Unauthorized),
        (status = 403, response = crate::api::openapi::doc::Forbidden),
        (status = 500, response = crate::api::openapi::doc::Internal),
    ))]
pub async fn list(
    State(app): State<AppState>,
    caller: Caller,
    Params(mut q): Params<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    let tenant = Whose { tenant: q.tenant.take(), all_tenants: q.all_tenants }.tenant(&caller)?;
    if let Some(r) = &q.reason {
        check_reason(r)?;
    }
    let filter = DeadLetterFilter {
        tenant,
        reason: q.reason,
        since_us: parse_since(q.since.as_deref())?,
        cursor: page_cursor(q.cursor.as_deref())?,
        limit: page_limit(q.limit)?,
    };
    let page = app.store.dead_letters_list(filter).await?;
    let keys: Vec<String> = page.items.iter().map(|d| d.intent.key.clone()).collect();
    let mut attempts: HashMap<String, Vec<AttemptRow>> = HashMap::new();
    for a in app.store.attempts_of(&keys).await? {
        attempts.entry(a.intent_key.clone()).or_default().push(a);
    }
    let mut receipts: HashMap<String, Vec<ReceiptRow>> = HashMap::new();
    for r in app.store.receipts_of(&keys).await? {
        receipts.entry(r.intent_key.clone()).or_default().push(r);
    }
    let of = |key: &str| receipts.get(key).map_or(&[][..], Vec::as_slice);
    let items: Vec<Value> = page
        .items
        .iter()
        .map(|d| views::dead_letter(d, attempts.get(&d.intent.key).map_or(&[], Vec::as_slice), of(&d.intent.key)))
        .collect();
    Ok(Json(json!({"dead_letters": items, "next": page.next})))
}

#[derive(Debug, Deserialize)]
pub struct SummaryQuery {
    since: Option<String>,
    tenant: Option<String>,
    #[serde(default)]
    all_tenants: bool,
}

impl QueryParams for SummaryQuery {
    const NAMES: &'static [&'static str] = &["since", "tenant", "all_tenants"];
}

/// How many dead letters, by reason.
#[utoipa::path(get, path = "/v1/dead-letters/summary", operation_id = "dead_letter_summary", tag = "dead letters", security(("bearer" = ["ops"]), ("bearer" = ["admin"])),
    params(
        ("since" = Option<String>, Query, format = DateTime, description = "RFC 3339 with an offset."),
        ("tenant" = Option<String>, Query, description = "Another tenant's (scope admin; one's own needs only ops)."),
        ("all_tenants" = Option<bool>, Query, description = "Every tenant's (scope admin)."),
    ),
    responses(
        (status = 200, description = "The counts.", body = crate::api::openapi::doc::DeadLetterSummary),
        (status = 400, response = crate::api::openapi::doc::BadRequest),
        (status = 401, response = crate::api::openapi::doc::Unauthorized),
        (status = 403, response = crate::api::openapi::doc::Forbidden),
        (status = 500, response = crate::api::openapi::doc::Internal),
    ))]
pub async fn summary(
    State(app): State<AppState>,
    caller: Caller,
    Params(mut q): Params<SummaryQuery>,
) -> Result<Json<Value>, ApiError> {
    let tenant = Whose { tenant: q.tenant.take(), all_tenants: q.all_tenants }.tenant(&caller)?;
    let since = parse_since(q.since.as_deref())?.unwrap_or(i64::MIN);
    let rows = app.store.dead_letters_summary(tenant.as_deref(), since, i64::MAX).await?;
    let total: i64 = rows.iter().map(|(_, n)| n).sum();
    let by_reason: serde_json::Map<String, Value> = rows.into_iter().map(|(r, n)| (r, Value::from(n))).collect();
    Ok(Json(json!({"total": total, "by_reason": by_reason})))
}

/// `{"ids": [...]}` or `{"reason": "...", "since": "..."}`.
/// Put dead letters back on the queue: the same intents, same key, same frozen content.
#[utoipa::path(post, path = "/v1/dead-letters/replay", operation_id = "replay_dead_letters", tag = "dead letters", security(("bearer" = ["ops"])),
    params(("traceparent" = Option<String>, Header, description = "W3C trace context: the replayed notifications' \
        attempts continue this trace, each linked to the trace of the request that first planned it. Invalid or \
        absent: a trace of its own.")),
    request_body(content = crate::api::openapi::doc::ReplayRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "What was queued again and what was skipped, and why.", body = crate::api::openapi::doc::ReplayResult),
        (status = 400, response = crate::api::openapi::doc::BadRequest),
        (status = 401, response = crate::api::openapi::doc::Unauthorized),
        (status = 403, response = crate::api::openapi::doc::Forbidden),
        (status = 413, response = crate::api::openapi::doc::PayloadTooLarge),
        (status = 500, response = crate::api::openapi::doc::Internal),
    ))]
pub async fn replay(
    State(app): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    caller.require(Scope::Ops)?;
    let v = read_strict(&body)?;
    let obj = v.as_object().ok_or_else(|| ApiError::bad_request("body must be a JSON object"))?;
    if let Some(k) = obj.keys().find(|k| !["ids", "reason", "since"].contains(&k.as_str())) {
        return Err(ApiError::invalid_field(k, "unknown field; expected ids, or reason and since"));
    }
    let selector = match (obj.get("ids"), obj.get("reason")) {
        (Some(ids), None) => {
            let ids = ids
                .as_array()
                .filter(|a| !a.is_empty() && a.len() <= 1000)
                .ok_or_else(|| ApiError::invalid_field("ids", "must be a list of 1 to 1000 intent ids"))?;
            let ids = ids
                .iter()
                .enumerate()
                .map(|(i, id)| {
                    id.as_str()
                        .map(String::from)
                        .ok_or_else(|| ApiError::invalid_field(&format!("ids[{i}]"), "must be a string"))
                })
                .collect::<Result<Vec<_>, _>>()?;
            ReplaySelector::Ids(ids)
        }
        (None, Some(reason)) => {
            let reason = reason.as_str().ok_or_else(|| ApiError::invalid_field("reason", "must be a string"))?;
            check_reason(reason)?;
            let since = parse_since(obj.get("since").and_then(Value::as_str))?;
            ReplaySelector::Reason { reason: reason.to_string(), since_us: since }
        }
        _ => return Err(ApiError::bad_request("give either \"ids\" or \"reason\" (with an optional \"since\")")),
    };
    let replay = Replay {
        tenant: caller.tenant.as_str().to_string(),
        selector,
        now_us: micros(app.clock.now()),
        requested_by: caller.name.clone(),
        limit: REPLAY_LIMIT,
        traceparent: None,
    };
    let results = crate::ops::replay::replay(app.store.as_ref(), replay, super::events::trace_of(&headers)).await?;
    let mut replayed = Vec::new();
    let mut skipped = Vec::new();
    let mut by_reason: BTreeMap<&str, u64> = BTreeMap::new();
    for r in results {
        match r.outcome.skipped() {
            None => replayed.push(Value::String(r.key)),
            Some((code, why)) => {
                *by_reason.entry(code).or_default() += 1;
                skipped.push(json!({"id": r.key, "reason": code, "why": why}));
            }
        }
    }
    tracing::info!(replayed = replayed.len(), skipped = ?by_reason, by = ?caller.name, "dead letters replayed");
    Ok(Json(json!({"replayed": replayed, "skipped": skipped, "skipped_by_reason": by_reason})))
}
