//! Test support: a fresh database per test on every configured backend, a fake
//! SMS provider that speaks the real wire protocol, and a builder that starts
//! the real app on port 0.
//!
//! SQLite always runs. Postgres runs when `HERALD_TEST_DATABASE_URL` is set,
//! and a set-but-unreachable URL fails the test instead of skipping it.

#![allow(dead_code)]

pub mod capture;
pub mod digest;
pub mod nats;
pub mod peer;
pub mod receipts;
pub mod send_log;
pub mod serve;
pub mod slow_store;
pub mod smtp;
pub mod sns;
pub mod twilio;
pub mod webhook;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use herald::app::{Running, start_with};
use herald::clock::{Clock, SystemClock};
use herald::config::Config;
use serde_json::{Value, json};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// Says that a leg of the running test did not run because the variable
/// naming its service is unset, so a run without the service reads as what
/// it is and not as a pass. Under CI (`CI` set), which configures every
/// service, a skipped leg is a failure instead.
pub fn skipped(leg: &str, var: &str) {
    // libtest names each test's thread after the test.
    let test = std::thread::current().name().unwrap_or("a test").to_string();
    if std::env::var("CI").is_ok_and(|v| !v.is_empty()) {
        panic!("{test}: {var} is unset under CI, so its {leg} leg would be skipped; CI must set it");
    }
    eprintln!("SKIPPED: the {leg} leg of {test} ({var} is unset)");
}

/// SQLite, and Postgres when `HERALD_TEST_DATABASE_URL` is set (saying so
/// when it is not).
pub fn backends() -> Vec<Backend> {
    let mut out = vec![Backend::Sqlite];
    if std::env::var("HERALD_TEST_DATABASE_URL").is_ok_and(|v| !v.is_empty()) {
        out.push(Backend::Postgres);
    } else {
        skipped("Postgres", "HERALD_TEST_DATABASE_URL");
    }
    out
}

/// A scratch Postgres database when the Postgres leg runs, else None: for a
/// test of what only Postgres has (its plans, its settings, its pool).
pub async fn postgres_db() -> Option<TestDb> {
    match backends().contains(&Backend::Postgres) {
        true => Some(TestDb::new(Backend::Postgres).await),
        false => None,
    }
}

pub struct TestDb {
    pub url: String,
    pub backend: Backend,
    _dir: Option<tempfile::TempDir>,
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

impl TestDb {
    pub async fn new(backend: Backend) -> TestDb {
        match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().expect("temp dir");
                let url = format!("sqlite://{}", dir.path().join("herald.db").display());
                TestDb { url, backend, _dir: Some(dir) }
            }
            Backend::Postgres => {
                let admin = std::env::var("HERALD_TEST_DATABASE_URL").expect("HERALD_TEST_DATABASE_URL");
                // A database per test, named from the process and a counter.
                let name = format!(
                    "herald_test_{}_{}_{}",
                    std::process::id(),
                    COUNTER.fetch_add(1, Ordering::SeqCst),
                    jiff::Timestamp::now().as_millisecond() % 1_000_000
                );
                use sqlx::Connection;
                let mut conn = sqlx::PgConnection::connect(&admin).await.unwrap_or_else(|e| {
                    panic!("HERALD_TEST_DATABASE_URL is set but Postgres is unreachable ({admin}): {e}")
                });
                sqlx::query(&format!("CREATE DATABASE {name}"))
                    .execute(&mut conn)
                    .await
                    .unwrap_or_else(|e| panic!("cannot create test database {name}: {e}"));
                let base = admin.rsplit_once('/').map_or(admin.as_str(), |(b, _)| b).to_string();
                TestDb { url: format!("{base}/{name}"), backend, _dir: None }
            }
        }
    }

    pub async fn store(&self) -> Arc<dyn herald::store::Store> {
        let store = herald::store::connect(&self.url).await.expect("connect");
        store.migrate().await.expect("migrate");
        store
    }

    /// A store on a database that publishes (as a process with
    /// `[publish.nats]` makes it at start-up).
    pub async fn publishing_store(&self) -> Arc<dyn herald::store::Store> {
        let store = self.store().await;
        herald::store::publications_enable(store.as_ref()).await.expect("publications on");
        store
    }
}

/// One scripted answer of the fake SMS provider.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub body: Value,
    pub retry_after: Option<String>,
    pub delay: Duration,
}

impl Reply {
    pub fn ok(id: &str) -> Reply {
        Reply { status: 200, body: json!({"id": id}), retry_after: None, delay: Duration::ZERO }
    }
    pub fn status(status: u16, body: Value) -> Reply {
        Reply { status, body, retry_after: None, delay: Duration::ZERO }
    }
    pub fn slow(mut self, delay: Duration) -> Reply {
        self.delay = delay;
        self
    }
}

