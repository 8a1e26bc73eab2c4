//! Group commit: new requests wait in a bounded queue, and a writer takes
//! every request that is waiting (up to a batch) into one transaction. Under
//! light load a request finds the writer idle and goes alone at once, without
//! waiting for company; under load the requests that arrive while one batch
//! commits form the next, so a commit is shared by many requests rather than
//! paid by each.

use crate::store::{Ingest, IngestOutcome, Store, StoreError, StoreResult};
use std::sync::Arc;
use tokio::sync::{Mutex, mpsc, oneshot};

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
        // Enough room for every writer's next batch; beyond it, senders wait
        // (backpressure reaches the HTTP connections).
        let (queue, waiting) = mpsc::channel(MAX_BATCH * writers.max(1) * 2);
        let waiting = Arc::new(Mutex::new(waiting));
        for _ in 0..writers.max(1) {
            tokio::spawn(write(store.clone(), waiting.clone()));
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
async fn write(store: Arc<dyn Store>, waiting: Arc<Mutex<mpsc::Receiver<Pending>>>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    loop {
        // Only the taking is shared between writers; each writes on its own.
        let taken = waiting.lock().await.recv_many(&mut batch, MAX_BATCH).await;
        if taken == 0 {
            return;
        }
        let (ingests, answers): (Vec<Ingest>, Vec<_>) = batch.drain(..).map(|p| (p.ingest, p.answer)).unzip();
        let outcomes = store.events_ingest_batch(ingests).await;
        for (answer, outcome) in answers.into_iter().zip(outcomes) {
            // A request whose caller went away is written all the same; the
            // answer has no one to go to.
            let _ = answer.send(outcome);
        }
    }
}
