//! The bus as the front door, against HTTP, in one run:
//!
//!     cargo bench --bench bus -- [--events 5000] [--pg URL] [--nats URL] [--connections 32] [--smoke]
//!
//! N distinct single-SMS events (the ingest benchmark's workload) reach
//! Herald (`herald serve` in its own process, its SMS channel on a fake
//! provider on loopback, every run on emptied tables of one scratch Postgres
//! database) four ways:
//! over HTTP from `--connections` clients, to one process and to two; and
//! published to a JetStream stream that one process, then two, consume through
//! one durable consumer. For each it reports events/s until every intent is
//! committed (read from the database) and until the provider has accepted
//! every SMS, and checks that each was accepted exactly once. Postgres comes
//! from `--pg`, else `HERALD_BENCH_DATABASE_URL`, else the local one; NATS from
//! `--nats`, else `HERALD_TEST_NATS_URL`, else the local one. It exits
//! non-zero only when a notification was lost or doubled, never on a figure;
//! `--smoke` (100 events, about 15 s) is CI's check that the path works.

#[path = "common/mod.rs"]
mod common;
#[path = "ingest/db.rs"]
#[allow(dead_code)]
mod db;
#[path = "ingest/herald.rs"]
#[allow(dead_code)]
mod herald;
#[path = "ingest/provider.rs"]
#[allow(dead_code)]
mod provider;
#[path = "ingest/shape.rs"]
#[allow(dead_code)]
mod shape;

use async_nats::jetstream;
use db::Backend;
use herald::Herald;
use provider::FakeProvider;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long the provider may see nothing new before a run is declared stuck.
const STALL: Duration = Duration::from_secs(60);

struct Options {
    events: usize,
    connections: usize,
    pg: String,
    nats: String,
    smoke: bool,
}

#[derive(Clone, Copy, PartialEq)]
enum Door {
    Http,
    Bus,
}

/// One run's figures.
struct Run {
    door: Door,
    processes: usize,
    committed_per_s: f64,
    accepted_per_s: f64,
    problems: Vec<String>,
}

fn options() -> Result<Options, String> {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let smoke = args.iter().any(|a| a == "--smoke");
    for a in args.iter().filter(|a| a.starts_with("--")) {
        if !["--smoke", "--events", "--connections", "--pg", "--nats"].contains(&a.as_str()) {
            return Err(format!("unknown argument {a:?}"));
        }
    }
    let number = |name: &str, default: usize| -> Result<usize, String> {
        match common::arg(name) {
            Some(v) => v.parse().ok().filter(|n| *n > 0).ok_or(format!("{name}: {v:?} is not a positive number")),
            None => Ok(default),
        }
    };
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    Ok(Options {
        events: number("--events", if smoke { 100 } else { 5_000 })?,
        connections: number("--connections", 32)?,
        pg: common::arg("--pg")
            .or_else(|| env("HERALD_BENCH_DATABASE_URL"))
            .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/postgres".into()),
        nats: common::arg("--nats")
            .or_else(|| env("HERALD_TEST_NATS_URL"))
            .unwrap_or_else(|| "nats://127.0.0.1:4222".into()),
        smoke,
    })
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> ExitCode {
    let options = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!(
                "{e}\nusage: cargo bench --bench bus -- [--events N] [--pg URL] [--nats URL] [--connections N] [--smoke]"
            );
            return ExitCode::from(2);
        }
    };
    let outcome = run(&options).await;
    if let Err(e) = common::sweep(&options.pg, db::PREFIX).await {
        eprintln!("could not sweep scratch databases: {e}");
    }
    match outcome {
        Ok(runs) => {
            println!("{}", table(&options, &runs));
            let problems: Vec<&String> = runs.iter().flat_map(|r| &r.problems).collect();
            for p in &problems {
                eprintln!("PROBLEM: {p}");
            }
            if problems.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
        }
        Err(e) => {
            eprintln!("bus bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(options: &Options) -> anyhow::Result<Vec<Run>> {
    let client =
        async_nats::connect(&options.nats).await.map_err(|e| anyhow::anyhow!("NATS at {}: {e}", options.nats))?;
    let js = jetstream::new(client);
    let db = Backend::Postgres { admin_url: options.pg.clone() }.fresh_migrated().await?;
    let runs = all_runs(options, &js, &db.url).await;
    db.dispose().await;
    runs
}

async fn all_runs(options: &Options, js: &jetstream::Context, db_url: &str) -> anyhow::Result<Vec<Run>> {
    let mut runs = Vec::new();
    for (door, processes) in [(Door::Http, 1), (Door::Bus, 1), (Door::Http, 2), (Door::Bus, 2)] {
        empty_tables(db_url).await?;
        let run = measure(options, js, db_url, door, processes).await?;
        eprintln!(
            "{} × {processes}: committed {:.0} events/s, accepted by the provider {:.0}/s",
            door_name(door),
            run.committed_per_s,
            run.accepted_per_s
        );
        runs.push(run);
    }
    Ok(runs)
}

fn door_name(door: Door) -> &'static str {
    match door {
        Door::Http => "HTTP",
        Door::Bus => "NATS JetStream",
    }
}

/// Empties every table of the run's database but the migrations' record, so
/// that each run starts from nothing on the schema already migrated. A fresh
/// database per run did the same at the price of a DROP DATABASE, which waits
/// for a checkpoint (1–2 s each on a busy machine, a third of a smoke run);
/// TRUNCATE gives the tables new files and throws the old pages away unwritten.
async fn empty_tables(db_url: &str) -> anyhow::Result<()> {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(db_url).await?;
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT quote_ident(tablename) FROM pg_tables WHERE schemaname = 'public' AND tablename <> '_sqlx_migrations'",
    )
    .fetch_all(&mut conn)
    .await?;
    sqlx::query(&format!("TRUNCATE {} RESTART IDENTITY", tables.join(", "))).execute(&mut conn).await?;
    Ok(())
}

