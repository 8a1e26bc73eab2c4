//! Stream order among messages handled at once. A bus hands Herald a batch
//! of messages that are planned and stored concurrently; two of them with the
//! same request identity (or the same event) must still be decided in the
//! order the stream holds them, so that the first wins, as over HTTP where
//! the second request comes after the first's answer. Each message takes a
//! [`Turn`] in stream order under its identities ([`identities`]); a turn
//! waits for the turns taken before it under any of the same identities, and
//! messages that share none go on at once.
//!
//! A turn that ends without a verdict (the store failed and the message will
//! be redelivered, or its task panicked) tells the turns after it: deciding
//! them now would let a later message win, so they wait for redelivery too.

use super::{Request, identify_for_order};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// The identities under which a message must wait for earlier ones: its
/// request identity when it has an `Idempotency-Key`, and its event key when
/// the body parses as an event. A body that does not parse has no event key
/// (it is refused on its own, whatever came before).
pub fn identities(request: &Request<'_>) -> Vec<String> {
    let tenant = request.tenant.as_str();
    let mut ids: Vec<String> = request.idempotency_key.map(|k| format!("{tenant}|key:{k}")).into_iter().collect();
    if let Some(event_key) = identify_for_order(request) {
        ids.push(format!("event:{event_key}"));
    }
    ids
}

/// The last turn taken under each identity still in hand.
#[derive(Default)]
pub struct InOrder {
    last: Mutex<HashMap<String, watch::Receiver<Option<bool>>>>,
}

/// One message's place: what it waits for and how it tells those after it.
pub struct Turn {
    ahead: Vec<watch::Receiver<Option<bool>>>,
    own: watch::Sender<Option<bool>>,
    keys: Vec<String>,
    queue: Arc<InOrder>,
}

impl InOrder {
    /// Takes the next turn under `keys`. Call it in stream order (it does not
    /// wait; [`Turn::wait`] does).
    pub fn take(self: &Arc<Self>, mut keys: Vec<String>) -> Turn {
        keys.sort_unstable();
        keys.dedup();
        let (own, rx) = watch::channel(None);
        let mut last = self.last.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let ahead = keys.iter().filter_map(|k| last.insert(k.clone(), rx.clone())).collect();
        Turn { ahead, own, keys, queue: self.clone() }
    }

    /// How many identities have a turn in hand.
    pub fn in_hand(&self) -> usize {
        self.last.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).len()
    }
}

impl Turn {
    /// Waits until every turn taken before this one under one of its
    /// identities has ended; true when each of them reached a verdict.
    pub async fn wait(&mut self) -> bool {
        let mut decided = true;
        for ahead in &mut self.ahead {
            decided &= match ahead.wait_for(Option::is_some).await {
                Ok(verdict) => verdict.unwrap_or(false),
                // Ended without saying: its task panicked.
                Err(_) => false,
            };
        }
        decided
    }

    /// Ends the turn: `decided` when the message got its verdict (accepted,
    /// or refused and recorded), false when it will be redelivered.
    pub fn end(self, decided: bool) {
        self.own.send_replace(Some(decided));
    }
}

impl Drop for Turn {
    /// The identities this turn was the last under are free again.
    fn drop(&mut self) {
        let mut last = self.queue.last.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let own = self.own.subscribe();
        for k in &self.keys {
            if last.get(k).is_some_and(|rx| rx.same_channel(&own)) {
                last.remove(k);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn keys(ks: &[&str]) -> Vec<String> {
        ks.iter().map(|k| k.to_string()).collect()
    }

    /// Two messages with one identity, the first slow to plan: whatever the
    /// scheduler does, the first decides first and wins, every time.
    #[tokio::test]
    async fn the_first_of_two_with_one_identity_decides_first_however_slow() {
        for _ in 0..20 {
            let queue = Arc::new(InOrder::default());
            let frozen: Arc<Mutex<Option<&str>>> = Arc::default();
            let mut first = queue.take(keys(&["default|key:k"]));
            let mut second = queue.take(keys(&["default|key:k", "event:e2"]));
            let f = frozen.clone();
            let later = tokio::spawn(async move {
                assert!(second.wait().await);
                f.lock().unwrap().get_or_insert("second");
                second.end(true);
            });
            let f = frozen.clone();
            let earlier = tokio::spawn(async move {
                assert!(first.wait().await, "nothing ahead of the first");
                tokio::time::sleep(Duration::from_millis(2)).await;
                f.lock().unwrap().get_or_insert("first");
                first.end(true);
            });
            later.await.unwrap();
            earlier.await.unwrap();
            assert_eq!(*frozen.lock().unwrap(), Some("first"));
            assert_eq!(queue.in_hand(), 0, "every identity is free again");
        }
    }

    #[tokio::test]
    async fn messages_that_share_no_identity_do_not_wait() {
        let queue = Arc::new(InOrder::default());
        let _first = queue.take(keys(&["default|key:a", "event:e1"]));
        let mut other = queue.take(keys(&["default|key:b", "event:e2"]));
        let waited = tokio::time::timeout(Duration::from_secs(1), other.wait()).await;
        assert_eq!(waited.ok(), Some(true), "nothing ahead of it");
    }

    #[tokio::test]
    async fn the_same_event_under_another_key_waits_too() {
        let queue = Arc::new(InOrder::default());
        let first = queue.take(keys(&["default|key:a", "event:e1"]));
        let mut second = queue.take(keys(&["event:e1"]));
        assert!(tokio::time::timeout(Duration::from_millis(20), second.wait()).await.is_err(), "it waits");
        first.end(true);
        assert!(second.wait().await);
    }

    /// A first message that will be redelivered (its store failed) has no
    /// verdict yet: the second is told so, and waits for redelivery too
    /// rather than winning. So is one whose task died without a word.
    #[tokio::test]
    async fn a_turn_ended_without_a_verdict_holds_back_the_ones_after_it() {
        let queue = Arc::new(InOrder::default());
        let first = queue.take(keys(&["event:e1"]));
        let mut second = queue.take(keys(&["event:e1"]));
        first.end(false);
        assert!(!second.wait().await);
        let dies = queue.take(keys(&["event:e2"]));
        let mut after = queue.take(keys(&["event:e2"]));
        drop(dies);
        assert!(!after.wait().await);
    }
}
