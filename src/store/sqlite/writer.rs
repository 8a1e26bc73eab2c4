//! The thread SQLite's writer transactions run on. The one write connection
//! is shared by ingest, claims and outcomes, and each statement of a
//! transaction is a hand-off to sqlx's connection thread and back. On the
//! server's runtime, the task holding the transaction rejoins the run queue
//! after every statement behind every HTTP request in flight, so under load
//! the writer sat idle between statements while no transaction could start.
//! Here the hot transactions (an ingest batch, a claim, a batch of outcomes)
//! run on a runtime of their own, on a thread of their own, where nothing
//! else waits in line: the writer's transactions are as long as their
//! statements, not as long as the server's queue. The claims, the outcomes
//! and the all-new ingest batches go further: [`super::commits`] runs them
//! here without a hand-off a statement, and commits those waiting together
//! at once.

use super::super::{StoreError, StoreResult};
use std::future::Future;
use tokio::runtime::{Builder, Handle};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub(super) struct WriterThread {
    handle: Handle,
    /// Dropped (with the store) to end the thread.
    stop: Option<oneshot::Sender<()>>,
}

impl WriterThread {
    pub(super) fn start() -> StoreResult<WriterThread> {
        let unstarted = |e: std::io::Error| StoreError::Unreachable(format!("the SQLite writer's thread: {e}"));
        let runtime = Builder::new_current_thread().enable_all().build().map_err(unstarted)?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("herald-sqlite-writer".into())
            .spawn(move || {
                // Whatever is still running when the store goes is dropped
                // with the runtime, as it would be with the server's.
                runtime.block_on(async {
                    let _ = stopped.await;
                });
            })
            .map_err(unstarted)?;
        Ok(WriterThread { handle, stop: Some(stop) })
    }

    /// Runs `work` on the writer's thread for as long as the thread runs.
    pub(super) fn spawn(&self, work: impl Future<Output = ()> + Send + 'static) {
        self.handle.spawn(work);
    }

    /// Runs `work` on the writer's thread and waits for it. A caller that
    /// stops waiting stops the work, as it would stop work of its own: its
    /// transaction is dropped at its next statement and rolled back (a claim
    /// a stopping worker gave up leases nothing).
    pub(super) async fn run<T: Send + 'static>(
        &self,
        work: impl Future<Output = StoreResult<T>> + Send + 'static,
    ) -> StoreResult<T> {
        let mut task = AbortOnDrop(self.handle.spawn(work));
        match (&mut task.0).await {
            Ok(result) => result,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => Err(StoreError::Unanswered("SQLite writer")),
        }
    }
}

/// A task on the writer's thread, stopped if no one waits for it any more.
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Drop for WriterThread {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    /// Waits (up to five seconds) until `done` says so.
    async fn until(what: &str, done: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !done() {
            assert!(Instant::now() < deadline, "gave up waiting: {what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn work_runs_on_the_writers_thread_and_its_answer_comes_back() {
        let writer = WriterThread::start().unwrap();
        let name = writer.run(async { Ok(std::thread::current().name().map(str::to_string)) }).await.unwrap();
        assert_eq!(name.as_deref(), Some("herald-sqlite-writer"));
        let refused: StoreResult<()> = writer.run(async { Err(StoreError::Corrupt("no".into())) }).await;
        assert!(matches!(refused, Err(StoreError::Corrupt(_))), "{refused:?}");
    }

    #[tokio::test]
    async fn the_thread_ends_with_its_store() {
        let writer = WriterThread::start().unwrap();
        // The writer's own thread, by its id: /proc/thread-self is
        // "PID/task/TID" for the thread that reads it.
        let task = writer.run(async { Ok(std::fs::read_link("/proc/thread-self").unwrap()) }).await.unwrap();
        let task = std::path::Path::new("/proc").join(task);
        assert!(task.exists(), "{} is the running writer's thread", task.display());
        drop(writer);
        until("the writer's thread to end", || !task.exists()).await;
    }

    #[tokio::test]
    async fn work_its_caller_stops_waiting_for_is_stopped_too() {
        struct Flag(Arc<AtomicBool>);
        impl Drop for Flag {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let writer = WriterThread::start().unwrap();
        let (dropped, started) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        let (flag, begun) = (Flag(dropped.clone()), started.clone());
        let work = writer.run(async move {
            let _flag = flag;
            begun.store(true, Ordering::SeqCst);
            std::future::pending::<()>().await;
            Ok(())
        });
        let mut work = Box::pin(work);
        // Driven until the work has begun on the writer's thread, then dropped.
        tokio::select! {
            _ = &mut work => panic!("pending work answered"),
            _ = until("the work to begin", || started.load(Ordering::SeqCst)) => {}
        }
        drop(work);
        until("the abandoned work to be dropped", || dropped.load(Ordering::SeqCst)).await;
    }

    #[tokio::test]
    #[should_panic(expected = "a bug in the work")]
    async fn a_panic_in_the_work_is_the_callers() {
        let writer = WriterThread::start().unwrap();
        let _: StoreResult<()> = writer.run(async { panic!("a bug in the work") }).await;
    }
}
