//! `GET /v1/shadow/report`: what arrived over a range and what Herald did or
//! would have done with it (see [`crate::ops::shadow_report`]); and `POST
//! /v1/shadow/compare`: an old notifier's send log beside Herald's intents
//! (see [`crate::ops::shadow_compare`]). Scoped as the dead letters are: the
//! caller's tenant with `ops`, another's (or, for the report, every
//! tenant's) with `admin`.

use super::dead_letters::Whose;
use super::query::{Params, QueryParams};
use super::{ApiError, AppState, Caller, Scope};
use crate::clock::micros;
use crate::config::parse_duration;
use crate::ops::shadow_compare::sends::{self, Field, Format, Mapping, Tagger, TimeFormat};
use crate::ops::{shadow_compare, shadow_report};
use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode, header};
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

/// The most a send log posted to `/v1/shadow/compare` may weigh (the CLI
/// reads a file of any size).
pub const COMPARE_MAX_BYTES: usize = 16 * 1024 * 1024;
/// The most notifications one list of the comparison may hold.
const COMPARE_MAX_LIMIT: usize = 10_000;

#[derive(Debug, Deserialize)]
pub struct CompareQuery {
    since: Option<String>,
    until: Option<String>,
    tenant: Option<String>,
    #[serde(default)]
    all_tenants: bool,
    window: Option<String>,
    limit: Option<usize>,
    time_column: Option<String>,
    channel_column: Option<String>,
    recipient_column: Option<String>,
    destination_column: Option<String>,
    entity_type_column: Option<String>,
    entity_id_column: Option<String>,
    event_type_column: Option<String>,
    time_format: Option<String>,
    channel_aliases: Option<String>,
}

impl QueryParams for CompareQuery {
    const NAMES: &'static [&'static str] = &[
        "since",
        "until",
        "tenant",
        "all_tenants",
        "window",
        "limit",
        "time_column",
        "channel_column",
        "recipient_column",
        "destination_column",
        "entity_type_column",
        "entity_id_column",
        "event_type_column",
        "time_format",
        "channel_aliases",
    ];
}

impl CompareQuery {
    /// The mapping the parameters name, each error naming its parameter.
    fn mapping(&self) -> Result<Mapping, ApiError> {
        let mut mapping = Mapping::default();
        let columns = [
            (Field::Time, "time_column", &self.time_column),
            (Field::Channel, "channel_column", &self.channel_column),
            (Field::RecipientId, "recipient_column", &self.recipient_column),
            (Field::Destination, "destination_column", &self.destination_column),
            (Field::EntityType, "entity_type_column", &self.entity_type_column),
            (Field::EntityId, "entity_id_column", &self.entity_id_column),
            (Field::EventType, "event_type_column", &self.event_type_column),
        ];
        for (field, name, column) in columns {
            if let Some(column) = column {
                mapping.set_column(field, column).map_err(|m| ApiError::invalid_field(name, &m))?;
            }
        }
        if let Some(t) = &self.time_format {
            mapping.time_format = TimeFormat::parse(t).ok_or_else(|| {
                ApiError::invalid_field("time_format", &format!("{t:?} must be \"rfc3339\", \"unix\" or \"unix_ms\""))
            })?;
        }
        if let Some(list) = &self.channel_aliases {
            mapping.set_channels(list).map_err(|m| ApiError::invalid_field("channel_aliases", &m))?;
        }
        Ok(mapping)
    }
}

/// The log's format, by its content type.
fn sends_format(headers: &HeaderMap) -> Result<Format, ApiError> {
    let ct = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    match ct.split(';').next().unwrap_or("").trim().to_ascii_lowercase().as_str() {
        "text/csv" => Ok(Format::Csv),
        "application/x-ndjson" | "application/jsonl" | "application/jsonlines" | "application/x-jsonlines" => {
            Ok(Format::JsonLines)
        }
        "application/json" => Ok(Format::Json),
        _ => Err(ApiError::UnsupportedMediaType(format!(
            "send the log as text/csv, application/x-ndjson (JSON Lines) or application/json ({{\"sends\": [...]}}); \
             got {}",
            if ct.is_empty() { "no Content-Type".to_string() } else { format!("Content-Type {ct:?}") }
        ))),
    }
}

