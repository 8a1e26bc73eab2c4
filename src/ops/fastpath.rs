//! The optional Redis fast path in front of ingest (DESIGN rule 2). The answer
//! to a request that has been repeated is kept under `notify:seen:KEY`
//! (`SET … NX EX dedupe_window`), so the rest of a duplicate storm is answered
//! from Redis alone, with the answer as it was stored, and never reaches the
//! database. The database stays the authority: a miss, a flushed Redis or a
//! Redis that is down only means the database answers — never a duplicate,
//! never a failed ingest.

use crate::event::identity::sha256_hex;
use redis::aio::ConnectionManager;
use std::time::Duration;
use tokio::sync::Mutex;

/// How long one Redis call may take before the database answers instead.
const CALL_TIMEOUT: Duration = Duration::from_millis(150);
/// After a failure, how long to leave Redis alone before trying again.
const BACKOFF: Duration = Duration::from_secs(5);

pub struct FastPath {
    client: redis::Client,
    conn: Mutex<Option<ConnectionManager>>,
    down_until: Mutex<Option<tokio::time::Instant>>,
    ttl_secs: u64,
}

/// What Redis holds for a request identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub fingerprint: String,
    pub response: String,
}

impl FastPath {
    pub fn new(url: &str, ttl: Duration) -> Result<FastPath, redis::RedisError> {
        Ok(FastPath {
            client: redis::Client::open(url)?,
            conn: Mutex::new(None),
            down_until: Mutex::new(None),
            ttl_secs: ttl.as_secs().max(1),
        })
    }

    fn key(tenant: &str, identity: &str) -> String {
        format!("notify:seen:{}", &sha256_hex(format!("{tenant}|{identity}").as_bytes())[..32])
    }

    async fn connection(&self) -> Option<ConnectionManager> {
        if let Some(until) = *self.down_until.lock().await
            && tokio::time::Instant::now() < until
        {
            return None;
        }
        let mut guard = self.conn.lock().await;
        if let Some(c) = guard.as_ref() {
            return Some(c.clone());
        }
        match tokio::time::timeout(CALL_TIMEOUT * 4, ConnectionManager::new(self.client.clone())).await {
            Ok(Ok(c)) => {
                *guard = Some(c.clone());
                Some(c)
            }
            Ok(Err(e)) => {
                self.failed(&e.to_string()).await;
                None
            }
            Err(_) => {
                self.failed("connect timed out").await;
                None
            }
        }
    }

    async fn failed(&self, error: &str) {
        tracing::warn!(error, "redis fast path unavailable; the database answers alone");
        crate::ops::metrics::fastpath("error");
        *self.down_until.lock().await = Some(tokio::time::Instant::now() + BACKOFF);
    }

    /// The stored answers for these identities (tenant, identity), in order:
    /// one `MGET` for a batch of requests, so a miss shares its round trip
    /// with every request gathered beside it. Any failure answers "none".
    pub async fn lookup_many(&self, ids: &[(&str, &str)]) -> Vec<Option<Seen>> {
        let none = || vec![None; ids.len()];
        if ids.is_empty() {
            return none();
        }
        let Some(mut conn) = self.connection().await else { return none() };
        let keys: Vec<String> = ids.iter().map(|(tenant, identity)| Self::key(tenant, identity)).collect();
        let cmd = redis::cmd("MGET").arg(&keys).to_owned();
        match tokio::time::timeout(CALL_TIMEOUT, cmd.query_async::<Vec<Option<String>>>(&mut conn)).await {
            Ok(Ok(values)) if values.len() == ids.len() => values
                .into_iter()
                .map(|value| {
                    let seen = value.as_deref().and_then(|v| v.split_once('\n')).map(|(fingerprint, response)| Seen {
                        fingerprint: fingerprint.to_string(),
                        response: response.to_string(),
                    });
                    crate::ops::metrics::fastpath(if seen.is_some() { "hit" } else { "miss" });
                    seen
                })
                .collect(),
            Ok(Ok(values)) => {
                self.failed(&format!("MGET of {} keys answered {} values", ids.len(), values.len())).await;
                none()
            }
            Ok(Err(e)) => {
                self.failed(&e.to_string()).await;
                none()
            }
            Err(_) => {
                self.failed("MGET timed out").await;
                none()
            }
        }
    }

    /// Remembers the answer the database gave (first writer wins).
    pub async fn remember(&self, tenant: &str, identity: &str, fingerprint: &str, response: &str) {
        let Some(mut conn) = self.connection().await else { return };
        let cmd = redis::cmd("SET")
            .arg(Self::key(tenant, identity))
            .arg(format!("{fingerprint}\n{response}"))
            .arg("NX")
            .arg("EX")
            .arg(self.ttl_secs)
            .to_owned();
        match tokio::time::timeout(CALL_TIMEOUT, cmd.query_async::<Option<String>>(&mut conn)).await {
            Ok(Ok(Some(_))) => crate::ops::metrics::fastpath("stored"),
            Ok(Ok(None)) => {}
            Ok(Err(e)) => self.failed(&e.to_string()).await,
            Err(_) => self.failed("SET timed out").await,
        }
    }
}
