//! What ingest costs, and how far it is from what the database allows, in one run.
//!
//!     cargo bench --bench ingest -- [--backends pg,sqlite | --sqlite] [--pg URL] [--events 50000]
//!         [--connections 1,8,32] [--fail-rate 0.1] [--json FILE] [--baseline FILE] [--smoke]
//!
//! Per backend, each run on a fresh database (Postgres: a scratch database on
//! the server of `--pg`, else `HERALD_BENCH_DATABASE_URL`, else the local one;
//! SQLite: a file in a temporary directory), all removed at the end:
//!
//! 1. the limit: Herald's ingest rows written straight through sqlx, one event
//!    per transaction and 50 per transaction, at each connection count;
//! 2. Herald over HTTP (`herald serve` in its own process, its SMS channel on a
//!    fake provider on loopback), distinct single-SMS events at each connection
//!    count: ingest rate, p50/p99 per request, end-to-end rate, peak RSS;
//! 3. ingest alone, at the most connections: the same events to a `herald
//!    serve` without workers (`[worker] disabled`), as the limit delivers
//!    nothing; each must be answered 202 and leave its job queued;
//! 4. a duplicate storm (one event posted `--events` times): posts/s, and the
//!    provider must be called exactly once;
//! 5. distinct events while the provider answers 503 to the first try of a
//!    `--fail-rate` share: each must be delivered exactly once.
//!
//! Prints a table per backend with Herald ÷ limit and the targets;
//! `--json FILE` writes the same figures. It exits non-zero only when a promise
//! was broken (a notification lost or doubled, a request refused), never on a
//! figure: `--smoke` (tiny sizes) is CI's check that the whole path works.

#[path = "../common/mod.rs"]
mod common;
mod cpu;
mod db;
mod herald;
mod limit;
mod over_http;
mod provider;
mod report;
mod shape;
mod stats;

use db::Backend;
use report::{BackendReport, LimitFigures, Report};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

const USAGE: &str = "usage: cargo bench --bench ingest -- [--backends pg,sqlite | --sqlite] [--pg URL] [--events N] \
                     [--connections 1,8,32] [--fail-rate 0.1] [--json FILE] [--baseline FILE] [--smoke]";

#[derive(Clone)]
struct Options {
    backends: Vec<Backend>,
    events: usize,
    connections: Vec<usize>,
    fail_rate: f64,
    json: Option<PathBuf>,
    baseline: Option<PathBuf>,
    smoke: bool,
}

