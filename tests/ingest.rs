//! The ingest pipeline on its own (no HTTP): what a request costs depends on
//! whether it is new. A replay is answered from the request record before any
//! planning or destination check; only a new request resolves webhook hosts,
//! and only after its route is known.

mod common;

use common::{Backend, TestApp, TestDb, backends, sms_event};
use herald::channel::destination::{DestinationPolicy, Lookup};
use herald::clock::SystemClock;
use herald::event::identity::Tenant;
use herald::ingest::{Answer, IngestError, Ingestor, Request};
use serde_json::{Value, json};
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// A DNS that answers a public address until the test moves the host inside
/// (to loopback), counting how often it was asked.
#[derive(Default)]
struct MovingDns {
    asked: AtomicUsize,
    moved: AtomicBool,
}

impl MovingDns {
    fn asked(&self) -> usize {
        self.asked.load(Ordering::SeqCst)
    }
}

#[async_trait::async_trait]
impl Lookup for MovingDns {
    async fn lookup(&self, _name: &str) -> std::io::Result<Vec<IpAddr>> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        let inside = self.moved.load(Ordering::SeqCst);
        Ok(vec![if inside { "127.0.0.1" } else { "93.184.216.34" }.parse().unwrap()])
    }
}

async fn ingestor(db: &TestDb, dns: Arc<MovingDns>) -> Ingestor {
    let mut config = TestApp::new(db)
        .without_workers()
        .with_toml("[channels.webhook]\nsecret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\ntimeout = \"1s\"\n")
        .config();
    let store = db.store().await;
    herald::suppression::resolve(&mut config, store.as_ref()).await.unwrap();
    Ingestor::new(
        store,
        Arc::new(config.clone()),
        Arc::new(herald::app::load_templates(&config).unwrap()),
        herald::api::routes_by_event(&config),
        Arc::new(SystemClock),
        None,
        Arc::new(DestinationPolicy::new(false, dns)),
    )
}

fn webhook_event(entity_id: &str, event_type: &str, url: &str) -> Value {
    json!({
        "type": event_type,
        "entity": {"type": "purchase_order", "id": entity_id},
        "occurred_at": "2026-11-29T10:15:00Z",
        "data": {"po": {"number": entity_id, "total": "1"}, "approver": {"name": "Asha"}},
        "recipients": [{"id": "u-1", "webhook_url": url}],
        "channels": ["webhook"]
    })
}

async fn post(ingest: &Ingestor, body: &Value, key: Option<&str>) -> Result<Answer, IngestError> {
    let body = serde_json::to_vec(body).unwrap();
    let tenant = Tenant::default_tenant();
    ingest.ingest(Request { tenant: &tenant, idempotency_key: key, body: &body, trace: None }).await
}

