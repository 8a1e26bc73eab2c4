//! The worker itself: what it does when recording is slow, and that no
//! provider call can hold a slot past its channel's timeout.

mod common;

use common::slow_store::SlowRecording;
use common::{FakeSms, Reply, TestApp, TestDb, backends, sms_event};
use herald::channel::Provider;
use herald::channel::sms_http::SmsHttp;
use herald::clock::SystemClock;
use herald::deliver::retry::RetryPolicy;
use herald::deliver::{Providers, Worker};
use herald::event::Channel;
use herald::ingest::IngestLoad;
use herald::store::Store;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
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
        ingest_load: Arc::default(),
    }
}

/// A database, a fake SMS provider and an API without workers, one SMS event
/// posted for each phone: the ids of their intents, queued for a worker.
async fn queued_sms(
    backend: common::Backend,
    prefix: &str,
    phones: &[impl AsRef<str>],
) -> (TestDb, FakeSms, common::Spawned, Vec<String>) {
    let db = TestDb::new(backend).await;
    let sms = FakeSms::start().await;
    let api = TestApp::new(&db).with_sms(&sms).without_workers().spawn().await;
    let mut ids = Vec::new();
    for (n, phone) in phones.iter().enumerate() {
        let (_, b, _) = api.post_event(&sms_event(&format!("{prefix}-{n}"), phone.as_ref()), None).await;
        ids.push(b["intents"][0]["id"].as_str().unwrap().to_string());
    }
    (db, sms, api, ids)
}

/// Recording takes longer than the lease. The calls themselves finished in
/// time, so none of them may be rescued as `unknown` and sent again: the
/// worker claims nothing that could retake a job whose outcome is still on
/// its way to the database. (The old worker retook each one after its lease,
/// recorded it `unknown` and sent it again.)
#[tokio::test]
async fn a_slow_store_never_turns_a_finished_call_into_a_rescue_and_a_resend() {
    for backend in backends() {
        let phones = ["+15550000401", "+15550000402", "+15550000403"];
        let (db, sms, api, ids) = queued_sms(backend, "PO-SLOW", &phones).await;
        let slow = SlowRecording::new(db.store().await, Duration::from_millis(1500));
        let sms_provider = Arc::new(SmsHttp::new(sms.url.clone(), None, Duration::from_millis(300)).unwrap());
        let w = worker(slow.clone(), Channel::Sms, sms_provider, Duration::from_secs(1));
        let (stop, rx) = tokio::sync::watch::channel(false);
        let running = tokio::spawn(w.run(rx, Duration::from_secs(10)));
        for id in &ids {
            let it = api.wait_state(id, &["sent"]).await;
            let outcomes: Vec<_> = it["attempts"].as_array().unwrap().iter().map(|a| a["outcome"].clone()).collect();
            assert_eq!(outcomes, ["accepted"], "{backend:?}: no rescue, no second try: {it}");
        }
        for phone in phones {
            assert_eq!(sms.sent_to(phone).len(), 1, "{backend:?}: sent once");
        }
        let _ = stop.send(true);
        running.await.unwrap();
        api.running.stop().await;
    }
}

/// While this process's ingest stays busy the worker gives way after every
/// claim, and still delivers every job: a share, never a stop.
#[tokio::test]
async fn a_worker_giving_way_to_busy_ingest_still_delivers_everything_once() {
    for backend in backends() {
        // More jobs than slots, so that the worker claims several times.
        let phones: Vec<String> = (0..20).map(|n| format!("+1555000{:04}", 500 + n)).collect();
        let (db, sms, api, ids) = queued_sms(backend, "PO-BUSY", &phones).await;
        let load = Arc::new(IngestLoad::default());
        let _requests: Vec<_> = (0..herald::ingest::load::BUSY).map(|_| load.serving()).collect();
        assert!(load.busy());
        let sms_provider = Arc::new(SmsHttp::new(sms.url.clone(), None, Duration::from_secs(2)).unwrap());
        let mut w = worker(db.store().await, Channel::Sms, sms_provider, Duration::from_secs(30));
        w.ingest_load = load.clone();
        let (stop, rx) = tokio::sync::watch::channel(false);
        let running = tokio::spawn(w.run(rx, Duration::from_secs(10)));
        for id in &ids {
            api.wait_state(id, &["sent"]).await;
        }
        for phone in &phones {
            assert_eq!(sms.sent_to(phone).len(), 1, "{backend:?}: {phone} sent once");
        }
        assert!(load.busy(), "ingest was busy throughout");
        let _ = stop.send(true);
        tokio::time::timeout(Duration::from_secs(5), running).await.expect("stops while giving way").unwrap();
        api.running.stop().await;
    }
}

