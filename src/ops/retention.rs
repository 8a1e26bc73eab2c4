//! Retention: a scheduled job that prunes by age in small batches, each its own
//! short transaction, so pruning never blocks the hot path. Verbose attempt
//! text goes first, content bodies next (intents keep their digests), whole
//! intents then — never younger than the dedupe window — and with them the
//! content records of events none of whose intents remain; request records go
//! exactly at the dedupe window.

use crate::clock::Clock;
use crate::config::RetentionConfig;
use crate::store::{OpsStore, PruneStep, StoreResult};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

pub struct Retention {
    pub store: Arc<dyn OpsStore>,
    pub clock: Arc<dyn Clock>,
    pub config: RetentionConfig,
    pub dedupe_window: Duration,
}

impl Retention {
    fn steps(&self) -> [(PruneStep, &'static str, Duration); 14] {
        let c = &self.config;
        [
            (PruneStep::AttemptDiagnostics, "attempt_diagnostics", c.attempt_diagnostics),
            (PruneStep::Contents, "contents", c.payloads),
            (PruneStep::Payloads, "payloads", c.payloads),
            (PruneStep::Intents, "intents", c.intents),
            (PruneStep::Events, "events", c.intents),
            (PruneStep::Requests, "requests", self.dedupe_window),
            (PruneStep::Digests, "digests", c.digests),
            (PruneStep::InboxCards, "inbox_cards", c.inbox_cards),
            (PruneStep::DeadLetterReplays, "dead_letter_replays", c.dead_letter_replays),
            (PruneStep::PreferenceVersions, "preference_versions", c.preference_versions),
            // A rejected bus message is content like a payload, and a record like an intent.
            (PruneStep::RejectedBodies, "rejected_bodies", c.payloads),
            (PruneStep::RejectedMessages, "rejected_messages", c.intents),
            // The shadow report's tally reaches back as far as its intents do.
            (PruneStep::IngestTally, "ingest_tally", c.intents),
            (PruneStep::Publications, "publications", c.publications),
        ]
    }

    /// One pass over every step; returns the rows touched per step.
    pub async fn prune(&self, shutdown: &watch::Receiver<bool>) -> StoreResult<Vec<(&'static str, u64)>> {
        let now = self.clock.now().as_microsecond();
        let mut out = Vec::new();
        for (step, name, age) in self.steps() {
            let cutoff = now - crate::clock::duration_us(age);
            let mut total = 0;
            loop {
                let n = self.store.retention_batch(step, cutoff, self.config.batch).await?;
                total += n;
                if n < self.config.batch as u64 || *shutdown.borrow() {
                    break;
                }
                // Let the hot path in between batches.
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            crate::ops::metrics::pruned(name, total);
            out.push((name, total));
        }
        Ok(out)
    }

    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        loop {
            match self.prune(&shutdown).await {
                Ok(counts) if counts.iter().any(|(_, n)| *n > 0) => tracing::info!(?counts, "retention pass"),
                Ok(_) => {}
                Err(e) => tracing::error!(error = %e, "retention pass failed; will retry"),
            }
            tokio::select! {
                _ = tokio::time::sleep(self.config.interval) => {},
                _ = shutdown.changed() => return,
            }
        }
    }
}
