//! herald-chaos: Herald's fault suite. It runs real `herald serve` processes
//! (two or more on its own Postgres, one on SQLite) against fake providers,
//! posts a seeded stream of events while injecting faults on a seeded
//! schedule, lets everything heal and drain, and then checks from the
//! database and the providers' logs that nothing was lost or duplicated.
//! Exits non-zero on any violation, printing the seed that reproduces it.

mod checker;
mod driver;
mod faults;
mod herald;
mod provider;
mod rng;
mod services;
mod smtp;
mod snapshot;

use anyhow::{Context, bail};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
struct Options {
    herald_bin: PathBuf,
    seed: u64,
    events: usize,
    faults: usize,
    legs: Vec<String>,
    processes: usize,
    concurrency: usize,
    pace: Duration,
    drain: Duration,
    /// The `faketime` offset of one more Herald process on the Postgres leg.
    skew: Option<String>,
}

const USAGE: &str = "herald-chaos [--herald-bin PATH] [--seed N] [--events N] [--faults N] \
[--legs postgres,sqlite] [--processes N] [--skew +90s|none] [--concurrency N] [--pace-ms N] [--drain-secs N]";

fn options() -> anyhow::Result<Options> {
    let default_bin = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/debug/herald");
    let mut o = Options {
        herald_bin: default_bin,
        seed: jiff::Timestamp::now().as_nanosecond() as u64 % 1_000_000_000,
        events: 300,
        faults: 12,
        legs: vec!["postgres".into(), "sqlite".into()],
        processes: 2,
        concurrency: 8,
        pace: Duration::from_millis(30),
        drain: Duration::from_secs(120),
        skew: Some("+90s".into()),
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "--help" || flag == "-h" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        let value = args.next().with_context(|| format!("{flag} needs a value\n{USAGE}"))?;
        let number = || value.parse::<u64>().with_context(|| format!("{flag}: {value:?} is not a number"));
        match flag.as_str() {
            "--herald-bin" => o.herald_bin = PathBuf::from(&value),
            "--seed" => o.seed = number()?,
            "--events" => o.events = number()? as usize,
            "--faults" => o.faults = number()? as usize,
            "--legs" => o.legs = value.split(',').map(str::to_string).collect(),
            "--processes" => o.processes = number()?.max(1) as usize,
            "--concurrency" => o.concurrency = number()?.max(1) as usize,
            "--pace-ms" => o.pace = Duration::from_millis(number()?),
            "--drain-secs" => o.drain = Duration::from_secs(number()?),
            "--skew" => o.skew = (value != "none").then(|| value.clone()),
            _ => bail!("unknown flag {flag}\n{USAGE}"),
        }
    }
    for leg in &o.legs {
        if leg != "postgres" && leg != "sqlite" {
            bail!("--legs: {leg:?} is not postgres or sqlite");
        }
    }
    if o.skew.is_some() && o.legs.iter().any(|l| l == "postgres") {
        herald::libfaketime()?;
    }
    if !o.herald_bin.exists() {
        bail!("no Herald binary at {} (build it, or pass --herald-bin)", o.herald_bin.display());
    }
    Ok(o)
}

#[tokio::main]
async fn main() {
    let o = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("herald-chaos: {e:#}");
            std::process::exit(2);
        }
    };
    println!(
        "herald-chaos: seed {} ({} events, {} faults per leg, legs {})",
        o.seed,
        o.events,
        o.faults,
        o.legs.join(",")
    );
    let mut failed = false;
    for leg in &o.legs {
        match run_leg(&o, leg).await {
            Ok(true) => {}
            Ok(false) => failed = true,
            Err(e) => {
                eprintln!("herald-chaos: the {leg} leg could not run: {e:#}");
                failed = true;
            }
        }
    }
    let rerun = format!(
        "herald-chaos --seed {} --events {} --faults {} --legs {} --processes {} --skew {}",
        o.seed,
        o.events,
        o.faults,
        o.legs.join(","),
        o.processes,
        o.skew.as_deref().unwrap_or("none")
    );
    if failed {
        println!("herald-chaos: FAILED with seed {} — rerun with: {rerun}", o.seed);
        std::process::exit(1);
    }
    println!("herald-chaos: passed (seed {}; rerun with: {rerun})", o.seed);
}

