//! Batches of concurrent requests. [`Gather`] is the mechanism: inputs wait
//! in a bounded queue, and a worker takes every input that is waiting (up to
//! a batch) into one call. Under light load an input finds a worker idle and
//! goes alone at once, without waiting for company; under load the inputs that
//! arrive while one batch is in hand form the next, so one round trip (or one
//! commit) is shared by many requests rather than paid by each.
//!
//! [`GroupCommit`] is the ingest transaction gathered this way; the reads a
//! new request makes before it is planned are gathered the same way
//! (`super::reads`).
//!
//! With several writers, the requests of one event always go to the same
//! writer ([`Gather::sharded`]), so no two of this process's transactions
//! ever write one event's rows at once. They did: in a duplicate storm the
//! first request went alone, and the repeats that arrived while it was in
//! hand went to the other writer, which wrote the same event, intent and
//! request record in another order than the first's single statement
//! (whose inserts Postgres runs in an order of its own). Each waited for a
//! row the other held; Postgres found the deadlock after its
//! `deadlock_timeout` (a second) and aborted one, which ran again: one send
//! all the same, but every request of the storm waited the second out (the
//! kit's storm on Postgres + Redis, 2026-12-07: a deadlock in one storm of
//! six, ingest p99 1,024 ms against 20–32 ms). The single statement now
//! writes in the others' order too (`crate::store::postgres_batch`), so
//! two transactions of one event — two processes' — wait rather than
//! deadlock; the shard keeps this process's from waiting on each other at
//! all, and the statement's guess from failing on its own repeats.

use crate::store::{Ingest, IngestOutcome, IngestStore, StoreError, StoreResult};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use tokio::sync::{Mutex, mpsc, oneshot};

/// What handles one batch: every input answered, in order.
pub type Handler<I, O> = Arc<dyn Fn(Vec<I>) -> Pin<Box<dyn Future<Output = Vec<O>> + Send>> + Send + Sync>;

/// What writes one batch: the store's `events_ingest_batch`, or in the tests
/// a stand-in that fails the way a store can.
pub type WriteBatch = Handler<Ingest, StoreResult<IngestOutcome>>;

/// How many requests one transaction takes at most.
pub const MAX_BATCH: usize = 64;

struct Pending<I, O> {
    input: I,
    answer: oneshot::Sender<O>,
}

/// Concurrent callers' inputs gathered into batches for one handler: the
/// group commit's writers, and the reads every new request makes before it
/// is planned (one statement for the batch, not one per request). Under
/// light load an input finds a worker idle and goes alone at once; under
/// load the inputs that arrive while one batch is in hand form the next.
/// Dropping it lets the workers finish the batches they hold and stop.
pub struct Gather<I, O> {
    /// One queue that every worker takes from, or a queue of its own for
    /// each worker ([`Gather::sharded`]).
    queues: Vec<mpsc::Sender<Pending<I, O>>>,
    /// Which queue an input goes to, when there are several.
    shard: Option<fn(&I) -> u64>,
    /// What the batches are, for the log line of a batch that panicked.
    what: &'static str,
}

impl<I: Send + 'static, O: Send + 'static> Gather<I, O> {
    /// Starts `workers` workers (each a batch at a time) that hand each
    /// batch of at most `max` inputs to `handler`, each worker taking
    /// whatever is waiting.
    pub fn start(what: &'static str, handler: Handler<I, O>, workers: usize, max: usize) -> Gather<I, O> {
        let workers = workers.max(1);
        // Enough room for every worker's next batch; beyond it, callers wait
        // (backpressure reaches the HTTP connections).
        let (queue, waiting) = mpsc::channel(max * workers * 2);
        let waiting = Arc::new(Mutex::new(waiting));
        for _ in 0..workers {
            tokio::spawn(work(what, handler.clone(), waiting.clone(), max));
        }
        Gather { queues: vec![queue], shard: None, what }
    }

