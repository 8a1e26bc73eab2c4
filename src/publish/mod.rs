//! What became of each notification, published on the bus (`[publish.nats]`).
//!
//! The outbox is the `publications` table ([`crate::store::Publication`]),
//! whose rows are written in the transaction of each transition; this task
//! only moves them out: claim a batch under a lease, publish each with
//! `Nats-Msg-Id = key:state:n` (n: the intent's publication number) and wait
//! for JetStream's acks, then mark the acknowledged rows. A crash between
//! the ack and the mark publishes a row again, which the stream's duplicate
//! window drops; nothing is published inside a database transaction, and
//! nothing committed is lost.

use crate::clock::{Clock, rfc3339};
use crate::config::NatsPublishConfig;
use crate::ops::metrics;
use crate::store::{Publication, PublicationClaim, PublicationStore};
use async_nats::jetstream;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How long a connection to NATS may take at start-up before Herald says so.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the publisher waits after a failure (database or bus) before trying again.
const BACKOFF: Duration = Duration::from_secs(1);

pub struct NatsPublisher {
    config: NatsPublishConfig,
    js: jetstream::Context,
    store: Arc<dyn PublicationStore>,
    clock: Arc<dyn Clock>,
}

/// The subject of a publication: `<prefix>.<tenant>.intents.<state>`. A
/// tenant's characters that NATS reads as structure (`.`, `*`, `>`,
/// whitespace) become `_`; the body carries the tenant as it is.
pub fn subject(prefix: &str, tenant: &str, state: &str) -> String {
    let tenant: String =
        tenant.chars().map(|c| if c == '.' || c == '*' || c == '>' || c.is_whitespace() { '_' } else { c }).collect();
    format!("{prefix}.{tenant}.intents.{state}")
}

/// The compact body: what the intent is and what became of it, never its
/// destination or content.
pub fn body(p: &Publication) -> serde_json::Value {
    serde_json::json!({
        "key": p.intent_key,
        "tenant": p.tenant,
        "entity": {"type": p.entity_type, "id": p.entity_id, "version": p.entity_version},
        "channel": p.channel,
        "recipient_id": p.recipient_id,
        "state": p.state,
        "reason": p.reason,
        "attempts": p.attempts,
        "at": rfc3339(p.at),
    })
}

/// A batch in the order its transitions happened, so a consumer reading one
/// subject sees an intent's transitions in order: by time, and an intent's
/// transitions stamped with the same time by their publication number, the
/// `n` of `key:state:n`, as a number (`…:9` before `…:10`).
pub fn in_order(batch: &mut [Publication]) {
    let number = |p: &Publication| p.msg_id.rsplit_once(':').and_then(|(_, n)| n.parse::<u64>().ok());
    batch.sort_by(|a, b| (a.at, &a.intent_key, number(a), &a.msg_id).cmp(&(b.at, &b.intent_key, number(b), &b.msg_id)));
}

impl NatsPublisher {
    /// Connects, and creates or checks the stream. The error says what is wrong.
    pub async fn connect(
        config: &NatsPublishConfig,
        store: Arc<dyn PublicationStore>,
        clock: Arc<dyn Clock>,
    ) -> Result<NatsPublisher, String> {
        let at = |msg: String| format!("publish.nats: {msg}");
        let client = async_nats::ConnectOptions::new()
            .connection_timeout(CONNECT_TIMEOUT)
            .name("herald-publisher")
            .connect(&config.url);
        let client = tokio::time::timeout(CONNECT_TIMEOUT, client)
            .await
            .map_err(|_| at(format!("cannot reach NATS at {} (no answer in {CONNECT_TIMEOUT:?})", config.url)))?
            .map_err(|e| at(format!("cannot connect to NATS at {}: {e}", config.url)))?;
        let js = jetstream::new(client);
        let captures = format!("{}.>", config.subject_prefix);
        let stream = js
            .get_or_create_stream(jetstream::stream::Config {
                name: config.stream.clone(),
                subjects: vec![captures.clone()],
                ..Default::default()
            })
            .await
            .map_err(|e| at(format!("stream {:?}: {e} (is JetStream enabled on the server?)", config.stream)))?;
        let has = &stream.cached_info().config.subjects;
        let example = subject(&config.subject_prefix, "t", "sent");
        if !has.iter().any(|p| crate::ingest::nats::subject_covers(p, &example)) {
            return Err(at(format!(
                "stream: the existing stream {:?} does not capture {captures:?} (it captures {has:?}); \
                 add the subject to the stream or change publish.nats.subject_prefix",
                config.stream
            )));
        }
        tracing::info!(stream = %config.stream, prefix = %config.subject_prefix, "publishing intent status to NATS");
        Ok(NatsPublisher { config: config.clone(), js, store, clock })
    }

    /// Publishes until shutdown, looking for rows every `interval` (at once
    /// again while batches come back full); a batch in hand is finished first.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let mut pause = self.config.interval;
        while !*shutdown.borrow() {
            if !pause.is_zero() {
                tokio::select! {
                    _ = shutdown.changed() => break,
                    _ = tokio::time::sleep(pause) => {}
                }
            }
            pause = match self.round().await {
                Ok(n) if n >= self.config.batch as usize => Duration::ZERO,
                Ok(_) => self.config.interval,
                Err(e) => {
                    tracing::warn!(error = %e, stream = %self.config.stream, "publishing intent status failed; trying again");
                    BACKOFF
                }
            };
        }
    }

    /// One batch: claimed, published, the acknowledged ones marked. The
    /// number claimed.
    pub async fn round(&self) -> Result<usize, String> {
        let now_us = self.clock.now().as_microsecond();
        let lease_us = crate::clock::duration_us(self.config.lease);
        let mut batch = self
            .store
            .publications_claim(PublicationClaim { now_us, lease_us, limit: self.config.batch })
            .await
            .map_err(|e| e.to_string())?;
        if batch.is_empty() {
            self.measure(now_us).await;
            return Ok(0);
        }
        in_order(&mut batch);
        let mut pending = Vec::with_capacity(batch.len());
        let mut failed = 0u64;
        for p in &batch {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert(async_nats::header::NATS_MESSAGE_ID, p.msg_id.as_str());
            let subject = subject(&self.config.subject_prefix, &p.tenant, &p.state);
            match self.js.publish_with_headers(subject, headers, body(p).to_string().into()).await {
                Ok(ack) => pending.push((p.msg_id.clone(), ack)),
                Err(e) => {
                    failed += 1;
                    tracing::warn!(error = %e, msg_id = %p.msg_id, "publish failed; the row is tried again after its lease");
                }
            }
        }
        let mut acked = Vec::with_capacity(pending.len());
        for (msg_id, ack) in pending {
            match ack.await {
                Ok(_) => acked.push(msg_id),
                Err(e) => {
                    failed += 1;
                    tracing::warn!(error = %e, %msg_id, "no JetStream ack; the row is tried again after its lease");
                }
            }
        }
        let now_us = self.clock.now().as_microsecond();
        self.store.publications_mark(&acked, now_us).await.map_err(|e| e.to_string())?;
        metrics::publications(acked.len() as u64, failed);
        self.measure(now_us).await;
        Ok(batch.len())
    }

    async fn measure(&self, now_us: i64) {
        match self.store.publications_backlog().await {
            Ok(b) => metrics::publication_backlog(b, now_us),
            Err(e) => tracing::debug!(error = %e, "publication backlog not measured"),
        }
    }
}
