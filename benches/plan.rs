//! What planning one intent costs in the process (no database): the planner
//! and the renderer as ingest runs them, for a plain route and for a digest
//! route, whose key template is either compiled once at start-up (as
//! `app::load_templates` does) or compiled again for every intent (as before
//! it did, and as a caller that never registered the key still gets).
//!
//!     cargo bench --bench plan -- [--events 2000] [--recipients 10] [--rounds 5]
//!
//! Prints the best round's microseconds per intent for each case. For counts
//! that a busy machine does not disturb, run the built binary under
//! `valgrind --tool=callgrind` with `--rounds 1` and compare instructions.

mod common;

use common::{arg, sms_route};
use herald::config::Route;
use herald::event::{Event, Tenant, parse_event};
use herald::plan::{PlanInput, plan};
use herald::render::TemplateSet;
use serde_json::json;
use std::collections::HashMap;
use std::time::Instant;

const EVENT: &str = "purchase_order.approved";
const DIGEST_KEY: &str = "{{ entity.type }}:{{ po.number }}";

fn events(count: usize, recipients: usize) -> anyhow::Result<Vec<Event>> {
    (0..count)
        .map(|e| {
            let to: Vec<_> = (0..recipients)
                .map(|n| json!({"id": format!("u-{e}-{n}"), "phone": format!("+1555{:07}", e * recipients + n)}))
                .collect();
            Ok(parse_event(&json!({
                "type": EVENT,
                "entity": {"type": "purchase_order", "id": format!("PO-{e}"), "version": 1},
                "occurred_at": "2026-11-30T10:15:00Z",
                "data": {"po": {"number": format!("PO-{e}"), "total": "1,20,000"}, "approver": {"name": "Asha"}},
                "recipients": to,
            }))?)
        })
        .collect()
}

/// The best of `rounds` passes over every event: microseconds per intent.
fn measure(events: &[Event], route: &Route, templates: &TemplateSet, rounds: usize) -> f64 {
    let tenant = Tenant::default_tenant();
    let (directory, suppressions) = (HashMap::new(), HashMap::new());
    let now = jiff::Timestamp::from_second(1_780_000_000).expect("a valid time");
    let mut best = f64::INFINITY;
    for _ in 0..rounds {
        let (started, mut intents) = (Instant::now(), 0usize);
        for event in events {
            let planned = plan(&PlanInput {
                tenant: &tenant,
                event,
                route,
                templates,
                directory: &directory,
                configured: &|_| true,
                suppressions: &suppressions,
                caps: &Default::default(),
                now,
            });
            assert!(planned.iter().all(|i| i.reason.is_none()), "every intent planned as intended");
            intents += planned.len();
        }
        best = best.min(started.elapsed().as_secs_f64() * 1e6 / intents.max(1) as f64);
    }
    best
}

fn main() -> anyhow::Result<()> {
    let number = |name: &str, default: usize| -> anyhow::Result<usize> {
        Ok(arg(name).map(|s| s.parse()).transpose()?.unwrap_or(default))
    };
    let (count, recipients, rounds) = (number("--events", 2000)?, number("--recipients", 10)?, number("--rounds", 5)?);
    let events = events(count, recipients)?;
    let per_call = TemplateSet::built_in();
    let mut once = TemplateSet::built_in();
    once.add_key(DIGEST_KEY)?;
    println!("plan: {count} events × {recipients} SMS recipients, best of {rounds} rounds, µs per intent");
    let cases = [
        ("plain route", sms_route(EVENT, None), &once),
        ("digest route, key compiled per intent", sms_route(EVENT, Some(DIGEST_KEY)), &per_call),
        ("digest route, key compiled once", sms_route(EVENT, Some(DIGEST_KEY)), &once),
    ];
    for (name, route, templates) in &cases {
        println!("  {name:<40}{:>8.2}", measure(&events, route, templates, rounds));
    }
    Ok(())
}
