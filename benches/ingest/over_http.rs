//! Herald over HTTP: N client connections posting events to a `herald serve`
//! whose SMS channel points at the fake provider, and what came out the other
//! end. Each run gets a fresh database, a fresh provider and a fresh Herald.

use crate::cpu::Meter;
use crate::db::{Backend, FreshDb};
use crate::herald::Herald;
use crate::provider::FakeProvider;
use crate::report::{AloneFigures, FailFigures, HeraldFigures, StormFigures};
use crate::shape::event_body;
use crate::stats::Latencies;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long the provider may see nothing new before a run is declared stuck.
const STALL: Duration = Duration::from_secs(60);
/// After the last expected acceptance, how long the provider must hear nothing
/// before the tally is final: a duplicate would arrive as a late retry.
const QUIET: Duration = Duration::from_secs(1);

struct Posted {
    started: Instant,
    elapsed: Duration,
    latencies: Latencies,
    /// By HTTP status; 0 is a request that got no answer.
    statuses: BTreeMap<u16, usize>,
    /// The body of one successful answer.
    sample: Option<serde_json::Value>,
}

impl Posted {
    fn count(&self, status: u16) -> usize {
        self.statuses.get(&status).copied().unwrap_or(0)
    }

    fn unexpected(&self, expected: &[u16]) -> Option<String> {
        let other: Vec<String> = self
            .statuses
            .iter()
            .filter(|(s, _)| !expected.contains(s))
            .map(|(s, n)| if *s == 0 { format!("{n} without an answer") } else { format!("{n} × {s}") })
            .collect();
        (!other.is_empty()).then(|| format!("unexpected answers: {}", other.join(", ")))
    }
}

/// Posts `posts` events (`body(i)` for i in 0..posts) over `connections`
/// keep-alive connections, each sending its next request when the last is answered.
async fn post(base: &str, connections: usize, posts: usize, body: fn(usize) -> String) -> anyhow::Result<Posted> {
    let next = Arc::new(AtomicUsize::new(0));
    let ready = Arc::new(tokio::sync::Barrier::new(connections + 1));
    let mut clients = tokio::task::JoinSet::new();
    for _ in 0..connections {
        let (next, ready, base) = (next.clone(), ready.clone(), base.to_string());
        clients.spawn(async move {
            // Open the connection before the clock starts; meet at the
            // barrier even on failure, or the others would wait forever.
            let warmed = async {
                let client = reqwest::Client::builder().pool_max_idle_per_host(1).build()?;
                client.get(format!("{base}/healthz")).send().await?.error_for_status()?;
                anyhow::Ok(client)
            }
            .await;
            ready.wait().await;
            let client = warmed?;
            let url = format!("{base}/v1/events");
            let (mut latencies, mut statuses, mut sample) = (Latencies::default(), BTreeMap::new(), None);
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= posts {
                    return anyhow::Ok((latencies, statuses, sample));
                }
                let t = Instant::now();
                let sent = client.post(&url).header("content-type", "application/json").body(body(i)).send().await;
                let status = match sent {
                    Ok(resp) => {
                        let status = resp.status().as_u16();
                        let bytes = resp.bytes().await.unwrap_or_default();
                        if sample.is_none() && (200..300).contains(&status) {
                            sample = serde_json::from_slice(&bytes).ok();
                        }
                        status
                    }
                    Err(_) => 0,
                };
                latencies.push(t.elapsed());
                *statuses.entry(status).or_insert(0) += 1;
            }
        });
    }
    ready.wait().await;
    let started = Instant::now();
    let mut posted = Posted {
        started,
        elapsed: Duration::ZERO,
        latencies: Latencies::default(),
        statuses: BTreeMap::new(),
        sample: None,
    };
    while let Some(done) = clients.join_next().await {
        let (latencies, statuses, sample) = done??;
        posted.latencies.merge(latencies);
        for (s, n) in statuses {
            *posted.statuses.entry(s).or_insert(0) += n;
        }
        posted.sample = posted.sample.or(sample);
    }
    posted.elapsed = started.elapsed();
    Ok(posted)
}

