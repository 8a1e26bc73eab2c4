//! NATS JetStream as a front door: a durable pull consumer whose messages go
//! through the same pipeline as `POST /v1/events` ([`super::Ingestor`]), so a
//! message and an HTTP post of the same event are the same event.
//!
//! A message is acked only once its rows are committed; a crash before the
//! ack means a redelivery, which the pipeline answers as a replay. A store
//! failure is a Nak with a delay. A message the API would refuse is recorded
//! in `rejected_messages` (with the error the API would have given) and only
//! then terminated, so no message is lost without a trace; so is one
//! delivered more than `max_deliver` times without a verdict.
//!
//! Messages are handled concurrently, but two with the same request identity
//! or the same event are decided in stream order ([`super::order`]): the
//! first wins, as over HTTP, and the second is refused (422 or 409) and
//! recorded like any refused message.

use super::order::{self, Ahead, Ended, InOrder};
use super::{IngestError, Ingestor, Request};
use crate::api::{ApiError, checked_idempotency_key};
use crate::clock::{Clock, micros};
use crate::config::NatsIngestConfig;
use crate::event::identity::Tenant;
use crate::ops::metrics;
use crate::store::{RejectedMessage, RejectedStore};
use async_nats::jetstream::{self, AckKind, consumer::PullConsumer};
use futures_util::StreamExt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

/// How long a connection to NATS may take at start-up before Herald says so.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Messages handled at once by one process (bounded further by `max_ack_pending`).
const IN_FLIGHT: usize = 128;

/// One `[[ingest.nats]]` entry, connected and checked.
pub struct NatsIngest {
    config: NatsIngestConfig,
    tenant: Tenant,
    consumer: PullConsumer,
    ingest: Arc<Ingestor>,
    store: Arc<dyn RejectedStore>,
    clock: Arc<dyn Clock>,
    max_body_bytes: usize,
    /// The turns of the messages in hand, per identity.
    order: Arc<InOrder>,
}

/// What a front door needs besides its own configuration.
pub struct Wiring {
    pub ingest: Arc<Ingestor>,
    pub store: Arc<dyn RejectedStore>,
    pub clock: Arc<dyn Clock>,
    pub max_body_bytes: usize,
}

impl NatsIngest {
    /// Connects, and creates or checks the stream and the durable consumer.
    /// The error names the entry and says what is wrong.
    pub async fn connect(index: usize, config: &NatsIngestConfig, wiring: Wiring) -> Result<NatsIngest, String> {
        let at = |msg: String| format!("ingest.nats[{index}]: {msg}");
        let client =
            async_nats::ConnectOptions::new().connection_timeout(CONNECT_TIMEOUT).name("herald").connect(&config.url);
        let client = tokio::time::timeout(CONNECT_TIMEOUT, client)
            .await
            .map_err(|_| at(format!("cannot reach NATS at {} (no answer in {CONNECT_TIMEOUT:?})", config.url)))?
            .map_err(|e| at(format!("cannot connect to NATS at {}: {e}", config.url)))?;
        let js = jetstream::new(client);
        let stream = js
            .get_or_create_stream(jetstream::stream::Config {
                name: config.stream.clone(),
                subjects: config.subjects.clone(),
                ..Default::default()
            })
            .await
            .map_err(|e| at(format!("stream {:?}: {e} (is JetStream enabled on the server?)", config.stream)))?;
        let has = &stream.cached_info().config.subjects;
        if let Some(missing) = config.subjects.iter().find(|s| !has.iter().any(|p| subject_covers(p, s))) {
            return Err(at(format!(
                "subjects: the existing stream {:?} does not capture {missing:?} (it captures {has:?}); \
                 add the subject to the stream or change ingest.nats[{index}].subjects",
                config.stream
            )));
        }
        let wanted = consumer_config(config);
        let consumer: PullConsumer = stream
            .get_or_create_consumer(&config.consumer, wanted.clone())
            .await
            .map_err(|e| at(format!("consumer {:?} on stream {:?}: {e}", config.consumer, config.stream)))?;
        let got = &consumer.cached_info().config;
        let differs = [
            ("ack_wait", got.ack_wait != wanted.ack_wait),
            ("max_deliver", got.max_deliver != wanted.max_deliver),
            ("max_ack_pending", got.max_ack_pending != wanted.max_ack_pending),
            ("ack_policy", got.ack_policy != jetstream::consumer::AckPolicy::Explicit),
        ];
        if let Some((key, _)) = differs.iter().find(|(_, d)| *d) {
            return Err(at(format!(
                "{key}: the existing consumer {:?} was created with other settings; every Herald sharing it \
                 must configure it alike (or delete the consumer to recreate it)",
                config.consumer
            )));
        }
        tracing::info!(stream = %config.stream, consumer = %config.consumer, tenant = %config.tenant, "consuming events from NATS");
        Ok(NatsIngest {
            config: config.clone(),
            tenant: Tenant::new(config.tenant.clone()),
            consumer,
            ingest: wiring.ingest,
            store: wiring.store,
            clock: wiring.clock,
            max_body_bytes: wiring.max_body_bytes,
            order: Arc::new(InOrder::new(config.ack_wait)),
        })
    }