#[derive(Debug, Clone)]
pub struct SmsRequest {
    pub idempotency_key: Option<String>,
    /// Every header name the request carried, lowercased.
    pub header_names: Vec<String>,
    pub body: Value,
}

#[derive(Default)]
struct FakeState {
    requests: Vec<SmsRequest>,
    scripts: HashMap<String, VecDeque<Reply>>,
    counter: u64,
}

/// An SMS provider on loopback: records every request; answers per `to` from a
/// script whose last entry repeats, or 200 with a fresh id.
#[derive(Clone)]
pub struct FakeSms {
    pub url: String,
    state: Arc<Mutex<FakeState>>,
}

impl FakeSms {
    pub async fn start() -> FakeSms {
        let state = Arc::new(Mutex::new(FakeState::default()));
        let app = axum::Router::new().route("/sms", axum::routing::post(sms_handler)).with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}/sms", listener.local_addr().expect("addr"));
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeSms { url, state }
    }

    pub fn script(&self, to: &str, replies: Vec<Reply>) {
        self.state.lock().unwrap().scripts.insert(to.to_string(), replies.into());
    }

    /// Every request it received, to any number.
    pub fn calls(&self) -> usize {
        self.state.lock().unwrap().requests.len()
    }

    /// `Some` once a request to `to` has arrived (for [`eventually`]).
    pub fn has(&self, to: &str) -> Option<()> {
        (!self.sent_to(to).is_empty()).then_some(())
    }

    pub fn sent_to(&self, to: &str) -> Vec<SmsRequest> {
        let s = self.state.lock().unwrap();
        s.requests.iter().filter(|r| r.body["to"] == to).cloned().collect()
    }
}

async fn sms_handler(
    State(state): State<Arc<Mutex<FakeState>>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    let reply = {
        let mut s = state.lock().unwrap();
        s.requests.push(SmsRequest {
            idempotency_key: headers.get("idempotency-key").and_then(|v| v.to_str().ok()).map(String::from),
            header_names: headers.keys().map(|k| k.as_str().to_string()).collect(),
            body: body.clone(),
        });
        s.counter += 1;
        let n = s.counter;
        let to = body["to"].as_str().unwrap_or_default().to_string();
        match s.scripts.get_mut(&to) {
            Some(q) if q.len() > 1 => q.pop_front().unwrap(),
            Some(q) if q.len() == 1 => q[0].clone(),
            _ => Reply::ok(&format!("fake-{n}")),
        }
    };
    if !reply.delay.is_zero() {
        // A slow provider on purpose (`Reply::slow`): the delay is what the test is about.
        tokio::time::sleep(reply.delay).await;
    }
    let mut resp = (StatusCode::from_u16(reply.status).unwrap(), Json(reply.body)).into_response();
    if let Some(ra) = reply.retry_after {
        resp.headers_mut().insert("retry-after", ra.parse().unwrap());
    }
    resp
}

/// Builds a config and starts Herald on port 0.
pub struct TestApp {
    db_url: String,
    sms_url: Option<String>,
    retry: (u32, &'static str, &'static str),
    max_retry_after: Option<&'static str>,
    lease: &'static str,
    sms_timeout: &'static str,
    workers: bool,
    templates_dir: Option<std::path::PathBuf>,
    clock: Option<Arc<dyn Clock>>,
    redis: Option<String>,
    public_url: Option<String>,
    mode: Option<&'static str>,
    extra: String,
}

/// A clock the test moves by hand.
pub struct TestClock(Mutex<jiff::Timestamp>);

impl TestClock {
    pub fn at(rfc3339: &str) -> Arc<TestClock> {
        Arc::new(TestClock(Mutex::new(rfc3339.parse().expect("a timestamp"))))
    }

    pub fn set(&self, rfc3339: &str) {
        *self.0.lock().unwrap() = rfc3339.parse().expect("a timestamp");
    }
}

impl Clock for TestClock {
    fn now(&self) -> jiff::Timestamp {
        *self.0.lock().unwrap()
    }
}

pub struct Spawned {
    pub running: Running,
    pub base: String,
    pub client: reqwest::Client,
}

impl TestApp {
    pub fn new(db: &TestDb) -> TestApp {
        TestApp {
            db_url: db.url.clone(),
            sms_url: None,
            retry: (4, "20ms", "100ms"),
            max_retry_after: None,
            lease: "3s",
            sms_timeout: "1s",
            workers: true,
            templates_dir: None,
            clock: None,
            redis: None,
            public_url: None,
            mode: None,
            extra: String::new(),
        }
    }