fn routes() -> Vec<(&'static str, Vec<&'static str>)> {
    vec![
        (driver::EVENT_TYPE, vec!["sms", "email", "webhook", "in_app"]),
        (driver::BATCHED_TYPE, vec!["email", "in_app"]),
    ]
}
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

fn write_templates(dir: &Path) -> anyhow::Result<PathBuf> {
    let root = dir.join("templates");
    let t = root.join("chaos");
    std::fs::create_dir_all(t.join("en"))?;
    std::fs::write(t.join("template.toml"), "revision = \"1\"\ndefault_locale = \"en\"\nsms_max_segments = 2\n")?;
    std::fs::write(
        t.join("fixtures.json"),
        r#"{"data": {"ref": "evt~0~", "note": "first"}, "entity": {"type": "order", "id": "o-0", "version": 1}}"#,
    )?;
    std::fs::write(t.join("en/email.subject.j2"), "{{ entity.id }} v{{ entity.version }} {{ ref }}")?;
    std::fs::write(t.join("en/email.txt.j2"), "Order {{ entity.id }} is at version {{ entity.version }} ({{ ref }}).")?;
    std::fs::write(t.join("en/sms.j2"), "Order {{ entity.id }} v{{ entity.version }} {{ ref }}")?;
    std::fs::write(t.join("en/in_app.j2"), "Order {{ entity.id }} v{{ entity.version }} {{ ref }}")?;
    // The digest names each member's marker: the checker reads them back.
    let d = root.join("chaos_digest");
    std::fs::create_dir_all(d.join("en"))?;
    std::fs::write(d.join("template.toml"), "revision = \"1\"\ndefault_locale = \"en\"\n")?;
    std::fs::write(d.join("fixtures.json"), r#"{"data": {}, "entity": {"type": "order", "id": "b-0", "version": 1}}"#)?;
    std::fs::write(d.join("en/email.subject.j2"), "{{ count }} updates on {{ group_key }}")?;
    std::fs::write(d.join("en/email.txt.j2"), "{% for m in members %}{{ m.data.ref }}\n{% endfor %}")?;
    Ok(root)
}

struct LegConfig<'a> {
    port: u16,
    database_url: &'a str,
    redis_url: Option<&'a str>,
    templates: &'a Path,
    sms_url: &'a str,
    smtp_url: &'a str,
}

fn herald_config(c: &LegConfig) -> String {
    let redis = c.redis_url.map(|u| format!("redis_url = \"{u}\"\n")).unwrap_or_default();
    format!(
        r#"listen = "127.0.0.1:{port}"
database_url = "{db}"
{redis}templates_dir = "{templates}"
dedupe_window = "1h"
shutdown_grace = "{grace}s"
[retry]
attempts = 8
base = "200ms"
max = "2s"
[worker]
concurrency = 16
poll_interval = "200ms"
lease = "4s"
[log]
level = "warn"
[[routes]]
event = "{event}"
template = "chaos"
channels = ["sms", "email", "webhook", "in_app"]
skip_superseded = true
[[routes]]
event = "{batched}"
template = "chaos"
channels = ["email", "in_app"]
digest = {{ window = "2s", key = "{{{{ entity.id }}}}", template = "chaos_digest", channels = ["email"] }}
[channels.email]
smtp_url = "{smtp}"
from = "Herald <noreply@chaos.test>"
message_id_domain = "chaos.test"
timeout = "1s"
[channels.sms]
url = "{sms}"
timeout = "1s"
[channels.webhook]
secret = "whsec_Y2hhb3MtY2hhb3MtY2hhb3MtY2hhb3MtY2hhb3M="
timeout = "1s"
allow_private_destinations = true
"#,
        port = c.port,
        db = c.database_url,
        templates = c.templates.display(),
        grace = SHUTDOWN_GRACE.as_secs(),
        event = driver::EVENT_TYPE,
        batched = driver::BATCHED_TYPE,
        sms = c.sms_url,
        smtp = c.smtp_url,
    )
}

