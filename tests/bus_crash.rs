//! A Herald killed between a bus message's commit and its ack: `herald serve`
//! as a child process, made to die at that moment by its test-only fault hook
//! (`HERALD_TEST_CRASH_AFTER_BUS_COMMIT=1`, an abort: no ack, no shutdown).
//! The bus redelivers the message to the next process, which answers it as a
//! replay: one set of intents, one send. Runs when `HERALD_TEST_NATS_URL` is set.

mod common;

use common::nats::TestStream;
use common::serve::Serve;
use common::{FakeSms, TestDb, backends, count};
use std::path::Path;

use std::time::Duration;

fn config(db: &TestDb, sms: &FakeSms, bus: &TestStream, workers: bool) -> String {
    format!(
        r#"
listen = "127.0.0.1:0"
database_url = "{db}"
dedupe_window = "1h"
shutdown_grace = "2s"
[retry]
attempts = 4
base = "20ms"
max = "100ms"
[worker]
poll_interval = "20ms"
lease = "3s"
disabled = {disabled}
[[routes]]
event = "purchase_order.approved"
template = "po_approved"
channels = ["sms"]
[channels.sms]
url = "{sms}"
timeout = "1s"
{bus}"#,
        db = db.url,
        sms = sms.url,
        disabled = !workers,
        bus = bus.toml("default", 5),
    )
}

fn serve(config: &Path, log: &Path, crash_after_commit: bool) -> Serve {
    let crash: &[(&str, &str)] = if crash_after_commit { &[("HERALD_TEST_CRASH_AFTER_BUS_COMMIT", "1")] } else { &[] };
    Serve::start(config, log, crash)
}

/// Waits until the child has created the durable consumer (it is ready to pull).
async fn wait_consuming(bus: &TestStream, herald: &mut Serve) {
    for _ in 0..400 {
        if let Ok(stream) = bus.js.get_stream(&bus.stream).await
            && stream.get_consumer::<async_nats::jetstream::consumer::pull::Config>(&bus.consumer).await.is_ok()
        {
            return;
        }
        herald.assert_running("consuming");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("herald never created its consumer: {}", herald.log());
}

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
async fn a_crash_between_commit_and_ack_is_answered_by_a_replay_on_redelivery() {
    for backend in backends() {
        let Some(bus) = TestStream::new().await else { return };
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let dir = tempfile::tempdir().unwrap();
        let (crashing, surviving) = (dir.path().join("crashing.toml"), dir.path().join("surviving.toml"));
        // The first process only ingests, so nothing is sent before it dies.
        std::fs::write(&crashing, config(&db, &sms, &bus, false)).unwrap();
        std::fs::write(&surviving, config(&db, &sms, &bus, true)).unwrap();
        let (log1, log2) = (dir.path().join("first.log"), dir.path().join("second.log"));

        let mut first = serve(&crashing, &log1, true);
        wait_consuming(&bus, &mut first).await;
        let phone = "+9779800000021";
        let body = serde_json::to_vec(&common::sms_event("PO-CRASH-1", phone)).unwrap();
        let seq = bus.publish(&body, None).await;
        let Some(status) = first.exited(Duration::from_secs(20)).await else {
            panic!("herald did not die after the commit: {}", first.log());
        };
        assert!(!status.success(), "{status}");
        let log = first.log();
        assert!(log.contains("dying between commit and ack"), "{log}");
        // Committed, and not acked.
        assert_eq!(count(&db, "SELECT COUNT(*) FROM intents").await, 1, "{backend:?}");
        let info = bus.durable().await.info().await.unwrap().clone();
        assert!(info.ack_floor.stream_sequence < seq, "the message was never acked: {info:?}");

        // The next process gets the redelivery (after ack_wait) and replays it.
        let second = serve(&surviving, &log2, false);
        bus.wait_settled(seq).await;
        wait_count(&db, "SELECT COUNT(*) FROM intents WHERE state = 'sent'", 1).await;
        assert_eq!(count(&db, "SELECT COUNT(*) FROM intents").await, 1, "one set of intents ({backend:?})");
        assert_eq!(count(&db, "SELECT COUNT(*) FROM rejected_messages").await, 0);
        assert_eq!(sms.sent_to(phone).len(), 1, "one send");
        drop(second);
        bus.cleanup().await;
    }
}