/// A provider that never returns and ignores its deadline.
struct Hangs;

#[async_trait::async_trait]
impl Provider for Hangs {
    fn name(&self) -> &str {
        "hangs"
    }

    /// A test provider.
    fn dedupes_retries(&self) -> bool {
        true
    }

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

/// A provider that accepts at once and counts its calls.
#[derive(Default)]
struct Counts(AtomicUsize);

#[async_trait::async_trait]
impl Provider for Counts {
    fn name(&self) -> &str {
        "counts"
    }

    /// A test provider.
    fn dedupes_retries(&self) -> bool {
        true
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs(1)
    }

    async fn send(&self, _: &herald::channel::Delivery) -> herald::channel::Outcome {
        self.0.fetch_add(1, Ordering::SeqCst);
        herald::channel::Outcome::Accepted { status: Some(200), message_id: None }
    }
}

/// Recording stops altogether. Finished outcomes wait in a bounded queue;
/// once it is full, attempts keep their slots and the worker stops claiming,
/// so at most a few slots' worth of calls pile up instead of the whole queue
/// being sent with nothing recorded. (The old worker called all 12.)
#[tokio::test]
async fn a_stalled_recorder_stops_the_claims_after_a_bounded_backlog() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let api = TestApp::new(&db).with_sms_url("http://127.0.0.1:9/sms").without_workers().spawn().await;
        let mut ids = Vec::new();
        for n in 0..12 {
            let (_, b, _) = api.post_event(&sms_event(&format!("PO-STALL-{n}"), "+15550000420"), None).await;
            ids.push(b["intents"][0]["id"].as_str().unwrap().to_string());
        }
        let stalled = SlowRecording::stalled(db.store().await);
        let calls = Arc::new(Counts::default());
        let mut w = worker(stalled.clone(), Channel::Sms, calls.clone(), Duration::from_secs(30));
        w.concurrency = 2;
        let (stop, rx) = tokio::sync::watch::channel(false);
        let running = tokio::spawn(w.run(rx, Duration::from_secs(5)));
        // Every call made is in the batch the recorder is stuck on, in its
        // queue (2), or holding one of the 2 slots while it waits for room in
        // the queue. Once the calls are exactly those, every slot waits on the
        // full queue and the queue on the stuck recorder: nothing can free a
        // slot, so nothing more is claimed or called until the store opens.
        let called = || calls.0.load(Ordering::SeqCst);
        let settled = common::eventually("the slots and the recorder's queue to fill", || async {
            let called = called();
            assert!(called <= 6, "{backend:?}: {called} calls while nothing could be recorded");
            let held = stalled.held();
            (held > 0 && called == held + 2 + 2).then_some(called)
        })
        .await;
        assert!((4..=6).contains(&settled), "{backend:?}: {settled} calls while nothing could be recorded");
        stalled.open();
        for id in &ids {
            api.wait_state(id, &["sent"]).await;
        }
        assert_eq!(called(), 12, "{backend:?}: each sent once");
        let _ = stop.send(true);
        running.await.unwrap();
        api.running.stop().await;
    }
}

/// A provider that refuses its first call (503) and hangs on every later
/// one, ignoring its deadline; it cannot recognise a retry, so a retry reads
/// the earlier attempts first. Counts its calls.
#[derive(Default)]
struct RefusesThenHangs(AtomicUsize);

#[async_trait::async_trait]
impl Provider for RefusesThenHangs {
    fn name(&self) -> &str {
        "refuses-then-hangs"
    }

    fn dedupes_retries(&self) -> bool {
        false
    }

    /// Three quarters of the tests' 4 s lease: the longest `config check` allows.
    fn timeout(&self) -> Duration {
        Duration::from_secs(3)
    }

    async fn send(&self, _: &herald::channel::Delivery) -> herald::channel::Outcome {
        if self.0.fetch_add(1, Ordering::SeqCst) == 0 {
            return herald::channel::Outcome::Retryable {
                class: herald::intent::Reason::Provider5xx,
                status: Some(503),
                error: "busy".into(),
                retry_after: None,
            };
        }
        std::future::pending().await
    }
}