/// One leg: its services, its Herald processes, the driver and the faults,
/// the drain, the check. Ok(false) when an invariant was violated.
async fn run_leg(o: &Options, leg: &str) -> anyhow::Result<bool> {
    let started = Instant::now();
    let dir = tempfile::Builder::new().prefix("herald-chaos").tempdir()?;
    let templates = write_templates(dir.path())?;
    let postgres = if leg == "postgres" {
        let pg = Arc::new(services::Postgres::start().await?);
        pg.create_database("herald_chaos").await?;
        Some(pg)
    } else {
        None
    };
    let database_url = match &postgres {
        Some(pg) => pg.url("herald_chaos"),
        None => format!("sqlite://{}", dir.path().join("herald.db").display()),
    };
    let redis = services::Redis::start().await?;
    let redis_url = redis.url();
    // Each leg has a provider that honours keys and one that does not, SMS and
    // email swapping roles between legs; the webhook receiver never does.
    let sms_honours = postgres.is_some();
    let sms = provider::Provider::start("sms", sms_honours, "idempotency-key").await?;
    let smtp = smtp::SmtpPeer::start(!sms_honours).await?;
    let webhook = provider::Provider::start("webhook", false, "webhook-id").await?;
    let processes = if postgres.is_some() { o.processes.max(2) } else { 1 };
    let skewed = if postgres.is_some() { o.skew.clone() } else { None };
    let mut nodes = Vec::new();
    for i in 0..processes + usize::from(skewed.is_some()) {
        let skew = if i >= processes { skewed.clone() } else { None };
        let port = services::free_port()?;
        let config = herald_config(&LegConfig {
            port,
            database_url: &database_url,
            redis_url: Some(&redis_url),
            templates: &templates,
            sms_url: &sms.url("/sms"),
            smtp_url: &smtp.url(),
        });
        let mut node = herald::Node::new(&format!("herald-{i}"), o.herald_bin.clone(), dir.path(), config, port, skew)?;
        node.start().await?;
        nodes.push(node);
    }
    let bases: Vec<String> = nodes.iter().map(|n| n.base()).collect();

    let root = rng::Rng::new(o.seed ^ if leg == "postgres" { 0 } else { 0x5117e });
    let hook = webhook.clone();
    let plan = driver::Plan::generate(&mut root.fork(1), o.events, routes(), &|id| hook.url(&format!("/hook/{id}")));
    let targets = faults::Targets {
        nodes: nodes.len(),
        channels: vec!["sms", "webhook"],
        redis: true,
        postgres: postgres.is_some(),
        smtp: true,
    };
    let schedule = faults::schedule(&mut root.fork(2), o.faults, plan.posts.len(), &targets);
    let skew_note = skewed.as_deref().map(|s| format!(" + 1 under faketime {s}")).unwrap_or_default();
    println!(
        "\n== {leg}: {processes} Herald process(es){skew_note}, {} events in {} posts, {} faults",
        plan.events.len(),
        plan.posts.len(),
        schedule.len()
    );
    for (at, f) in &schedule {
        println!("   at post {at:>6}: {f:?}");
    }

    let world = Arc::new(faults::World {
        nodes: nodes.into_iter().map(tokio::sync::Mutex::new).collect(),
        redis: Some(tokio::sync::Mutex::new(redis)),
        postgres: postgres.clone().map(|pg| (pg, "herald_chaos".to_string())),
        providers: vec![("sms", sms.clone()), ("webhook", webhook.clone())],
        smtp: Some(smtp.clone()),
        kills_mid_send: Default::default(),
        shutdown_grace: SHUTDOWN_GRACE,
        injected: Default::default(),
        unclean_stops: Default::default(),
        errors: Default::default(),
    });
    let driver = Arc::new(driver::Driver::new(plan, bases));
    let injector = {
        let (world, progress) = (world.clone(), driver.progress.clone());
        tokio::spawn(async move { world.inject(schedule, progress).await })
    };
    driver.run(o.concurrency, o.pace).await;
    injector.await?;
    world.heal().await?;
    driver.redrive().await;
    let driven = started.elapsed();

    // Drain: every intent final, no job, no open digest window.
    let db = snapshot::Db::connect(&database_url).await?;
    let deadline = Instant::now() + o.drain;
    let mut pending = db.pending().await?;
    while pending > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(250)).await;
        pending = db.pending().await?;
    }
    let drained = pending == 0;
    let snapshot = db.snapshot().await?;
    db.close().await;
    for n in &world.nodes {
        let mut n = n.lock().await;
        if let Some(problem) = n.terminate(SHUTDOWN_GRACE + Duration::from_secs(5)).await? {
            world.unclean_stops.lock().unwrap().push(problem);
        }
    }

    let mut ledger = std::mem::take(&mut *driver.ledger.lock().unwrap());
    let evidence = checker::Evidence {
        snapshot,
        expected: ledger.expected.drain().map(|(_, x)| x).collect(),
        calls: [sms.calls(), smtp.calls(), webhook.calls()].concat(),
        honouring: [if sms_honours { "sms" } else { "email" }.to_string()].into(),
        internal_channels: ["in_app".to_string()].into(),
    };
    let report = checker::check(&evidence);
    let mut violations: Vec<(String, String)> =
        report.violations.iter().map(|v| (v.kind.to_string(), v.detail.clone())).collect();
    for v in &ledger.violations {
        violations.push(("driver".into(), v.clone()));
    }
    for i in &ledger.unanswered {
        violations.push(("unanswered".into(), format!("post {i} never got a definitive answer")));
    }
    for e in world.errors.lock().unwrap().iter() {
        violations.push(("fault_harness".into(), e.clone()));
    }
    if !drained {
        violations.push((
            "not_drained".into(),
            format!("{pending} intents, jobs or digest windows still pending after {:?}", o.drain),
        ));
    }
    for problem in world.unclean_stops.lock().unwrap().iter() {
        violations.push(("unclean_stop".into(), problem.clone()));
    }

    println!("-- {leg}: summary ({:.0?} driving, {:.0?} in all)", driven, started.elapsed());
    println!(
        "   events posted      {} ({} posts; answers {:?}; client retries {})",
        driver.plan.events.len(),
        driver.plan.posts.len(),
        ledger.answers,
        ledger.client_retries
    );
    println!(
        "   intents            {} expected, {} in the database, by state {:?}",
        evidence.expected.len(),
        report.intents,
        report.by_state
    );
    println!("   faults injected    {:?}", world.injected.lock().unwrap());
    let mut failed_starts = 0;
    for n in &world.nodes {
        failed_starts += n.lock().await.failed_starts;
    }
    println!("   starts retried     {failed_starts} (Herald exited at start, its database unreachable)");
    println!(
        "   kills mid-send     {} (a provider was handling a call at the kill)",
        world.kills_mid_send.load(std::sync::atomic::Ordering::SeqCst)
    );
    println!("   provider effects   {:?}", report.effects);
    for p in ["sms", "email", "webhook"] {
        let d = report.duplicates.get(p).cloned().unwrap_or_default();
        let honours = if evidence.honouring.contains(p) { "honours keys" } else { "ignores keys" };
        println!("   duplicates {p:<8} {} explained, {} unexplained ({honours})", d.explained, d.unexplained);
    }
    println!("   lost               {}", report.lost);
    let mut by_kind: BTreeMap<&str, u64> = BTreeMap::new();
    for (k, _) in &violations {
        *by_kind.entry(k.as_str()).or_default() += 1;
    }
    println!("   violations         {} {:?}", violations.len(), by_kind);
    for (k, d) in violations.iter().take(30) {
        println!("     {k}: {d}");
    }
    if !violations.is_empty() {
        let logs = dir.keep();
        println!("   Herald's logs and configs are kept in {}", logs.display());
    }
    Ok(violations.is_empty())
}
