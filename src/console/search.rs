//! Search (by entity, recipient or key) and one intent's timeline — the
//! console's "what happened to this notification?".
//!
//! Indexes: an entity search reads `intents_by_entity_recipient` (tenant,
//! entity_type, entity_id, …) and sorts that entity's intents by time, a
//! recipient search `intents_by_recipient` (tenant, recipient_id, created_at
//! DESC), a key the primary key; each page is 50 rows, so the cost does not
//! grow with the table (docs/console.md, "Indexes the pages use").

use super::error::ConsoleError;
use super::pages;
use super::session::Operator;
use crate::api::AppState;
use crate::clock::rfc3339;
use crate::event::{Channel, NotificationKey};
use crate::intent::{self, Decision};
use crate::receipt::{DeliveryStatus, current};
use crate::store::{Cursor, IntentDetail, IntentFilter, IntentRow, ReceiptRow};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use minijinja::context;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::HashMap;

const PAGE: u32 = 50;

#[derive(Debug, Default, Deserialize)]
pub struct SearchQuery {
    #[serde(default)]
    q: String,
    #[serde(default)]
    by: Option<String>,
    #[serde(default)]
    cursor: Option<String>,
    /// `utc` (the default) or `recipient`: each row's time in its
    /// recipient's zone, as the directory has it.
    #[serde(default)]
    zone: Option<String>,
}

/// `?zone=` as the console's pages read it: true for `recipient`.
fn wants_recipient(zone: Option<&str>) -> Result<bool, ConsoleError> {
    match zone {
        None | Some("utc") => Ok(false),
        Some("recipient") => Ok(true),
        Some(_) => Err(ConsoleError::invalid("zone", "is utc or recipient".to_string())),
    }
}

/// What a search names.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    Entity(String, String),
    Recipient(String),
    Key(NotificationKey),
}

impl Target {
    /// `by` says what `q` is; `auto` (or nothing) reads it: 32 hex characters
    /// are a key, `TYPE:ID` an entity, anything else a recipient id.
    fn parse(q: &str, by: Option<&str>) -> Result<Target, ConsoleError> {
        let entity = |q: &str| {
            q.split_once(':')
                .filter(|(k, i)| !k.is_empty() && !i.is_empty())
                .map(|(k, i)| Target::Entity(k.to_string(), i.to_string()))
                .ok_or_else(|| ConsoleError::invalid("q", "an entity is TYPE:ID, like purchase_order:PO-4482"))
        };
        let key = |q: &str| {
            NotificationKey::parse(q)
                .map(Target::Key)
                .ok_or_else(|| ConsoleError::invalid("q", "a key is 32 lowercase hex characters"))
        };
        match by.unwrap_or("auto") {
            "entity" => entity(q),
            "recipient" => Ok(Target::Recipient(q.to_string())),
            "key" => key(q),
            "auto" if NotificationKey::parse(q).is_some() => key(q),
            "auto" if q.contains(':') => entity(q),
            "auto" => Ok(Target::Recipient(q.to_string())),
            other => Err(ConsoleError::invalid("by", format!("{other:?} is not one of auto, entity, recipient, key"))),
        }
    }
}

/// One row of the results table.
#[derive(Debug, Serialize)]
struct Row {
    key: String,
    tenant: String,
    created_at: Option<String>,
    event_type: String,
    entity: String,
    version: Option<i64>,
    channel: Channel,
    recipient_id: String,
    decision: Decision,
    reason: Option<String>,
    state: intent::State,
    delivery_status: Option<&'static str>,
    /// The zone its time is shown in.
    zone: String,
}

fn row(i: &IntentRow, receipts: &[&ReceiptRow]) -> Row {
    let applied = receipts.iter().filter(|r| r.applied).filter_map(|r| DeliveryStatus::parse(&r.status));
    Row {
        key: i.key.clone(),
        tenant: i.tenant.clone(),
        created_at: rfc3339(i.created_at),
        event_type: i.event_type.clone(),
        entity: format!("{}:{}", i.entity_type, i.entity_id),
        version: i.entity_version,
        channel: i.channel,
        recipient_id: i.recipient_id.clone(),
        decision: i.decision,
        reason: i.reason.clone(),
        state: i.state,
        delivery_status: current(applied).map(DeliveryStatus::as_str),
        zone: "UTC".into(),
    }
}

