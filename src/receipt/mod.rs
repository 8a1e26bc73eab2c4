//! Delivery receipts: what a provider says became of a message after it
//! accepted it. Each receipt is kept as a row beside the attempts (the ledger
//! stays append-only); the intent's delivery status is the furthest one its
//! receipts have reached, because callbacks arrive out of order. A bounce or a
//! failure makes the sent intent a dead letter; a bounce or a complaint puts
//! the address on the tenant's suppression list.

pub mod generic;
pub mod ses;
pub mod sns;
pub mod twilio;

pub use crate::lifecycle::receipt::{Consequence, DeliveryStatus, advances, consequence, current, ends_retry};

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
