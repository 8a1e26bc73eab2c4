//! How many ingest requests this process is serving, so that its worker can
//! give way to them while they queue.
//!
//! Ingest and delivery share the process's cores and the database's: a
//! caller waits for an ingest's answer, and nobody waits on a claim's few
//! milliseconds. While ingest is busy, the worker pauses after each claim
//! for a few times as long as the claim took (never longer than an idle
//! worker waits between polls), and claims again: delivery never stops, and
//! each claim finds more slots free, so it takes more jobs in one statement
//! and its recording writes more outcomes in one.
//!
//! The count is this process's own: an API-only process's ingest does not
//! slow another process's worker. Only a worker on Postgres is handed this
//! process's count (`crate::app`); the figures behind both choices are in
//! docs/performance.md ("Ingest first while it queues").

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Requests in flight from which ingest counts as busy. Below it a request
/// is served at once, and slowing delivery would gain it nothing.
pub const BUSY: usize = 8;

/// How many times a claim's own duration the worker waits after it while
/// ingest is busy: delivery keeps at least a quarter of the time it would
/// have, and pays for it in larger batches, not in lost work.
pub const GIVE_WAY: u32 = 3;

/// Ingest requests in flight in this process.
#[derive(Debug, Default)]
pub struct IngestLoad {
    in_flight: AtomicUsize,
}

/// One request being served; dropping it (answered, failed or cancelled by a
/// client that went away) ends it.
#[must_use]
pub struct Serving(Arc<IngestLoad>);

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

impl IngestLoad {
    pub fn serving(self: &Arc<Self>) -> Serving {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        Serving(self.clone())
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    pub fn busy(&self) -> bool {
        self.in_flight() >= BUSY
    }

    /// How long the worker waits after a claim that took `claim`, or `None`
    /// when ingest is not busy. At most `cap` (the worker's poll interval).
    pub fn give_way(&self, claim: Duration, cap: Duration) -> Option<Duration> {
        self.busy().then(|| (claim * GIVE_WAY).min(cap))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_the_requests_being_served() {
        let load = Arc::new(IngestLoad::default());
        let serving: Vec<Serving> = (0..BUSY - 1).map(|_| load.serving()).collect();
        assert_eq!(load.in_flight(), BUSY - 1);
        assert!(!load.busy());
        let one_more = load.serving();
        assert!(load.busy());
        drop(one_more);
        assert!(!load.busy());
        drop(serving);
        assert_eq!(load.in_flight(), 0);
    }

    #[tokio::test]
    async fn a_cancelled_request_stops_counting() {
        // A client that hangs up drops the handler's future mid-await.
        let load = Arc::new(IngestLoad::default());
        let held = load.clone();
        let request = async move {
            let _serving = held.serving();
            std::future::pending::<()>().await;
        };
        let cancelled = tokio::time::timeout(Duration::from_millis(1), request).await;
        assert!(cancelled.is_err());
        assert_eq!(load.in_flight(), 0);
    }

    #[test]
    fn the_worker_waits_only_while_ingest_is_busy_and_never_past_the_cap() {
        let load = Arc::new(IngestLoad::default());
        let cap = Duration::from_millis(200);
        let claim = Duration::from_millis(4);
        assert_eq!(load.give_way(claim, cap), None);
        let _busy: Vec<Serving> = (0..BUSY).map(|_| load.serving()).collect();
        assert_eq!(load.give_way(claim, cap), Some(Duration::from_millis(12)));
        assert_eq!(load.give_way(Duration::from_secs(5), cap), Some(cap));
    }
}
