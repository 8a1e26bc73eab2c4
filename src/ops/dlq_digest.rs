//! The daily dead-letter digest (DESIGN rule 5): every day at `ops.digest_at`
//! in `ops.digest_timezone`, the dead letters since the last digest go to the
//! ops webhook — counts by reason, a few examples each with masked
//! destinations, and the command that replays each group. It is posted even
//! when the count is zero: a silent channel looks the same as a broken
//! scheduler. One row per day in the database, claimed under a lease, makes it
//! exactly one post across many processes, and none lost across a restart.

use crate::clock::{Clock, rfc3339};
use crate::recipient::mask_for_channel;
use crate::store::{OpsDigestClaim, Store, StoreError};
use jiff::civil::Time;
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

const EXAMPLES_PER_REASON: u32 = 3;
/// How long a process may hold a day's digest before another may post it.
const LEASE: Duration = Duration::from_secs(120);
/// How long after `digest_at` the digest waits, so that an outcome stamped
/// just before it (and still in a worker's recording batch) is committed and
/// counted, not missed between two digests.
const SETTLE: jiff::SignedDuration = jiff::SignedDuration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum DigestError {
    #[error("ops.digest_webhook is not configured")]
    NotConfigured,
    #[error("the ops webhook did not accept the digest: {0}")]
    Post(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

pub struct OpsDigest {
    pub store: Arc<dyn Store>,
    pub clock: Arc<dyn Clock>,
    pub webhook: Option<String>,
    pub at: Time,
    pub tz: TimeZone,
    pub client: reqwest::Client,
}

/// The most recent scheduled instant at or before `now`, and the local date
/// that names its slot.
pub fn latest_slot(now: Timestamp, at: Time, tz: &TimeZone) -> Option<(String, Timestamp)> {
    let today = now.to_zoned(tz.clone()).date();
    for date in [Some(today), today.checked_sub(1.day()).ok()].into_iter().flatten() {
        let scheduled = date.to_datetime(at).to_zoned(tz.clone()).ok()?.timestamp();
        if scheduled <= now {
            return Some((date.to_string(), scheduled));
        }
    }
    None
}

/// The first scheduled instant after `now` (the digest goes a minute after
/// it, once outcomes stamped just before it are committed).
pub fn next_slot(now: Timestamp, at: Time, tz: &TimeZone) -> Option<Timestamp> {
    let today = now.to_zoned(tz.clone()).date();
    (0i64..3)
        .filter_map(|days| today.checked_add(days.days()).ok())
        .filter_map(|date| date.to_datetime(at).to_zoned(tz.clone()).ok())
        .map(|zoned| zoned.timestamp())
        .find(|scheduled| *scheduled > now)
}

impl OpsDigest {
    /// The digest of dead letters updated in [since, until): one tenant's, or
    /// (the daily digest to the deployment's operators) every tenant's.
    pub async fn build(&self, tenant: Option<&str>, since_us: i64, until_us: i64) -> Result<Value, StoreError> {
        let by_reason = self.store.dead_letters_summary(tenant, since_us, until_us).await?;
        let total: i64 = by_reason.iter().map(|(_, n)| n).sum();
        let (since, until) = (rfc3339(since_us).unwrap_or_default(), rfc3339(until_us).unwrap_or_default());
        let mut lines = Vec::new();
        let mut examples = Map::new();
        let mut replay = Map::new();
        if total == 0 {
            lines.push(format!(
                "Herald dead letters {since} → {until}: none. (This digest is posted every day, even when there is nothing to report.)"
            ));
        } else {
            let counts: Vec<String> = by_reason.iter().map(|(r, n)| format!("{r} {n}")).collect();
            lines.push(format!("Herald dead letters {since} → {until}: {total} ({})", counts.join(", ")));
        }
        for (reason, count) in &by_reason {
            let rows =
                self.store.dead_letters_examples(tenant, reason, since_us, until_us, EXAMPLES_PER_REASON).await?;
            let mut shown = Vec::new();
            let mut tenants = BTreeSet::new();
            for r in &rows {
                tenants.insert(r.tenant.clone());
                let to = r.destination.as_deref().map(|d| mask_for_channel(r.channel, d)).unwrap_or_else(|| "-".into());
                let detail = r.detail.as_deref().unwrap_or("");
                shown.push(json!({
                    "id": r.key, "tenant": r.tenant, "channel": r.channel, "destination": to,
                    "entity": format!("{}:{}", r.entity_type, r.entity_id), "detail": detail,
                }));
                lines.push(format!(
                    "  • {reason}: {} to {to} ({}, {}:{})",
                    r.channel, r.tenant, r.entity_type, r.entity_id
                ));
            }
            let commands: Vec<String> = tenants
                .iter()
                .map(|t| format!("herald dlq replay --tenant {t} --reason {reason} --since {since}"))
                .collect();
            lines.insert(lines.len() - rows.len(), format!("• {reason}: {count}"));
            for c in &commands {
                lines.push(format!("  replay: {c}"));
            }
            examples.insert(reason.clone(), Value::Array(shown));
            replay.insert(reason.clone(), json!(commands));
        }
        // New hard bounces by recipient domain, one line each: a directory
        // sync that mangled one department's addresses reads as one line.
        let bounces = self.store.bounces_by_domain(tenant, since_us, until_us).await?;
        if !bounces.is_empty() {
            let n: i64 = bounces.iter().map(|(_, n)| n).sum();
            lines.push(format!("New hard bounces by recipient domain ({n}, now on the suppression list):"));
            for (domain, count) in &bounces {
                let plural = if *count == 1 { "" } else { "s" };
                lines.push(format!("  • {domain}: {count} new hard bounce{plural}"));
            }
        }
        // Bus messages that never became events: no dead letter stands for
        // them, so without these lines they would go unseen.
        let rejected = self.store.rejected_summary(tenant, since_us, until_us).await?;
        let rejected_total: i64 = rejected.iter().map(|(_, n)| n).sum();
        if rejected_total > 0 {
            let counts: Vec<String> = rejected.iter().map(|(c, n)| format!("{c} {n}")).collect();
            lines.push(format!("Rejected bus messages: {rejected_total} ({})", counts.join(", ")));
            lines.push("  see: herald rejected list (or GET /v1/rejected)".to_string());
        }
        let rejected: Map<String, Value> = rejected.into_iter().map(|(c, n)| (c, Value::from(n))).collect();
        let bounces: Map<String, Value> = bounces.into_iter().map(|(d, n)| (d, Value::from(n))).collect();
        let by_reason: Map<String, Value> = by_reason.into_iter().map(|(r, n)| (r, Value::from(n))).collect();
        Ok(json!({
            "bounces_by_domain": bounces,
            "text": lines.join("\n"),
            "total": total,
            "by_reason": by_reason,
            "since": since,
            "until": until,
            "examples": examples,
            "replay": replay,
            "rejected_messages": {"total": rejected_total, "by_code": rejected},
        }))
    }

    async fn post(&self, body: &Value) -> Result<(), DigestError> {
        let url = self.webhook.as_deref().ok_or(DigestError::NotConfigured)?;
        // The URL is a secret of its own (a Slack hook): never in an error.
        let resp = self
            .client
            .post(url)
            .json(body)
            .send()
            .await
            .map_err(|e| DigestError::Post(e.without_url().to_string()))?;
        if !resp.status().is_success() {
            return Err(DigestError::Post(format!("HTTP {}", resp.status().as_u16())));
        }
        Ok(())
    }

    /// Where the next digest starts: the end of the last daily one, or a day back.
    async fn since(&self, until_us: i64) -> Result<i64, StoreError> {
        Ok(self.store.ops_digest_last_until().await?.unwrap_or(until_us - 86_400_000_000))
    }

    /// `POST /v1/ops/dlq-digest` (the deployment operator's): every tenant's
    /// dead letters since the last daily digest, now. It does not move the
    /// daily digest's window.
    pub async fn post_now(&self) -> Result<Value, DigestError> {
        if self.webhook.is_none() {
            return Err(DigestError::NotConfigured);
        }
        let now = self.clock.now().as_microsecond();
        let since = self.since(now).await?;
        let body = self.build(None, since, now).await?;
        let slot = format!("manual:{now}");
        self.store
            .ops_digest_claim(OpsDigestClaim {
                slot: slot.clone(),
                since_us: since,
                until_us: now,
                now_us: now,
                lease_us: 0,
            })
            .await?;
        let posted = self.post(&body).await;
        crate::ops::metrics::ops_digest_posted(posted.is_ok());
        posted?;
        self.store.ops_digest_posted(&slot, now, body["total"].as_i64().unwrap_or(0)).await?;
        Ok(body)
    }

    /// Posts the latest scheduled digest if it is due and nobody has; returns
    /// whether this call posted it.
    pub async fn tick(&self) -> Result<bool, DigestError> {
        let now = self.clock.now();
        let settled = now.checked_sub(SETTLE).unwrap_or(now);
        let Some((slot, scheduled)) = latest_slot(settled, self.at, &self.tz) else { return Ok(false) };
        let until = scheduled.as_microsecond();
        let since = self.since(until).await?;
        let now_us = now.as_microsecond();
        let claim = OpsDigestClaim {
            slot: slot.clone(),
            since_us: since.min(until),
            until_us: until,
            now_us,
            lease_us: LEASE.as_micros() as i64,
        };
        let Some((since, until)) = self.store.ops_digest_claim(claim).await? else { return Ok(false) };
        let body = self.build(None, since, until).await?;
        let posted = self.post(&body).await;
        crate::ops::metrics::ops_digest_posted(posted.is_ok());
        posted?;
        self.store.ops_digest_posted(&slot, now_us, body["total"].as_i64().unwrap_or(0)).await?;
        tracing::info!(slot, total = body["total"].as_i64(), "daily dead-letter digest posted");
        Ok(true)
    }

    pub async fn run(self, mut shutdown: watch::Receiver<bool>, every: Duration) {
        loop {
            match self.tick().await {
                Ok(_) => {}
                Err(DigestError::NotConfigured) => return,
                // The lease expires and the next tick (here or elsewhere) tries again.
                Err(e) => tracing::error!(error = %e, "daily dead-letter digest failed; will retry"),
            }
            tokio::select! {
                _ = tokio::time::sleep(every) => {},
                _ = shutdown.changed() => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_slot_is_today_until_the_time_has_passed_then_tomorrow() {
        let tz = TimeZone::get("Asia/Kathmandu").unwrap();
        let at: Time = "08:30".parse().unwrap();
        let next = |now: &str| next_slot(now.parse().unwrap(), at, &tz).map(|t| t.to_string());
        assert_eq!(next("2026-11-30T02:00:00Z").as_deref(), Some("2026-11-30T02:45:00Z"), "08:30 +05:45 today");
        assert_eq!(next("2026-11-30T02:45:00Z").as_deref(), Some("2026-12-01T02:45:00Z"), "at the time: tomorrow's");
        assert_eq!(next("2026-11-30T20:00:00Z").as_deref(), Some("2026-12-01T02:45:00Z"));
    }

    #[test]
    fn the_latest_slot_is_today_once_the_time_has_passed_else_yesterday() {
        let at: Time = "08:30".parse().unwrap();
        let tz = TimeZone::get("Asia/Kathmandu").unwrap();
        // 09:00 local on the 30th
        let (slot, when) = latest_slot("2026-11-30T03:15:00Z".parse().unwrap(), at, &tz).unwrap();
        assert_eq!((slot.as_str(), when.to_string().as_str()), ("2026-11-30", "2026-11-30T02:45:00Z"));
        // 08:00 local: yesterday's is the latest
        let (slot, _) = latest_slot("2026-11-30T02:15:00Z".parse().unwrap(), at, &tz).unwrap();
        assert_eq!(slot, "2026-11-29");
    }
}
