//! How far a message's delivery has come, by its provider's receipts, and
//! what a receipt that moved it does to the intent. The receipts themselves
//! are parsed and verified in [`crate::receipt`].

use super::Change;
use crate::intent::{Reason, State};
use serde::Serialize;
use std::fmt;

/// A message's delivery status, in Herald's words (each provider's are mapped
/// to these at the edge).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DeliveryStatus {
    /// The provider has it and has not handed it on yet.
    Queued,
    /// Handed to the carrier or the receiving mail server.
    Sent,
    Delivered,
    /// Not delivered this time (a handset off, a filter); the address may be fine.
    Undelivered,
    /// The provider gave up on it.
    Failed,
    /// The address does not exist or refuses mail for good (a hard bounce).
    Bounced,
    /// The recipient marked it as spam, or asked for no more.
    Complained,
}

impl DeliveryStatus {
    pub const ALL: [DeliveryStatus; 7] = [
        DeliveryStatus::Queued,
        DeliveryStatus::Sent,
        DeliveryStatus::Delivered,
        DeliveryStatus::Undelivered,
        DeliveryStatus::Failed,
        DeliveryStatus::Bounced,
        DeliveryStatus::Complained,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Queued => "queued",
            DeliveryStatus::Sent => "sent",
            DeliveryStatus::Delivered => "delivered",
            DeliveryStatus::Undelivered => "undelivered",
            DeliveryStatus::Failed => "failed",
            DeliveryStatus::Bounced => "bounced",
            DeliveryStatus::Complained => "complained",
        }
    }

    pub fn parse(s: &str) -> Option<DeliveryStatus> {
        DeliveryStatus::ALL.into_iter().find(|d| d.as_str() == s)
    }

    /// How far along a message is. The three ends a message can come to share
    /// a rank, so the first of them to arrive stands; a bounce and then a
    /// complaint are verdicts on the address and go beyond any of them.
    fn rank(self) -> u8 {
        match self {
            DeliveryStatus::Queued => 1,
            DeliveryStatus::Sent => 2,
            DeliveryStatus::Delivered | DeliveryStatus::Undelivered | DeliveryStatus::Failed => 3,
            DeliveryStatus::Bounced => 4,
            DeliveryStatus::Complained => 5,
        }
    }
}

impl fmt::Display for DeliveryStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether a receipt of `new` moves an intent whose status is `current`:
/// only forward, so a late `sent` never undoes a `delivered`.
pub fn advances(current: Option<DeliveryStatus>, new: DeliveryStatus) -> bool {
    current.is_none_or(|c| new.rank() > c.rank())
}

/// The furthest of the statuses a message's receipts have reached.
pub fn current<I: IntoIterator<Item = DeliveryStatus>>(applied: I) -> Option<DeliveryStatus> {
    applied.into_iter().max_by_key(|s| s.rank())
}

/// What a receipt that moved the status does beyond that.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Consequence {
    /// A sent intent becomes a dead letter with this reason.
    pub dead: Option<Reason>,
    /// The address goes on the tenant's suppression list with this reason.
    pub suppress: Option<Reason>,
}

pub fn consequence(status: DeliveryStatus) -> Consequence {
    let (dead, suppress) = match status {
        DeliveryStatus::Bounced => (Some(Reason::HardBounce), Some(Reason::AddressBounced)),
        DeliveryStatus::Complained => (None, Some(Reason::AddressComplained)),
        DeliveryStatus::Undelivered | DeliveryStatus::Failed => (Some(Reason::Undelivered), None),
        DeliveryStatus::Queued | DeliveryStatus::Sent | DeliveryStatus::Delivered => (None, None),
    };
    Consequence { dead, suppress }
}

/// Where an intent waiting for a retry goes when a receipt that moved its
/// status arrives: the provider had the message after all, so it is not sent
/// again. None when the intent is not waiting for a retry (never tried, in
/// flight, or already at an end).
pub fn ends_retry(state: State, attempts: i64, status: DeliveryStatus) -> Option<(State, Option<Reason>)> {
    if !matches!(state, State::Unknown | State::Queued) || attempts == 0 {
        return None;
    }
    Some(match consequence(status).dead {
        Some(reason) => (State::Dead, Some(reason)),
        None => (State::Sent, None),
    })
}

/// Whether a receipt is a publication of its own (`delivered`): one that
/// moved the status, the first time it is recorded.
pub fn publishes_delivered(status: DeliveryStatus, applied: bool) -> bool {
    applied && status == DeliveryStatus::Delivered
}

/// What a receipt that moved the status (and was not a repeat) does to its
/// intent, now in `state` after `attempts` tries, at `at`: ends a pending
/// retry (sent, or dead on a bounce or a failure), or makes a sent intent a
/// dead letter. An intent in flight keeps its own course, and the receipt
/// stays on record.
pub fn changes(key: &str, state: State, attempts: i64, status: DeliveryStatus, at: i64) -> Vec<Change> {
    let mut changes = Vec::new();
    let ended = ends_retry(state, attempts, status);
    if let Some((end, reason)) = ended {
        changes.push(Change::to(key, end, at).reason(reason));
    }
    if let Some(reason) = consequence(status).dead.filter(|_| state == State::Sent) {
        changes.push(Change::to(key, State::Dead, at).reason(Some(reason)));
    }
    changes
}

