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

pub use crate::lifecycle::receipt::{
    Consequence, DeliveryStatus, Refusal, advances, consequence, current, ends_retry, receipt_id, refusal,
};
