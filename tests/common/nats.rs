//! A JetStream stream of a test's own on the NATS of `HERALD_TEST_NATS_URL`:
//! None when unset; a panic when set but unreachable, so a broken CI leg fails
//! instead of skipping. Each stream has a unique name and subject, and is
//! deleted by `cleanup`.

use async_nats::jetstream::{self, consumer::PullConsumer};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// The NATS of `HERALD_TEST_NATS_URL`; None (said, and a failure under CI)
/// when unset.
fn nats_url() -> Option<String> {
    let url = std::env::var("HERALD_TEST_NATS_URL").ok().filter(|v| !v.is_empty());
    if url.is_none() {
        super::skipped("NATS", "HERALD_TEST_NATS_URL");
    }
    url
}

/// Makes sure the account always holds one stream besides the tests' own.
///
/// When nats-server (2.9 on these machines) deletes an account's last
/// stream, it then removes the account's empty `streams` directory from
/// another goroutine, after the delete has answered. A stream created in
/// that moment — by a test running beside the one that cleaned up, or by a
/// test that deletes its stream and makes it again — loses the directory
/// between making its parents and making its own, and the create fails:
/// `error creating store for stream` (10049), logged by the server as
/// `could not create storage directory … no such file or directory`. It
/// failed CI on 2026-12-06, and 2 of 36 runs of `tests/bus.rs` here.
/// A stream that is never deleted keeps `streams` from ever being empty. It
/// holds nothing (nobody publishes to its subject) and stays on the server
/// between runs, which every test process shares.
async fn keep_the_accounts_directory(js: &jetstream::Context) {
    let keeper = jetstream::stream::Config {
        name: "herald_test_keeper".into(),
        subjects: vec!["herald-test-keeper.nothing".into()],
        ..Default::default()
    };
    // Its own first creation can meet the same race, until it exists.
    let mut tries = 0;
    while let Err(e) = js.get_or_create_stream(keeper.clone()).await {
        tries += 1;
        assert!(tries < 50, "the keeper stream could not be made: {e}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub struct TestStream {
    pub url: String,
    pub js: jetstream::Context,
    pub stream: String,
    pub subject: String,
    pub consumer: String,
}

impl TestStream {
    pub async fn new() -> Option<TestStream> {
        let url = nats_url()?;
        let client = tokio::time::timeout(Duration::from_secs(5), async_nats::connect(&url))
            .await
            .unwrap_or_else(|_| panic!("HERALD_TEST_NATS_URL is set but NATS does not answer ({url})"))
            .unwrap_or_else(|e| panic!("HERALD_TEST_NATS_URL is set but NATS is unreachable ({url}): {e}"));
        let js = jetstream::new(client);
        keep_the_accounts_directory(&js).await;
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let id = format!("{}_{}_{}", std::process::id(), n, jiff::Timestamp::now().as_millisecond() % 1_000_000);
        Some(TestStream {
            url,
            js,
            stream: format!("herald_test_{id}"),
            subject: format!("herald-test.{id}.events"),
            consumer: format!("herald_{id}"),
        })
    }

    /// The `[[ingest.nats]]` entry for this stream, bound to `tenant`.
    pub fn toml(&self, tenant: &str, max_deliver: i64) -> String {
        format!(
            "[[ingest.nats]]\nurl = {:?}\nstream = {:?}\nsubjects = [{:?}]\nconsumer = {:?}\ntenant = {tenant:?}\n\
             ack_wait = \"1s\"\nmax_deliver = {max_deliver}\nmax_ack_pending = 100\n",
            self.url, self.stream, self.subject, self.consumer
        )
    }

    /// Publishes and waits for the stream to store it; the stream sequence.
    pub async fn publish(&self, body: &[u8], idempotency_key: Option<&str>) -> u64 {
        let mut headers = async_nats::HeaderMap::new();
        if let Some(k) = idempotency_key {
            headers.insert("Idempotency-Key", k);
        }
        let ack = self
            .js
            .publish_with_headers(self.subject.clone(), headers, body.to_vec().into())
            .await
            .expect("publish")
            .await
            .expect("stored by the stream");
        ack.sequence
    }

    pub async fn durable(&self) -> PullConsumer {
        let stream = self.js.get_stream(&self.stream).await.expect("stream");
        stream.get_consumer(&self.consumer).await.expect("consumer")
    }

    /// Waits until every message up to `seq` has a verdict (acked or
    /// terminated) and none is in hand.
    pub async fn wait_settled(&self, seq: u64) {
        let mut consumer = self.durable().await;
        for _ in 0..400 {
            let info = consumer.info().await.expect("consumer info");
            if info.ack_floor.stream_sequence >= seq && info.num_ack_pending == 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        let info = consumer.info().await.expect("consumer info");
        panic!("messages up to {seq} were not settled: {info:?}");
    }

    pub async fn cleanup(self) {
        let _ = self.js.delete_stream(&self.stream).await;
    }
}

/// A stream of a test's own for `[publish.nats]`, with its own subject prefix.
pub struct TestPublications {
    pub url: String,
    pub js: jetstream::Context,
    pub stream: String,
    pub prefix: String,
}

/// One publication as the stream stored it.
#[derive(Debug)]
pub struct Published {
    pub subject: String,
    pub msg_id: String,
    pub body: serde_json::Value,
}

impl TestPublications {
    pub async fn new() -> Option<TestPublications> {
        let bus = TestStream::new().await?;
        let id = bus.stream.trim_start_matches("herald_test_").to_string();
        Some(TestPublications {
            url: bus.url,
            js: bus.js,
            stream: format!("herald_pub_{id}"),
            prefix: format!("hpub_{id}"),
        })
    }

    /// The `[publish.nats]` section, polling every `interval`.
    pub fn toml(&self, interval: &str) -> String {
        format!(
            "[publish.nats]\nurl = {:?}\nstream = {:?}\nsubject_prefix = {:?}\ninterval = {interval:?}\nlease = \"1s\"\n",
            self.url, self.stream, self.prefix
        )
    }

    /// How many messages the stream holds (0 before Herald created it).
    pub async fn stored(&self) -> u64 {
        match self.js.get_stream(&self.stream).await {
            Ok(mut s) => s.info().await.expect("stream info").state.messages,
            Err(_) => 0,
        }
    }

    /// Waits until the stream holds `n` messages, then returns them all.
    pub async fn wait_for(&self, n: u64) -> Vec<Published> {
        for _ in 0..400 {
            if self.stored().await >= n {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        let stored = self.stored().await;
        assert!(stored >= n, "the stream holds {stored} publications, not {n}");
        let stream = self.js.get_stream(&self.stream).await.expect("stream");
        let mut out = Vec::new();
        for seq in 1..=stored {
            let m = stream.get_raw_message(seq).await.expect("stored message");
            out.push(Published {
                subject: m.subject.to_string(),
                msg_id: m
                    .headers
                    .get(async_nats::header::NATS_MESSAGE_ID)
                    .map(|v| v.as_str().to_string())
                    .unwrap_or_default(),
                body: serde_json::from_slice(&m.payload).expect("a JSON body"),
            });
        }
        out
    }

    pub async fn cleanup(self) {
        let _ = self.js.delete_stream(&self.stream).await;
    }
}