/// Why a receipt is refused: it can only describe a message a provider may
/// have taken. A receipt for anything else — an intent suppressed before any
/// attempt, held for quiet hours, an in-app card — would invent a delivery,
/// put an address never written to on the suppression list, or kill a card
/// no provider ever saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The channel has no provider receipts (in-app, webhook).
    ChannelWithoutReceipts,
    /// No attempt of the intent may have reached its provider: none was
    /// made, or every one ended without the provider taking the message.
    NeverTaken,
}

impl Refusal {
    pub fn explain(self) -> &'static str {
        match self {
            Refusal::ChannelWithoutReceipts => "its channel has no delivery receipts (only email and SMS do)",
            Refusal::NeverTaken => {
                "no attempt of it may have reached its provider (none accepted, unknown or in flight)"
            }
        }
    }
}

/// Whether a receipt may act on an intent of `channel` with `taken` attempts
/// that its provider may have accepted: `accepted`, `unknown`, or still in
/// flight (a fast provider's receipt can overtake the call's own answer).
pub fn refusal(channel: &str, taken: i64) -> Option<Refusal> {
    if !matches!(channel, "email" | "sms") {
        return Some(Refusal::ChannelWithoutReceipts);
    }
    (taken == 0).then_some(Refusal::NeverTaken)
}

/// A receipt's identity: the same callback twice is one receipt.
pub fn receipt_id(intent_key: &str, source: &str, provider_message_id: Option<&str>, provider_status: &str) -> String {
    let input = format!("receipt|{intent_key}|{source}|{}|{provider_status}", provider_message_id.unwrap_or(""));
    crate::event::identity::sha256_hex(input.as_bytes())[..32].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use DeliveryStatus::*;

    #[test]
    fn the_status_only_moves_forward() {
        assert!(advances(None, Queued));
        assert!(advances(Some(Queued), Sent));
        assert!(advances(Some(Sent), Delivered));
        assert!(!advances(Some(Delivered), Sent), "a late sent never undoes delivered");
        assert!(!advances(Some(Delivered), Queued));
        assert!(!advances(Some(Delivered), Delivered), "a repeat changes nothing");
        assert!(!advances(Some(Failed), Delivered), "the first end to arrive stands");
        assert!(advances(Some(Delivered), Bounced), "a later bounce is a verdict on the address");
        assert!(advances(Some(Bounced), Complained));
        assert!(!advances(Some(Complained), Bounced));
    }

    #[test]
    fn whatever_order_receipts_arrive_in_the_status_is_the_furthest() {
        let receipts = [Sent, Delivered, Queued];
        let mut status = None;
        for order in [[0, 1, 2], [2, 1, 0], [1, 0, 2], [1, 2, 0], [0, 2, 1], [2, 0, 1]] {
            status = None;
            for i in order {
                if advances(status, receipts[i]) {
                    status = Some(receipts[i]);
                }
            }
            assert_eq!(status, Some(Delivered), "{order:?}");
        }
        assert_eq!(current([Queued, Delivered, Sent]), status);
    }

    #[test]
    fn a_bounce_is_a_dead_letter_and_a_suppression_and_a_complaint_only_suppresses() {
        assert_eq!(
            consequence(Bounced),
            Consequence { dead: Some(Reason::HardBounce), suppress: Some(Reason::AddressBounced) }
        );
        assert_eq!(consequence(Complained), Consequence { dead: None, suppress: Some(Reason::AddressComplained) });
        assert_eq!(consequence(Failed).dead, Some(Reason::Undelivered));
        assert_eq!(consequence(Delivered), Consequence { dead: None, suppress: None });
    }

    #[test]
    fn a_receipt_ends_a_pending_retry_and_nothing_else() {
        assert_eq!(ends_retry(State::Unknown, 1, Delivered), Some((State::Sent, None)));
        assert_eq!(ends_retry(State::Queued, 2, Queued), Some((State::Sent, None)), "the provider has it");
        assert_eq!(ends_retry(State::Unknown, 1, Bounced), Some((State::Dead, Some(Reason::HardBounce))));
        assert_eq!(ends_retry(State::Unknown, 1, Failed), Some((State::Dead, Some(Reason::Undelivered))));
        assert_eq!(ends_retry(State::Queued, 0, Delivered), None, "never tried: nothing to end");
        assert_eq!(ends_retry(State::Sending, 1, Delivered), None, "in flight: its own outcome decides");
        assert_eq!(ends_retry(State::Sent, 1, Delivered), None);
        assert_eq!(ends_retry(State::Dead, 3, Delivered), None);
    }

    #[test]
    fn statuses_read_back_as_written() {
        for s in DeliveryStatus::ALL {
            assert_eq!(DeliveryStatus::parse(s.as_str()), Some(s));
        }
        assert_eq!(DeliveryStatus::parse("bounce"), None);
    }

    #[test]
    fn only_a_message_a_provider_may_have_taken_takes_a_receipt() {
        assert_eq!(refusal("in_app", 1), Some(Refusal::ChannelWithoutReceipts));
        assert_eq!(refusal("webhook", 3), Some(Refusal::ChannelWithoutReceipts));
        assert_eq!(refusal("email", 0), Some(Refusal::NeverTaken));
        assert_eq!(refusal("sms", 0), Some(Refusal::NeverTaken));
        assert_eq!(refusal("email", 1), None);
        assert_eq!(refusal("sms", 2), None);
    }
}
