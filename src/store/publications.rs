//! The status outbox (`publications`, migration 0041): a row per notable
//! transition of an intent, written in the transaction that makes it, read by
//! the bus publisher ([`crate::publish`]).
//!
//! The rows are written by database triggers rather than by each write path:
//! ingest, claims, outcome recording, digest closing and receipts all change
//! states, and a trigger is the one place that cannot be forgotten by the
//! next path someone adds. Which states count is [`PUBLISHED_STATES`] (and
//! `delivered`, from an applied receipt). The triggers write only for a
//! process that publishes: on Postgres they are permanent and test the
//! session setting `herald.publish`, which a publishing process sets on each
//! connection; on SQLite they are TEMP triggers a publishing process creates
//! on its writer connection. A process without `[publish.nats]` writes no
//! rows and pays no more than the Postgres triggers' WHEN test.

use sqlx::SqliteConnection;

/// The intent states whose arrival is published (`delivered` comes from receipts).
pub const PUBLISHED_STATES: [&str; 7] = ["sent", "dead", "suppressed", "held", "digested", "unknown", "shadowed"];

/// What a Herald process's store does besides the schema's own work.
#[derive(Debug, Clone, Copy, Default)]
pub struct StoreOptions {
    /// Write a `publications` row for each notable transition.
    pub publications: bool,
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

macro_rules! publication_columns {
    () => {
        "msg_id, tenant, intent_key, entity_type, entity_id, entity_version, channel, recipient_id, state, reason, attempts, at"
    };
}
pub(crate) use publication_columns;

/// The SQLite triggers, created TEMP on the writer connection of a
/// publishing process (TEMP triggers may watch the main schema's tables).
/// Each numbers its publication first (`intents.publication_seq`, migration
/// 0043), then writes the row under that number, in the statement's
/// transaction. The numbering UPDATE sets no `state`, so it fires none of them.
const SQLITE_TRIGGERS: [&str; 3] = [
    "CREATE TEMP TRIGGER IF NOT EXISTS intents_publication_on_insert AFTER INSERT ON intents
     WHEN NEW.state IN ('sent', 'dead', 'suppressed', 'held', 'digested', 'unknown', 'shadowed')
     BEGIN
         UPDATE intents SET publication_seq = publication_seq + 1 WHERE key = NEW.key;
         INSERT OR IGNORE INTO publications (msg_id, tenant, intent_key, entity_type, entity_id, entity_version,
                                             channel, recipient_id, state, reason, attempts, at)
         SELECT i.key || ':' || i.state || ':' || i.publication_seq, i.tenant, i.key, i.entity_type, i.entity_id,
                i.entity_version, i.channel, i.recipient_id, i.state, i.reason, i.attempts, i.updated_at
         FROM intents i WHERE i.key = NEW.key;
     END",
    "CREATE TEMP TRIGGER IF NOT EXISTS intents_publication_on_update AFTER UPDATE OF state ON intents
     WHEN NEW.state IS NOT OLD.state AND NEW.state IN ('sent', 'dead', 'suppressed', 'held', 'digested', 'unknown', 'shadowed')
     BEGIN
         UPDATE intents SET publication_seq = publication_seq + 1 WHERE key = NEW.key;
         INSERT OR IGNORE INTO publications (msg_id, tenant, intent_key, entity_type, entity_id, entity_version,
                                             channel, recipient_id, state, reason, attempts, at)
         SELECT i.key || ':' || i.state || ':' || i.publication_seq, i.tenant, i.key, i.entity_type, i.entity_id,
                i.entity_version, i.channel, i.recipient_id, i.state, i.reason, i.attempts, i.updated_at
         FROM intents i WHERE i.key = NEW.key;
     END",
    "CREATE TEMP TRIGGER IF NOT EXISTS receipts_publication_on_delivered AFTER INSERT ON receipts
     WHEN NEW.applied AND NEW.status = 'delivered'
     BEGIN
         UPDATE intents SET publication_seq = publication_seq + 1 WHERE key = NEW.intent_key;
         INSERT OR IGNORE INTO publications (msg_id, tenant, intent_key, entity_type, entity_id, entity_version,
                                             channel, recipient_id, state, reason, attempts, at)
         SELECT i.key || ':delivered:' || i.publication_seq, i.tenant, i.key, i.entity_type, i.entity_id,
                i.entity_version, i.channel, i.recipient_id, 'delivered', NULL, i.attempts, NEW.received_at
         FROM intents i WHERE i.key = NEW.intent_key;
     END",
];

/// Creates the TEMP triggers on this connection once the schema has the
/// tables they watch (a fresh file has none until it is migrated; the
/// migration then calls this again).
pub(crate) async fn sqlite_triggers(conn: &mut SqliteConnection) -> Result<(), sqlx::Error> {
    // The numbering column (0043) is the last thing the triggers need.
    let ready: i64 = sqlx::query_scalar(
        "SELECT (SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name IN ('receipts', 'publications'))
              + (SELECT COUNT(*) FROM pragma_table_info('intents') WHERE name = 'publication_seq')",
    )
    .fetch_one(&mut *conn)
    .await?;
    if ready < 3 {
        return Ok(());
    }
    for sql in SQLITE_TRIGGERS {
        sqlx::query(sql).execute(&mut *conn).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_sqlite_triggers_and_the_postgres_migration_watch_the_same_states() {
        // 0043 decides on Postgres which transitions are numbered, and so published.
        let postgres = include_str!("../../migrations/postgres/0043_publication_seq.sql");
        let list = super::PUBLISHED_STATES.map(|s| format!("'{s}'")).join(", ");
        assert_eq!(postgres.matches(&list).count(), 2, "{list}");
        for sql in &super::SQLITE_TRIGGERS[..2] {
            assert!(sql.contains(&list), "{sql}");
        }
    }
}
