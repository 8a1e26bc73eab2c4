//! A fast SMS provider on loopback speaking the wire protocol of DESIGN §5:
//! it answers `200 {"id": …}` at once and counts calls and acceptances per
//! `Idempotency-Key`, so "delivered exactly once" is read off what a provider
//! actually saw. With a fail rate it answers `503` to the first try of a fixed
//! share of keys, chosen from the key itself so every run fails the same ones.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde_json::json;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

#[derive(Default, Clone, Copy)]
struct Count {
    calls: u32,
    accepted: u32,
}

#[derive(Default)]
struct Seen {
    by_key: HashMap<String, Count>,
    accepted_keys: usize,
    last_acceptance: Option<Instant>,
    last_call: Option<Instant>,
    refused: u64,
    without_key: u64,
}

struct Shared {
    /// Keys whose first try is refused, per 10,000.
    fail_per_10k: u32,
    seen: Mutex<Seen>,
}

pub struct FakeProvider {
    pub url: String,
    shared: Arc<Shared>,
    server: JoinHandle<()>,
}

/// What the provider has seen so far.
pub struct Tally {
    pub calls: u64,
    /// Keys accepted at least once.
    pub accepted_keys: usize,
    /// Keys accepted more than once: a notification delivered twice.
    pub duplicates: usize,
    pub refused: u64,
    without_key: u64,
}

impl Tally {
    /// Herald sends every SMS with its key (DESIGN §5): a call without one is a defect.
    pub fn without_key(&self) -> Option<String> {
        (self.without_key > 0).then(|| format!("{} provider calls without an Idempotency-Key", self.without_key))
    }
}

impl FakeProvider {
    pub async fn start(fail_rate: f64) -> anyhow::Result<FakeProvider> {
        let shared = Arc::new(Shared { fail_per_10k: (fail_rate * 10_000.0).round() as u32, seen: Mutex::default() });
        let app = axum::Router::new().route("/sms", axum::routing::post(sms)).with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/sms", listener.local_addr()?);
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(FakeProvider { url, shared, server })
    }

    pub fn tally(&self) -> Tally {
        let seen = self.shared.seen.lock().unwrap();
        Tally {
            calls: seen.by_key.values().map(|c| u64::from(c.calls)).sum::<u64>() + seen.without_key,
            accepted_keys: seen.accepted_keys,
            duplicates: seen.by_key.values().filter(|c| c.accepted > 1).count(),
            refused: seen.refused,
            without_key: seen.without_key,
        }
    }

    pub fn calls_for(&self, key: &str) -> u32 {
        self.shared.seen.lock().unwrap().by_key.get(key).map_or(0, |c| c.calls)
    }

    /// Waits until `keys` distinct keys have been accepted and returns when the
    /// last of them was; fails when nothing new is accepted for `stall`.
    pub async fn wait_accepted(&self, keys: usize, stall: Duration) -> anyhow::Result<Instant> {
        let (mut last_count, mut last_progress) = (0, Instant::now());
        loop {
            let (count, at) = {
                let seen = self.shared.seen.lock().unwrap();
                (seen.accepted_keys, seen.last_acceptance)
            };
            if count >= keys {
                return Ok(at.expect("an acceptance was recorded"));
            }
            if count != last_count {
                (last_count, last_progress) = (count, Instant::now());
            } else if last_progress.elapsed() > stall {
                anyhow::bail!(
                    "the provider has accepted {count} of {keys} notifications and nothing more for {stall:?}"
                );
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Waits until no call has arrived for `quiet` (at most `limit`): once a
    /// run's notifications are all accepted, a duplicate would be a late retry.
    pub async fn wait_quiet(&self, quiet: Duration, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            let last = self.shared.seen.lock().unwrap().last_call;
            if last.is_none_or(|t| t.elapsed() >= quiet) || Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for FakeProvider {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// Whether the first try of `key` is refused: the key is hex from SHA-256,
/// so its leading digits are uniform.
fn refuses_first_try(key: &str, fail_per_10k: u32) -> bool {
    let lead = key.get(..8).and_then(|h| u32::from_str_radix(h, 16).ok()).unwrap_or(0);
    lead % 10_000 < fail_per_10k
}

async fn sms(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    _body: axum::body::Bytes,
) -> (StatusCode, Json<serde_json::Value>) {
    let Some(key) = headers.get("idempotency-key").and_then(|v| v.to_str().ok()) else {
        shared.seen.lock().unwrap().without_key += 1;
        return (StatusCode::BAD_REQUEST, Json(json!({"error": "missing Idempotency-Key"})));
    };
    let mut seen = shared.seen.lock().unwrap();
    seen.last_call = Some(Instant::now());
    let count = seen.by_key.entry(key.to_string()).or_default();
    count.calls += 1;
    if count.calls == 1 && refuses_first_try(key, shared.fail_per_10k) {
        seen.refused += 1;
        return (StatusCode::SERVICE_UNAVAILABLE, Json(json!({"error": "unavailable"})));
    }
    count.accepted += 1;
    let (first, calls) = (count.accepted == 1, count.calls);
    if first {
        seen.accepted_keys += 1;
        seen.last_acceptance = Some(Instant::now());
    }
    (StatusCode::OK, Json(json!({"id": format!("fake-{key}-{calls}")})))
}