/// The retry of `PO-LEASE-…`, whose read of its earlier attempts took
/// `history` before the call: the intent once it is dead (two attempts
/// allowed), its second attempt, and the provider's calls.
async fn retry_after_slow_history(backend: common::Backend, history: Duration) -> (serde_json::Value, usize) {
    let db = TestDb::new(backend).await;
    let api = TestApp::new(&db).with_sms_url("http://127.0.0.1:9/sms").without_workers().spawn().await;
    let (_, b, _) = api.post_event(&sms_event("PO-LEASE", "+15550000420"), None).await;
    let id = b["intents"][0]["id"].as_str().unwrap().to_string();
    let provider = Arc::new(RefusesThenHangs::default());
    let slow = SlowRecording::slow_history(db.store().await, history);
    let mut w = worker(slow, Channel::Sms, provider.clone(), Duration::from_secs(4));
    w.policy = RetryPolicy::new(2, Duration::from_millis(10), Duration::from_millis(10));
    let (stop, rx) = tokio::sync::watch::channel(false);
    let running = tokio::spawn(w.run(rx, Duration::from_secs(1)));
    // The lease alone is 4 s, well inside what `wait_state` waits.
    let it = api.wait_state(&id, &["dead"]).await;
    let _ = stop.send(true);
    running.await.unwrap();
    api.running.stop().await;
    (it["attempts"][1].clone(), provider.0.load(Ordering::SeqCst))
}

/// A call's timeout fits in its lease, but the lease starts at the claim: a
/// retry that spent two of its four seconds reading its earlier attempts
/// must have its call cut off while the lease still covers recording the
/// outcome. Left to its own three seconds, the call was still in flight when
/// the lease ended, and the next claim took the job as abandoned (`unknown`,
/// `lease_expired`) and would have sent it again beside the call.
#[tokio::test]
async fn a_call_after_a_slow_read_ends_within_its_lease() {
    for backend in backends() {
        let (second, calls) = retry_after_slow_history(backend, Duration::from_secs(2)).await;
        let class = (second["outcome"].as_str(), second["error_class"].as_str());
        assert_eq!(class, (Some("unknown"), Some("timeout")), "{backend:?}: abandoned by its worker: {second}");
        let at = |k: &str| second[k].as_str().unwrap().parse::<jiff::Timestamp>().unwrap();
        let took = at("finished_at").duration_since(at("started_at")).as_secs_f64();
        assert!((2.5..4.0).contains(&took), "{backend:?}: over a quarter of the 4 s lease before its end: {took}s");
        assert!(second["error"].as_str().unwrap().contains("all its lease had left"), "{second}");
        assert_eq!(calls, 2, "{backend:?}: the first try and the retry");
    }
}

/// When the read before the call took all the lease allows for calling, the
/// provider is not called at all: the attempt is a retryable one that says
/// so, and no call runs past the lease.
#[tokio::test]
async fn a_retry_whose_lease_was_spent_before_the_call_does_not_call() {
    let (second, calls) = retry_after_slow_history(common::Backend::Sqlite, Duration::from_millis(3500)).await;
    let class = (second["outcome"].as_str(), second["error_class"].as_str());
    assert_eq!(class, (Some("retryable"), Some("lease_expired")), "{second}");
    assert!(second["error"].as_str().unwrap().starts_with("not called"), "{second}");
    assert_eq!(calls, 1, "only the first try reached the provider");
}

/// The intent once it has ended (sent or dead), its attempts included.
async fn when_ended(api: &common::Spawned, id: &str) -> serde_json::Value {
    api.wait_state(id, &["sent", "dead"]).await
}

fn at(v: &serde_json::Value) -> jiff::Timestamp {
    v.as_str().unwrap_or_else(|| panic!("a time: {v}")).parse().unwrap()
}

/// A provider's `Retry-After` is a floor under the next delay, never cut by
/// `retry.max`. With `retry.max = 200ms` a `Retry-After: 1` was retried after
/// 0.2 s, before the provider asked, and refused again.
#[tokio::test]
async fn a_retry_after_above_retry_max_is_waited_for_in_full() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let mut throttled = Reply::status(429, serde_json::json!({"error": "slow down"}));
        throttled.retry_after = Some("1".into());
        sms.script("+15550000440", vec![throttled, Reply::ok("ok")]);
        let api = TestApp::new(&db).with_sms(&sms).with_retry(4, "20ms", "200ms").spawn().await;
        let (_, b, _) = api.post_event(&sms_event("PO-RA-FLOOR", "+15550000440"), None).await;
        let it = when_ended(&api, b["intents"][0]["id"].as_str().unwrap()).await;
        assert_eq!(it["state"], "sent", "{backend:?}: {it}");
        let first = &it["attempts"][0];
        assert_eq!(first["retry_after_seconds"], 1.0, "{backend:?}: honoured in full: {it}");
        assert_eq!(at(&first["next_try_at"]).duration_since(at(&first["finished_at"])).as_secs_f64(), 1.0);
        let waited = at(&it["attempts"][1]["started_at"]).duration_since(at(&first["finished_at"])).as_secs_f64();
        assert!(waited >= 1.0, "{backend:?}: retried {waited}s after a Retry-After of 1s");
        api.running.stop().await;
    }
}

