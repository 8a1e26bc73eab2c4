//! Group commit: new requests wait in a bounded queue, and a writer takes
//! every request that is waiting (up to a batch) into one transaction. Under
//! light load a request finds the writer idle and goes alone at once, without
//! waiting for company; under load the requests that arrive while one batch
//! commits form the next, so a commit is shared by many requests rather than
//! paid by each.

use crate::store::{Ingest, IngestOutcome, Store, StoreError, StoreResult};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use tokio::sync::{Mutex, mpsc, oneshot};

/// What writes one batch: the store's `events_ingest_batch`, or in the tests
/// a stand-in that fails the way a store can.
pub type WriteBatch =
    Arc<dyn Fn(Vec<Ingest>) -> Pin<Box<dyn Future<Output = Vec<StoreResult<IngestOutcome>>> + Send>> + Send + Sync>;

/// How many requests one transaction takes at most.
pub const MAX_BATCH: usize = 64;

struct Pending {
    ingest: Ingest,
    answer: oneshot::Sender<StoreResult<IngestOutcome>>,
}

/// The queue in front of the writers. Dropping it lets them finish the
/// batches they hold and stop.
pub struct GroupCommit {
    queue: mpsc::Sender<Pending>,
}

impl GroupCommit {
    /// Starts `writers` writers (each a transaction at a time) on `store`.
    pub fn start(store: Arc<dyn Store>, writers: usize) -> GroupCommit {
        GroupCommit::start_with(
            Arc::new(move |batch| {
                let store = store.clone();
                Box::pin(async move { store.events_ingest_batch(batch).await })
            }),
            writers,
        )
    }

    /// Starts `writers` writers that write each batch with `write_batch`.
    pub fn start_with(write_batch: WriteBatch, writers: usize) -> GroupCommit {
        // Enough room for every writer's next batch; beyond it, senders wait
        // (backpressure reaches the HTTP connections).
        let (queue, waiting) = mpsc::channel(MAX_BATCH * writers.max(1) * 2);
        let waiting = Arc::new(Mutex::new(waiting));
        for _ in 0..writers.max(1) {
            tokio::spawn(write(write_batch.clone(), waiting.clone()));
        }
        GroupCommit { queue }
    }

    /// The request's own outcome, once its rows are durable.
    pub async fn ingest(&self, ingest: Ingest) -> StoreResult<IngestOutcome> {
        let (answer, outcome) = oneshot::channel();
        self.queue.send(Pending { ingest, answer }).await.map_err(|_| stopped())?;
        outcome.await.map_err(|_| stopped())?
    }
}

fn stopped() -> StoreError {
    StoreError::Corrupt("the ingest writer stopped".into())
}

/// One writer: take what is waiting (at least one request, at most a batch),
/// write it in one transaction, answer each request, repeat.
async fn write(write_batch: WriteBatch, waiting: Arc<Mutex<mpsc::Receiver<Pending>>>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    loop {
        // Only the taking is shared between writers; each writes on its own.
        let taken = waiting.lock().await.recv_many(&mut batch, MAX_BATCH).await;
        if taken == 0 {
            return;
        }
        let (ingests, answers): (Vec<Ingest>, Vec<_>) = batch.drain(..).map(|p| (p.ingest, p.answer)).unzip();
        // Each batch in a task of its own: a panic in it fails that batch's
        // requests (their answers are dropped, so each caller gets an error
        // and nothing was answered as written), and this writer goes on. A
        // writer that died with the panic would leave SQLite's one writer
        // gone and every later request failing until a restart.
        let outcomes = match tokio::spawn(write_batch(ingests)).await {
            Ok(outcomes) => outcomes,
            Err(e) => {
                tracing::error!(error = %e, requests = answers.len(), "an ingest batch panicked; its requests failed");
                continue;
            }
        };
        for (answer, outcome) in answers.into_iter().zip(outcomes) {
            // A request whose caller went away is written all the same; the
            // answer has no one to go to.
            let _ = answer.send(outcome);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn request(identity: &str) -> Ingest {
        Ingest {
            tenant: "default".into(),
            identity: identity.into(),
            fingerprint: format!("fp-{identity}"),
            event_key: format!("ek-{identity}"),
            content_digest: format!("c-{identity}"),
            event_type: "purchase_order.approved".into(),
            entity_type: "purchase_order".into(),
            entity_id: "PO-1".into(),
            entity_version: None,
            occurred_at: "2026-11-30T00:00:00Z".into(),
            event_body: "{}".into(),
            intents: vec![],
            now_us: 0,
            traceparent: None,
        }
    }

    #[tokio::test]
    async fn a_batch_that_panics_fails_its_requests_and_the_writer_goes_on() {
        let calls = Arc::new(AtomicUsize::new(0));
        let seen = calls.clone();
        let commits = GroupCommit::start_with(
            Arc::new(move |batch: Vec<Ingest>| {
                let first = seen.fetch_add(1, Ordering::SeqCst) == 0;
                Box::pin(async move {
                    assert!(!first, "the store fell over");
                    batch.iter().map(|_| Ok(IngestOutcome::Mismatch)).collect()
                })
            }),
            1,
        );
        assert!(
            commits.ingest(request("a")).await.is_err(),
            "the panicking batch's request is not answered as written"
        );
        // One writer, as on SQLite: it must still be there.
        assert_eq!(commits.ingest(request("b")).await.unwrap(), IngestOutcome::Mismatch);
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }
}