/// The directory's time zone of each recipient on the page, by (tenant,
/// recipient id): one read per tenant on the page. A zone given only inline
/// with an event is shown on its timeline, not here (it would cost a read
/// of every row's event).
async fn directory_zones(
    app: &AppState,
    items: &[IntentRow],
) -> Result<HashMap<(String, String), String>, ConsoleError> {
    let mut ids: HashMap<&str, Vec<String>> = HashMap::new();
    for i in items {
        let of_tenant = ids.entry(i.tenant.as_str()).or_default();
        if !of_tenant.contains(&i.recipient_id) {
            of_tenant.push(i.recipient_id.clone());
        }
    }
    let mut zones = HashMap::new();
    for (tenant, ids) in ids {
        for r in app.store.recipients_get(tenant, &ids).await? {
            if let Some(z) = r.timezone.filter(|z| jiff::tz::TimeZone::get(z).is_ok()) {
                zones.insert((r.tenant, r.id), z);
            }
        }
    }
    Ok(zones)
}

pub fn operator_context(op: &Operator) -> minijinja::Value {
    context! { name => op.name(), tenant => op.tenant(), csrf => op.csrf, admin => op.is_admin() }
}

pub async fn search(
    State(app): State<AppState>,
    op: Operator,
    query: Result<Query<SearchQuery>, QueryRejection>,
) -> Result<Response, ConsoleError> {
    let Query(query) = query.map_err(|e| ConsoleError::invalid("query", e.body_text()))?;
    let q = query.q.trim();
    let by = query.by.as_deref().unwrap_or("auto");
    let now = app.clock.now().to_string();
    let in_recipient_zone = wants_recipient(query.zone.as_deref())?;
    let zone = if in_recipient_zone { "recipient" } else { "utc" };
    let show = |rows: Vec<Row>, next: Option<String>, searched: bool| {
        pages::render(
            "search.html",
            context! { op => operator_context(&op), q, by, zone, rows, next, searched, now, page => "search" },
        )
    };
    if q.is_empty() {
        return Ok(show(Vec::new(), None, false));
    }
    let cursor = query
        .cursor
        .as_deref()
        .map(|c| Cursor::parse(c).ok_or_else(|| ConsoleError::invalid("cursor", "is not a page link Herald made")))
        .transpose()?;
    let (entity, recipient_id) = match Target::parse(q, query.by.as_deref())? {
        Target::Key(key) => {
            return match whose(&app, &op, key.as_str()).await? {
                Some(_) => Ok(Redirect::to(&format!("/console/intents/{}", key.as_str())).into_response()),
                None => Ok(show(Vec::new(), None, true)),
            };
        }
        Target::Entity(kind, id) => (Some((kind, id)), None),
        Target::Recipient(id) => (None, Some(id)),
    };
    let page = app
        .store
        .intents_list(IntentFilter {
            tenant: op.reads().map(str::to_string),
            entity,
            recipient_id,
            state: None,
            cursor,
            limit: PAGE,
        })
        .await?;
    let keys: Vec<String> = page.items.iter().map(|i| i.key.clone()).collect();
    let receipts = app.store.receipts_of(&keys).await?;
    let mut by_key: HashMap<&str, Vec<&ReceiptRow>> = HashMap::new();
    for r in &receipts {
        by_key.entry(r.intent_key.as_str()).or_default().push(r);
    }
    let zones = match in_recipient_zone {
        true => directory_zones(&app, &page.items).await?,
        false => HashMap::new(),
    };
    let rows = (page.items.iter())
        .map(|i| {
            let mut r = row(i, by_key.get(i.key.as_str()).map_or(&[][..], Vec::as_slice));
            if let Some(z) = zones.get(&(i.tenant.clone(), i.recipient_id.clone())) {
                r.zone = z.clone();
            }
            r
        })
        .collect();
    Ok(show(rows, page.next.map(|c| c.to_string()), true))
}

/// One intent as a timeline: the event and its data, the decision and the
/// preferences version behind it, the content as frozen, every attempt and
/// receipt, and where it stands. Another tenant's intent is not found.
/// The timeline's `?zone=`: `utc` (the default) or `recipient` (the
/// recipient's time zone, from the event or the directory, when known).
#[derive(Debug, Default, Deserialize)]
pub struct TimelineQuery {
    #[serde(default)]
    zone: Option<String>,
}

