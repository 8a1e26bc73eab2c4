//! Recording outcomes, with backpressure. Finished attempts wait for the
//! recorder in a bounded queue: when it is full, an attempt keeps its worker
//! slot until there is room, so a slow database slows the claims down instead
//! of piling up finished calls. And the worker claims nothing while an
//! outcome still on its way belongs to a job whose lease is about to end, or
//! its own claim would rescue that finished attempt and send it again.

use crate::store::{FinishedAttempt, QueueStore};
use opentelemetry::KeyValue;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
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
    /// The attempt span's context: the `record` span goes under it.
    pub trace: opentelemetry::Context,
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
pub async fn run(store: Arc<dyn QueueStore>, mut rx: mpsc::Receiver<Done>, unrecorded: Arc<Unrecorded>) {
    let (mut batch, mut lease_ends, mut traces) = (Vec::new(), Vec::new(), Vec::new());
    while let Some(first) = rx.recv().await {
        let mut next = Some(first);
        while let Some(d) = next.take() {
            batch.push(d.attempt);
            lease_ends.push(d.lease_end);
            traces.push(d.trace);
            if batch.len() < MAX_RECORD_BATCH {
                next = rx.try_recv().ok();
            }
        }
        let started = SystemTime::now();
        let mut recorded = record(store.as_ref(), &batch, 4).await;
        if !recorded.0 && batch.len() > 1 {
            // One row the database refuses must not take the rest of the
            // batch down with it: record them one by one.
            recorded = (true, Vec::new());
            for one in batch.chunks(1) {
                let (ok, stale) = record(store.as_ref(), one, 2).await;
                if !ok {
                    recorded.1.push((one[0].key.clone(), one[0].n));
                }
                recorded.1.extend(stale);
            }
        }
        trace_batch(&batch, &traces, (started, SystemTime::now()), &recorded);
        batch.clear();
        traces.clear();
        unrecorded.remove(lease_ends.drain(..));
    }
}

/// A `record` span under each attempt of the batch, with the batch's times;
/// an error where the outcome did not go in or arrived after a rescue.
fn trace_batch(
    batch: &[FinishedAttempt],
    traces: &[opentelemetry::Context],
    times: (SystemTime, SystemTime),
    (all, missed): &(bool, Vec<(String, i64)>),
) {
    if !crate::ops::trace::exporting() {
        return;
    }
    for (attempt, trace) in batch.iter().zip(traces) {
        let missed = !*all || missed.iter().any(|(key, n)| *key == attempt.key && *n == attempt.n);
        let attributes = vec![
            KeyValue::new("herald.intent_key", attempt.key.clone()),
            KeyValue::new("herald.attempt", attempt.n),
            KeyValue::new("herald.record.batch", batch.len() as i64),
        ];
        let error = missed.then_some("the outcome was not recorded as reported");
        crate::ops::trace::batch_span("record", trace, times, attributes, error);
    }
}

/// Records a batch, retrying with backoff; false if it never went in, and
/// the outcomes that arrived after their attempt was rescued. An outcome
/// that is never recorded leaves its attempt unfinished: once the lease
/// expires it is retaken and recorded as `unknown`, never lost.
async fn record(store: &dyn QueueStore, batch: &[FinishedAttempt], tries: u32) -> (bool, Vec<(String, i64)>) {
    let mut delay = Duration::from_millis(50);
    for try_no in 1..=tries {
        match store.attempts_finish(batch).await {
            Ok(report) => {
                for (key, n) in &report.stale {
                    tracing::warn!(intent = %key, attempt = n, "outcome arrived after the attempt was rescued; kept the rescue");
                }
                return (true, report.stale);
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
    (false, Vec::new())
}