    /// Pulls and handles messages until shutdown, then lets the ones in
    /// hand finish (those pulled but not started are redelivered).
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let this = Arc::new(self);
        let slots = Arc::new(Semaphore::new(IN_FLIGHT.min(this.config.max_ack_pending as usize)));
        let mut in_hand = JoinSet::new();
        'pull: while !*shutdown.borrow() {
            let mut messages = match this.consumer.messages().await {
                Ok(m) => m,
                Err(e) => {
                    tracing::warn!(error = %e, stream = %this.config.stream, "cannot pull from NATS; trying again");
                    tokio::select! {
                        _ = shutdown.changed() => break 'pull,
                        _ = tokio::time::sleep(Duration::from_secs(1)) => continue 'pull,
                    }
                }
            };
            loop {
                let Ok(slot) = slots.clone().acquire_owned().await else { break 'pull };
                let next = tokio::select! {
                    _ = shutdown.changed() => break 'pull,
                    next = messages.next() => next,
                };
                match next {
                    Some(Ok(msg)) => {
                        // Its turn is taken here, in stream order; it is
                        // decided after the earlier ones that share an
                        // identity with it.
                        let mut turn = this.order.take(this.identities(&msg));
                        let this = this.clone();
                        in_hand.spawn(async move {
                            let ahead = turn.wait().await;
                            let ended = this.handle(msg, ahead).await;
                            turn.end(ended);
                            drop(slot);
                        });
                    }
                    Some(Err(e)) => tracing::warn!(error = %e, stream = %this.config.stream, "NATS pull failed"),
                    None => continue 'pull,
                }
                while in_hand.try_join_next().is_some() {}
            }
        }
        while in_hand.join_next().await.is_some() {}
    }

    /// The identities under which the message waits for earlier ones. A
    /// body over the limit is refused whatever came before: it is not read.
    fn identities(&self, msg: &jetstream::Message) -> Vec<String> {
        let key = idempotency_key(msg.headers.as_ref()).ok().flatten();
        let body: &[u8] = if msg.payload.len() > self.max_body_bytes { b"" } else { &msg.payload };
        let request = Request { tenant: &self.tenant, idempotency_key: key.as_deref(), body, trace: None };
        order::identities(&request)
    }

    /// One message to its verdict: acked after commit, Nak'd on a store
    /// failure, or recorded as rejected and terminated; what it came to is
    /// returned for the messages after it. When `ahead` says an earlier
    /// message with one of its identities will be redelivered, this one is
    /// redelivered too, not decided before it, and after it: Nak'd until the
    /// earlier one is back (and a margin), however few times this one was
    /// delivered.
    async fn handle(&self, msg: jetstream::Message, ahead: Ahead) -> Ended {
        let Ok(info) = msg.info() else {
            tracing::warn!(subject = %msg.subject, "a message without JetStream metadata; ignored");
            return Ended::Decided;
        };
        let (stream_seq, delivered) = (info.stream_sequence as i64, info.delivered);
        if delivered > self.config.max_deliver {
            let message = format!(
                "delivered {delivered} times without a verdict (max_deliver = {}); the last try did not finish",
                self.config.max_deliver
            );
            return self.reject(&msg, stream_seq, delivered, (503, "max_deliver_exceeded", message)).await;
        }
        if let Ahead::Redelivered { until } = ahead {
            let delay = order::hold_back(nak_delay(delivered), until, Instant::now());
            tracing::info!(
                stream_seq,
                next_in = ?delay,
                "an earlier message with the same identity awaits redelivery; so does this one, after it"
            );
            return self.retry_later(&msg, delay).await;
        }
        let key = match idempotency_key(msg.headers.as_ref()) {
            Ok(k) => k,
            Err(e) => return self.reject(&msg, stream_seq, delivered, e.answer()).await,
        };
        if msg.payload.len() > self.max_body_bytes {
            let e = ApiError::PayloadTooLarge { limit: self.max_body_bytes };
            return self.reject(&msg, stream_seq, delivered, e.answer()).await;
        }
        // A publisher's trace context travels in the message's headers too.
        let trace = (msg.headers.as_ref())
            .and_then(|h| h.get(crate::ops::trace::TRACEPARENT))
            .and_then(|v| crate::ops::trace::TraceParent::parse(v.as_str()));
        let request = Request { tenant: &self.tenant, idempotency_key: key.as_deref(), body: &msg.payload, trace };
        let every = self.config.ack_wait / 3;
        match with_progress(&msg, every, self.ingest.ingest(request)).await {
            Ok(_) => {
                if crash_after_commit() {
                    tracing::error!(stream_seq, "HERALD_TEST_CRASH_AFTER_BUS_COMMIT: dying between commit and ack");
                    std::process::abort();
                }
                metrics::bus_message(&self.config.stream, "accepted");
                // Committed: a lost ack only means a redelivery, which replays.
                if let Err(e) = msg.double_ack().await {
                    tracing::warn!(error = %e, stream_seq, "ack after commit failed; the redelivery will replay");
                }
                Ended::Decided
            }
            Err(IngestError::Store(e)) => {
                tracing::warn!(error = %e, stream_seq, delivered, "ingest failed; the bus will redeliver");
                self.retry_later(&msg, nak_delay(delivered)).await
            }
            Err(e) => self.reject(&msg, stream_seq, delivered, ApiError::from(e).answer()).await,
        }
    }

    /// Records the message with the API's answer, then terminates it
    /// (decided). When the record cannot be written the message is Nak'd
    /// instead: it is never dropped without a trace.
    async fn reject(
        &self,
        msg: &jetstream::Message,
        stream_seq: i64,
        delivered: i64,
        (status, code, message): (u16, &'static str, String),
    ) -> Ended {
        let body = &msg.payload[..msg.payload.len().min(self.max_body_bytes)];
        let row = RejectedMessage {
            id: RejectedMessage::id_of(&self.config.stream, stream_seq),
            tenant: self.tenant.as_str().to_string(),
            stream: self.config.stream.clone(),
            consumer: self.config.consumer.clone(),
            subject: msg.subject.to_string(),
            stream_seq,
            deliveries: delivered,
            status: i32::from(status),
            code: code.to_string(),
            // The API's message may quote the refused value (an address, a
            // URL whose path is a webhook's secret).
            message: crate::redact::scrub_string(&message),
            body: Some(String::from_utf8_lossy(body).into_owned()),
            created_at: micros(self.clock.now()),
        };
        match self.store.rejected_record(row).await {
            Ok(new) => {
                if new {
                    metrics::rejected_message(&self.config.stream, code);
                }
                metrics::bus_message(&self.config.stream, "rejected");
                tracing::info!(stream_seq, subject = %msg.subject, code, "bus message rejected and recorded");
                if let Err(e) = msg.ack_with(AckKind::Term).await {
                    tracing::warn!(error = %e, stream_seq, "terminating a recorded message failed; it will be seen again");
                }
                Ended::Decided
            }
            Err(e) => {
                tracing::warn!(error = %e, stream_seq, "recording a rejected message failed; the bus will redeliver");
                self.retry_later(msg, nak_delay(delivered)).await
            }
        }
    }

    /// Nak's the message for `delay`, and says by when it comes back: then,
    /// or after `ack_wait` if the Nak did not get through (both counted from
    /// after the Nak, so never too early for the messages held behind it).
    async fn retry_later(&self, msg: &jetstream::Message, delay: Duration) -> Ended {
        metrics::bus_message(&self.config.stream, "retry");
        let delay = match msg.ack_with(AckKind::Nak(Some(delay))).await {
            Ok(()) => delay,
            Err(e) => {
                tracing::warn!(error = %e, "nak failed; the bus redelivers after ack_wait");
                self.config.ack_wait
            }
        };
        Ended::Redelivered { at: Instant::now() + delay }
    }
}