/// A `Retry-After` that would stretch the chain past the dedupe window (1 h
/// in the tests' configuration) ends the chain: the retry is not scheduled,
/// and the intent is dead as after its last try, the attempt keeping the
/// provider's error class. Under the ceiling, it would have been waited for.
#[tokio::test]
async fn a_retry_after_past_the_dedupe_window_ends_the_chain() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let mut throttled = Reply::status(429, serde_json::json!({"error": "come back tomorrow"}));
        throttled.retry_after = Some("7200".into());
        sms.script("+15550000441", vec![throttled, Reply::ok("ok")]);
        let api = TestApp::new(&db).with_sms(&sms).with_max_retry_after("3h").spawn().await;
        let (_, b, _) = api.post_event(&sms_event("PO-RA-WINDOW", "+15550000441"), None).await;
        let it = when_ended(&api, b["intents"][0]["id"].as_str().unwrap()).await;
        assert_eq!((&it["state"], &it["reason"]), (&"dead".into(), &"retries_exhausted".into()), "{backend:?}: {it}");
        let attempts = it["attempts"].as_array().unwrap();
        assert_eq!(attempts.len(), 1, "{it}");
        assert_eq!(attempts[0]["error_class"], "throttled", "{it}");
        assert!(attempts[0]["next_try_at"].is_null(), "no retry scheduled: {it}");
        assert_eq!(sms.sent_to("+15550000441").len(), 1);
        api.running.stop().await;
    }
}

/// A try whose worker died is not sent again by a claim that finds its
/// expired lease after the chain's dedupe window (1 h in the tests'
/// configuration, counted from the chain's first try): after an `unknown`
/// attempt that send would be a possible duplicate nothing could dedupe any
/// more. The intent is dead, its lapsed attempts `unknown` / `lease_expired`,
/// and the provider is not called. A chain still inside its window is tried
/// again and sent.
#[tokio::test]
async fn a_try_whose_worker_died_is_not_sent_again_after_the_dedupe_window() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let clock = common::TestClock::at("2026-12-01T10:00:00Z");
        let api = TestApp::new(&db).with_sms(&sms).with_clock(clock.clone()).without_workers().spawn().await;
        let (_, a, _) = api.post_event(&sms_event("PO-LAPSED-LATE", "+15550000443"), None).await;
        clock.set("2026-12-01T10:30:00Z");
        let (_, b, _) = api.post_event(&sms_event("PO-LAPSED-INSIDE", "+15550000444"), None).await;
        api.running.stop().await;
        // Workers that die at once: A's chain starts at 10:00; at 10:30 its
        // try is taken back and tried again, and B's chain starts.
        let store = db.store().await;
        let dying = |now: &str| herald::store::Claim {
            now_us: now.parse::<jiff::Timestamp>().unwrap().as_microsecond(),
            limit: 10,
            lease_us: 0,
            max_attempts: 4,
            dedupe_window_us: Some(3_600_000_000),
            supersede_types: vec![],
            repeats_unrecognised: vec![],
        };
        assert_eq!(store.jobs_claim(dying("2026-12-01T10:00:00Z")).await.unwrap().len(), 1);
        assert_eq!(store.jobs_claim(dying("2026-12-01T10:30:00Z")).await.unwrap().len(), 2);
        // A worker comes up a second after A's window has run out.
        clock.set("2026-12-01T11:00:01Z");
        let app = TestApp::new(&db).with_sms(&sms).with_clock(clock.clone()).spawn().await;
        let id = |body: &serde_json::Value| body["intents"][0]["id"].as_str().unwrap().to_string();
        let late = app.wait_state(&id(&a), &["dead"]).await;
        assert_eq!(late["reason"], "retries_exhausted", "{backend:?}: {late}");
        let classes: Vec<_> = (late["attempts"].as_array().unwrap().iter())
            .map(|t| (t["outcome"].as_str(), t["error_class"].as_str()))
            .collect();
        assert_eq!(classes, [(Some("unknown"), Some("lease_expired")); 2], "{backend:?}: no third try: {late}");
        assert!(sms.sent_to("+15550000443").is_empty(), "{backend:?}: sent after its window");
        let inside = app.wait_state(&id(&b), &["sent"]).await;
        assert_eq!(inside["attempts"].as_array().unwrap().len(), 2, "{backend:?}: {inside}");
        assert_eq!(sms.sent_to("+15550000444").len(), 1);
        app.running.stop().await;
    }
}
