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
//! them now would let a later message win, so they wait for redelivery too,
//! and it tells them when its own redelivery is due. A message held back is
//! redelivered after that ([`hold_back`]), whatever its own delivery count
//! says: with the first at its third delivery (Nak'd for 4 s) and the second
//! at its first (1 s), the second would otherwise come back first, find
//! nothing ahead of it and win.

use super::{Request, identify_for_order};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// How much later than the message ahead of it a held-back message is
/// redelivered: time for the first to be pulled and take its turn again.
pub const MARGIN: Duration = Duration::from_secs(1);

/// How a turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The message got its verdict (accepted, or refused and recorded).
    Decided,
    /// It will be redelivered, by `at` at the latest (this process's clock).
    Redelivered { at: Instant },
}

/// What the turns ahead of a message came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ahead {
    /// Each reached a verdict (or there was none).
    Decided,
    /// One at least will be redelivered, the last of them by `until`.
    Redelivered { until: Instant },
}

/// How long to Nak a message held back behind one redelivered by `until`,
/// its own delay being `own`: until after that one, so that the first comes
/// back first.
pub fn hold_back(own: Duration, until: Instant, now: Instant) -> Duration {
    own.max(until.saturating_duration_since(now) + MARGIN)
}

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
    last: Mutex<HashMap<String, watch::Receiver<Option<Ended>>>>,
    /// When a message whose turn ended without a word (its task panicked)
    /// is redelivered at the latest, from then: the bus's `ack_wait`.
    unended: Duration,
}

/// One message's place: what it waits for and how it tells those after it.
pub struct Turn {
    ahead: Vec<watch::Receiver<Option<Ended>>>,
    own: watch::Sender<Option<Ended>>,
    keys: Vec<String>,
    queue: Arc<InOrder>,
}

impl InOrder {
    /// `unended`: how long the bus takes at most to redeliver a message that
    /// got neither an ack nor a Nak (its `ack_wait`).
    pub fn new(unended: Duration) -> InOrder {
        InOrder { last: Mutex::default(), unended }
    }

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
    /// identities has ended, and says what they came to.
    pub async fn wait(&mut self) -> Ahead {
        let mut ahead = Ahead::Decided;
        for turn in &mut self.ahead {
            let ended = match turn.wait_for(Option::is_some).await {
                Ok(ended) => *ended,
                Err(_) => None,
            };
            // Ended without saying (cannot happen: a dropped turn says so).
            let ended = ended.unwrap_or(Ended::Redelivered { at: Instant::now() + self.queue.unended });
            if let Ended::Redelivered { at } = ended {
                ahead = match ahead {
                    Ahead::Redelivered { until } => Ahead::Redelivered { until: until.max(at) },
                    Ahead::Decided => Ahead::Redelivered { until: at },
                };
            }
        }
        ahead
    }

    /// Ends the turn: [`Ended::Decided`] when the message got its verdict,
    /// [`Ended::Redelivered`] when it was Nak'd (by when it comes back).
    pub fn end(self, ended: Ended) {
        self.own.send_replace(Some(ended));
    }
}

impl Drop for Turn {
    /// The identities this turn was the last under are free again. A turn
    /// dropped before it ended (its task panicked: no ack, no Nak) tells
    /// those after it that its message comes back after `ack_wait`.
    fn drop(&mut self) {
        let unended = Ended::Redelivered { at: Instant::now() + self.queue.unended };
        self.own.send_if_modified(|ended| ended.is_none() && ended.replace(unended).is_none());
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
                assert_eq!(second.wait().await, Ahead::Decided);
                f.lock().unwrap().get_or_insert("second");
                second.end(Ended::Decided);
            });
            let f = frozen.clone();
            let earlier = tokio::spawn(async move {
                assert_eq!(first.wait().await, Ahead::Decided, "nothing ahead of the first");
                tokio::time::sleep(Duration::from_millis(2)).await;
                f.lock().unwrap().get_or_insert("first");
                first.end(Ended::Decided);
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
        assert_eq!(waited.ok(), Some(Ahead::Decided), "nothing ahead of it");
    }

    #[tokio::test]
    async fn the_same_event_under_another_key_waits_too() {
        let queue = Arc::new(InOrder::default());
        let first = queue.take(keys(&["default|key:a", "event:e1"]));
        let mut second = queue.take(keys(&["event:e1"]));
        assert!(tokio::time::timeout(Duration::from_millis(20), second.wait()).await.is_err(), "it waits");
        first.end(Ended::Decided);
        assert_eq!(second.wait().await, Ahead::Decided);
    }

    /// A first message that will be redelivered (its store failed) has no
    /// verdict yet: the second is told so, and when the first comes back,
    /// and waits for redelivery too rather than winning. So is one whose
    /// task died without a word (it comes back after `ack_wait`).
    #[tokio::test]
    async fn a_turn_ended_without_a_verdict_holds_back_the_ones_after_it() {
        let queue = Arc::new(InOrder::new(Duration::from_secs(30)));
        let first = queue.take(keys(&["event:e1"]));
        let mut second = queue.take(keys(&["event:e1"]));
        let back = Instant::now() + Duration::from_secs(4);
        first.end(Ended::Redelivered { at: back });
        assert_eq!(second.wait().await, Ahead::Redelivered { until: back });
        let dies = queue.take(keys(&["event:e2"]));
        let mut after = queue.take(keys(&["event:e2"]));
        let dropped = Instant::now();
        drop(dies);
        let Ahead::Redelivered { until } = after.wait().await else { panic!("the first has no verdict") };
        assert!(until >= dropped + Duration::from_secs(30) && until <= Instant::now() + Duration::from_secs(30));
    }

    /// The first message at its third delivery is Nak'd for 4 s, the second
    /// at its first would be for 1 s: held back, it is Nak'd until after the
    /// first comes back, so the first takes its turn again first. Before, the
    /// second came back first, found nothing ahead of it, and its body won.
    #[tokio::test]
    async fn a_message_held_back_comes_back_after_the_one_ahead_of_it() {
        let queue = Arc::new(InOrder::default());
        let first = queue.take(keys(&["default|key:k"]));
        let mut second = queue.take(keys(&["default|key:k"]));
        let mut third = queue.take(keys(&["default|key:k"]));
        let now = Instant::now();
        let (first_nak, own_nak) = (Duration::from_secs(4), Duration::from_secs(1));
        first.end(Ended::Redelivered { at: now + first_nak });
        let Ahead::Redelivered { until } = second.wait().await else { panic!("the first has no verdict") };
        let second_nak = hold_back(own_nak, until, now);
        assert!(second_nak >= first_nak + MARGIN, "the second is Nak'd for {second_nak:?}");
        // A third behind the second waits for the second's redelivery in turn.
        second.end(Ended::Redelivered { at: now + second_nak });
        let Ahead::Redelivered { until } = third.wait().await else { panic!("the second has no verdict") };
        assert!(hold_back(own_nak, until, now) >= second_nak + MARGIN);
        // Its own, longer delay is kept; a redelivery already due leaves the margin.
        assert_eq!(hold_back(Duration::from_secs(60), now + first_nak, now), Duration::from_secs(60));
        assert_eq!(hold_back(Duration::ZERO, now, now + Duration::from_secs(9)), MARGIN);
    }
}