    /// Starts `workers` workers as [`Gather::start`] does, each with a queue
    /// of its own: an input goes to the worker `shard` names, so inputs with
    /// the same shard are handled one batch at a time, never in two batches
    /// at once.
    pub fn sharded(
        what: &'static str,
        handler: Handler<I, O>,
        workers: usize,
        max: usize,
        shard: fn(&I) -> u64,
    ) -> Gather<I, O> {
        let queues = (0..workers.max(1))
            .map(|_| {
                let (queue, waiting) = mpsc::channel(max * 2);
                tokio::spawn(work(what, handler.clone(), Arc::new(Mutex::new(waiting)), max));
                queue
            })
            .collect();
        Gather { queues, shard: Some(shard), what }
    }

    /// This input's own answer, once its batch is handled; `None` when the
    /// workers have stopped, its batch panicked, or the handler left it
    /// unanswered.
    pub async fn call(&self, input: I) -> Option<O> {
        let at = self.shard.map_or(0, |shard| (shard(&input) % self.queues.len() as u64) as usize);
        let (answer, outcome) = oneshot::channel();
        self.queues[at].send(Pending { input, answer }).await.ok()?;
        outcome.await.ok()
    }

    /// What the batches are.
    pub fn what(&self) -> &'static str {
        self.what
    }
}

/// One worker: take what is waiting (at least one input, at most a batch),
/// handle it, answer each caller, repeat.
async fn work<I: Send + 'static, O: Send + 'static>(
    what: &'static str,
    handler: Handler<I, O>,
    waiting: Arc<Mutex<mpsc::Receiver<Pending<I, O>>>>,
    max: usize,
) {
    let mut batch = Vec::with_capacity(max);
    loop {
        // Only the taking is shared between workers; each handles on its own.
        let taken = waiting.lock().await.recv_many(&mut batch, max).await;
        if taken == 0 {
            return;
        }
        let (inputs, answers): (Vec<I>, Vec<_>) = batch.drain(..).map(|p| (p.input, p.answer)).unzip();
        // Each batch in a task of its own: a panic in it fails that batch's
        // callers (their answers are dropped, so each gets an error and none
        // was answered as done), and this worker goes on. A writer that died
        // with the panic would leave SQLite's one writer gone and every later
        // request failing until a restart. The handler is called inside the
        // task too, so a panic while it builds its future is the batch's.
        let handle = handler.clone();
        let outputs = match tokio::spawn(async move { handle(inputs).await }).await {
            Ok(outputs) => outputs,
            Err(e) => {
                tracing::error!(error = %e, batch = what, requests = answers.len(), "a batch panicked; its requests failed");
                continue;
            }
        };
        // An input the handler left unanswered gets no answer: its caller
        // sees the sender dropped, an error, never another input's answer.
        if outputs.len() != answers.len() {
            tracing::error!(
                batch = what,
                requests = answers.len(),
                answers = outputs.len(),
                "a batch handler answered a different number of requests than it was given"
            );
        }
        for (answer, output) in answers.into_iter().zip(outputs) {
            // A caller that went away is handled all the same; the answer has
            // no one to go to.
            let _ = answer.send(output);
        }
    }
}

/// Group commit: the queue in front of the ingest writers.
pub struct GroupCommit(Gather<Ingest, StoreResult<IngestOutcome>>);

impl GroupCommit {
    /// Starts `writers` writers (each a transaction at a time) on `store`.
    pub fn start(store: Arc<dyn IngestStore>, writers: usize) -> GroupCommit {
        GroupCommit::start_with(
            Arc::new(move |batch| {
                let store = store.clone();
                Box::pin(async move { store.events_ingest_batch(batch).await })
            }),
            writers,
        )
    }

