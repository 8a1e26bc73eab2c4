//! The reads a request makes before it is planned — its request record (is it
//! a replay?) and, when it is new, its recipients' directory entries with the
//! suppression entries of their addresses — gathered across concurrent
//! requests as group commit gathers their writes: one statement answers every
//! request waiting, where each request paid a round trip (and a statement's
//! parse, plan and execution) of its own.
//!
//! Request records are gathered on both backends: on SQLite a read has no
//! network round trip to share, but each statement is a hop to a connection's
//! thread, and a duplicate storm's concurrent requests all name one identity,
//! which a gathered read reads once. Directory reads are gathered on Postgres
//! only: SQLite has no statement that answers many of them at once, and one
//! read at a time through a gatherer would only queue what its pool of read
//! connections does side by side.
//!
//! A batch is read only once every request in it has arrived (a worker takes
//! what is waiting, then reads), so a replay's answer is never older than its
//! request: a client that saw its intent delivered cannot be told it is queued
//! by a read that began before it asked again.

use super::group::{Gather, MAX_BATCH, stopped};
use crate::store::{DirectoryRead, DirectoryRows, RequestLookup, RequestSeen, Store, StoreResult};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// A batch's answers, in order.
type Answers<O> = Pin<Box<dyn Future<Output = Vec<O>> + Send>>;

/// One kind of read, gathered: `read` answers a batch from the store.
fn gather<I: Send + 'static, O: Send + 'static>(
    what: &'static str,
    store: &Arc<dyn Store>,
    workers: usize,
    read: fn(Arc<dyn Store>, Vec<I>) -> Answers<O>,
) -> Gather<I, O> {
    let store = store.clone();
    Gather::start(what, Arc::new(move |batch| read(store.clone(), batch)), workers, MAX_BATCH)
}

pub struct Reads {
    store: Arc<dyn Store>,
    requests: Gather<RequestLookup, StoreResult<Option<RequestSeen>>>,
    directories: Option<Gather<DirectoryRead, StoreResult<DirectoryRows>>>,
}

impl Reads {
    /// Request records gathered by `workers` workers (one batch is read while
    /// the next gathers); directory reads straight from `store`.
    pub fn requests_gathered(store: Arc<dyn Store>, workers: usize) -> Reads {
        let requests = gather("request lookup", &store, workers, |store, lookups| {
            Box::pin(async move { store.requests_find(&lookups).await })
        });
        Reads { store, requests, directories: None }
    }

    /// Both kinds of read gathered, by `workers` workers each.
    pub fn gathered(store: Arc<dyn Store>, workers: usize) -> Reads {
        let directories = gather("directory read", &store, workers, |store, reads| {
            Box::pin(async move { store.directories_read(&reads).await })
        });
        Reads { directories: Some(directories), ..Reads::requests_gathered(store, workers) }
    }

    /// The answer already stored for this identity, if any.
    pub async fn request(&self, lookup: RequestLookup) -> StoreResult<Option<RequestSeen>> {
        let g = &self.requests;
        g.call(lookup).await.unwrap_or_else(|| Err(stopped(g.what())))
    }

    /// The directory entries and suppression entries a new request reads.
    pub async fn directory(&self, read: DirectoryRead) -> StoreResult<DirectoryRows> {
        match &self.directories {
            Some(g) => g.call(read).await.unwrap_or_else(|| Err(stopped(g.what()))),
            None => self.store.recipients_and_suppressions(&read.tenant, &read.ids, &read.hashes).await,
        }
    }
}