#[tokio::test]
async fn a_replay_resolves_no_webhook_host_and_answers_though_the_host_has_moved_inside() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let dns = Arc::new(MovingDns::default());
        let ingest = ingestor(&db, dns.clone()).await;
        let event = webhook_event("PO-1", "purchase_order.approved", "https://hooks.example/in");
        let (by_event, by_key) = (post(&ingest, &event, None).await, post(&ingest, &event, Some("k-1")).await);
        assert!(matches!(by_event, Ok(Answer::Created(_))), "{backend:?}: {by_event:?}");
        assert!(matches!(by_key, Ok(Answer::Existing(_))), "{backend:?}: {by_key:?}");
        assert_eq!(dns.asked(), 2, "{backend:?}: each new request checks its host");
        dns.moved.store(true, Ordering::SeqCst);
        for key in [None, Some("k-1")] {
            // The host now resolves to loopback: a new request naming it would
            // be refused, a replay of the accepted one is not.
            let again = post(&ingest, &event, key).await;
            match again {
                Ok(Answer::Replayed(r)) => assert!(r.replayed, "{r:?}"),
                other => panic!("{backend:?} {key:?}: want a replay, got {other:?}"),
            }
            assert_eq!(dns.asked(), 2, "{backend:?} {key:?}: a replay asked the DNS");
        }
        // The same identity with another body is a mismatch, also without a lookup.
        let other = webhook_event("PO-2", "purchase_order.approved", "https://hooks.example/in");
        assert!(matches!(post(&ingest, &other, Some("k-1")).await, Err(IngestError::IdempotencyMismatch)));
        assert_eq!(dns.asked(), 2, "{backend:?}: a mismatch asked the DNS");
        // A new event naming the moved host is refused, naming the field.
        match post(&ingest, &webhook_event("PO-3", "purchase_order.approved", "https://hooks.example/in"), None).await {
            Err(IngestError::InvalidField { field, .. }) => assert_eq!(field, "recipients[0].webhook_url"),
            other => panic!("{backend:?}: want the moved host refused, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn an_unknown_type_is_answered_as_such_before_any_destination_check() {
    let db = TestDb::new(Backend::Sqlite).await;
    let dns = Arc::new(MovingDns::default());
    let ingest = ingestor(&db, dns.clone()).await;
    for url in ["http://127.0.0.1:9/hook", "https://hooks.example/in"] {
        match post(&ingest, &webhook_event("PO-1", "invoice.paid", url), None).await {
            Err(IngestError::UnknownEventType(t)) => assert_eq!(t, "invoice.paid"),
            other => panic!("{url}: want unknown_event_type, got {other:?}"),
        }
    }
    assert_eq!(dns.asked(), 0, "an unknown type resolved a host");
}

#[tokio::test]
async fn an_unknown_type_with_an_inside_webhook_url_is_a_422_over_http() {
    let db = TestDb::new(Backend::Sqlite).await;
    let app = TestApp::new(&db)
        .without_workers()
        .with_toml("[channels.webhook]\nsecret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\ntimeout = \"1s\"\n")
        .spawn()
        .await;
    let (status, body, _) =
        app.post_event(&webhook_event("PO-1", "invoice.paid", "http://127.0.0.1:9/hook"), None).await;
    assert_eq!((status, body["error"]["code"].as_str()), (422, Some("unknown_event_type")), "{body}");
    app.running.stop().await;
}

#[tokio::test]
async fn a_replay_shows_the_intents_as_they_are_now_without_redis() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let ingest = ingestor(&db, Arc::new(MovingDns::default())).await;
        let event = sms_event("PO-9", "+9779800000001");
        // No SMS channel is configured here: the intent is suppressed at once.
        let Ok(Answer::Created(first)) = post(&ingest, &event, Some("k")).await else { panic!("{backend:?}") };
        common::execute(
            &db,
            &format!("UPDATE intents SET state = 'dead', reason = 'rejected' WHERE key = '{}'", first.intents[0].key),
        )
        .await;
        let Ok(Answer::Replayed(again)) = post(&ingest, &event, Some("k")).await else { panic!("{backend:?}") };
        assert_eq!((again.intents[0].state.as_str(), again.intents[0].reason.as_deref()), ("dead", Some("rejected")));
        assert_eq!(again.intents[0].created, first.intents[0].created, "created keeps its first meaning");
    }
}

#[tokio::test]
async fn the_stored_fingerprint_and_content_are_the_events_own() {
    let db = TestDb::new(Backend::Sqlite).await;
    let ingest = ingestor(&db, Arc::new(MovingDns::default())).await;
    let body = sms_event("PO-7", "+9779800000007");
    let Ok(Answer::Created(_)) = post(&ingest, &body, Some("k-7")).await else { panic!("not created") };
    let event = herald::event::parse_event(&body).unwrap();
    let store = db.store().await;
    let seen = store.request_find("default", "key:k-7", &event.fingerprint()).await.unwrap();
    assert!(matches!(seen, Some(herald::store::RequestSeen::Replay(_))), "{seen:?}");
    let stored =
        common::count(&db, &format!("SELECT COUNT(*) FROM events WHERE content_digest = '{}'", event.content_digest()))
            .await;
    assert_eq!(stored, 1, "the content record holds the event's content digest");
}