pub async fn intent(
    State(app): State<AppState>,
    op: Operator,
    Path(key): Path<String>,
    query: Result<Query<TimelineQuery>, QueryRejection>,
) -> Result<Response, ConsoleError> {
    let Query(query) = query.map_err(|e| ConsoleError::invalid("query", e.body_text()))?;
    let wants_recipient = wants_recipient(query.zone.as_deref())?;
    let not_found = || match op.reads() {
        Some(tenant) => ConsoleError::NotFound(format!("No intent {key:?} in tenant {tenant}.")),
        None => ConsoleError::NotFound(format!("No intent {key:?} in any tenant.")),
    };
    let parsed = NotificationKey::parse(&key).ok_or_else(not_found)?;
    let tenant = whose(&app, &op, parsed.as_str()).await?.ok_or_else(not_found)?;
    let detail = app.store.intent_get(&tenant, parsed.as_str()).await?.ok_or_else(not_found)?;
    // The API's view of a dead letter: every destination masked, the event's
    // inline recipients too, provider text redacted.
    let mut view = crate::api::dead_letter_json(&detail);
    view["messages_may_have_reached"] =
        Value::from(crate::deliver::duplicate::messages_may_have_reached(&detail.attempts));
    // Each replay from the dead letters sits in the timeline where it
    // happened: before the first attempt that started after it.
    let mut replays = detail.replays.iter().peekable();
    for (a, row) in view["attempts"].as_array_mut().into_iter().flatten().zip(&detail.attempts) {
        a["duration_ms"] = row.finished_at.map(|f| Value::from((f - row.started_at) / 1000)).unwrap_or(Value::Null);
        let before: Vec<Value> = std::iter::from_fn(|| replays.next_if(|r| r.replayed_at <= row.started_at))
            .map(crate::api::replay_json)
            .collect();
        a["replays_before"] = Value::from(before);
    }
    view["replays_after"] = replays.map(crate::api::replay_json).collect();
    let i = &detail.intent;
    let decided_because = crate::why::decision_reason(i.decision.as_str(), i.reason.as_deref());
    let event = serde_json::to_string_pretty(&view["event"]).unwrap_or_default();
    let data = serde_json::to_string_pretty(&view["event"]["data"]).unwrap_or_default();
    let sms = (i.channel == Channel::Sms).then(|| view["content"]["body"].as_str().map(sms_facts)).flatten();
    let recipient_zone = recipient_zone(&app, &tenant, &detail).await?;
    let zone = match (&recipient_zone, wants_recipient) {
        (Some(z), true) => z.clone(),
        _ => "UTC".to_string(),
    };
    let now = app.clock.now().to_string();
    Ok(pages::render(
        "intent.html",
        context! {
            op => operator_context(&op), intent => view, tenant, decided_because, event, data, sms, zone,
            recipient_zone, now, page => "search"
        },
    ))
}

/// The recipient's time zone as this intent was planned with it: given
/// inline with the event, else the directory's.
async fn recipient_zone(app: &AppState, tenant: &str, d: &IntentDetail) -> Result<Option<String>, ConsoleError> {
    let inline = d.event_body.as_deref().and_then(|b| serde_json::from_str::<Value>(b).ok()).and_then(|event| {
        let me = event["recipients"].as_array()?.iter().find(|r| r["id"] == d.intent.recipient_id.as_str())?;
        me["timezone"].as_str().map(str::to_string)
    });
    let zone = match inline {
        Some(z) => Some(z),
        None => {
            let ids = [d.intent.recipient_id.clone()];
            app.store.recipients_get(tenant, &ids).await?.into_iter().find_map(|r| r.timezone)
        }
    };
    Ok(zone.filter(|z| jiff::tz::TimeZone::get(z).is_ok()))
}

/// The tenant of an intent this operator may open: their own tenant's, or
/// for an `admin` any tenant's. None: not found (another tenant's is not
/// found either).
async fn whose(app: &AppState, op: &Operator, key: &str) -> Result<Option<String>, ConsoleError> {
    match op.reads() {
        Some(tenant) => Ok(app.store.intent_tenant(key).await?.filter(|t| t == tenant)),
        None => Ok(app.store.intent_tenant(key).await?),
    }
}

/// What an operator wants to know about an SMS as it went out.
fn sms_facts(body: &str) -> minijinja::Value {
    let a = crate::render::sms::analyse(body);
    let culprits: Vec<String> = a.culprits.iter().map(|c| format!("{} {}", c.ch, c.code_point())).collect();
    let pieces = super::templates::pieces(body, &a.culprits);
    context! { characters => body.chars().count(), culprits, pieces }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_search_reads_what_it_names() {
        let key = "0123456789abcdef0123456789abcdef";
        assert!(matches!(Target::parse(key, None), Ok(Target::Key(_))));
        assert_eq!(
            Target::parse("purchase_order:PO-1", None).unwrap(),
            Target::Entity("purchase_order".into(), "PO-1".into())
        );
        assert_eq!(Target::parse("u-19", Some("auto")).unwrap(), Target::Recipient("u-19".into()));
        assert_eq!(Target::parse("a:b", Some("recipient")).unwrap(), Target::Recipient("a:b".into()));
        assert!(matches!(Target::parse("nocolon", Some("entity")), Err(ConsoleError::Invalid { .. })));
        assert!(matches!(Target::parse(":x", None), Err(ConsoleError::Invalid { .. })));
        assert!(matches!(Target::parse("XYZ", Some("key")), Err(ConsoleError::Invalid { .. })));
        assert!(matches!(Target::parse("x", Some("name")), Err(ConsoleError::Invalid { field, .. }) if field == "by"));
    }
}
