//! The status outbox (`publications`, migration 0041): a row per published
//! transition of an intent ([`crate::lifecycle::publishes`], and a
//! `delivered` receipt), read by the bus publisher ([`crate::publish`]).
//!
//! The rows are written by the store's one writer of state changes
//! (`intents_apply` in each backend, and the intents' inserts), in the
//! statement or transaction that makes the change, never by a trigger. They
//! are written once the deployment publishes: when the `settings` table holds
//! the row [`PUBLICATIONS_SETTING`], which a process with `[publish.nats]`
//! writes at start-up ([`enable`]). Every process reads it in the statement
//! that writes a publication, so one without the bus configured (an API-only
//! process) publishes what it changes as well, and a connection pooler has
//! no session setting to lose.
//!
//! Each backend writes out the statements that insert publications: a row's
//! `msg_id` is `key:state:n` (the intent's publication number), and a row
//! written already (the same transition offered twice) is kept as it was,
//! with its id (`ON CONFLICT (msg_id) DO NOTHING`). The condition they carry,
//! `EXISTS (SELECT 1 FROM settings WHERE name = 'publications')`, is
//! [`PUBLICATIONS_SETTING`].

use super::{Store, StoreResult};

/// The `settings` row that makes every write of a published transition
/// write its publication too. Removing it stops new rows (docs/bus.md).
pub const PUBLICATIONS_SETTING: &str = "publications";

/// Marks the deployment as publishing, from now on and for every process
/// (see the module's notes); a second call changes nothing.
pub async fn enable(store: &dyn Store) -> StoreResult<()> {
    store.setting_get_or_insert(PUBLICATIONS_SETTING, "on").await?;
    Ok(())
}

/// One transition waiting to be (or already) published.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Publication {
    /// `key:state:n`, the bus's `Nats-Msg-Id`: n is the intent's publication
    /// number (1 for its first, one more for each after), so every transition
    /// has its own id and a re-publication of one keeps it.
    pub msg_id: String,
    pub tenant: String,
    pub intent_key: String,
    pub entity_type: String,
    pub entity_id: String,
    pub entity_version: Option<i64>,
    pub channel: String,
    pub recipient_id: String,
    pub state: String,
    pub reason: Option<String>,
    pub attempts: i64,
    /// When the transition happened (µs).
    pub at: i64,
}

#[derive(Debug, Clone, Copy)]
pub struct PublicationClaim {
    /// The claimer's clock; Postgres leases by its own clock, as it does jobs.
    pub now_us: i64,
    /// A claimed row is not offered to another publisher for this long.
    pub lease_us: i64,
    pub limit: u32,
}

/// Unpublished rows, and the time of the oldest.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PublicationBacklog {
    pub unpublished: i64,
    pub oldest_at_us: Option<i64>,
}
