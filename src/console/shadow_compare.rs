//! The shadow comparison in the console: a form to paste or upload the old
//! notifier's send log, and the result on the same page — the counts, the old
//! notifier's duplicates worst first, what only the old notifier sent grouped
//! by Herald's reason, and what only Herald would send. The comparison is the
//! one `POST /v1/shadow/compare` answers ([`crate::ops::shadow_compare`]).
//!
//! The log is read from the form, matched and dropped: it is not stored, and
//! the page never shows it back (the form comes back empty), since it holds
//! addresses in clear.

use super::error::ConsoleError;
use super::pages;
use super::search::operator_context;
use super::session::Operator;
use crate::api::AppState;
use crate::clock::micros;
use crate::config::parse_duration;
use crate::ops::shadow_compare::sends::{self, Field, Format, Mapping, Tagger, TimeFormat};
use crate::ops::shadow_compare::{self, Comparison, OldNotification};
use axum::extract::State;
use axum::extract::multipart::{Multipart, MultipartRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use minijinja::context;
use serde::Serialize;
use std::collections::BTreeMap;

/// Notifications listed in each part of the page.
const LISTED: usize = 200;

/// What the form holds, but the log: shown back as it was given.
#[derive(Debug, Default, Serialize)]
struct Form {
    format: String,
    window: String,
    since: String,
    until: String,
    tenant: String,
    time_format: String,
    channel_aliases: String,
    columns: BTreeMap<String, String>,
}

/// The page: the form, and a comparison or what was wrong with the input.
fn page(op: &Operator, form: &Form, now: &str, result: Option<Comparison>, problem: Option<String>) -> Response {
    let fields: Vec<&str> = Field::ALL.iter().map(|f| f.name()).collect();
    let only_old = result.as_ref().map(by_reason).unwrap_or_default();
    let status = if problem.is_some() { StatusCode::BAD_REQUEST } else { StatusCode::OK };
    let body = pages::render(
        "shadow_compare.html",
        context! { op => operator_context(op), form, fields, result, only_old, problem, now, page => "shadow_compare" },
    );
    (status, body).into_response()
}

/// What only the old notifier sent, grouped by Herald's reason, the most
/// common reason first.
fn by_reason(c: &Comparison) -> Vec<minijinja::Value> {
    c.only_old
        .by_reason
        .iter()
        .map(|r| {
            let rows: Vec<&OldNotification> =
                c.only_old.listed.iter().filter(|n| n.reason.as_deref() == Some(r.reason.as_str())).collect();
            context! { reason => r.reason, count => r.notifications, rows }
        })
        .collect()
}

pub async fn form(State(app): State<AppState>, op: Operator) -> Response {
    let form = Form { window: "10m".into(), format: "auto".into(), ..Form::default() };
    page(&op, &form, &app.clock.now().to_string(), None, None)
}

pub async fn compare(
    State(app): State<AppState>,
    op: Operator,
    multipart: Result<Multipart, MultipartRejection>,
) -> Result<Response, ConsoleError> {
    let mut multipart = multipart.map_err(|e| ConsoleError::invalid("form", e.body_text()))?;
    let mut form = Form::default();
    let (mut csrf, mut pasted, mut file, mut file_name) = (String::new(), Vec::new(), Vec::new(), None);
    let too_large = |e: axum::extract::multipart::MultipartError| match e.status() {
        StatusCode::PAYLOAD_TOO_LARGE => ConsoleError::invalid(
            "sends",
            format!(
                "the form is larger than {} MiB; compare a larger log with herald shadow compare",
                crate::api::COMPARE_MAX_BYTES / (1024 * 1024)
            ),
        ),
        _ => ConsoleError::invalid("form", e.body_text()),
    };
    while let Some(field) = multipart.next_field().await.map_err(too_large)? {
        let name = field.name().unwrap_or_default().to_string();
        if name == "file" {
            file_name = field.file_name().map(str::to_string).filter(|n| !n.is_empty());
            file = field.bytes().await.map_err(too_large)?.to_vec();
            continue;
        }
        let value = field.bytes().await.map_err(too_large)?;
        if name == "sends" {
            pasted = value.to_vec();
            continue;
        }
        let text = String::from_utf8_lossy(&value).trim().to_string();
        match name.as_str() {
            "csrf" => csrf = text,
            "format" => form.format = text,
            "window" => form.window = text,
            "since" => form.since = text,
            "until" => form.until = text,
            "tenant" => form.tenant = text,
            "time_format" => form.time_format = text,
            "channel_aliases" => form.channel_aliases = text,
            column => {
                if let Some(field) =
                    column.strip_suffix("_column").and_then(|f| Field::ALL.iter().find(|x| x.name() == f))
                {
                    form.columns.insert(field.name().to_string(), text);
                }
            }
        }
    }
    op.check_csrf(&app.console, &csrf)?;
    if form.window.is_empty() {
        form.window = "10m".into();
    }
    if form.format.is_empty() {
        form.format = "auto".into();
    }
    let now = app.clock.now();
    let problem = |form: &Form, message: String| Ok(page(&op, form, &now.to_string(), None, Some(message)));

    // Another tenant's intents only for the deployment operator, as in the API.
    let tenant = match form.tenant.as_str() {
        "" => op.tenant().to_string(),
        t if t == op.tenant() || op.is_admin() => t.to_string(),
        _ => return Err(ConsoleError::Forbidden("Comparing another tenant's needs an admin token.".into())),
    };
    let mut mapping = Mapping::default();
    for field in Field::ALL {
        if let Some(column) = form.columns.get(field.name()).filter(|c| !c.is_empty())
            && let Err(m) = mapping.set_column(field, column)
        {
            return problem(&form, format!("{} column: {m}", field.name()));
        }
    }
    if !form.time_format.is_empty() {
        match TimeFormat::parse(&form.time_format) {
            Some(t) => mapping.time_format = t,
            None => return problem(&form, format!("time format: {:?} is not one Herald reads", form.time_format)),
        }
    }
    if let Err(m) = mapping.set_channels(&form.channel_aliases) {
        return problem(&form, format!("channel names: {m}"));
    }
    let window = match parse_duration(&form.window) {
        Ok(w) => w,
        Err(m) => return problem(&form, format!("window: {m}")),
    };
    // The upload when there is one, else what was pasted.
    let (body, from_file) = if file.is_empty() { (pasted, false) } else { (file, true) };
    if body.iter().all(u8::is_ascii_whitespace) {
        return problem(&form, "sends: paste the old notifier's send log, or choose its file".into());
    }
    let format = match form.format.as_str() {
        "csv" => Format::Csv,
        "jsonl" => Format::JsonLines,
        _ => match file_name.as_deref().filter(|_| from_file).and_then(|n| Format::of_path(std::path::Path::new(n))) {
            Some(f) => f,
            // Pasted: JSON Lines begin with an object.
            None if body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{') => Format::JsonLines,
            None => Format::Csv,
        },
    };
    let key = app.config.suppression.settled()?;
    let sends = match sends::read(&body, format, &mapping, &Tagger { key, tenant: &tenant }) {
        Ok(s) => s,
        Err(e) => return problem(&form, e.to_string()),
    };
    drop(body);
    let (since, until) =
        (Some(form.since.as_str()).filter(|s| !s.is_empty()), Some(form.until.as_str()).filter(|s| !s.is_empty()));
    let (since_us, until_us) = match shadow_compare::range(since, until, &sends, window, micros(now)) {
        Ok(r) => r,
        Err((field, m)) => return problem(&form, format!("{field}: {m}")),
    };
    let request = shadow_compare::Request { tenant: &tenant, key, sends, since_us, until_us, window, limit: LISTED };
    let result = shadow_compare::compare(app.store.as_ref(), request).await?;
    tracing::info!(by = %op.name(), tenant = %tenant, sends = result.sends.read, "console: a send log compared");
    Ok(page(&op, &form, &now.to_string(), Some(result), None))
}
