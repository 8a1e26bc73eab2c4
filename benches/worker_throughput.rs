//! How fast the worker turns queued jobs into recorded outcomes, with the
//! provider taken out of the picture (it accepts at once): claim a batch and
//! write its attempt rows in one transaction, record a batch of outcomes in
//! another.
//!
//!     cargo bench --bench worker_throughput -- [--jobs 100000] [--concurrency 256]
//!         [--backend postgres|sqlite] [--database-url postgres://…] [--supersede]
//!
//! Creates a fresh database (Postgres, or a SQLite file in a temporary
//! directory), queues the jobs through the real ingest, runs the real worker
//! until the queue is empty, prints jobs per second, and drops the database.
//! `--supersede` gives every intent an entity version and opts its route into
//! skipping superseded versions, so each claim also looks for newer versions
//! (finding none: every job is still sent).

mod common;

use async_trait::async_trait;
use common::{Scratch, arg};
use herald::channel::{Delivery, Outcome, Provider};
use herald::clock::SystemClock;
use herald::deliver::retry::RetryPolicy;
use herald::deliver::{Providers, Worker};
use herald::event::Channel;
use herald::store::{Ingest, NewIntent, PostgresStore, SqliteStore, Store};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Accepts;

#[async_trait]
impl Provider for Accepts {
    fn name(&self) -> &str {
        "accepts"
    }

    /// A benchmark provider.
    fn dedupes_retries(&self) -> bool {
        true
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(10)
    }

    async fn send(&self, _: &Delivery) -> Outcome {
        Outcome::Accepted { status: Some(200), message_id: None }
    }
}

const EVENT_TYPE: &str = "purchase_order.approved";

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    let jobs: usize = arg("--jobs").map(|s| s.parse()).transpose()?.unwrap_or(100_000);
    let concurrency: usize = arg("--concurrency").map(|s| s.parse()).transpose()?.unwrap_or(256);
    let supersede = std::env::args().any(|a| a == "--supersede");
    match arg("--backend").as_deref().unwrap_or("postgres") {
        "postgres" => {
            let db = Scratch::create("herald_bench_worker").await?;
            let result = async {
                let store: Arc<dyn Store> = Arc::new(PostgresStore::connect(&db.url).await?);
                run(store, "Postgres", jobs, concurrency, supersede).await
            }
            .await;
            db.drop().await;
            result
        }
        "sqlite" => {
            let dir = tempfile::tempdir()?;
            let url = format!("sqlite://{}", dir.path().join("bench.db").display());
            let store: Arc<dyn Store> = Arc::new(SqliteStore::connect(&url).await?);
            run(store, "SQLite", jobs, concurrency, supersede).await
        }
        other => anyhow::bail!("--backend is postgres or sqlite, not {other}"),
    }
}

async fn run(
    store: Arc<dyn Store>,
    backend: &str,
    jobs: usize,
    concurrency: usize,
    supersede: bool,
) -> anyhow::Result<()> {
    store.migrate().await?;
    let per_event = 500;
    let now = jiff::Timestamp::now().as_microsecond();
    for e in 0..jobs.div_ceil(per_event) {
        let intents = (0..per_event)
            .map(|n| NewIntent {
                key: format!("{e:016x}{n:016x}"),
                channel: Channel::Sms,
                recipient_id: format!("u-{n}"),
                destination: Some("+15550000000".into()),
                locale: Some("en".into()),
                template_id: "po_approved".into(),
                template_revision: Some("1".into()),
                payload: Some(("content".into(), r#"{"body":"PO approved","encoding":"GSM-7","segments":1}"#.into())),
                decision: herald::intent::Decision::Send,
                reason: None,
                detail: None,
                state: herald::intent::State::Queued,
                run_at: Some(now),
                preferences_version: None,
                digest: None,
                mode: herald::intent::Mode::Live,
                cap: None,
            })
            .collect();
        store
            .events_ingest(Ingest {
                tenant: "default".into(),
                identity: format!("bench:{e}"),
                fingerprint: format!("event-{e}"),
                event_key: format!("bench|{e}"),
                content_digest: format!("content-{e}"),
                event_type: EVENT_TYPE.into(),
                entity_type: "purchase_order".into(),
                entity_id: format!("PO-{e}"),
                entity_version: supersede.then_some(1),
                occurred_at: "2026-11-29T04:30:00.000000000Z".into(),
                event_body: "{}".into(),
                intents,
                now_us: now,
                traceparent: None,
            })
            .await?;
    }
    let queued = store.queue_stats(None, i64::MAX).await?.total;
    let checks = if supersede { ", each claim looking for newer versions" } else { "" };
    println!(
        "worker throughput: {queued} queued jobs, concurrency {concurrency}, a provider that accepts at once{checks}, {backend}"
    );
    let mut providers = Providers::new();
    providers.insert(Channel::Sms, Arc::new(Accepts) as Arc<dyn Provider>);
    let worker = Worker {
        store: store.clone(),
        providers: Arc::new(providers),
        policy: RetryPolicy::new(6, Duration::from_secs(30), Duration::from_secs(3600)),
        concurrency,
        poll_interval: Duration::from_millis(50),
        lease: Duration::from_secs(30),
        clock: Arc::new(SystemClock),
        supersede_types: if supersede { vec![EVENT_TYPE.to_string()] } else { Vec::new() },
        ingest_load: Arc::default(),
    };
    let (stop, rx) = tokio::sync::watch::channel(false);
    let started = Instant::now();
    let handle = tokio::spawn(worker.run(rx, Duration::from_secs(30)));
    loop {
        if store.queue_stats(None, i64::MAX).await?.total == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = started.elapsed();
    let _ = stop.send(true);
    let _ = handle.await;
    let sent = sent(store.as_ref(), jobs).await?;
    println!(
        "{sent} sent in {:.2}s: {:.0} jobs/s (each: a claimed lease, an attempt row, an outcome, the intent's state, the job removed)",
        took.as_secs_f64(),
        sent as f64 / took.as_secs_f64()
    );
    Ok(())
}

/// How many intents were sent, counted through the store.
async fn sent(store: &dyn Store, jobs: usize) -> anyhow::Result<usize> {
    let filter = herald::store::IntentFilter {
        tenant: Some("default".into()),
        state: Some(herald::intent::State::Sent),
        limit: u32::try_from(jobs + 1).unwrap_or(u32::MAX),
        ..Default::default()
    };
    Ok(store.intents_list(filter).await?.items.len())
}