    pub fn with_sms(mut self, sms: &FakeSms) -> TestApp {
        self.sms_url = Some(sms.url.clone());
        self
    }

    /// An SMS provider at any URL (a misbehaving peer, a closed port).
    pub fn with_sms_url(mut self, url: &str) -> TestApp {
        self.sms_url = Some(url.to_string());
        self
    }

    pub fn with_retry(mut self, attempts: u32, base: &'static str, max: &'static str) -> TestApp {
        self.retry = (attempts, base, max);
        self
    }

    /// `retry.max_retry_after`: the ceiling on a provider's `Retry-After`.
    pub fn with_max_retry_after(mut self, ceiling: &'static str) -> TestApp {
        self.max_retry_after = Some(ceiling);
        self
    }

    pub fn with_lease(mut self, lease: &'static str, sms_timeout: &'static str) -> TestApp {
        self.lease = lease;
        self.sms_timeout = sms_timeout;
        self
    }

    /// An API-only process: it ingests but claims nothing.
    pub fn without_workers(mut self) -> TestApp {
        self.workers = false;
        self
    }

    pub fn with_redis(mut self, url: &str) -> TestApp {
        self.redis = Some(url.to_string());
        self
    }

    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> TestApp {
        self.clock = Some(clock);
        self
    }

    pub fn with_templates_dir(mut self, dir: &std::path::Path) -> TestApp {
        self.templates_dir = Some(dir.to_path_buf());
        self
    }

    /// `public_url`: where providers post receipts.
    pub fn with_public_url(mut self, url: &str) -> TestApp {
        self.public_url = Some(url.to_string());
        self
    }

    /// The deployment's `mode` (`live` or `shadow`).
    pub fn with_mode(mut self, mode: &'static str) -> TestApp {
        self.mode = Some(mode);
        self
    }

    /// Extra TOML appended to the config.
    pub fn with_toml(mut self, toml: &str) -> TestApp {
        self.extra.push_str(toml);
        self
    }

    pub fn config(&self) -> Config {
        let (attempts, base, max) = self.retry;
        let mut toml = format!(
            r#"
listen = "127.0.0.1:0"
database_url = "{db}"
dedupe_window = "1h"
shutdown_grace = "5s"
{templates}
{redis}
{public_url}
{mode}
[retry]
attempts = {attempts}
base = "{base}"
max = "{max}"
{max_retry_after}
[worker]
concurrency = 8
poll_interval = "20ms"
lease = "{lease}"
disabled = {disabled}
[[routes]]
event = "purchase_order.approved"
template = "po_approved"
channels = ["sms", "in_app"]
"#,
            db = self.db_url,
            lease = self.lease,
            max_retry_after = self.max_retry_after.map(|c| format!("max_retry_after = {c:?}")).unwrap_or_default(),
            disabled = !self.workers,
            redis = self.redis.as_ref().map(|r| format!("redis_url = {r:?}")).unwrap_or_default(),
            public_url = self.public_url.as_ref().map(|u| format!("public_url = {u:?}")).unwrap_or_default(),
            mode = self.mode.map(|m| format!("mode = {m:?}")).unwrap_or_default(),
            templates = self
                .templates_dir
                .as_ref()
                .map(|d| format!("templates_dir = {:?}", d.display().to_string()))
                .unwrap_or_default(),
        );
        if let Some(url) = &self.sms_url {
            toml.push_str(&format!("[channels.sms]\nurl = \"{url}\"\ntimeout = \"{}\"\n", self.sms_timeout));
        }
        toml.push_str(&self.extra);
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("herald.toml");
        std::fs::write(&path, toml).expect("write config");
        Config::load_with_env(Some(&path), &[]).expect("test config is valid")
    }

    pub async fn spawn(self) -> Spawned {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let clock = self.clock.clone().unwrap_or_else(|| Arc::new(SystemClock));
        let running = start_with(self.config(), clock, Some(listener)).await.expect("herald starts");
        let base = format!("http://{}", running.addr);
        Spawned { running, base, client: reqwest::Client::new() }
    }
}

impl Spawned {
    pub async fn post_event(&self, event: &Value, idempotency_key: Option<&str>) -> (u16, Value, HeaderMap) {
        let mut req = self.client.post(format!("{}/v1/events", self.base)).json(event);
        if let Some(k) = idempotency_key {
            req = req.header("idempotency-key", k);
        }
        let resp = req.send().await.expect("POST /v1/events");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        (status, resp.json().await.unwrap_or(Value::Null), headers)
    }

