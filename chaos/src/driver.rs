//! The driver: a stream of events derived from the seed — new events, exact
//! duplicates (some concurrent), replays under an `Idempotency-Key`, versions
//! of one entity posted out of order, the same event with a new recipient, a
//! changed body for an accepted event, `occurred_at` far in the past and
//! future — posted to whichever Herald process answers, retried like a real
//! at-least-once client until each post gets a definitive answer. From the
//! answers it knows which intents must exist.

use crate::checker::Expected;
use crate::rng::Rng;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const TENANT: &str = "default";
/// Sent one by one, older versions superseded (`skip_superseded`).
pub const EVENT_TYPE: &str = "chaos.happened";
/// Batched into digests by entity (email), in-app one by one.
pub const BATCHED_TYPE: &str = "chaos.batched";
pub const ENTITY_TYPE: &str = "order";

#[derive(Debug, Clone)]
pub struct Recipient {
    pub id: String,
    pub phone: Option<String>,
    pub email: Option<String>,
    pub webhook_url: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Event {
    pub n: usize,
    pub event_type: &'static str,
    pub entity_id: String,
    pub version: u64,
    /// `occurred_at` in Herald's canonical UTC form (part of every key).
    pub occurred_at: String,
    /// As posted: the same instant, sometimes written with another offset.
    pub occurred_at_written: String,
}

#[derive(Debug, Clone)]
pub struct Post {
    pub event: usize,
    pub recipients: Vec<usize>,
    pub channels: Option<Vec<&'static str>>,
    pub idempotency_key: Option<String>,
    /// Its data differs from the event's first post: `409 event_conflict`
    /// unless it is the one accepted.
    pub changed: bool,
    /// Posted this many times at once.
    pub copies: usize,
    pub kind: &'static str,
}

pub struct Plan {
    pub recipients: Vec<Recipient>,
    pub events: Vec<Event>,
    pub posts: Vec<Post>,
    /// Each event type's route: its channels.
    pub routes: Vec<(&'static str, Vec<&'static str>)>,
}

/// The instant's canonical form: UTC, nine fractional digits.
fn canonical(ts: jiff::Timestamp) -> String {
    written(ts, jiff::tz::Offset::UTC)
}

/// The instant in a fixed offset, as a sender might write it.
fn written(ts: jiff::Timestamp, offset: jiff::tz::Offset) -> String {
    // Civil time: its sub-second part is never negative, before 1970 too.
    let local = ts.to_zoned(jiff::tz::TimeZone::fixed(offset)).datetime();
    let suffix = if offset == jiff::tz::Offset::UTC { "Z".to_string() } else { offset.to_string() };
    format!("{}.{:09}{suffix}", local.strftime("%Y-%m-%dT%H:%M:%S"), local.subsec_nanosecond())
}

fn with_offset(ts: jiff::Timestamp) -> String {
    written(ts, jiff::tz::Offset::from_seconds(5 * 3600 + 45 * 60).expect("a valid offset"))
}

pub fn intent_key(event_type: &str, entity_id: &str, occurred_at: &str, channel: &str, recipient: &str) -> String {
    let text = format!("{TENANT}|{event_type}|{ENTITY_TYPE}|{entity_id}|{occurred_at}|{channel}|{recipient}");
    hex::encode(Sha256::digest(text.as_bytes()))[..32].to_string()
}

impl Plan {
    /// `endpoints(channel, recipient)`: the URL a recipient's webhook points at.
    /// The first route is the main one; a second, if given, gets a fifth of the entities.
    pub fn generate(
        rng: &mut Rng,
        events: usize,
        routes: Vec<(&'static str, Vec<&'static str>)>,
        webhook_url: &dyn Fn(&str) -> String,
    ) -> Plan {
        let recipients: Vec<Recipient> = (0..40)
            .map(|i| {
                let id = format!("r-{i}");
                Recipient {
                    phone: (i % 5 != 0).then(|| format!("+1555010{i:04}")),
                    email: (i % 7 != 0).then(|| format!("{id}@chaos.test")),
                    webhook_url: (i % 4 != 0).then(|| webhook_url(&id)),
                    id,
                }
            })
            .collect();
        let mut list: Vec<(u64, Event)> = Vec::new();
        let mut posts: Vec<(u64, Post)> = Vec::new();
        let mut versions: Vec<u64> = Vec::new();
        let mut route = 0;
        for n in 0..events {
            if n % 3 == 0 {
                route = if routes.len() > 1 && rng.chance(20) { 1 } else { 0 };
                // Three versions of each entity, posted in a shuffled order.
                versions = vec![1, 2, 3];
                for i in (1..3).rev() {
                    let j = rng.below(i as u64 + 1) as usize;
                    versions.swap(i, j);
                }
            }
            let secs = match rng.below(100) {
                0..=2 => -2_177_000_000 + n as i64,  // 1901
                3..=5 => 221_900_000_000 + n as i64, // 9001
                _ => 1_795_000_000 + 7 * n as i64,   // late 2026
            };
            let ts = jiff::Timestamp::new(secs, rng.below(1_000_000_000) as i32).expect("in range");
            let written = if rng.chance(50) { with_offset(ts) } else { canonical(ts) };
            list.push((
                n as u64,
                Event {
                    n,
                    event_type: routes[route].0,
                    entity_id: format!("{}-{}", if route == 0 { "o" } else { "b" }, n / 3),
                    version: versions[n % 3],
                    occurred_at: canonical(ts),
                    occurred_at_written: written,
                },
            ));
            let mut audience: Vec<usize> = Vec::new();
            for _ in 0..1 + rng.below(3) {
                let r = rng.below(recipients.len() as u64) as usize;
                if !audience.contains(&r) {
                    audience.push(r);
                }
            }
            let route_channels = &routes[route].1;
            let channels = rng.chance(30).then(|| {
                let mut c: Vec<&'static str> = route_channels.iter().copied().filter(|_| rng.chance(60)).collect();
                if c.is_empty() {
                    c.push(*rng.pick(route_channels));
                }
                c
            });
            let key = rng.chance(30).then(|| format!("idem-{n}"));
            let at = 100 * n as u64;
            let first = Post {
                event: n,
                recipients: audience.clone(),
                channels: channels.clone(),
                idempotency_key: key,
                changed: false,
                copies: 1,
                kind: "new",
            };
            if rng.chance(25) {
                let copies = if rng.chance(40) { 3 } else { 1 };
                let kind = if first.idempotency_key.is_some() { "replay_by_key" } else { "duplicate" };
                posts.push((at + 1 + rng.below(1500), Post { copies, kind, ..first.clone() }));
            }
            if rng.chance(10) {
                let mut wider = audience.clone();
                let extra = (audience[0] + 1 + rng.below(5) as usize) % recipients.len();
                if !wider.contains(&extra) {
                    wider.push(extra);
                }
                let post = Post { recipients: wider, idempotency_key: None, kind: "new_recipient", ..first.clone() };
                posts.push((at + 1 + rng.below(1500), post));
            }
            if rng.chance(5) {
                let post = Post { changed: true, idempotency_key: None, kind: "changed_body", ..first.clone() };
                posts.push((at + 1 + rng.below(1500), post));
            }
            posts.push((at, first));
        }
        posts.sort_by_key(|(at, _)| *at);
        Plan {
            recipients,
            events: list.into_iter().map(|(_, e)| e).collect(),
            posts: posts.into_iter().map(|(_, p)| p).collect(),
            routes,
        }
    }

