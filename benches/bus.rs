//! The bus as the front door, against HTTP, in one run:
//!
//!     cargo bench --bench bus -- [--events 5000] [--pg URL] [--nats URL] [--connections 32] [--smoke]
//!
//! N distinct single-SMS events (the ingest benchmark's workload) reach
//! Herald (`herald serve` in its own process, its SMS channel on a fake
//! provider on loopback, every run on emptied tables of one scratch Postgres
//! database) four ways: over HTTP from `--connections` clients, to one
//! process and to two; and published to a JetStream stream that one process,
//! then two, consume through one durable consumer. For each it reports
//! events/s until every intent is committed (read from the database) and
//! until the provider has accepted every SMS, and checks that each was
//! accepted exactly once. Beside the rates: the CPU each party spent per event
//! until the last acceptance (Herald's processes, the Postgres backends
//! serving them, nats-server, this load generator), read from `/proc`, the
//! figure a shared machine distorts least; and the Postgres transactions per
//! event, which say how well the writes were batched. Postgres comes
//! from `--pg`, else `HERALD_BENCH_DATABASE_URL`, else the local one; NATS from
//! `--nats`, else `HERALD_TEST_NATS_URL`, else the local one. It exits
//! non-zero only when a notification was lost or doubled, never on a figure;
//! `--smoke` (100 events, about 10 s) is CI's check that the path works.

#[path = "common/mod.rs"]
mod common;
#[path = "ingest/cpu.rs"]
#[allow(dead_code)]
mod cpu;
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
    cpu: CpuPerEvent,
    /// Postgres transactions per event, from start-up to shutdown.
    transactions_per_event: f64,
    problems: Vec<String>,
}

/// CPU milliseconds per event, by who spent them. `None` where that party
/// does not run on this host (no `/proc` entry to read).
#[derive(Clone, Copy, Default)]
struct CpuPerEvent {
    herald: f64,
    postgres: Option<f64>,
    nats: Option<f64>,
    load: f64,
}

/// CPU used so far by each party of a run.
struct CpuSnapshot {
    herald: Duration,
    postgres: Option<cpu::Backends>,
    nats: Option<Duration>,
    load: Duration,
}

impl CpuSnapshot {
    /// `poller` is the backend of the benchmark's own polling connection.
    async fn take(heralds: &[u32], nats: Option<u32>, db_url: &str, poller: u32) -> CpuSnapshot {
        CpuSnapshot {
            herald: heralds.iter().filter_map(|pid| cpu::process(*pid)).sum(),
            postgres: cpu::Backends::read(db_url).await.map(|b| b.without(poller)),
            nats: nats.and_then(cpu::process),
            load: cpu::process(std::process::id()).unwrap_or_default(),
        }
    }

    fn per_event_since(&self, before: &CpuSnapshot, events: usize) -> CpuPerEvent {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0 / events.max(1) as f64;
        CpuPerEvent {
            herald: ms(self.herald.saturating_sub(before.herald)),
            postgres: self.postgres.as_ref().zip(before.postgres.as_ref()).map(|(now, was)| ms(now.since(was))),
            nats: self.nats.zip(before.nats).map(|(now, was)| ms(now.saturating_sub(was))),
            load: ms(self.load.saturating_sub(before.load)),
        }
    }
}

/// The local nats-server's process id, when it runs on this host.
fn nats_server_pid() -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|entry| {
        let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
        let comm = std::fs::read_to_string(entry.path().join("comm")).ok()?;
        (comm.trim_end() == "nats-server").then_some(pid)
    })
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
    // Not migrated here: the first `herald serve` does it. A store opened
    // here would keep connections to it open (its listener holds them) that
    // the transaction count would have to tell from Herald's.
    let db = Backend::Postgres { admin_url: options.pg.clone() }.fresh().await?;
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
/// that each run starts from nothing on the schema already migrated (nothing
/// to do before the first run, whose Herald migrates the new database). A fresh
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
    if !tables.is_empty() {
        sqlx::query(&format!("TRUNCATE {} RESTART IDENTITY", tables.join(", "))).execute(&mut conn).await?;
    }
    conn.close().await?;
    Ok(())
}

