//! NATS JetStream as a front door, against a real `nats-server`: runs when
//! `HERALD_TEST_NATS_URL` is set (and fails loudly when it is set but
//! unreachable). Each test uses a stream of its own and deletes it.

mod common;

use common::nats::TestStream;
use common::{TestApp, TestDb, backends, count, sms_event};
use std::time::Duration;

async fn wait_count(db: &TestDb, sql: &str, want: i64) {
    for _ in 0..400 {
        if count(db, sql).await == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(count(db, sql).await, want, "{sql}");
}

#[tokio::test]
async fn a_message_becomes_intents_and_is_acked() {
    for backend in backends() {
        let Some(bus) = TestStream::new().await else { return };
        let db = TestDb::new(backend).await;
        let app = TestApp::new(&db).without_workers().with_toml(&bus.toml("default", 5)).spawn().await;
        let body = serde_json::to_vec(&sms_event("PO-BUS-1", "+9779800000001")).unwrap();
        let seq = bus.publish(&body, None).await;
        bus.wait_settled(seq).await;
        assert_eq!(count(&db, "SELECT COUNT(*) FROM intents WHERE tenant = 'default'").await, 1, "{backend:?}");
        let (status, list) = app.get("/v1/intents?entity=purchase_order:PO-BUS-1").await;
        assert_eq!(status, 200, "{list}");
        assert_eq!(list["intents"].as_array().map(Vec::len), Some(1), "{list}");
        app.running.stop().await;
        bus.cleanup().await;
    }
}

#[tokio::test]
async fn the_same_event_twice_on_the_bus_and_once_over_http_is_one_set_of_intents() {
    for backend in backends() {
        let Some(bus) = TestStream::new().await else { return };
        let db = TestDb::new(backend).await;
        let app = TestApp::new(&db).without_workers().with_toml(&bus.toml("default", 5)).spawn().await;
        let event = sms_event("PO-BUS-2", "+9779800000002");
        let (status, first, _) = app.post_event(&event, None).await;
        assert_eq!(status, 202, "{first}");
        let body = serde_json::to_vec(&event).unwrap();
        bus.publish(&body, None).await;
        let seq = bus.publish(&body, None).await;
        bus.wait_settled(seq).await;
        // And with a key: the key is the identity, over HTTP as on the bus.
        let keyed = sms_event("PO-BUS-3", "+9779800000003");
        let seq = bus.publish(&serde_json::to_vec(&keyed).unwrap(), Some("po-bus-3")).await;
        bus.wait_settled(seq).await;
        let (status, replay, headers) = app.post_event(&keyed, Some("po-bus-3")).await;
        assert_eq!(status, 200, "{replay}");
        assert_eq!(headers.get("idempotent-replayed").map(|v| v.to_str().unwrap()), Some("true"));
        assert_eq!(count(&db, "SELECT COUNT(*) FROM intents").await, 2, "{backend:?}");
        assert_eq!(count(&db, "SELECT COUNT(*) FROM rejected_messages").await, 0);
        app.running.stop().await;
        bus.cleanup().await;
    }
}

#[tokio::test]
async fn an_invalid_message_is_terminated_and_recorded_with_the_apis_error() {
    for backend in backends() {
        let Some(bus) = TestStream::new().await else { return };
        let db = TestDb::new(backend).await;
        let app = TestApp::new(&db).without_workers().with_toml(&bus.toml("default", 5)).spawn().await;
        let mut no_time = sms_event("PO-BUS-4", "+9779800000004");
        no_time.as_object_mut().unwrap().remove("occurred_at");
        let bad_json = bus.publish(b"{\"type\": ", None).await;
        let missing = bus.publish(&serde_json::to_vec(&no_time).unwrap(), None).await;
        let mut unknown = sms_event("PO-BUS-5", "+9779800000005");
        unknown["type"] = "nobody.listens".into();
        let unknown_seq = bus.publish(&serde_json::to_vec(&unknown).unwrap(), None).await;
        // The same key with another body: refused as over HTTP (422). Messages
        // are handled concurrently, so either of the two may be the refused one.
        let first = sms_event("PO-BUS-6", "+9779800000006");
        let first_seq = bus.publish(&serde_json::to_vec(&first).unwrap(), Some("po-bus-6")).await;
        let other = sms_event("PO-BUS-7", "+9779800000007");
        let mismatch = bus.publish(&serde_json::to_vec(&other).unwrap(), Some("po-bus-6")).await;
        bus.wait_settled(mismatch).await;
        assert_eq!(count(&db, "SELECT COUNT(*) FROM intents").await, 1, "{backend:?}");

        let (status, list) = app.get("/v1/rejected").await;
        assert_eq!(status, 200, "{list}");
        let rejected = list["rejected"].as_array().unwrap();
        assert_eq!(rejected.len(), 4, "{list}");
        let by_seq = |seq: u64| rejected.iter().find(|r| r["stream_seq"] == seq).unwrap_or_else(|| panic!("{list}"));
        assert_eq!(by_seq(bad_json)["error"]["code"], "malformed_json");
        assert_eq!(by_seq(missing)["error"]["code"], "invalid_field");
        assert!(by_seq(missing)["error"]["message"].as_str().unwrap().starts_with("occurred_at"), "{list}");
        assert_eq!(by_seq(unknown_seq)["error"]["code"], "unknown_event_type");
        assert_eq!(by_seq(unknown_seq)["error"]["status"], 422);
        let refused = rejected.iter().find(|r| r["error"]["code"] == "idempotency_key_mismatch").expect("a mismatch");
        assert!(refused["stream_seq"] == first_seq || refused["stream_seq"] == mismatch, "{list}");
        assert_eq!(by_seq(missing)["subject"], bus.subject.as_str());
        assert!(by_seq(missing).get("body").is_none(), "the list leaves bodies out");

        let id = by_seq(bad_json)["id"].as_str().unwrap();
        let (status, one) = app.get(&format!("/v1/rejected/{id}")).await;
        assert_eq!(status, 200, "{one}");
        assert!(one["body"].is_null(), "a body that is not JSON cannot be masked, so the API withholds it: {one}");
        assert_eq!(one["deliveries"], 1);
        let id = by_seq(missing)["id"].as_str().unwrap();
        let (_, one) = app.get(&format!("/v1/rejected/{id}")).await;
        let body = one["body"].as_str().unwrap_or_else(|| panic!("{one}"));
        assert!(body.contains("PO-BUS-4") && !body.contains("9800000004"), "inline addresses masked: {body}");
        let (status, _) = app.get("/v1/rejected/00000000000000000000000000000000").await;
        assert_eq!(status, 404);
        let metrics = app.client.get(format!("{}/metrics", app.base)).send().await.unwrap().text().await.unwrap();
        assert!(metrics.contains("herald_rejected_messages_total"), "{metrics}");
        app.running.stop().await;
        bus.cleanup().await;
    }
}

#[tokio::test]
async fn a_message_redelivered_past_max_deliver_without_a_verdict_is_recorded() {
    for backend in backends() {
        let Some(bus) = TestStream::new().await else { return };
        let db = TestDb::new(backend).await;
        let toml = bus.toml("default", 1);
        // A first process takes the message and dies without a verdict: the
        // consumer is created as Herald would, and the message left unacked.
        let first = TestApp::new(&db).without_workers().with_toml(&toml).spawn().await;
        first.running.stop().await;
        let body = serde_json::to_vec(&sms_event("PO-BUS-8", "+9779800000008")).unwrap();
        let seq = bus.publish(&body, None).await;
        let taken = bus.durable().await.fetch().max_messages(1).messages().await.unwrap();
        let taken: Vec<_> = futures_util::StreamExt::collect::<Vec<_>>(taken).await;
        assert_eq!(taken.len(), 1);
        // After ack_wait the bus delivers it a second time, past max_deliver = 1.
        let app = TestApp::new(&db).without_workers().with_toml(&toml).spawn().await;
        bus.wait_settled(seq).await;
        wait_count(&db, "SELECT COUNT(*) FROM rejected_messages WHERE code = 'max_deliver_exceeded'", 1).await;
        assert_eq!(count(&db, "SELECT COUNT(*) FROM intents").await, 0, "{backend:?}");
        let (_, list) = app.get("/v1/rejected").await;
        assert_eq!(list["rejected"][0]["deliveries"], 2, "{list}");
        assert_eq!(list["rejected"][0]["error"]["status"], 503, "{list}");
        app.running.stop().await;
        bus.cleanup().await;
    }
}

#[tokio::test]
async fn an_existing_stream_that_does_not_capture_the_subjects_is_refused_at_start() {
    let Some(bus) = TestStream::new().await else { return };
    bus.js
        .create_stream(async_nats::jetstream::stream::Config {
            name: bus.stream.clone(),
            subjects: vec![format!("{}.elsewhere", bus.stream)],
            ..Default::default()
        })
        .await
        .unwrap();
    let db = TestDb::new(common::Backend::Sqlite).await;
    let config = TestApp::new(&db).with_toml(&bus.toml("default", 5)).config();
    let err = herald::app::start(config).await.err().expect("refused").to_string();
    assert!(err.starts_with("ingest.nats[0]: subjects:"), "{err}");
    assert!(err.contains(&bus.subject), "{err}");
    bus.cleanup().await;
}

#[tokio::test]
async fn an_unreachable_nats_is_refused_at_start_naming_the_entry() {
    let db = TestDb::new(common::Backend::Sqlite).await;
    let toml = "[[ingest.nats]]\nurl = \"nats://127.0.0.1:1\"\nstream = \"s\"\nsubjects = [\"a.b\"]\n\
                consumer = \"c\"\ntenant = \"default\"\n";
    let config = TestApp::new(&db).with_toml(toml).config();
    let err = herald::app::start(config).await.err().expect("refused").to_string();
    assert!(err.starts_with("ingest.nats[0]: cannot"), "{err}");
    assert!(err.contains("nats://127.0.0.1:1"), "{err}");
}

#[test]
fn a_bad_bus_entry_is_refused_at_load_naming_the_key() {
    let toml = "listen = \"127.0.0.1:0\"\n[[ingest.nats]]\nurl = \"http://x\"\nstream = \"s\"\nsubjects = [\"a\"]\n\
                consumer = \"c\"\ntenant = \"t\"\n";
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.toml");
    std::fs::write(&path, toml).unwrap();
    let err = herald::config::Config::load_with_env(Some(&path), &[]).unwrap_err().to_string();
    assert!(err.contains("ingest.nats[0].url"), "{err}");
}
