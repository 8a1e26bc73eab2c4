//! `GET /v1/shadow/report`: what arrived over a range and what Herald did or
//! would have done with it (see [`crate::ops::shadow_report`]). Scoped as the
//! dead letters are: the caller's tenant with `ops`, another's or every
//! tenant's with `admin`.

use super::dead_letters::Whose;
use super::query::{Params, QueryParams};
use super::{ApiError, AppState, Caller};
use crate::clock::micros;
use crate::ops::shadow_report;
use axum::Json;
use axum::extract::State;
use serde::Deserialize;

#[derive(Debug, Deserialize)]
pub struct ReportQuery {
    since: Option<String>,
    until: Option<String>,
    tenant: Option<String>,
    #[serde(default)]
    all_tenants: bool,
}

impl QueryParams for ReportQuery {
    const NAMES: &'static [&'static str] = &["since", "until", "tenant", "all_tenants"];
}

/// The shadow report: posts by how they were answered, intents by channel, decision and reason, what shadow would have sent, SMS segments by encoding, template errors.
#[utoipa::path(get, path = "/v1/shadow/report", operation_id = "shadow_report", tag = "operations", security(("bearer" = ["ops"]), ("bearer" = ["admin"])),
    params(
        ("since" = Option<String>, Query, format = DateTime, description = "RFC 3339 with an offset; default: a day before `until`."),
        ("until" = Option<String>, Query, format = DateTime, description = "RFC 3339 with an offset; default: now. Must be after `since`."),
        ("tenant" = Option<String>, Query, description = "Another tenant's (scope admin; one's own needs only ops)."),
        ("all_tenants" = Option<bool>, Query, description = "Every tenant's (scope admin)."),
    ),
    responses(
        (status = 200, description = "The report.", body = crate::ops::shadow_report::ShadowReport),
        (status = 400, response = crate::api::openapi::doc::BadRequest),
        (status = 401, response = crate::api::openapi::doc::Unauthorized),
        (status = 403, response = crate::api::openapi::doc::Forbidden),
        (status = 500, response = crate::api::openapi::doc::Internal),
    ))]
pub async fn report(
    State(app): State<AppState>,
    caller: Caller,
    Params(mut q): Params<ReportQuery>,
) -> Result<Json<shadow_report::ShadowReport>, ApiError> {
    let tenant = Whose { tenant: q.tenant.take(), all_tenants: q.all_tenants }.tenant(&caller)?;
    let (since, until) = shadow_report::range(q.since.as_deref(), q.until.as_deref(), micros(app.clock.now()))
        .map_err(|(field, message)| ApiError::invalid_field(field, &message))?;
    Ok(Json(shadow_report::build(app.store.as_ref(), tenant.as_deref(), since, until).await?))
}
