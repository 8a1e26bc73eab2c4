//! What a recorded decision costs on disk (DESIGN rule 9): the decision log is
//! the intent ledger, so a suppression should cost no more than a delivery.
//!
//!     cargo bench --bench decision_log -- [--intents 1000000] [--database-url postgres://…]
//!
//! Creates a fresh Postgres database, plans events through the real planner and
//! writes them through the real store (ingest, claim, record) in a realistic
//! mix — 60 % sent, 15 % no_destination, 10 % opted_out, 10 % held for quiet
//! hours, 5 % digest members — then prints bytes per intent row by class,
//! with the table's indexes shared out per row, and what sent rows add in
//! content and attempts. Drops the database afterwards.

mod common;

use common::{Scratch, arg, sms_route};
use herald::event::{Tenant, parse_event};
use herald::intent::OutcomeClass;
use herald::plan::{PlanInput, plan};
use herald::render::TemplateSet;
use herald::store::{Claim, FinishedAttempt, Ingest, PostgresStore, RecipientRow, Transition};
use herald::store::{IngestStore, OpsStore, QueueStore};
use serde_json::json;
use std::collections::HashMap;
use std::time::{Duration, Instant};

const PER_EVENT: usize = 100;

/// Recipient `n` of an event: what kind of decision they will get.
fn recipient(n: usize, event: usize) -> (serde_json::Value, Option<RecipientRow>) {
    let id = format!("u-{}", event * PER_EVENT + n);
    let phone = format!("+1555{:07}", (event * PER_EVENT + n) % 10_000_000);
    let row = |prefs: serde_json::Value| RecipientRow {
        tenant: "default".into(),
        id: id.clone(),
        email: None,
        phone: Some(phone.clone()),
        locale: Some("en".into()),
        timezone: Some("UTC".into()),
        webhook_url: None,
        preferences: prefs.to_string(),
        preferences_version: 3,
        updated_at: 0,
    };
    match n % 20 {
        0..=11 => (json!({"id": id, "phone": phone}), None), // 60 % sent
        12..=14 => (json!({"id": id}), None),                // 15 % no_destination
        15 | 16 => (json!({"id": id}), Some(row(json!({"channels": {"sms": false}})))), // 10 % opted out
        _ => (json!({"id": id}), Some(row(json!({"quiet_hours": {"start": "00:00", "end": "23:59"}})))), // 15 %: held
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    let total: usize = arg("--intents").map(|s| s.parse()).transpose()?.unwrap_or(1_000_000);
    let db = Scratch::create("herald_bench").await?;
    let result = run(&db.url, total).await;
    db.drop().await;
    result
}

async fn run(url: &str, total: usize) -> anyhow::Result<()> {
    let store = PostgresStore::connect(url).await?;
    store.migrate().await?;
    let mut templates = TemplateSet::built_in();
    let tenant = Tenant::default_tenant();
    let (plain, batched) =
        (sms_route("purchase_order.approved", None), sms_route("purchase_order.batched", Some("{{ entity.type }}")));
    // As `app::load_templates` does at start-up.
    if let Some(d) = &batched.digest {
        templates.add_key(&d.key)?;
    }
    let events = total.div_ceil(PER_EVENT);
    let started = Instant::now();
    let mut now = jiff::Timestamp::from_second(1_780_000_000)?;
    println!("decision log: {total} intents in {events} events of {PER_EVENT} recipients, on Postgres");
    for e in 0..events {
        // one event in twenty goes through a digest route: 5 % digest members
        let digest = e % 20 == 19;
        let mut recipients = Vec::with_capacity(PER_EVENT);
        let mut directory = HashMap::new();
        for n in 0..PER_EVENT {
            let (inline, row) = if digest { recipient(n % 12, e) } else { recipient(n, e) };
            let inline = if digest {
                json!({"id": format!("u-{}", e * PER_EVENT + n), "phone": inline["phone"]})
            } else {
                inline
            };
            if let Some(r) = row {
                directory.insert(inline["id"].as_str().unwrap_or_default().to_string(), r);
            }
            recipients.push(inline);
        }
        let event = parse_event(&json!({
            "type": if digest { "purchase_order.batched" } else { "purchase_order.approved" },
            "entity": {"type": "purchase_order", "id": format!("PO-{e}"), "version": 1},
            "occurred_at": now.to_string(),
            "data": {"po": {"number": format!("PO-{e}"), "total": "1,20,000"}, "approver": {"name": "Asha"}},
            "recipients": recipients,
        }))?;
        let r = if digest { &batched } else { &plain };
        let intents = plan(&PlanInput {
            tenant: &tenant,
            event: &event,
            route: r,
            templates: &templates,
            directory: &directory,
            configured: &|_| true,
            suppressions: &HashMap::new(),
            caps: &Default::default(),
            now,
        });
        store
            .events_ingest(Ingest {
                tenant: "default".into(),
                identity: format!("event:{}#{}", event.event_key(&tenant), event.fingerprint()),
                fingerprint: event.fingerprint(),
                event_key: event.event_key(&tenant),
                content_digest: event.content_digest(),
                event_type: event.event_type.clone(),
                entity_type: event.entity.kind.clone(),
                entity_id: event.entity.id.clone(),
                entity_version: Some(1),
                occurred_at: event.occurred_at.canonical(),
                event_body: herald::event::canonical_json(&event.canonical()),
                intents,
                now_us: now.as_microsecond(),
                traceparent: None,
            })
            .await?;
        now = now.checked_add(jiff::SignedDuration::from_millis(10))?;
    }
    let ingested = started.elapsed();
    // Deliver every queued intent through the real claim/record path.
    let delivering = Instant::now();
    let at = now.as_microsecond();
    loop {
        let jobs = store
            .jobs_claim(Claim {
                now_us: at,
                limit: 500,
                lease_us: 30_000_000,
                max_attempts: 6,
                dedupe_window_us: None,
                supersede_types: vec![],
                repeats_unrecognised: vec![],
            })
            .await?;
        if jobs.is_empty() {
            break;
        }
        let finished: Vec<FinishedAttempt> = jobs
            .iter()
            .map(|j| FinishedAttempt {
                key: j.intent.key.clone(),
                n: j.intent.attempts,
                finished_at_us: at + 1000,
                outcome: OutcomeClass::Accepted,
                error_class: None,
                provider_status: Some(200),
                provider_message_id: Some(format!("msg-{}", &j.intent.key[..12])),
                error: None,
                retry_after_us: None,
                transition: Transition::Sent,
                provider: Some("bench".into()),
                possible_duplicate: false,
            })
            .collect();
        store.attempts_finish(&finished).await?;
    }
    let delivered = delivering.elapsed();
    sqlx::query("VACUUM ANALYZE").execute(store.pool()).await?;
    report(&store, ingested, delivered).await
}

async fn report(store: &PostgresStore, ingested: Duration, delivered: Duration) -> anyhow::Result<()> {
    let pool = store.pool();
    let classes: Vec<(String, i64, f64)> = sqlx::query_as(
        "SELECT CASE WHEN state = 'sent' THEN 'sent'
                     WHEN state = 'suppressed' THEN 'suppressed'
                     ELSE 'held/digest' END AS class,
                count(*), avg(pg_column_size(i.*))::float8
         FROM intents i GROUP BY 1 ORDER BY 1 DESC",
    )
    .fetch_all(pool)
    .await?;
    let (heap, indexes): (i64, i64) =
        sqlx::query_as("SELECT pg_table_size('intents'), pg_indexes_size('intents')").fetch_one(pool).await?;
    let (payloads, attempts): (i64, i64) =
        sqlx::query_as("SELECT pg_total_relation_size('payloads'), pg_total_relation_size('attempts')")
            .fetch_one(pool)
            .await?;
    let rows: i64 = classes.iter().map(|c| c.1).sum();
    let raw: f64 = classes.iter().map(|c| c.1 as f64 * c.2).sum();
    // Share the table's on-disk size (page and tuple overhead included) out in
    // proportion to each row's own size, and the indexes equally per row.
    let heap_scale = heap as f64 / raw;
    let index_per_row = indexes as f64 / rows as f64;
    let sent = classes.iter().find(|c| c.0 == "sent").map_or(0, |c| c.1).max(1);
    println!(
        "ingest {:.1}s ({:.0} intents/s); delivery {:.1}s ({:.0} intents/s)",
        ingested.as_secs_f64(),
        rows as f64 / ingested.as_secs_f64(),
        delivered.as_secs_f64(),
        sent as f64 / delivered.as_secs_f64()
    );
    println!("intents table {} MiB + indexes {} MiB for {rows} rows", heap >> 20, indexes >> 20);
    println!("{:<12} {:>9} {:>10} {:>10} {:>12}", "class", "rows", "row bytes", "index", "decision row");
    for (class, count, avg) in &classes {
        let row = avg * heap_scale;
        println!("{class:<12} {count:>9} {row:>10.0} {index_per_row:>10.0} {:>12.0}", row + index_per_row);
    }
    println!(
        "a sent intent also holds {:.0} B of content (shared by an event's recipients) and {:.0} B of attempt ledger",
        payloads as f64 / sent as f64,
        attempts as f64 / sent as f64
    );
    Ok(())
}