fn per_s(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64().max(1e-9)
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// A fresh database, provider and Herald; torn down by [`Setup::finish`].
struct Setup {
    db: Option<FreshDb>,
    provider: FakeProvider,
    herald: Option<Herald>,
}

impl Setup {
    async fn new(backend: &Backend, fail_rate: f64) -> anyhow::Result<Setup> {
        Setup::with(backend, fail_rate, "").await
    }

    /// [`Setup::new`] with more TOML for Herald's config.
    async fn with(backend: &Backend, fail_rate: f64, extra: &str) -> anyhow::Result<Setup> {
        let db = backend.fresh().await?;
        let provider = FakeProvider::start(fail_rate).await?;
        match Herald::start_with(&db.url, &provider.url, extra).await {
            Ok(herald) => Ok(Setup { db: Some(db), provider, herald: Some(herald) }),
            Err(e) => {
                db.dispose().await;
                Err(e)
            }
        }
    }

    fn herald(&self) -> &Herald {
        self.herald.as_ref().expect("running until finish")
    }

    /// Herald's CPU and its database's from now on.
    async fn meter(&self) -> Meter {
        Meter::start(self.herald().pid(), &self.db.as_ref().expect("kept until finish").url).await
    }

    async fn finish(mut self) {
        drop(self.herald.take());
        if let Some(db) = self.db.take() {
            db.dispose().await;
        }
    }
}

/// What a run measured, and what it found broken.
pub struct Measured<T> {
    pub figures: T,
    pub problems: Vec<String>,
}

/// `events` distinct events over `connections`; `vs_limit` and `vs_batched`
/// are filled in by the caller.
pub async fn distinct(backend: &Backend, connections: usize, events: usize) -> anyhow::Result<Measured<HeraldFigures>> {
    let setup = Setup::new(backend, 0.0).await?;
    let result = async {
        let meter = setup.meter().await;
        let mut posted = post(&setup.herald().base, connections, events, event_body).await?;
        let last = setup.provider.wait_accepted(events, STALL).await;
        let cpu = meter.stop(events).await;
        let rss = setup.herald().peak_rss_bytes()?;
        setup.provider.wait_quiet(QUIET, STALL).await;
        let tally = setup.provider.tally();
        let mut problems: Vec<String> = posted.unexpected(&[202]).into_iter().chain(tally.without_key()).collect();
        if let Err(e) = &last {
            problems.push(e.to_string());
        }
        if tally.duplicates > 0 {
            problems.push(format!("{} notifications delivered twice", tally.duplicates));
        }
        let figures = HeraldFigures {
            connections,
            events,
            ingest_per_s: per_s(events, posted.elapsed),
            p50_ms: posted.latencies.percentile_ms(50.0),
            p99_ms: posted.latencies.percentile_ms(99.0),
            end_to_end_per_s: last.map_or(0.0, |last| per_s(events, last - posted.started)),
            vs_limit: 0.0,
            vs_batched: 0.0,
            peak_rss_mib: mib(rss),
            delivered: tally.accepted_keys,
            duplicates: tally.duplicates,
            cpu: Some(cpu),
        };
        anyhow::Ok(Measured { figures, problems })
    }
    .await;
    setup.finish().await;
    result
}

/// `events` distinct events over `connections` to a Herald that runs no
/// workers (`[worker] disabled`, as an API-only process of a deployment that
/// scales the two apart): ingest alone, the work the limit does, without
/// delivery's share of the cores and the database. Every request must be
/// answered 202 and leave its job in the queue.
pub async fn alone(backend: &Backend, connections: usize, events: usize) -> anyhow::Result<Measured<AloneFigures>> {
    let setup = Setup::with(backend, 0.0, "[worker]\ndisabled = true\n").await?;
    let result = async {
        let meter = setup.meter().await;
        let mut posted = post(&setup.herald().base, connections, events, event_body).await?;
        let cpu = meter.stop(events).await;
        let rss = setup.herald().peak_rss_bytes()?;
        let mut problems: Vec<String> = posted.unexpected(&[202]).into_iter().collect();
        let store = herald::store::connect(&setup.db.as_ref().expect("kept until finish").url).await?;
        let queued = store.queue_stats(None, i64::MAX).await?.total;
        if queued != events as i64 {
            problems.push(format!("ingest alone: {events} events accepted, {queued} jobs queued"));
        }
        if setup.provider.tally().calls > 0 {
            problems.push("ingest alone: a process without workers called the provider".into());
        }
        let figures = AloneFigures {
            connections,
            events,
            ingest_per_s: per_s(events, posted.elapsed),
            p50_ms: posted.latencies.percentile_ms(50.0),
            p99_ms: posted.latencies.percentile_ms(99.0),
            vs_limit: 0.0,
            vs_batched: 0.0,
            peak_rss_mib: mib(rss),
            queued,
            cpu: Some(cpu),
        };
        anyhow::Ok(Measured { figures, problems })
    }
    .await;
    setup.finish().await;
    result
}

/// One event posted `posts` times over `connections`: one notification, and
/// the provider called once.
pub async fn storm(backend: &Backend, connections: usize, posts: usize) -> anyhow::Result<Measured<StormFigures>> {
    let setup = Setup::new(backend, 0.0).await?;
    let result = async {
        let meter = setup.meter().await;
        let mut posted = post(&setup.herald().base, connections, posts, |_| event_body(0)).await?;
        setup.provider.wait_accepted(1, STALL).await?;
        let cpu = meter.stop(posts).await;
        let rss = setup.herald().peak_rss_bytes()?;
        setup.provider.wait_quiet(QUIET, STALL).await;
        let tally = setup.provider.tally();
        let mut problems: Vec<String> = posted.unexpected(&[200, 202]).into_iter().chain(tally.without_key()).collect();
        if posted.count(202) != 1 {
            problems.push(format!("the storm created {} times (202), not once", posted.count(202)));
        }
        if tally.calls != 1 {
            problems.push(format!("the storm's one notification cost {} provider calls", tally.calls));
        }
        let key = posted.sample.as_ref().and_then(|b| b["intents"][0]["key"].as_str().map(String::from));
        if let Some(key) = key.filter(|k| setup.provider.calls_for(k) != 1) {
            problems.push(format!("the provider saw key {key} {} times", setup.provider.calls_for(&key)));
        }
        let figures = StormFigures {
            connections,
            posts,
            posts_per_s: per_s(posts, posted.elapsed),
            p50_ms: posted.latencies.percentile_ms(50.0),
            p99_ms: posted.latencies.percentile_ms(99.0),
            created: posted.count(202),
            replayed: posted.count(200),
            provider_calls: tally.calls,
            peak_rss_mib: mib(rss),
            cpu: Some(cpu),
        };
        anyhow::Ok(Measured { figures, problems })
    }
    .await;
    setup.finish().await;
    result
}

/// `events` distinct events while the provider refuses the first try of a
/// `fail_rate` share of them with 503: each must still be accepted exactly once.
pub async fn failures(
    backend: &Backend,
    connections: usize,
    events: usize,
    fail_rate: f64,
) -> anyhow::Result<Measured<FailFigures>> {
    let setup = Setup::new(backend, fail_rate).await?;
    let result = async {
        let posted = post(&setup.herald().base, connections, events, event_body).await?;
        let last = setup.provider.wait_accepted(events, STALL).await;
        let rss = setup.herald().peak_rss_bytes()?;
        setup.provider.wait_quiet(QUIET, STALL).await;
        let tally = setup.provider.tally();
        let mut problems: Vec<String> = posted.unexpected(&[202]).into_iter().chain(tally.without_key()).collect();
        if let Err(e) = &last {
            problems.push(format!("with {:.0} % 503s: {e}", fail_rate * 100.0));
        }
        if tally.duplicates > 0 {
            problems.push(format!(
                "with {:.0} % 503s, {} notifications delivered twice",
                fail_rate * 100.0,
                tally.duplicates
            ));
        }
        let figures = FailFigures {
            connections,
            events,
            fail_rate,
            refused: tally.refused,
            end_to_end_per_s: last.map_or(0.0, |last| per_s(events, last - posted.started)),
            delivered: tally.accepted_keys,
            duplicates: tally.duplicates,
            peak_rss_mib: mib(rss),
        };
        anyhow::Ok(Measured { figures, problems })
    }
    .await;
    setup.finish().await;
    result
}