    /// Starts `writers` writers that write each batch with `write_batch`,
    /// each request going to the writer its event key names.
    pub fn start_with(write_batch: WriteBatch, writers: usize) -> GroupCommit {
        GroupCommit(Gather::sharded("ingest", write_batch, writers, MAX_BATCH, event_shard))
    }

    /// The request's own outcome, once its rows are durable.
    pub async fn ingest(&self, ingest: Ingest) -> StoreResult<IngestOutcome> {
        self.0.call(ingest).await.unwrap_or_else(|| Err(stopped(self.0.what())))
    }
}

/// The writer a request goes to: every request of one event to the same one.
fn event_shard(ingest: &Ingest) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    BuildHasherDefault::<DefaultHasher>::default().hash_one(&ingest.event_key)
}

/// The error of a caller whose batch gave it no answer.
pub fn stopped(what: &'static str) -> StoreError {
    StoreError::Unanswered(what)
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

    /// How many inputs wait in a gatherer's queues, taken by no worker yet.
    fn waiting<I, O>(g: &Gather<I, O>) -> usize {
        g.queues.iter().map(|q| q.max_capacity() - q.capacity()).sum()
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

    /// The sizes of the batches a handler was given, in order.
    type Sizes = Arc<std::sync::Mutex<Vec<usize>>>;

    /// A gatherer of numbers whose batches wait until the test opens the
    /// gate, answered by `answer`; and the sizes of the batches it handled.
    fn gated(
        answer: fn(Vec<u32>) -> Vec<u32>,
        max: usize,
    ) -> (Arc<Gather<u32, u32>>, tokio::sync::watch::Sender<bool>, Sizes) {
        let (release, gate) = tokio::sync::watch::channel(false);
        let sizes = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = sizes.clone();
        let handler: Handler<u32, u32> = Arc::new(move |batch: Vec<u32>| {
            seen.lock().unwrap().push(batch.len());
            let mut gate = gate.clone();
            Box::pin(async move {
                let _ = gate.wait_for(|open| *open).await;
                answer(batch)
            })
        });
        (Arc::new(Gather::start("test", handler, 1, max)), release, sizes)
    }

    /// Calls `gather` with each number in a task of its own once the one
    /// before has been taken or is waiting in the queue.
    async fn call_each(
        gather: &Arc<Gather<u32, u32>>,
        sizes: &std::sync::Mutex<Vec<usize>>,
        numbers: std::ops::RangeInclusive<u32>,
    ) -> Vec<tokio::task::JoinHandle<Option<u32>>> {
        let mut handles = Vec::new();
        for n in numbers {
            let g = gather.clone();
            handles.push(tokio::spawn(async move { g.call(n).await }));
            // Wait until it is in a batch or in the queue.
            let before = sizes.lock().unwrap().iter().sum::<usize>() + waiting(gather);
            while sizes.lock().unwrap().iter().sum::<usize>() + waiting(gather) == before {
                tokio::task::yield_now().await;
            }
        }
        handles
    }

    #[tokio::test]
    async fn inputs_that_arrive_while_a_batch_is_in_hand_form_the_next_one() {
        let (gather, release, sizes) = gated(|batch| batch.iter().map(|n| n * 10).collect(), 4);
        // The first goes alone at once (nothing waits for company); six
        // arrive while it is in hand: the next batches take four, then two.
        let handles = call_each(&gather, &sizes, 1..=7).await;
        release.send_replace(true);
        for (n, handle) in (1..=7).zip(handles) {
            assert_eq!(handle.await.unwrap(), Some(n * 10), "each caller gets its own answer");
        }
        assert_eq!(*sizes.lock().unwrap(), vec![1, 4, 2]);
    }

    /// With two writers, the requests of an event in a batch in hand wait for
    /// it, even while the other writer is free: two transactions writing one
    /// event's rows at once deadlocked on Postgres. Another event's request
    /// goes to the other writer and is answered meanwhile.
    #[tokio::test]
    async fn an_events_requests_are_never_in_two_batches_at_once() {
        let (release, gate) = tokio::sync::watch::channel(false);
        let batches: Arc<std::sync::Mutex<Vec<Vec<String>>>> = Arc::default();
        let seen = batches.clone();
        let commits = Arc::new(GroupCommit::start_with(
            Arc::new(move |batch: Vec<Ingest>| {
                let held = batch.iter().any(|r| r.identity == "a-1");
                seen.lock().unwrap().push(batch.iter().map(|r| r.identity.clone()).collect());
                let mut gate = gate.clone();
                Box::pin(async move {
                    if held {
                        let _ = gate.wait_for(|open| *open).await;
                    }
                    batch.iter().map(|_| Ok(IngestOutcome::Mismatch)).collect()
                })
            }),
            2,
        ));
        // Requests of event `ek-a`, and of an event the other writer takes.
        let of = |event: &str, identity: &str| Ingest { event_key: event.into(), ..request(identity) };
        let other = (0..)
            .map(|n| format!("ek-b{n}"))
            .find(|e| event_shard(&of(e, "b")) % 2 != event_shard(&of("ek-a", "a")) % 2)
            .unwrap();
        let batched = |n: usize| batches.lock().unwrap().iter().map(Vec::len).sum::<usize>() == n;
        let call = |r: Ingest| {
            let c = commits.clone();
            tokio::spawn(async move { c.ingest(r).await })
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let first = call(of("ek-a", "a-1"));
        while !batched(1) {
            tokio::task::yield_now().await;
        }
        let repeats = [call(of("ek-a", "a-2")), call(of("ek-a", "a-3"))];
        while waiting(&commits.0) < 2 {
            let taken = batches.lock().unwrap().clone();
            assert!(std::time::Instant::now() < deadline, "the repeats were not left waiting: batches {taken:?}");
            tokio::task::yield_now().await;
        }
        let elsewhere = call(of(&other, "b-1")).await.unwrap();
        assert_eq!(elsewhere.unwrap(), IngestOutcome::Mismatch, "the other writer answered");
        assert_eq!(*batches.lock().unwrap(), vec![vec!["a-1".to_string()], vec!["b-1".to_string()]]);
        release.send_replace(true);
        first.await.unwrap().unwrap();
        for repeat in repeats {
            repeat.await.unwrap().unwrap();
        }
        assert_eq!(batches.lock().unwrap()[2], ["a-2", "a-3"], "the repeats went together, after the first");
    }

    #[tokio::test]
    async fn an_input_its_handler_left_unanswered_gets_no_answer_not_anothers() {
        let (gather, release, sizes) = gated(|batch| vec![batch[0]], 8);
        let handles = call_each(&gather, &sizes, 1..=3).await;
        release.send_replace(true);
        let mut answers = Vec::new();
        for handle in handles {
            answers.push(handle.await.unwrap());
        }
        assert_eq!(answers, vec![Some(1), Some(2), None]);
        assert_eq!(*sizes.lock().unwrap(), vec![1, 2]);
        // Group commit answers such a request with an error, never as written.
        let commits = GroupCommit::start_with(Arc::new(|_batch: Vec<Ingest>| Box::pin(async { Vec::new() })), 1);
        let err = commits.ingest(request("a")).await.unwrap_err();
        assert!(matches!(err, StoreError::Unanswered("ingest")), "{err}");
    }

    #[tokio::test]
    async fn a_handler_that_panics_before_its_future_runs_fails_only_its_batch() {
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = calls.clone();
        let gather: Gather<u32, u32> = Gather::start(
            "test",
            Arc::new(move |batch: Vec<u32>| {
                assert!(seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst) > 0, "the handler fell over");
                Box::pin(async move { batch })
            }),
            1,
            8,
        );
        assert_eq!(gather.call(1).await, None);
        assert_eq!(gather.call(2).await, Some(2), "the one worker is still there");
    }
}
