use super::*;
use crate::intent::Reason;
use crate::render::Content;
use std::sync::atomic::{AtomicU32, Ordering};

struct Fixed(AtomicU32);

impl Clock for Fixed {
    fn now(&self) -> jiff::Timestamp {
        jiff::Timestamp::from_second(i64::from(self.0.load(Ordering::SeqCst))).unwrap()
    }
}

struct Quiet;

#[async_trait]
impl Provider for Quiet {
    fn name(&self) -> &str {
        "quiet"
    }
    fn dedupes_retries(&self) -> bool {
        true
    }
    fn timeout(&self) -> Duration {
        Duration::from_secs(1)
    }
    async fn send(&self, _: &Delivery) -> Outcome {
        Outcome::Accepted { status: None, message_id: None }
    }
}

fn chain(clock: Arc<Fixed>, failover_on_unknown: &[&str]) -> Chain {
    let member = |name: &str| {
        let named = Arc::new(Named { name: name.into(), inner: Arc::new(Quiet) });
        (named, Arc::new(Breaker::new(name, 2, Duration::from_secs(30), clock.clone())))
    };
    Chain::new(vec![member("primary"), member("backup")], failover_on_unknown.iter().map(|s| s.to_string()).collect())
}

fn delivery(attempt: i64) -> Delivery {
    Delivery {
        key: "k".into(),
        tenant: "default".into(),
        recipient_id: "u".into(),
        destination: None,
        entity_type: "po".into(),
        entity_id: "1".into(),
        entity_version: None,
        occurred_at: String::new(),
        event_type: "alert.fired".into(),
        payload_digest: None,
        content: Content { subject: None, body: "b".into(), html: None, encoding: None, segments: None },
        attempt,
        deadline: tokio::time::Instant::now(),
    }
}

fn earlier(provider: &str, outcome: &str) -> AttemptRow {
    AttemptRow {
        intent_key: "k".into(),
        n: 1,
        started_at: 0,
        finished_at: Some(1),
        outcome: Some(OutcomeClass::parse(outcome).expect("an outcome class")),
        error_class: None,
        provider_status: None,
        provider_message_id: None,
        error: None,
        retry_after: None,
        retry_at: None,
        provider: Some(provider.into()),
        possible_duplicate: false,
    }
}

fn picked(c: &Chain, attempt: i64, history: &[AttemptRow]) -> String {
    c.pick(&delivery(attempt), history).unwrap().name().to_string()
}

fn refused() -> Outcome {
    Outcome::Retryable { class: Reason::Unreachable, status: None, error: String::new(), retry_after: None }
}

#[test]
fn a_definite_refusal_fails_over_and_an_unknown_stays() {
    let c = chain(Arc::new(Fixed(AtomicU32::new(0))), &[]);
    assert_eq!(picked(&c, 1, &[]), "primary");
    assert_eq!(picked(&c, 2, &[earlier("primary", "retryable")]), "backup");
    assert_eq!(picked(&c, 2, &[earlier("backup", "retryable")]), "primary", "wraps around");
    assert_eq!(picked(&c, 2, &[earlier("primary", "unknown")]), "primary", "a retry it can recognise");
    let alerts = chain(Arc::new(Fixed(AtomicU32::new(0))), &["alert.fired"]);
    assert_eq!(picked(&alerts, 2, &[earlier("primary", "unknown")]), "backup", "failover_on_unknown");
}

#[test]
fn the_circuit_opens_after_failures_in_a_row_and_closes_after_a_success() {
    let clock = Arc::new(Fixed(AtomicU32::new(1_000)));
    let c = chain(clock.clone(), &[]);
    c.observe("primary", &refused());
    assert_eq!(picked(&c, 1, &[]), "primary", "one failure is not a pattern");
    c.observe("primary", &refused());
    assert_eq!(picked(&c, 1, &[]), "backup", "open: skipped");
    clock.0.store(1_031, Ordering::SeqCst);
    assert_eq!(c.members[0].1.state(), BreakerState::HalfOpen);
    assert_eq!(picked(&c, 1, &[]), "primary", "tried again after the cool-down");
    c.observe("primary", &refused());
    assert_eq!(c.members[0].1.state(), BreakerState::Open, "a failed trial opens it again");
    clock.0.store(1_062, Ordering::SeqCst);
    c.observe("primary", &Outcome::Accepted { status: None, message_id: None });
    assert_eq!(c.members[0].1.state(), BreakerState::Closed);
}

#[test]
fn with_every_circuit_open_a_message_still_goes_somewhere() {
    let c = chain(Arc::new(Fixed(AtomicU32::new(0))), &[]);
    for member in ["primary", "backup"] {
        c.observe(member, &refused());
        c.observe(member, &refused());
    }
    assert_eq!(picked(&c, 1, &[]), "primary");
    assert_eq!(picked(&c, 2, &[earlier("primary", "retryable")]), "backup");
}