/// Compare the old notifier's send log with the tenant's intents: sent by both, only by the old notifier (with Herald's reason), only by Herald, and the old notifier's duplicates. The log is read, matched and forgotten: it is not stored.
#[utoipa::path(post, path = "/v1/shadow/compare", operation_id = "shadow_compare", tag = "operations", security(("bearer" = ["ops"]), ("bearer" = ["admin"])),
    params(
        ("since" = Option<String>, Query, format = DateTime, description = "RFC 3339 with an offset. Without since and until: the log's own span, from a window before its first send."),
        ("until" = Option<String>, Query, format = DateTime, description = "RFC 3339 with an offset; must be after `since`."),
        ("tenant" = Option<String>, Query, description = "Another tenant's (scope admin; one's own needs only ops)."),
        ("all_tenants" = Option<bool>, Query, description = "Refused: a send log is compared with one tenant's intents."),
        ("window" = Option<String>, Query, description = "How far a send may be from Herald's event (its occurred_at or when it was planned) and still match: a duration like `10m` (the default)."),
        ("limit" = Option<usize>, Query, minimum = 1, maximum = 10000, description = "The most notifications each list holds (default 100); the counts are complete."),
        ("time_column" = Option<String>, Query, description = "The log's column for the send's time (default `time`)."),
        ("channel_column" = Option<String>, Query, description = "… for the channel (default `channel`)."),
        ("recipient_column" = Option<String>, Query, description = "… for the recipient id (default `recipient_id`)."),
        ("destination_column" = Option<String>, Query, description = "… for the address or number, matched by its keyed hash when a row has no recipient id (default `destination`)."),
        ("entity_type_column" = Option<String>, Query, description = "… for the entity type (default `entity_type`)."),
        ("entity_id_column" = Option<String>, Query, description = "… for the entity id (default `entity_id`)."),
        ("event_type_column" = Option<String>, Query, description = "… for the event type (default `event_type`; a log without one matches any of the entity's events)."),
        ("time_format" = Option<String>, Query, description = "`rfc3339` (default), `unix` (seconds) or `unix_ms`."),
        ("channel_aliases" = Option<String>, Query, description = "The old notifier's channel names, `NAME:CHANNEL,…`, e.g. `mail:email,text:sms`."),
    ),
    request_body(description = "The send log, one send a row: CSV with a header row, JSON Lines, or `{\"sends\": [{…}, …]}`. At most 16 MiB.",
        content(
            (String = "text/csv", example = json!("time,channel,recipient_id,destination,entity_type,entity_id,event_type\n2026-11-29T10:15:10Z,sms,u-1,,purchase_order,PO-1,purchase_order.approved\n")),
            (String = "application/x-ndjson"),
            (crate::api::openapi::doc::CompareSends = "application/json"),
        )),
    responses(
        (status = 200, description = "The comparison.", body = crate::ops::shadow_compare::Comparison),
        (status = 400, response = crate::api::openapi::doc::BadRequest),
        (status = 401, response = crate::api::openapi::doc::Unauthorized),
        (status = 403, response = crate::api::openapi::doc::Forbidden),
        (status = 413, response = crate::api::openapi::doc::PayloadTooLarge),
        (status = 415, response = crate::api::openapi::doc::UnsupportedMediaType),
        (status = 500, response = crate::api::openapi::doc::Internal),
    ))]
pub async fn compare(
    State(app): State<AppState>,
    caller: Caller,
    Params(mut q): Params<CompareQuery>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<shadow_compare::Comparison>, ApiError> {
    if q.all_tenants {
        caller.require(Scope::Admin)?;
        return Err(ApiError::invalid_field(
            "all_tenants",
            "a send log is compared with one tenant's intents; name it with tenant",
        ));
    }
    let tenant = Whose { tenant: q.tenant.take(), all_tenants: false }.tenant(&caller)?.unwrap_or_default();
    let window = match &q.window {
        Some(w) => parse_duration(w).map_err(|m| ApiError::invalid_field("window", &m))?,
        None => shadow_compare::DEFAULT_WINDOW,
    };
    let limit = q.limit.unwrap_or(shadow_compare::DEFAULT_LIMIT);
    if !(1..=COMPARE_MAX_LIMIT).contains(&limit) {
        return Err(ApiError::invalid_field("limit", &format!("must be 1 to {COMPARE_MAX_LIMIT}")));
    }
    let mapping = q.mapping()?;
    let format = sends_format(&headers)?;
    let body = body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::PayloadTooLarge { limit: COMPARE_MAX_BYTES }
        } else {
            ApiError::bad_request(format!("could not read the request body: {rejection}"))
        }
    })?;
    let key = app.config.suppression.settled()?;
    let sends = sends::read(&body, format, &mapping, &Tagger { key, tenant: &tenant })
        .map_err(|e| ApiError::BadRequest { code: "invalid_field", message: e.to_string() })?;
    let (since_us, until_us) =
        shadow_compare::range(q.since.as_deref(), q.until.as_deref(), &sends, window, micros(app.clock.now()))
            .map_err(|(field, message)| ApiError::invalid_field(field, &message))?;
    let request = shadow_compare::Request { tenant: &tenant, key, sends, since_us, until_us, window, limit };
    Ok(Json(shadow_compare::compare(app.store.as_ref(), request).await?))
}
