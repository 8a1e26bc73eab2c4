//! `[[ingest.nats]]`: event-bus consumers, checked at load. Each names a
//! JetStream stream and a durable pull consumer Herald creates or checks at
//! start-up, bound to one tenant as a token is.

use super::{ConfigError, duration, invalid};
use serde::Deserialize;
use std::time::Duration;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IngestConfig {
    #[serde(default, deserialize_with = "super::load::list")]
    pub nats: Vec<NatsIngestConfig>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NatsIngestConfig {
    /// `nats://host:port`.
    pub url: String,
    pub stream: String,
    /// The subjects the stream captures (created with them when missing).
    pub subjects: Vec<String>,
    /// The durable pull consumer's name, shared by every Herald process.
    pub consumer: String,
    /// Events from this consumer belong to this tenant.
    pub tenant: String,
    #[serde(default = "default_max_ack_pending")]
    pub max_ack_pending: i64,
    /// How long the bus waits for a verdict before redelivering.
    #[serde(default = "default_ack_wait", deserialize_with = "duration")]
    pub ack_wait: Duration,
    /// Deliveries after which a message without a verdict is recorded as
    /// rejected and terminated.
    #[serde(default = "default_max_deliver")]
    pub max_deliver: i64,
}

fn default_max_ack_pending() -> i64 {
    1000
}
fn default_ack_wait() -> Duration {
    Duration::from_secs(30)
}
fn default_max_deliver() -> i64 {
    5
}

/// NATS names: no whitespace, dots, wildcards or path separators.
fn is_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= 64 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl IngestConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        for (i, n) in self.nats.iter().enumerate() {
            let key = |k: &str| format!("ingest.nats[{i}].{k}");
            if !(n.url.starts_with("nats://") || n.url.starts_with("tls://")) {
                return Err(invalid(format!("{}: {:?} is not a nats:// URL", key("url"), n.url)));
            }
            for (k, v) in [("stream", &n.stream), ("consumer", &n.consumer)] {
                if !is_name(v) {
                    return Err(invalid(format!("{}: {v:?} must be 1-64 letters, digits, '-' or '_'", key(k))));
                }
            }
            if n.subjects.is_empty() || n.subjects.iter().any(|s| s.is_empty() || s.contains(char::is_whitespace)) {
                return Err(invalid(format!("{}: give at least one subject, without spaces", key("subjects"))));
            }
            if n.tenant.is_empty() || n.tenant.contains(char::is_whitespace) {
                return Err(invalid(format!("{}: name the tenant (no spaces)", key("tenant"))));
            }
            if n.max_ack_pending < 1 {
                return Err(invalid(format!("{}: must be at least 1", key("max_ack_pending"))));
            }
            if n.ack_wait < Duration::from_secs(1) {
                return Err(invalid(format!("{}: must be at least 1s", key("ack_wait"))));
            }
            if n.max_deliver < 1 {
                return Err(invalid(format!("{}: must be at least 1", key("max_deliver"))));
            }
        }
        Ok(())
    }
}

/// `[publish.nats]`: where what became of each intent is published.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublishConfig {
    pub nats: Option<NatsPublishConfig>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NatsPublishConfig {
    /// `nats://host:port`.
    pub url: String,
    /// The JetStream stream that stores the publications (created, capturing
    /// `<subject_prefix>.>`, when missing).
    pub stream: String,
    /// Subjects are `<subject_prefix>.<tenant>.intents.<state>`.
    #[serde(default = "default_subject_prefix")]
    pub subject_prefix: String,
    /// Publications per round trip (published together, then marked together).
    #[serde(default = "default_publish_batch")]
    pub batch: u32,
    /// How often the publisher looks for new rows when it found none.
    #[serde(default = "default_publish_interval", deserialize_with = "duration")]
    pub interval: Duration,
    /// A claimed row another process may take over after this (its
    /// publisher died before marking it).
    #[serde(default = "default_publish_lease", deserialize_with = "duration")]
    pub lease: Duration,
}

fn default_subject_prefix() -> String {
    "herald".into()
}
fn default_publish_batch() -> u32 {
    256
}
fn default_publish_interval() -> Duration {
    Duration::from_millis(200)
}
fn default_publish_lease() -> Duration {
    Duration::from_secs(15)
}

impl PublishConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let Some(n) = &self.nats else { return Ok(()) };
        if !(n.url.starts_with("nats://") || n.url.starts_with("tls://")) {
            return Err(invalid(format!("publish.nats.url: {:?} is not a nats:// URL", n.url)));
        }
        if !is_name(&n.stream) {
            return Err(invalid(format!(
                "publish.nats.stream: {:?} must be 1-64 letters, digits, '-' or '_'",
                n.stream
            )));
        }
        let token_ok = |t: &str| is_name(t);
        if n.subject_prefix.split('.').any(|t| !token_ok(t)) {
            return Err(invalid(format!(
                "publish.nats.subject_prefix: {:?} must be dot-separated tokens of letters, digits, '-' or '_' (no wildcards)",
                n.subject_prefix
            )));
        }
        if n.batch == 0 || n.batch > 10_000 {
            return Err(invalid("publish.nats.batch: must be between 1 and 10000"));
        }
        if n.interval < Duration::from_millis(10) {
            return Err(invalid("publish.nats.interval: must be at least 10ms"));
        }
        if n.lease < Duration::from_secs(1) {
            return Err(invalid("publish.nats.lease: must be at least 1s"));
        }
        Ok(())
    }
}
