//! The in-app channel: Herald's own inbox. Delivery is a write to the inbox
//! table, idempotent per intent, that keeps one card per entity at its highest
//! version (DESIGN rule 4).

use super::{Delivery, Outcome, Provider, short_error};
use crate::intent::Reason;
use crate::store::{InboxDelivery, InboxStore};
use async_trait::async_trait;
use std::sync::Arc;
use std::time::Duration;

pub struct InApp {
    store: Arc<dyn InboxStore>,
    timeout: Duration,
}

impl InApp {
    /// `timeout` bounds the inbox write like any provider call.
    pub fn new(store: Arc<dyn InboxStore>, timeout: Duration) -> InApp {
        InApp { store, timeout }
    }
}

#[async_trait]
impl Provider for InApp {
    fn name(&self) -> &str {
        "in_app"
    }

    /// The inbox takes an intent once.
    fn dedupes_retries(&self) -> bool {
        true
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }

    async fn send(&self, d: &Delivery) -> Outcome {
        let Some(digest) = d.payload_digest.clone() else {
            return Outcome::Permanent {
                reason: Reason::TemplateError,
                status: None,
                error: "no rendered content".into(),
            };
        };
        let delivery = InboxDelivery {
            tenant: d.tenant.clone(),
            recipient_id: d.recipient_id.clone(),
            entity_type: d.entity_type.clone(),
            entity_id: d.entity_id.clone(),
            version: d.entity_version,
            occurred_at: d.occurred_at.clone(),
            intent_key: d.key.clone(),
            payload_digest: digest,
            now_us: crate::clock::micros(jiff::Timestamp::now()),
        };
        match self.store.inbox_deliver(delivery).await {
            Ok(()) => Outcome::Accepted { status: None, message_id: None },
            Err(e) => Outcome::Retryable {
                class: Reason::Unreachable,
                status: None,
                error: short_error(&format!("inbox write failed: {e}")),
                retry_after: None,
            },
        }
    }
}
