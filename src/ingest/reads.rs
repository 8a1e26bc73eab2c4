//! The reads a request makes before it is planned — its request record (is it
//! a replay?) and, when it is new, its recipients' directory entries with the
//! suppression entries of their addresses — gathered across concurrent
//! requests as group commit gathers their writes: on Postgres one statement
//! answers every request waiting, where each request paid a round trip (and
//! a statement's parse, plan and execution) of its own.
//!
//! On SQLite the reads are not gathered: they go to a pool of local read
//! connections, with no network round trip to share, and one read at a time
//! through a gatherer would only queue them.

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
    gathered: Option<Gathered>,
}

struct Gathered {
    requests: Gather<RequestLookup, StoreResult<Option<RequestSeen>>>,
    directories: Gather<DirectoryRead, StoreResult<DirectoryRows>>,
}

impl Reads {
    /// Reads straight from `store`, one request at a time.
    pub fn direct(store: Arc<dyn Store>) -> Reads {
        Reads { store, gathered: None }
    }

    /// Reads gathered by `workers` workers of each kind (one batch is read
    /// while the next gathers).
    pub fn gathered(store: Arc<dyn Store>, workers: usize) -> Reads {
        let requests = gather("request lookup", &store, workers, |store, lookups| {
            Box::pin(async move { store.requests_find(&lookups).await })
        });
        let directories = gather("directory read", &store, workers, |store, reads| {
            Box::pin(async move { store.directories_read(&reads).await })
        });
        Reads { store, gathered: Some(Gathered { requests, directories }) }
    }

    /// The answer already stored for this identity, if any.
    pub async fn request(&self, lookup: RequestLookup) -> StoreResult<Option<RequestSeen>> {
        match &self.gathered {
            Some(g) => g.requests.call(lookup).await.unwrap_or_else(|| Err(stopped(g.requests.what()))),
            None => self.store.request_find(&lookup.tenant, &lookup.identity, &lookup.fingerprint).await,
        }
    }

    /// The directory entries and suppression entries a new request reads.
    pub async fn directory(&self, read: DirectoryRead) -> StoreResult<DirectoryRows> {
        match &self.gathered {
            Some(g) => g.directories.call(read).await.unwrap_or_else(|| Err(stopped(g.directories.what()))),
            None => self.store.recipients_and_suppressions(&read.tenant, &read.ids, &read.hashes).await,
        }
    }
}