    pub fn body(&self, post: &Post) -> Value {
        let e = &self.events[post.event];
        let recipients: Vec<Value> = post
            .recipients
            .iter()
            .map(|&r| {
                let r = &self.recipients[r];
                let mut v = json!({"id": r.id});
                for (field, value) in [("phone", &r.phone), ("email", &r.email), ("webhook_url", &r.webhook_url)] {
                    if let Some(value) = value {
                        v[field] = json!(value);
                    }
                }
                v
            })
            .collect();
        let mut body = json!({
            "type": e.event_type,
            "entity": {"type": ENTITY_TYPE, "id": e.entity_id, "version": e.version},
            "occurred_at": e.occurred_at_written,
            "data": {"ref": format!("evt~{}~", e.n), "note": if post.changed { "changed" } else { "first" }},
            "recipients": recipients,
        });
        if let Some(c) = &post.channels {
            body["channels"] = json!(c);
        }
        body
    }

    /// The intents a post asks for: (key, channel, recipient id).
    pub fn audience(&self, post: &Post) -> Vec<Expected> {
        let e = &self.events[post.event];
        let route = self.routes.iter().find(|(t, _)| *t == e.event_type).map(|(_, c)| c.clone()).unwrap_or_default();
        let channels = post.channels.clone().unwrap_or(route);
        let mut out = Vec::new();
        for &r in &post.recipients {
            for c in &channels {
                let rid = &self.recipients[r].id;
                out.push(Expected {
                    key: intent_key(e.event_type, &e.entity_id, &e.occurred_at, c, rid),
                    event_key: format!("{TENANT}|{}|{ENTITY_TYPE}|{}|{}", e.event_type, e.entity_id, e.occurred_at),
                    channel: c.to_string(),
                    recipient_id: rid.clone(),
                });
            }
        }
        out
    }
}

/// What the answers established.
/// A 5xx must carry only a code and a reference to the log: no SQL, no
/// driver or server names, no addresses.
fn leaks_internals(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    let error = serde_json::from_str::<Value>(text).ok().filter(|v| v["error"]["code"].is_string());
    error.is_none()
        || ["sqlx", "select ", "insert ", "update ", "postgres", "sqlite", "redis", "127.0.0.1", "pool", "panicked"]
            .iter()
            .any(|w| lower.contains(w))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_5xx_is_judged_by_what_it_tells() {
        assert!(!leaks_internals(r#"{"error":{"code":"internal","message":"see the log, reference 4f2a"}}"#));
        assert!(leaks_internals(r#"{"error":{"code":"internal","message":"error returned from database: sqlx"}}"#));
        assert!(leaks_internals("Internal Server Error"));
    }

    #[test]
    fn instants_are_written_canonically_before_1970_and_with_offsets() {
        let ts = jiff::Timestamp::new(-1, 250_000_000).unwrap();
        assert_eq!(canonical(ts), "1969-12-31T23:59:59.250000000Z");
        assert_eq!(with_offset(ts), "1970-01-01T05:44:59.250000000+05:45");
    }
}

#[derive(Default)]
pub struct Ledger {
    pub expected: HashMap<String, Expected>,
    /// Per event: which contents were accepted (`changed` flag) and which refused with 409.
    accepted: HashMap<usize, BTreeSet<bool>>,
    refused: HashMap<usize, BTreeSet<bool>>,
    pub answers: BTreeMap<String, u64>,
    pub client_retries: u64,
    pub unanswered: Vec<usize>,
    pub violations: Vec<String>,
}

impl Ledger {
    /// Checks made once every post has its answer.
    pub fn finish(&mut self) {
        let mut events: Vec<&usize> = self.accepted.keys().chain(self.refused.keys()).collect();
        events.sort();
        events.dedup();
        for e in events {
            let accepted = self.accepted.get(e).cloned().unwrap_or_default();
            let refused = self.refused.get(e).cloned().unwrap_or_default();
            if accepted.len() > 1 {
                self.violations.push(format!("event {e}: two different bodies were both accepted"));
            }
            if accepted.is_empty() {
                self.violations.push(format!("event {e}: every post was refused with 409"));
            }
            if accepted.intersection(&refused).next().is_some() {
                self.violations.push(format!("event {e}: one body was accepted and also refused with 409"));
            }
        }
    }
}

pub struct Driver {
    pub plan: Arc<Plan>,
    bases: Vec<String>,
    client: reqwest::Client,
    pub ledger: Arc<Mutex<Ledger>>,
    /// Posts dispatched so far: the clock the fault schedule runs on.
    pub progress: Arc<AtomicUsize>,
    next: AtomicUsize,
}

enum Answer {
    Definitive,
    Retry,
}

impl Driver {
    pub fn new(plan: Plan, bases: Vec<String>) -> Driver {
        Driver {
            plan: Arc::new(plan),
            bases,
            client: reqwest::Client::builder().timeout(Duration::from_secs(5)).build().expect("client"),
            ledger: Arc::default(),
            progress: Arc::default(),
            next: AtomicUsize::new(0),
        }
    }

    /// Posts the whole plan, `concurrency` posts at a time, one started every `pace`.
    pub async fn run(self: &Arc<Self>, concurrency: usize, pace: Duration) {
        let permits = Arc::new(tokio::sync::Semaphore::new(concurrency));
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..self.plan.posts.len() {
            for _ in 0..self.plan.posts[i].copies {
                let permit = permits.clone().acquire_owned().await.expect("semaphore");
                let me = self.clone();
                tasks.spawn(async move {
                    me.post(i, Instant::now() + Duration::from_secs(20)).await;
                    drop(permit);
                });
            }
            self.progress.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(pace).await;
        }
        while tasks.join_next().await.is_some() {}
    }

    /// Posts again what never got a definitive answer (faults healed by now).
    pub async fn redrive(self: &Arc<Self>) {
        let pending = std::mem::take(&mut self.ledger.lock().unwrap().unanswered);
        for i in pending {
            self.post(i, Instant::now() + Duration::from_secs(60)).await;
        }
        self.ledger.lock().unwrap().finish();
    }

    async fn post(&self, i: usize, deadline: Instant) {
        let post = &self.plan.posts[i];
        let body = self.plan.body(post);
        let mut tries = 0u64;
        loop {
            let base = &self.bases[self.next.fetch_add(1, Ordering::Relaxed) % self.bases.len()];
            let mut request = self.client.post(format!("{base}/v1/events")).json(&body);
            if let Some(k) = &post.idempotency_key {
                request = request.header("Idempotency-Key", k);
            }
            let answer = match request.send().await {
                Ok(r) => {
                    let status = r.status().as_u16();
                    let text = r.text().await.unwrap_or_default();
                    self.judge(post, status, &text)
                }
                Err(_) => {
                    *self.ledger.lock().unwrap().answers.entry("no answer".into()).or_default() += 1;
                    Answer::Retry
                }
            };
            if let Answer::Definitive = answer {
                return;
            }
            tries += 1;
            if Instant::now() > deadline {
                self.ledger.lock().unwrap().unanswered.push(i);
                return;
            }
            self.ledger.lock().unwrap().client_retries += 1;
            tokio::time::sleep(Duration::from_millis(50 * tries.min(10))).await;
        }
    }

    fn judge(&self, post: &Post, status: u16, text: &str) -> Answer {
        let mut ledger = self.ledger.lock().unwrap();
        *ledger.answers.entry(status.to_string()).or_default() += 1;
        match status {
            200 | 202 => {
                let audience = self.plan.audience(post);
                let answered: Value = serde_json::from_str(text).unwrap_or_default();
                let keys: BTreeSet<&str> =
                    answered["intents"].as_array().into_iter().flatten().filter_map(|i| i["key"].as_str()).collect();
                let wanted: BTreeSet<&str> = audience.iter().map(|x| x.key.as_str()).collect();
                if keys != wanted || answered["event_key"].as_str() != Some(audience[0].event_key.as_str()) {
                    ledger.violations.push(format!(
                        "post of event {} ({}) answered {status} with other intents than it asked for: {text}",
                        post.event, post.kind
                    ));
                }
                for x in audience {
                    ledger.expected.insert(x.key.clone(), x);
                }
                ledger.accepted.entry(post.event).or_default().insert(post.changed);
                Answer::Definitive
            }
            409 => {
                ledger.refused.entry(post.event).or_default().insert(post.changed);
                Answer::Definitive
            }
            500..=599 => {
                if leaks_internals(text) {
                    ledger.violations.push(format!("a {status} answer leaks internals: {text}"));
                }
                Answer::Retry
            }
            _ => {
                ledger
                    .violations
                    .push(format!("post of event {} ({}) answered {status}: {text}", post.event, post.kind));
                Answer::Definitive
            }
        }
    }
}
