//! Dead letters by reason — how many, since when, a few examples each — and
//! replay, per group or per intent, after a confirmation page, with a result
//! page that says what could not be replayed and why.
//!
//! Index: the groups and their examples read `intents_dead` (tenant, reason,
//! updated_at) WHERE state = 'dead'.

use super::error::ConsoleError;
use super::pages;
use super::search::operator_context;
use super::session::Operator;
use crate::api::{AppState, REPLAY_LIMIT, Scope};
use crate::clock::{micros, rfc3339};
use crate::event::{Channel, NotificationKey};
use crate::intent::Reason;
use crate::store::{Replay, ReplaySelector};
use axum::Form;
use axum::extract::rejection::{FormRejection, QueryRejection};
use axum::extract::{Query, State};
use axum::response::Response;
use minijinja::context;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Examples shown under each group.
const EXAMPLES: u32 = 10;
/// Under each group when an admin sees every tenant's.
const EXAMPLES_EVERY_TENANT: u32 = 3;

#[derive(Debug, Serialize)]
struct Example {
    key: String,
    entity: String,
    channel: Channel,
    recipient_id: String,
    died_at: Option<String>,
    attempts: i64,
}

#[derive(Debug, Serialize)]
struct Group {
    tenant: String,
    /// Replays act in the operator's own tenant (as the API's do), so an
    /// admin's view of another tenant's group offers none.
    replayable: bool,
    reason: String,
    count: i64,
    oldest_at: Option<String>,
    oldest_age: String,
    examples: Vec<Example>,
}

/// `3d 4h`, `2h 5m`, `12m`, `40s`: the two largest units.
pub(super) fn age(seconds: i64) -> String {
    let s = seconds.max(0);
    let (d, h, m) = (s / 86_400, s / 3600 % 24, s / 60 % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, m) => format!("{m}m"),
        (0, h, m) => format!("{h}h {m}m"),
        (d, h, _) => format!("{d}d {h}h"),
    }
}

pub async fn groups(State(app): State<AppState>, op: Operator) -> Result<Response, ConsoleError> {
    let now_us = micros(app.clock.now());
    let may_replay = may_replay(&op).is_ok();
    let found = app.store.dead_letters_groups(op.reads()).await?;
    // Every tenant's page can hold dozens of groups: fewer examples each (as
    // many as the daily digest shows). All of them come in one query.
    let per_group = if op.reads().is_some() { EXAMPLES } else { EXAMPLES_EVERY_TENANT };
    let mut newest: HashMap<(String, String), Vec<Example>> = HashMap::new();
    for i in app.store.dead_letters_newest(op.reads(), per_group).await? {
        let reason = i.reason.clone().unwrap_or_else(|| "unknown".into());
        newest.entry((i.tenant.clone(), reason)).or_default().push(Example {
            entity: format!("{}:{}", i.entity_type, i.entity_id),
            died_at: rfc3339(i.updated_at),
            key: i.key,
            channel: i.channel,
            recipient_id: i.recipient_id,
            attempts: i.attempts,
        });
    }
    let groups: Vec<Group> = found
        .into_iter()
        .map(|g| Group {
            replayable: may_replay && g.tenant == op.tenant(),
            examples: newest.remove(&(g.tenant.clone(), g.reason.clone())).unwrap_or_default(),
            tenant: g.tenant,
            oldest_age: age((now_us - g.oldest_at) / 1_000_000),
            oldest_at: rfc3339(g.oldest_at),
            reason: g.reason,
            count: g.count,
        })
        .collect();
    let total: i64 = groups.iter().map(|g| g.count).sum();
    Ok(pages::render(
        "dead_letters.html",
        context! { op => operator_context(&op), groups, total, page => "dead_letters" },
    ))
}

/// What a replay form names: a whole reason group, or one intent.
#[derive(Debug, Default, Deserialize)]
pub struct Selection {
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    csrf: String,
}

impl Selection {
    fn selector(&self) -> Result<ReplaySelector, ConsoleError> {
        match (self.reason.as_deref().filter(|r| !r.is_empty()), self.id.as_deref().filter(|i| !i.is_empty())) {
            (Some(reason), None) => {
                if Reason::parse(reason).is_none() && reason != "unknown" {
                    return Err(ConsoleError::invalid("reason", format!("{reason:?} is not a reason Herald records")));
                }
                Ok(ReplaySelector::Reason { reason: reason.to_string(), since_us: None })
            }
            (None, Some(id)) => NotificationKey::parse(id)
                .map(|k| ReplaySelector::Ids(vec![k.as_str().to_string()]))
                .ok_or_else(|| ConsoleError::invalid("id", "an intent id is 32 lowercase hex characters")),
            _ => Err(ConsoleError::invalid("reason", "name either a reason or an intent id")),
        }
    }
}