impl Options {
    fn parse(args: &[String]) -> Result<Options, String> {
        let mut values = std::collections::HashMap::new();
        let (mut sqlite_only, mut smoke) = (false, false);
        let mut it = args.iter();
        while let Some(a) = it.next() {
            match a.as_str() {
                "--sqlite" => sqlite_only = true,
                "--smoke" => smoke = true,
                "--bench" => {} // what `cargo bench` passes to every bench
                "--pg" | "--backends" | "--events" | "--connections" | "--fail-rate" | "--json" | "--baseline" => {
                    let v = it.next().ok_or_else(|| format!("{a} needs a value"))?;
                    values.insert(a.as_str(), v.clone());
                }
                other => return Err(format!("unknown argument {other:?}")),
            }
        }
        let pg_url = values
            .get("--pg")
            .cloned()
            .or_else(|| std::env::var("HERALD_BENCH_DATABASE_URL").ok().filter(|v| !v.is_empty()))
            .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/postgres".into());
        let names = match (values.get("--backends"), sqlite_only) {
            (Some(_), true) => return Err("--sqlite and --backends: give one".into()),
            (Some(b), false) => b.clone(),
            (None, true) => "sqlite".into(),
            (None, false) => "pg,sqlite".into(),
        };
        let backends = names
            .split(',')
            .map(|b| match b.trim() {
                "pg" | "postgres" => Ok(Backend::Postgres { admin_url: pg_url.clone() }),
                "sqlite" => Ok(Backend::Sqlite),
                other => Err(format!("--backends: {other:?} is neither pg nor sqlite")),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let count = |name: &str, s: &str| -> Result<usize, String> {
            s.replace(['_', ','], "")
                .parse::<usize>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("{name}: {s:?} is not a positive number"))
        };
        let events = match values.get("--events") {
            Some(e) => count("--events", e)?,
            None if smoke => 100,
            None => 50_000,
        };
        let mut connections = match values.get("--connections") {
            Some(c) => c.split(',').map(|n| count("--connections", n.trim())).collect::<Result<Vec<_>, _>>()?,
            None => vec![1, 8, 32],
        };
        connections.sort_unstable();
        connections.dedup();
        let fail_rate = match values.get("--fail-rate") {
            Some(f) => f
                .parse::<f64>()
                .ok()
                .filter(|f| (0.0..1.0).contains(f))
                .ok_or("--fail-rate: a share from 0 to below 1, like 0.1")?,
            None => 0.1,
        };
        Ok(Options {
            backends,
            events,
            connections,
            fail_rate,
            json: values.get("--json").map(PathBuf::from),
            baseline: values.get("--baseline").map(PathBuf::from),
            smoke,
        })
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let options = match Options::parse(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let command = args.iter().filter(|a| *a != "--bench").cloned().collect::<Vec<_>>().join(" ");
    let mut task = tokio::spawn(run(options.clone(), command));
    let outcome = tokio::select! {
        joined = &mut task => joined.map_err(anyhow::Error::from).and_then(|r| r),
        _ = tokio::signal::ctrl_c() => {
            task.abort();
            let _ = task.await;
            Err(anyhow::anyhow!("interrupted"))
        }
    };
    // Whatever happened above, no scratch database outlives the run.
    for backend in &options.backends {
        if let Backend::Postgres { admin_url } = backend
            && let Err(e) = common::sweep(admin_url, db::PREFIX).await
        {
            eprintln!("could not sweep scratch databases on {admin_url}: {e}");
        }
    }
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("ingest bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs everything, prints the tables, writes the JSON; false when a promise was broken.
async fn run(options: Options, args: String) -> anyhow::Result<bool> {
    let baseline: Option<Report> = match &options.baseline {
        Some(path) => Some(serde_json::from_str(&std::fs::read_to_string(path)?)?),
        None => None,
    };
    let mut report = Report {
        command: format!("cargo {} --bench ingest -- {args}", if cfg!(debug_assertions) { "test" } else { "bench" })
            .trim()
            .to_string(),
        smoke: options.smoke,
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        optimised: !cfg!(debug_assertions),
        herald: format!("`herald serve` in its own process ({}), over loopback HTTP", env!("CARGO_BIN_EXE_herald")),
        events: options.events,
        connections: options.connections.clone(),
        fail_rate: options.fail_rate,
        backends: Vec::new(),
    };
    for backend in &options.backends {
        let mut measured = measure(backend, &options).await?;
        measured.judge(baseline.as_ref(), options.smoke);
        println!("{}", measured.render(&report));
        report.backends.push(measured);
    }
    if let Some(path) = &options.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(report.backends.iter().all(|b| b.problems.is_empty()))
}

/// Every run on one backend. At each connection count the limit runs just
/// before Herald does, so a ratio compares runs taken close together.
async fn measure(backend: &Backend, options: &Options) -> anyhow::Result<BackendReport> {
    let name = backend.name();
    let top = *options.connections.last().expect("at least one connection count");
    let rows = Arc::new((0..options.events).map(shape::EventRows::new).collect::<Vec<_>>());
    let (mut limits, mut herald, mut problems) = (Vec::new(), Vec::new(), Vec::new());
    for &c in &options.connections {
        let single = measure_limit(backend, rows.clone(), c, 1).await?;
        let batched = measure_limit(backend, rows.clone(), c, limit::BATCH).await?;
        let m = over_http::distinct(backend, c, options.events).await?;
        let mut h = m.figures;
        h.vs_limit = h.ingest_per_s / single.events_per_s;
        h.vs_batched = h.ingest_per_s / batched.events_per_s;
        eprintln!(
            "{name}: Herald, {c} connection(s): ingest {:.0}/s (p50 {:.2} ms, p99 {:.2} ms), end to end {:.0}/s, peak RSS {:.0} MiB",
            h.ingest_per_s, h.p50_ms, h.p99_ms, h.end_to_end_per_s, h.peak_rss_mib
        );
        limits.extend([single, batched]);
        problems.extend(m.problems);
        herald.push(h);
    }
    let mut alone = over_http::alone(backend, top, options.events).await?;
    if let Some(single) = limits.iter().find(|l| l.connections == top && l.events_per_tx == 1) {
        alone.figures.vs_limit = alone.figures.ingest_per_s / single.events_per_s;
    }
    if let Some(batched) = limits.iter().find(|l| l.connections == top && l.events_per_tx == limit::BATCH) {
        alone.figures.vs_batched = alone.figures.ingest_per_s / batched.events_per_s;
    }
    eprintln!(
        "{name}: Herald without workers, {top} connections: ingest {:.0}/s (p50 {:.2} ms, p99 {:.2} ms), {} queued",
        alone.figures.ingest_per_s, alone.figures.p50_ms, alone.figures.p99_ms, alone.figures.queued
    );
    problems.extend(alone.problems);
    let storm = over_http::storm(backend, top, options.events).await?;
    eprintln!(
        "{name}: duplicate storm, {top} connections: {:.0} posts/s, {} provider call(s)",
        storm.figures.posts_per_s, storm.figures.provider_calls
    );
    problems.extend(storm.problems);
    let failures = over_http::failures(backend, top, options.events, options.fail_rate).await?;
    eprintln!(
        "{name}: {:.0} % 503s, {top} connections: end to end {:.0}/s, {} delivered, {} twice",
        options.fail_rate * 100.0,
        failures.figures.end_to_end_per_s,
        failures.figures.delivered,
        failures.figures.duplicates
    );
    problems.extend(failures.problems);
    Ok(BackendReport {
        backend: name.into(),
        limit: limits,
        herald,
        alone: Some(alone.figures),
        storm: storm.figures,
        failures: failures.figures,
        targets: Vec::new(),
        problems,
    })
}

/// The limit at `connections`, `per_tx` events per transaction, on a fresh database.
async fn measure_limit(
    backend: &Backend,
    rows: Arc<Vec<shape::EventRows>>,
    connections: usize,
    per_tx: usize,
) -> anyhow::Result<LimitFigures> {
    let events = rows.len();
    let db = backend.fresh_migrated().await?;
    let measured = async {
        let target = limit::Target::connect(&db.url, connections).await?;
        let meter = cpu::Meter::start(std::process::id(), &db.url).await;
        let measured = limit::run(&target, rows, connections, per_tx).await;
        let cpu = meter.stop(events).await;
        target.close().await;
        measured.map(|m| (m, cpu))
    }
    .await;
    db.dispose().await;
    let (mut m, cpu) = measured?;
    let figures = LimitFigures {
        connections,
        events_per_tx: per_tx,
        events,
        events_per_s: events as f64 / m.elapsed.as_secs_f64(),
        p50_ms: m.latencies.percentile_ms(50.0),
        p99_ms: m.latencies.percentile_ms(99.0),
        cpu: Some(cpu),
    };
    eprintln!(
        "{}: limit, {per_tx} event(s)/transaction, {connections} connection(s): {:.0} events/s, p50 {:.2} ms, p99 {:.2} ms",
        backend.name(),
        figures.events_per_s,
        figures.p50_ms,
        figures.p99_ms
    );
    Ok(figures)
}
