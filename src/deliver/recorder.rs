//! Recording outcomes, with backpressure. Finished attempts wait for the
//! recorder in a bounded queue: when it is full, an attempt keeps its worker
//! slot until there is room, so a slow database slows the claims down instead
//! of piling up finished calls. And the worker claims nothing while an
//! outcome still on its way belongs to a job whose lease is about to end, or
//! its own claim would rescue that finished attempt and send it again.

use crate::store::{FinishedAttempt, Store};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;

/// The most outcomes one recording transaction writes.
const MAX_RECORD_BATCH: usize = 512;

/// A finished attempt on its way to the database.
pub struct Done {
    pub attempt: FinishedAttempt,
    /// When the job's lease ends, by this process's monotonic clock (never
    /// later than the database's end of it: measured from before the claim).
    pub lease_end: Instant,
}

/// The lease ends of finished attempts whose outcomes are not written yet.
#[derive(Default)]
pub struct Unrecorded {
    ends: Mutex<BTreeMap<Instant, usize>>,
    written: Notify,
}

impl Unrecorded {
    pub fn add(&self, end: Instant) {
        *self.lock().entry(end).or_default() += 1;
    }

    fn remove(&self, ends: impl IntoIterator<Item = Instant>) {
        let mut map = self.lock();
        for end in ends {
            if let Some(n) = map.get_mut(&end) {
                *n -= 1;
                if *n == 0 {
                    map.remove(&end);
                }
            }
        }
        drop(map);
        self.written.notify_waiters();
    }

    /// The earliest lease end among unwritten outcomes.
    pub fn earliest(&self) -> Option<Instant> {
        self.lock().keys().next().copied()
    }

    /// Resolves after the next batch of outcomes was written (or given up on).
    pub fn next_write(&self) -> tokio::sync::futures::Notified<'_> {
        self.written.notified()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Instant, usize>> {
        self.ends.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Drains finished attempts and records whatever has accumulated in one
/// transaction: immediate when idle, batched under load.
pub async fn run(store: Arc<dyn Store>, mut rx: mpsc::Receiver<Done>, unrecorded: Arc<Unrecorded>) {
    let (mut batch, mut lease_ends) = (Vec::new(), Vec::new());
    while let Some(first) = rx.recv().await {
        let mut next = Some(first);
        while let Some(d) = next.take() {
            batch.push(d.attempt);
            lease_ends.push(d.lease_end);
            if batch.len() < MAX_RECORD_BATCH {
                next = rx.try_recv().ok();
            }
        }
        if !record(store.as_ref(), &batch, 4).await && batch.len() > 1 {
            // One row the database refuses must not take the rest of the
            // batch down with it: record them one by one.
            for one in batch.chunks(1) {
                record(store.as_ref(), one, 2).await;
            }
        }
        batch.clear();
        unrecorded.remove(lease_ends.drain(..));
    }
}

/// Records a batch, retrying with backoff; false if it never went in. An
/// outcome that is never recorded leaves its attempt unfinished: once the
/// lease expires it is retaken and recorded as `unknown`, never lost.
async fn record(store: &dyn Store, batch: &[FinishedAttempt], tries: u32) -> bool {
    let mut delay = Duration::from_millis(50);
    for try_no in 1..=tries {
        match store.attempts_finish(batch).await {
            Ok(report) => {
                for (key, n) in &report.stale {
                    tracing::warn!(intent = %key, attempt = n, "outcome arrived after the attempt was rescued; kept the rescue");
                }
                return true;
            }
            Err(e) => {
                tracing::error!(error = %e, try_no, count = batch.len(), "recording outcomes failed");
                if try_no < tries {
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
            }
        }
    }
    false
}