    pub async fn put(&self, path: &str, body: &Value) -> (u16, Value) {
        let resp = self.client.put(format!("{}{path}", self.base)).json(body).send().await.expect("PUT");
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let resp = self.client.get(format!("{}{path}", self.base)).send().await.expect("GET");
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    /// Polls an intent until its state is one of `states`, for up to [`PATIENCE`].
    pub async fn wait_state(&self, id: &str, states: &[&str]) -> Value {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let (status, body) = self.get(&format!("/v1/intents/{id}")).await;
            if status == 200 && states.contains(&body["state"].as_str().unwrap_or_default()) {
                return body;
            }
            if Instant::now() > deadline {
                panic!("intent {id} never reached {states:?} in {PATIENCE:?}; last: {body}");
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// The sum of a metric's series on `/metrics` whose labels include all of
    /// `labels` (`result="failed"`). The recorder is the process's, shared by
    /// every app a test starts: compare before and after.
    pub async fn metric(&self, name: &str, labels: &[&str]) -> f64 {
        let resp = self.client.get(format!("{}/metrics", self.base)).send().await.expect("GET /metrics");
        let text = resp.text().await.expect("the metrics");
        (text.lines())
            .filter(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with(['{', ' '])))
            .filter(|l| labels.iter().all(|label| l.contains(label)))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }
}

/// How long a test waits for a state before it fails: wall-clock time, not a
/// number of polls, and generous, since a loaded machine is slow and a test
/// that passes never waits it out.
pub const PATIENCE: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(20);

/// Polls `check` until it gives a value, failing with `what` after [`PATIENCE`].
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if Instant::now() > deadline {
            panic!("waited {PATIENCE:?} for {what}");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The example event of DESIGN §4, for one recipient with a phone.
pub fn sms_event(entity_id: &str, phone: &str) -> Value {
    json!({
        "type": "purchase_order.approved",
        "entity": {"type": "purchase_order", "id": entity_id, "version": 1},
        "occurred_at": "2026-11-29T10:15:00+05:45",
        "data": {"po": {"number": entity_id, "total": "1,20,000"}, "approver": {"name": "Asha"}},
        "recipients": [{"id": format!("u-{entity_id}"), "phone": phone}],
        "channels": ["sms"]
    })
}

/// The Redis of `HERALD_TEST_REDIS_URL`, flushed of nothing: None when unset;
/// a panic when set but unreachable, so a broken CI leg fails instead of skipping.
pub async fn test_redis() -> Option<String> {
    let Some(url) = std::env::var("HERALD_TEST_REDIS_URL").ok().filter(|v| !v.is_empty()) else {
        skipped("Redis", "HERALD_TEST_REDIS_URL");
        return None;
    };
    let client = redis::Client::open(url.as_str()).unwrap_or_else(|e| panic!("HERALD_TEST_REDIS_URL {url}: {e}"));
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("HERALD_TEST_REDIS_URL is set but Redis is unreachable ({url}): {e}"));
    let pong: String = redis::cmd("PING").query_async(&mut conn).await.expect("PING");
    assert_eq!(pong, "PONG");
    Some(url)
}

/// Runs one SQL statement on a test database, outside Herald.
pub async fn execute(db: &TestDb, sql: &str) {
    use sqlx::Connection;
    match db.backend {
        Backend::Sqlite => {
            let mut conn = sqlx::SqliteConnection::connect(&db.url).await.expect("connect");
            sqlx::query(sql).execute(&mut conn).await.expect(sql);
        }
        Backend::Postgres => {
            let mut conn = sqlx::PgConnection::connect(&db.url).await.expect("connect");
            sqlx::query(sql).execute(&mut conn).await.expect(sql);
        }
    }
}

/// The one number a query answers, on a test database, outside Herald.
pub async fn count(db: &TestDb, sql: &str) -> i64 {
    use sqlx::Connection;
    match db.backend {
        Backend::Sqlite => {
            let mut conn = sqlx::SqliteConnection::connect(&db.url).await.expect("connect");
            sqlx::query_scalar(sql).fetch_one(&mut conn).await.expect(sql)
        }
        Backend::Postgres => {
            let mut conn = sqlx::PgConnection::connect(&db.url).await.expect("connect");
            sqlx::query_scalar(sql).fetch_one(&mut conn).await.expect(sql)
        }
    }
}

/// The text column a query answers, row by row, on a test database, outside Herald.
pub async fn texts(db: &TestDb, sql: &str) -> Vec<String> {
    use sqlx::Connection;
    match db.backend {
        Backend::Sqlite => {
            let mut conn = sqlx::SqliteConnection::connect(&db.url).await.expect("connect");
            sqlx::query_scalar(sql).fetch_all(&mut conn).await.expect(sql)
        }
        Backend::Postgres => {
            let mut conn = sqlx::PgConnection::connect(&db.url).await.expect("connect");
            sqlx::query_scalar(sql).fetch_all(&mut conn).await.expect(sql)
        }
    }
}