/// Replaying changes state, so it needs the `ops` scope itself (an
/// `admin`-only token may read, as the API lets it).
fn may_replay(op: &Operator) -> Result<(), ConsoleError> {
    if op.caller.has(Scope::Ops) {
        Ok(())
    } else {
        Err(ConsoleError::Forbidden("Replaying needs a token with the ops scope.".into()))
    }
}

/// The confirmation page: what a replay would put back on the queue.
pub async fn confirm(
    State(app): State<AppState>,
    op: Operator,
    query: Result<Query<Selection>, QueryRejection>,
) -> Result<Response, ConsoleError> {
    let Query(sel) = query.map_err(|e| ConsoleError::invalid("query", e.body_text()))?;
    may_replay(&op)?;
    let (reason, id, count) = match sel.selector()? {
        ReplaySelector::Reason { reason, .. } => {
            let count = app
                .store
                .dead_letters_groups(Some(op.tenant()))
                .await?
                .into_iter()
                .find(|g| g.reason == reason)
                .map_or(0, |g| g.count);
            (Some(reason), None, count.min(REPLAY_LIMIT))
        }
        ReplaySelector::Ids(ids) => {
            let id = ids.into_iter().next().unwrap_or_default();
            let found = app.store.intent_get(op.tenant(), &id).await?;
            if found.is_none() {
                return Err(ConsoleError::NotFound(format!("No intent {id:?} in tenant {}.", op.tenant())));
            }
            (None, Some(id), 1)
        }
    };
    Ok(pages::render(
        "replay_confirm.html",
        context! { op => operator_context(&op), reason, id, count, page => "dead_letters" },
    ))
}

pub async fn replay(
    State(app): State<AppState>,
    op: Operator,
    form: Result<Form<Selection>, FormRejection>,
) -> Result<Response, ConsoleError> {
    let Form(sel) = form.map_err(|e| ConsoleError::invalid("form", e.body_text()))?;
    op.check_csrf(&app.console, &sel.csrf)?;
    may_replay(&op)?;
    let selector = sel.selector()?;
    let replay = Replay {
        tenant: op.tenant().to_string(),
        selector,
        now_us: micros(app.clock.now()),
        requested_by: Some(format!("console:{}", op.name())),
        limit: REPLAY_LIMIT,
        traceparent: None,
    };
    let results = crate::ops::replay::replay(app.store.as_ref(), replay, None).await?;
    let mut replayed = Vec::new();
    let mut skipped = Vec::new();
    for r in results {
        match r.outcome.skipped() {
            None => replayed.push(r.key),
            Some((code, why)) => skipped.push(context! { id => r.key, code, why }),
        }
    }
    tracing::info!(replayed = replayed.len(), skipped = skipped.len(), by = %op.name(), "console: dead letters replayed");
    Ok(pages::render(
        "replay_result.html",
        context! { op => operator_context(&op), reason => sel.reason, id => sel.id, replayed, skipped, page => "dead_letters" },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_in_their_two_largest_units() {
        assert_eq!(age(40), "40s");
        assert_eq!(age(12 * 60 + 5), "12m");
        assert_eq!(age(2 * 3600 + 5 * 60), "2h 5m");
        assert_eq!(age(3 * 86_400 + 4 * 3600 + 59), "3d 4h");
        assert_eq!(age(-5), "0s");
    }

    #[test]
    fn a_replay_names_a_reason_or_an_intent() {
        let sel = |reason: Option<&str>, id: Option<&str>| Selection {
            reason: reason.map(String::from),
            id: id.map(String::from),
            csrf: String::new(),
        };
        assert!(matches!(sel(Some("hard_bounce"), None).selector(), Ok(ReplaySelector::Reason { .. })));
        assert!(matches!(sel(None, Some(&"a".repeat(32))).selector(), Ok(ReplaySelector::Ids(_))));
        assert!(
            matches!(sel(Some("bogus"), None).selector(), Err(ConsoleError::Invalid { field, .. }) if field == "reason")
        );
        assert!(matches!(sel(None, Some("x")).selector(), Err(ConsoleError::Invalid { field, .. }) if field == "id"));
        assert!(sel(None, None).selector().is_err());
        assert!(sel(Some("hard_bounce"), Some(&"a".repeat(32))).selector().is_err());
    }
}