/// Transactions committed or rolled back in the run's database so far, read
/// once every other client connection to it has closed: a backend reports
/// its counts when it exits, and otherwise only every few seconds.
/// (Autovacuum workers may come and go meanwhile; their work is not counted.)
async fn transactions_settled(db_url: &str) -> anyhow::Result<i64> {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(db_url).await?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let others: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM pg_stat_activity
             WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'",
        )
        .fetch_one(&mut conn)
        .await?;
        if others == 0 {
            break;
        }
        if Instant::now() > deadline {
            eprintln!(
                "{others} connections to the run's database still open after 10 s; transactions counted without them"
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let n: i64 = sqlx::query_scalar(
        "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()",
    )
    .fetch_one(&mut conn)
    .await?;
    conn.close().await?;
    Ok(n)
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
        let transactions_before = transactions_settled(db_url).await?;
        let mut heralds = Vec::new();
        for _ in 0..processes {
            heralds.push(Herald::start_with(db_url, &provider.url, &extra).await?);
        }
        // One connection, so that its backend can be left out of Postgres's CPU.
        let mut poll = {
            use sqlx::Connection;
            sqlx::PgConnection::connect(db_url).await?
        };
        let poller: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut poll).await?;
        let pids: Vec<u32> = heralds.iter().map(|h| h.pid()).collect();
        let nats_pid = nats_server_pid();
        let cpu_before = CpuSnapshot::take(&pids, nats_pid, db_url, poller as u32).await;
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
        let (committed, polls) = wait_committed(&mut poll, n, started).await?;
        let accepted = provider.wait_accepted(n, STALL).await?.duration_since(started);
        let cpu = CpuSnapshot::take(&pids, nats_pid, db_url, poller as u32).await.per_event_since(&cpu_before, n);
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
        let intents: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM intents").fetch_one(&mut poll).await?;
        if intents != n as i64 {
            problems.push(format!("{label}: {intents} intents for {n} events"));
        }
        sqlx::Connection::close(poll).await?;
        drop(heralds);
        // Herald's transactions: the database's, less this benchmark's polls.
        let transactions = transactions_settled(db_url).await? - transactions_before - polls;
        anyhow::Ok(Run {
            door,
            processes,
            committed_per_s: n as f64 / committed.as_secs_f64(),
            accepted_per_s: n as f64 / accepted.as_secs_f64(),
            cpu,
            transactions_per_event: transactions as f64 / n as f64,
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

/// Waits until `n` intents are committed; the time since `started`, and
/// how many queries it took to see it.
async fn wait_committed(conn: &mut sqlx::PgConnection, n: usize, started: Instant) -> anyhow::Result<(Duration, i64)> {
    let (mut last, mut progress, mut polls) = (0, Instant::now(), 0);
    loop {
        let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM intents").fetch_one(&mut *conn).await?;
        polls += 1;
        if count as usize >= n {
            return Ok((started.elapsed(), polls));
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
         | front door | Herald processes | events/s to committed intents | events/s to provider acceptance \
         | CPU ms per event: Herald | Postgres | nats-server | load generator | Postgres transactions per event |\n\
         |---|---|---|---|---|---|---|---|---|\n",
        options.events,
        options.connections,
        if options.smoke { " (smoke size: the figures mean little)" } else { "" }
    );
    for r in runs {
        out.push_str(&format!(
            "| {} | {} | {:.0} | {:.0} | {:.2} | {} | {} | {:.2} | {:.2} |\n",
            door_name(r.door),
            r.processes,
            r.committed_per_s,
            r.accepted_per_s,
            r.cpu.herald,
            r.cpu.postgres.map_or("–".into(), |ms| format!("{ms:.2}")),
            r.cpu.nats.map_or("–".into(), |ms| format!("{ms:.2}")),
            r.cpu.load,
            r.transactions_per_event
        ));
    }
    out
}