/// One run on emptied tables, a new provider and a new stream.
async fn measure(
    options: &Options,
    js: &jetstream::Context,
    db_url: &str,
    door: Door,
    processes: usize,
) -> anyhow::Result<Run> {
    let provider = FakeProvider::start(0.0).await?;
    let id = format!("{}_{}_{}", std::process::id(), run_number(), jiff::Timestamp::now().as_millisecond() % 1_000_000);
    let (stream, subject) = (format!("herald_bench_{id}"), format!("herald-bench.{id}.events"));
    let extra = match door {
        Door::Http => String::new(),
        Door::Bus => format!(
            "[[ingest.nats]]\nurl = {:?}\nstream = {stream:?}\nsubjects = [{subject:?}]\nconsumer = \"herald\"\n\
             tenant = \"default\"\nmax_ack_pending = 1000\n",
            options.nats
        ),
    };
    let result = async {
        let mut heralds = Vec::new();
        for _ in 0..processes {
            heralds.push(Herald::start_with(db_url, &provider.url, &extra).await?);
        }
        let pool = sqlx::PgPool::connect(db_url).await?;
        let n = options.events;
        let started = Instant::now();
        match door {
            Door::Http => {
                let bases: Vec<String> = heralds.iter().map(|h| h.base.clone()).collect();
                tokio::spawn(post_all(bases, options.connections, n));
            }
            Door::Bus => {
                let js = js.clone();
                tokio::spawn(publish_all(js, subject.clone(), n));
            }
        }
        let committed = wait_committed(&pool, n, started).await?;
        let accepted = provider.wait_accepted(n, STALL).await?.duration_since(started);
        provider.wait_quiet(Duration::from_millis(500), Duration::from_secs(5)).await;
        let tally = provider.tally();
        let mut problems = Vec::new();
        let label = format!("{} × {processes}", door_name(door));
        if tally.accepted_keys != n {
            problems.push(format!("{label}: {} of {n} notifications accepted", tally.accepted_keys));
        }
        if tally.duplicates > 0 {
            problems.push(format!("{label}: {} notifications accepted twice", tally.duplicates));
        }
        let intents: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM intents").fetch_one(&pool).await?;
        if intents != n as i64 {
            problems.push(format!("{label}: {intents} intents for {n} events"));
        }
        pool.close().await;
        drop(heralds);
        anyhow::Ok(Run {
            door,
            processes,
            committed_per_s: n as f64 / committed.as_secs_f64(),
            accepted_per_s: n as f64 / accepted.as_secs_f64(),
            problems,
        })
    }
    .await;
    let _ = js.delete_stream(&stream).await;
    result
}

/// Counts the runs of this process (stream names must not repeat).
fn run_number() -> usize {
    static N: AtomicUsize = AtomicUsize::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// Posts events 0..n over `connections` keep-alive clients, spread over the bases.
async fn post_all(bases: Vec<String>, connections: usize, n: usize) {
    let next = Arc::new(AtomicUsize::new(0));
    let mut clients = tokio::task::JoinSet::new();
    for c in 0..connections {
        let (next, url) = (next.clone(), format!("{}/v1/events", bases[c % bases.len()]));
        clients.spawn(async move {
            let client = reqwest::Client::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return;
                }
                let body = shape::event_body(i);
                // A failed post shows as a missing intent in the tally.
                let _ = client.post(&url).header("content-type", "application/json").body(body).send().await;
            }
        });
    }
    while clients.join_next().await.is_some() {}
}

/// Publishes events 0..n, pipelined (the acks are awaited in windows).
async fn publish_all(js: jetstream::Context, subject: String, n: usize) {
    let mut acks = Vec::with_capacity(256);
    for i in 0..n {
        match js.publish(subject.clone(), shape::event_body(i).into()).await {
            Ok(ack) => acks.push(ack),
            Err(e) => eprintln!("publish {i} failed: {e}"),
        }
        if acks.len() == 256 {
            for ack in acks.drain(..) {
                if let Err(e) = ack.await {
                    eprintln!("a publish was not stored: {e}");
                }
            }
        }
    }
    for ack in acks {
        if let Err(e) = ack.await {
            eprintln!("a publish was not stored: {e}");
        }
    }
}

/// Waits until `n` intents are committed; the time since `started`.
async fn wait_committed(pool: &sqlx::PgPool, n: usize, started: Instant) -> anyhow::Result<Duration> {
    let (mut last, mut progress) = (0, Instant::now());
    loop {
        let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM intents").fetch_one(pool).await?;
        if count as usize >= n {
            return Ok(started.elapsed());
        }
        if count != last {
            (last, progress) = (count, Instant::now());
        } else if progress.elapsed() > STALL {
            anyhow::bail!("{count} of {n} intents committed and nothing more for {STALL:?}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn table(options: &Options, runs: &[Run]) -> String {
    let mut out = format!(
        "{} distinct single-SMS events, one Postgres, HTTP from {} connections{}\n\n\
         | front door | Herald processes | events/s to committed intents | events/s to provider acceptance |\n\
         |---|---|---|---|\n",
        options.events,
        options.connections,
        if options.smoke { " (smoke size: the figures mean little)" } else { "" }
    );
    for r in runs {
        out.push_str(&format!(
            "| {} | {} | {:.0} | {:.0} |\n",
            door_name(r.door),
            r.processes,
            r.committed_per_s,
            r.accepted_per_s
        ));
    }
    out
}
