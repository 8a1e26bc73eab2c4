//! The worker itself: what it does when recording is slow, and that no
//! provider call can hold a slot past its channel's timeout.

mod common;

use common::{TestApp, TestDb, sms_event};
use herald::channel::Provider;
use herald::clock::SystemClock;
use herald::deliver::retry::RetryPolicy;
use herald::deliver::{Providers, Worker};
use herald::event::Channel;
use herald::store::Store;
use std::sync::Arc;
use std::time::Duration;

fn worker(store: Arc<dyn Store>, channel: Channel, provider: Arc<dyn Provider>, lease: Duration) -> Worker {
    let mut providers = Providers::new();
    providers.insert(channel, provider);
    Worker {
        store,
        providers: Arc::new(providers),
        policy: RetryPolicy::new(4, Duration::from_millis(20), Duration::from_millis(100)),
        concurrency: 8,
        poll_interval: Duration::from_millis(20),
        lease,
        clock: Arc::new(SystemClock),
        supersede_types: Vec::new(),
    }
}

/// A provider that never returns and ignores its deadline.
struct Hangs;

#[async_trait::async_trait]
impl Provider for Hangs {
    fn timeout(&self) -> Duration {
        Duration::from_millis(300)
    }

    async fn send(&self, _: &herald::channel::Delivery) -> herald::channel::Outcome {
        std::future::pending().await
    }
}

/// The worker bounds every call itself: a provider that forgets to cannot
/// hold a slot, and the abandoned call is `unknown` (it may have gone out).
#[tokio::test]
async fn a_provider_that_never_returns_is_abandoned_at_its_timeout_as_unknown() {
    let db = TestDb::new(common::Backend::Sqlite).await;
    // An API-only process with SMS configured, so the intent is to be sent.
    let api = TestApp::new(&db).with_sms_url("http://127.0.0.1:9/sms").without_workers().spawn().await;
    let (_, b, _) = api.post_event(&sms_event("PO-HANG", "+15550000410"), None).await;
    let id = b["intents"][0]["id"].as_str().unwrap().to_string();
    let mut w = worker(db.store().await, Channel::Sms, Arc::new(Hangs), Duration::from_secs(3));
    w.policy = RetryPolicy::new(1, Duration::from_millis(10), Duration::from_millis(10));
    let (stop, rx) = tokio::sync::watch::channel(false);
    let running = tokio::spawn(w.run(rx, Duration::from_secs(1)));
    let it = api.wait_state(&id, &["dead"]).await;
    let a = &it["attempts"][0];
    assert_eq!((a["outcome"].as_str(), a["error_class"].as_str()), (Some("unknown"), Some("timeout")), "{it}");
    let at = |k: &str| a[k].as_str().unwrap().parse::<jiff::Timestamp>().unwrap();
    let took = at("finished_at").duration_since(at("started_at")).as_secs_f64();
    assert!((0.3..2.5).contains(&took), "abandoned at the 300ms timeout, inside the 3s lease: {took}s");
    let _ = stop.send(true);
    running.await.unwrap();
    api.running.stop().await;
}