/// The crash test's fault hook (`tests/bus_crash.rs`): with
/// `HERALD_TEST_CRASH_AFTER_BUS_COMMIT=1` in its environment the process dies
/// at once — no ack, no shutdown, as under `kill -9` — right after a message's
/// rows are committed, the one moment a redelivery must be a replay. Read
/// once; unset in any real deployment.
fn crash_after_commit() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("HERALD_TEST_CRASH_AFTER_BUS_COMMIT").is_ok_and(|v| v == "1"))
}

/// The consumer every process shares: durable, pull, explicit acks. The bus
/// delivers once more than `max_deliver`, so that Herald sees a message that
/// never got a verdict and records it, rather than the bus dropping it.
fn consumer_config(c: &NatsIngestConfig) -> jetstream::consumer::pull::Config {
    jetstream::consumer::pull::Config {
        durable_name: Some(c.consumer.clone()),
        ack_policy: jetstream::consumer::AckPolicy::Explicit,
        ack_wait: c.ack_wait,
        max_deliver: c.max_deliver + 1,
        max_ack_pending: c.max_ack_pending,
        ..Default::default()
    }
}

/// The message's `Idempotency-Key` header (any case), checked as over HTTP.
fn idempotency_key(headers: Option<&async_nats::HeaderMap>) -> Result<Option<String>, ApiError> {
    let Some(headers) = headers else { return Ok(None) };
    let mut values = headers
        .iter()
        .filter(|(name, _)| AsRef::<str>::as_ref(*name).eq_ignore_ascii_case("idempotency-key"))
        .flat_map(|(_, values)| values.iter());
    let Some(v) = values.next() else { return Ok(None) };
    if values.next().is_some() {
        return Err(ApiError::invalid_field("Idempotency-Key", "given more than once; send one"));
    }
    checked_idempotency_key(AsRef::<str>::as_ref(v).as_bytes()).map(Some)
}

