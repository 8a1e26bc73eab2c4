//! Health: is Herald keeping up, and what is it doing about what it cannot
//! send? The queue (depth, age of the oldest due job), attempts by outcome over
//! the last hour, the providers whose circuit is open, the daily digest (the
//! last one and when the next is due) and, where they are configured, the
//! shadow report and the rejected bus messages.
//!
//! Each figure comes from the code that already serves it elsewhere: the
//! queue from `/metrics`'s query, the shadow report as `herald shadow report`
//! prints it, the rejected messages as `GET /v1/rejected` shows them. A
//! tenant's operator sees their tenant's figures; an `admin` every tenant's.
//! The circuit breakers and the digest's schedule are the deployment's.

use super::dead_letters::age;
use super::error::ConsoleError;
use super::pages;
use super::search::operator_context;
use super::session::Operator;
use crate::api::{AppState, RejectedBody, rejected_json};
use crate::channel::failover::BreakerState;
use crate::clock::{micros, rfc3339};
use crate::ops::{dlq_digest, shadow_report};
use axum::extract::State;
use axum::response::Response;
use minijinja::context;

const HOUR_US: i64 = 3_600_000_000;
/// Rejected bus messages listed (the newest).
const REJECTED: u32 = 20;

pub async fn health(State(app): State<AppState>, op: Operator) -> Result<Response, ConsoleError> {
    let now = app.clock.now();
    let now_us = micros(now);
    let tenant = op.reads();

    let q = app.store.queue_stats(tenant, now_us).await?;
    let queue = context! {
        due => q.due,
        total => q.total,
        oldest_due_at => q.oldest_due_us.and_then(rfc3339),
        oldest_due_age => q.oldest_due_us.map(|t| age((now_us - t) / 1_000_000)),
    };

    let outcomes = app.store.attempts_by_outcome(tenant, now_us - HOUR_US, now_us).await?;
    let attempts_total: i64 = outcomes.iter().map(|(_, n)| n).sum();
    let attempts: Vec<_> = outcomes.into_iter().map(|(outcome, n)| context! { outcome, n }).collect();

    let states = app.breakers.states();
    let open_breakers = states.iter().filter(|(_, s)| *s == BreakerState::Open).count();
    let breakers: Vec<_> = states
        .into_iter()
        .map(|(provider, state)| context! { provider, state => state.as_str(), open => state == BreakerState::Open })
        .collect();

    let d = &app.ops_digest;
    let last = app.store.ops_digest_last().await?;
    let digest = context! {
        configured => d.webhook.is_some(),
        at => d.at.strftime("%H:%M").to_string(),
        timezone => d.tz.iana_name().unwrap_or("UTC"),
        next_at => dlq_digest::next_slot(now, d.at, &d.tz).map(|t| t.to_string()),
        last_posted_at => last.as_ref().and_then(|l| rfc3339(l.posted_at)),
        last_posted_age => last.as_ref().map(|l| age((now_us - l.posted_at) / 1_000_000)),
        last_since => last.as_ref().and_then(|l| rfc3339(l.since)),
        last_until => last.as_ref().and_then(|l| rfc3339(l.until)),
        // The count is every tenant's: the deployment operator's to see.
        last_total => last.as_ref().filter(|_| op.is_admin()).map(|l| l.total),
    };

    let shadow = if app.config.any_shadow() {
        // The last hour, as the rest of the page: `herald shadow report` or
        // GET /v1/shadow/report covers any range.
        let report = shadow_report::build(app.store.as_ref(), tenant, now_us - HOUR_US, now_us).await?;
        Some(
            context! { table => shadow_report::table(&report), would_send => report.would_send, events => report.events_received },
        )
    } else {
        None
    };
    let rejected = if app.config.ingest.nats.is_empty() {
        None
    } else {
        let page = app.store.rejected_list(tenant, None, REJECTED).await?;
        let rows: Vec<_> = page
            .items
            .iter()
            .map(|r| {
                let mut v = rejected_json(r, RejectedBody::Omitted);
                v["tenant"] = r.tenant.clone().into();
                v
            })
            .collect();
        Some(rows)
    };

    Ok(pages::render(
        "health.html",
        context! {
            op => operator_context(&op), queue, attempts, attempts_total, breakers, open_breakers,
            digest, shadow, rejected, now => now.to_string(), page => "health",
        },
    ))
}
