//! Rows of delivery receipts and of the suppression list.

use crate::intent::Reason;
use crate::lifecycle::receipt::DeliveryStatus;

/// How a receipt names its intent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReceiptTarget {
    Key(String),
    /// The id the provider returned when it accepted an attempt.
    ProviderMessageId(String),
}

#[derive(Debug, Clone)]
pub struct NewReceipt {
    pub target: ReceiptTarget,
    /// Only an intent of this channel can be named (Twilio's receipts are SMS).
    pub channel: Option<String>,
    /// `twilio`, `generic`: where it came from.
    pub source: String,
    pub provider_message_id: Option<String>,
    pub status: DeliveryStatus,
    /// The provider's own word for it (`MessageStatus`), as written.
    pub provider_status: String,
    /// The provider's reason or error code, bounded.
    pub reason: Option<String>,
    pub now_us: i64,
    /// What a bounce or complaint's suppression entry is looked up by.
    pub suppression_key: crate::recipient::keyed::SuppressionKey,
}

#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ReceiptRow {
    pub id: String,
    pub intent_key: String,
    pub source: String,
    pub provider_message_id: Option<String>,
    pub status: String,
    pub provider_status: String,
    pub reason: Option<String>,
    pub received_at: i64,
    /// Whether it moved the intent's delivery status (a late one does not).
    pub applied: bool,
    /// Whether it ended a retry the intent was waiting for.
    pub ended_retry: bool,
}

/// What recording a receipt did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReceiptOutcome {
    /// No intent of that key, message id or channel.
    NotFound,
    /// The intent exists, but no message of it may have reached a provider
    /// (see [`crate::lifecycle::receipt::refusal`]): nothing was recorded or changed.
    Refused { intent_key: String, why: crate::lifecycle::receipt::Refusal },
    Recorded {
        intent_key: String,
        tenant: String,
        /// The intent's delivery status after this receipt.
        delivery_status: Option<DeliveryStatus>,
        /// It moved the status forward.
        applied: bool,
        /// The same receipt had been recorded before: nothing changed.
        duplicate: bool,
        /// The sent intent became a dead letter for this reason.
        dead: Option<Reason>,
        /// The address was put on the suppression list (new entry).
        suppressed: bool,
        /// The intent was waiting for a retry; the receipt ended it (the
        /// state it ended in is `sent`, or `dead` with `dead`'s reason).
        ended_retry: bool,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct SuppressionRow {
    pub tenant: String,
    /// What the entry is named by outside the store (see
    /// [`crate::recipient::keyed::entry_id`]); None only before the start-up
    /// that rekeys the list has run on a database of the old scheme.
    pub id: Option<String>,
    /// The keyed lookup of the address (HMAC, see [`crate::suppression`]),
    /// or the old unkeyed hash of an entry not yet rekeyed. Never shown.
    pub address_hash: String,
    /// The channel of the intent whose receipt put it there (email or sms).
    pub channel: crate::event::Channel,
    /// The address masked as views show it.
    pub masked: String,
    /// An email's domain.
    pub domain: Option<String>,
    /// [`Reason::AddressBounced`] or [`Reason::AddressComplained`].
    pub reason: Reason,
    /// The intent whose receipt put it there.
    pub source_intent: String,
    /// The provider's reason, as the receipt gave it.
    pub detail: Option<String>,
    pub created_at: i64,
}

/// A bus message that could not become an event, as it is recorded.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct RejectedMessage {
    /// Derived from the stream and the sequence (see [`RejectedMessage::id_of`]).
    pub id: String,
    pub tenant: String,
    pub stream: String,
    pub consumer: String,
    pub subject: String,
    pub stream_seq: i64,
    /// How many times the bus had delivered it.
    pub deliveries: i64,
    /// The HTTP status the API would have answered with the same request.
    pub status: i32,
    /// The API's error code (`malformed_json`, `invalid_field`, …), or
    /// `max_deliver_exceeded`.
    pub code: String,
    pub message: String,
    /// None once retention's `payloads` age has passed.
    pub body: Option<String>,
    pub created_at: i64,
}

impl RejectedMessage {
    /// One id per message of a stream: recording it again is a no-op.
    pub fn id_of(stream: &str, stream_seq: i64) -> String {
        crate::event::identity::sha256_hex(format!("rejected|{stream}|{stream_seq}").as_bytes())[..32].to_string()
    }
}