/// Runs `work`, telling the bus every `every` that it is still in hand, so a
/// slow commit is not redelivered to another process meanwhile.
async fn with_progress<F: Future>(msg: &jetstream::Message, every: Duration, work: F) -> F::Output {
    tokio::pin!(work);
    let mut tick = tokio::time::interval_at(Instant::now() + every, every);
    loop {
        tokio::select! {
            out = &mut work => return out,
            _ = tick.tick() => {
                if let Err(e) = msg.ack_with(AckKind::Progress).await {
                    tracing::debug!(error = %e, "progress ack failed");
                }
            }
        }
    }
}

/// Doubling from one second, at most a minute: a database that is down is
/// not hammered by every message at once.
fn nak_delay(delivered: i64) -> Duration {
    let exp = delivered.saturating_sub(1).clamp(0, 6) as u32;
    Duration::from_secs(2u64.pow(exp)).min(Duration::from_secs(60))
}

/// Whether a stream subject (possibly with `*` and `>`) captures `subject`
/// (itself possibly a pattern): token by token, `*` covers one token and
/// `>` the rest.
pub(crate) fn subject_covers(pattern: &str, subject: &str) -> bool {
    let mut p = pattern.split('.');
    let mut s = subject.split('.');
    loop {
        match (p.next(), s.next()) {
            (Some(">"), Some(_)) => return true,
            (Some("*"), Some(t)) if t != ">" => {}
            (Some(a), Some(b)) if a == b => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_subject_covers_what_its_wildcards_match() {
        assert!(subject_covers("orders.>", "orders.approved"));
        assert!(subject_covers("orders.>", "orders.*.x"));
        assert!(subject_covers("orders.*", "orders.approved"));
        assert!(subject_covers("orders.approved", "orders.approved"));
        assert!(!subject_covers("orders.*", "orders.a.b"));
        assert!(!subject_covers("orders.*", "orders.>"));
        assert!(!subject_covers("orders.approved", "orders.*"));
        assert!(!subject_covers("orders", "orders.approved"));
        assert!(!subject_covers("orders.>", "orders"));
    }

    #[test]
    fn a_nak_waits_longer_each_delivery_up_to_a_minute() {
        assert_eq!(nak_delay(1), Duration::from_secs(1));
        assert_eq!(nak_delay(2), Duration::from_secs(2));
        assert_eq!(nak_delay(4), Duration::from_secs(8));
        assert_eq!(nak_delay(100), Duration::from_secs(60));
        assert_eq!(nak_delay(0), Duration::from_secs(1));
    }

    #[test]
    fn the_idempotency_key_header_is_read_in_any_case_and_checked() {
        let mut h = async_nats::HeaderMap::new();
        assert_eq!(idempotency_key(None).unwrap(), None);
        h.insert("idempotency-key", "po-1");
        assert_eq!(idempotency_key(Some(&h)).unwrap().as_deref(), Some("po-1"));
        let mut bad = async_nats::HeaderMap::new();
        bad.insert("Idempotency-Key", "has space");
        let (status, code, message) = idempotency_key(Some(&bad)).unwrap_err().answer();
        assert_eq!((status, code), (400, "invalid_field"));
        assert!(message.starts_with("Idempotency-Key:"), "{message}");
    }
}
