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

    /// The stored answer for this identity, if Redis has one.
    pub async fn lookup(&self, tenant: &str, identity: &str) -> Option<Seen> {
        let mut conn = self.connection().await?;
        let cmd = redis::cmd("GET").arg(Self::key(tenant, identity)).to_owned();
        match tokio::time::timeout(CALL_TIMEOUT, cmd.query_async::<Option<String>>(&mut conn)).await {
            Ok(Ok(Some(v))) => {
                let (fingerprint, response) = v.split_once('\n')?;
                crate::ops::metrics::fastpath("hit");
                Some(Seen { fingerprint: fingerprint.to_string(), response: response.to_string() })
            }
            Ok(Ok(None)) => {
                crate::ops::metrics::fastpath("miss");
                None
            }
            Ok(Err(e)) => {
                self.failed(&e.to_string()).await;
                None
            }
            Err(_) => {
                self.failed("GET timed out").await;
                None
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
