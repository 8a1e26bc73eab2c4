//! The reads a request makes before it is planned — its request record (is it
//! a replay?) and, when it is new, its recipients' directory entries with the
//! suppression entries of their addresses — gathered across concurrent
//! requests as group commit gathers their writes: one statement answers every
//! request waiting, where each request paid a round trip (and a statement's
//! parse, plan and execution) of its own.
//!
//! Request records are gathered on both backends: on SQLite a read has no
//! network round trip to share, but a duplicate storm's concurrent requests
//! all name one identity, which a gathered read reads once. Directory reads
//! are gathered on Postgres only: on SQLite each request's runs where it is
//! asked, on a read connection of the store's own, and one read at a time
//! through a gatherer would only queue what the requests' own tasks do side
//! by side.
//!
//! A batch is read only once every request in it has arrived (a worker takes
//! what is waiting, then reads), so a replay's answer is never older than its
//! request: a client that saw its intent delivered cannot be told it is queued
//! by a read that began before it asked again.

use super::group::{Gather, MAX_BATCH, stopped};
use crate::ops::fastpath::{FastPath, Seen};
use crate::store::{DirectoryRead, DirectoryRows, IngestResponse, RequestLookup, RequestSeen, Store, StoreResult};
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

/// Request lookups, answered from Redis where it holds the exact repeat (one
/// `MGET` for the batch) and from the store for the rest (one read for
/// them); a replay the store answers is remembered in Redis for the next.
async fn requests_find(
    store: Arc<dyn Store>,
    fast: Option<Arc<FastPath>>,
    lookups: Vec<RequestLookup>,
) -> Vec<StoreResult<Option<RequestSeen>>> {
    let Some(fast) = fast else { return store.requests_find(&lookups).await };
    let ids: Vec<(&str, &str)> = lookups.iter().map(|l| (l.tenant.as_str(), l.identity.as_str())).collect();
    let stored = fast.lookup_many(&ids).await;
    let mut answers: Vec<Option<StoreResult<Option<RequestSeen>>>> = (stored.into_iter().zip(&lookups))
        .map(|(seen, l)| stored_replay(seen?, &l.fingerprint).map(|r| Ok(Some(RequestSeen::Replay(r)))))
        .collect();
    let misses: Vec<RequestLookup> =
        (lookups.iter().zip(&answers)).filter(|(_, a)| a.is_none()).map(|(l, _)| l.clone()).collect();
    if !misses.is_empty() {
        let mut read = store.requests_find(&misses).await.into_iter();
        for (lookup, answer) in misses.iter().zip(answers.iter_mut().filter(|a| a.is_none())) {
            let found = read.next().unwrap_or_else(|| Err(stopped("request lookup")));
            if let Ok(Some(RequestSeen::Replay(response))) = &found {
                remember(&fast, lookup, response).await;
            }
            *answer = Some(found);
        }
    }
    answers.into_iter().map(|a| a.unwrap_or_else(|| Err(stopped("request lookup")))).collect()
}

/// A replay answered from Redis alone: the answer stored for this identity
/// and fingerprint, as it was when it was stored (the way Stripe's
/// idempotency keys answer), with no database read. Only an exact repeat of
/// an accepted request can match; anything missing or unreadable falls
/// through to the database, which stays the authority.
fn stored_replay(seen: Seen, fingerprint: &str) -> Option<IngestResponse> {
    if seen.fingerprint != fingerprint {
        return None;
    }
    let mut response = serde_json::from_str::<IngestResponse>(&seen.response).ok()?;
    response.replayed = true;
    Some(response)
}

/// Keeps a replayed answer in Redis, so the next exact repeat is answered
/// there. Only a replay is kept, not a first answer: most events are never
/// posted twice, and a request that is not repeated should pay its share of
/// an `MGET`, not a `SET` too. A storm pays the database for its first
/// repeat only.
pub async fn remember(fast: &FastPath, lookup: &RequestLookup, response: &IngestResponse) {
    let text = serde_json::to_string(&IngestResponse { replayed: true, ..response.clone() }).unwrap_or_default();
    fast.remember(&lookup.tenant, &lookup.identity, &lookup.fingerprint, &text).await;
}

pub struct Reads {
    store: Arc<dyn Store>,
    requests: Gather<RequestLookup, StoreResult<Option<RequestSeen>>>,
    directories: Option<Gather<DirectoryRead, StoreResult<DirectoryRows>>>,
}

impl Reads {
    /// Request records gathered by `workers` workers (one batch is read while
    /// the next gathers); directory reads straight from `store`.
    /// With the Redis fast path, a batch asks Redis first ([`requests_find`]).
    pub fn requests_gathered(store: Arc<dyn Store>, workers: usize, fast: Option<Arc<FastPath>>) -> Reads {
        let reader = store.clone();
        let requests = Gather::start(
            "request lookup",
            Arc::new(move |lookups| Box::pin(requests_find(reader.clone(), fast.clone(), lookups)) as Answers<_>),
            workers,
            MAX_BATCH,
        );
        Reads { store, requests, directories: None }
    }

    /// Both kinds of read gathered, by `workers` workers each.
    pub fn gathered(store: Arc<dyn Store>, workers: usize, fast: Option<Arc<FastPath>>) -> Reads {
        let directories = gather("directory read", &store, workers, |store, reads| {
            Box::pin(async move { store.directories_read(&reads).await })
        });
        Reads { directories: Some(directories), ..Reads::requests_gathered(store, workers, fast) }
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
