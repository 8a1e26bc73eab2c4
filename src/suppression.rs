//! The suppression list: addresses a tenant must not be sent to, because a
//! provider reported a hard bounce or a complaint. An address is kept only as
//! a keyed lookup (HMAC-SHA256 under the deployment's suppression key), with
//! its masked form to show and an email's domain for the daily digest.
//!
//! The lookup is keyed because a masked number leaves about six digits
//! unknown: an unkeyed hash of it (as this list once kept) is reversed by
//! trying a million candidates, a second's work. Without the key no candidate
//! can be checked, and the lookup itself never leaves the store: an entry is
//! named outside by an opaque id derived from the intent whose receipt put it
//! there, which says nothing about the address.
//!
//! The key is `suppression.key` when configured (base64, 32 bytes or more).
//! Otherwise Herald draws one the first time it starts on a database and keeps
//! it there, so every process on that database uses the same. Either way the
//! database records the key's fingerprint, and a process with another key
//! refuses to start (its lookups would match nothing).

use crate::config::Config;
use crate::event::{Event, Tenant};
use crate::recipient::Kind;
use crate::store::{DirectoryStore, RecipientRow, StoreError, StoreResult, SuppressionRow};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use std::collections::HashMap;

pub use crate::recipient::keyed::{
    EntryFacts, MIN_KEY_BYTES, RekeyReport, SuppressionKey, entry_id, facts, kind_of, legacy_hash, named_detail,
    normalised,
};

/// The names the database keeps the key and its fingerprint under.
const STORED_KEY: &str = "suppression.key";
const STORED_FINGERPRINT: &str = "suppression.key.fingerprint";

/// The emails and numbers the event's recipients have (inline, or from the
/// directory when given), normalised.
fn addresses(event: &Event, directory: &HashMap<String, RecipientRow>) -> Vec<(Kind, String)> {
    let mut out = Vec::new();
    for inline in &event.recipients {
        let r = crate::plan::snapshot(inline, directory.get(&inline.id));
        out.extend(r.email.as_deref().map(|e| (Kind::Email, normalised(Kind::Email, e))));
        out.extend(r.phone.as_deref().map(|p| (Kind::Phone, normalised(Kind::Phone, p))));
    }
    out
}

/// The lookups of the emails and numbers the event's recipients give inline:
/// read with the directory, before the directory can add any.
pub fn inline_lookups(key: &SuppressionKey, tenant: &Tenant, event: &Event) -> Vec<String> {
    (addresses(event, &HashMap::new()).iter())
        .flat_map(|(kind, address)| key.lookups(tenant.as_str(), *kind, address))
        .collect()
}

/// The tenant's entries for every email and number the event's recipients
/// have (inline or from the directory), by normalised address: what the
/// planner checks. `looked_up` are lookups already read (with `found` the
/// entries among them); only the addresses the directory adds are read here.
pub async fn entries_for(
    key: &SuppressionKey,
    store: &dyn DirectoryStore,
    tenant: &Tenant,
    event: &Event,
    directory: &HashMap<String, RecipientRow>,
    looked_up: &[String],
    found: Vec<SuppressionRow>,
) -> StoreResult<HashMap<String, SuppressionRow>> {
    let wanted: Vec<(String, Vec<String>)> = (addresses(event, directory).into_iter())
        .map(|(kind, address)| {
            let lookups = key.lookups(tenant.as_str(), kind, &address);
            (address, lookups)
        })
        .collect();
    let mut rest: Vec<String> = wanted.iter().flat_map(|(_, l)| l.iter().cloned()).collect();
    rest.retain(|l| !looked_up.contains(l));
    let more = match rest.is_empty() {
        true => Vec::new(),
        false => store.suppressions_match(tenant.as_str(), &rest).await?,
    };
    let by_lookup: HashMap<String, SuppressionRow> =
        found.into_iter().chain(more).map(|row| (row.address_hash.clone(), row)).collect();
    Ok(wanted
        .into_iter()
        .filter_map(|(address, lookups)| {
            let row = lookups.iter().find_map(|l| by_lookup.get(l))?;
            Some((address, row.clone()))
        })
        .collect())
}

/// Settles the key this process uses on this database (see the module's
/// comment), rekeys the entries the old unkeyed hash wrote where their
/// address can still be found, and puts the key into `config`.
///
/// The database's fingerprint is read before anything is written, so a
/// process that would be refused stores nothing. A configured key that is
/// the one Herald once drew takes its place: the drawn copy is removed from
/// the database, which is what configuring the key is for.
pub async fn resolve(config: &mut Config, store: &dyn DirectoryStore) -> Result<SuppressionKey, StoreError> {
    let refused = |why: String| StoreError::Schema(format!("suppression.key: {why}"));
    let configured = match config.suppression.key.as_deref() {
        // Checked when the configuration was loaded.
        Some(text) => Some(SuppressionKey::from_base64(text).map_err(refused)?),
        None => None,
    };
    let recorded = store.setting_get(STORED_FINGERPRINT).await?;
    let stored = store.setting_get(STORED_KEY).await?;
    let key = match (configured, stored) {
        (Some(key), stored) => {
            if let Some(fingerprint) = recorded.as_deref().filter(|f| *f != key.fingerprint()) {
                return Err(refused(format!(
                    "this database's suppression list is keyed with the key of fingerprint {fingerprint}, and the \
                     configured key's is {}; {}",
                    key.fingerprint(),
                    match stored {
                        Some(_) =>
                            "while no key was configured Herald kept its key in the database (SELECT value \
                                    FROM settings WHERE name = 'suppression.key'): configure that value, and Herald \
                                    removes the database's copy at its next start",
                        None => "give every Herald process on one database the same suppression.key",
                    }
                )));
            }
            if stored.is_some() {
                store.setting_remove(STORED_KEY).await?;
                tracing::info!("suppression.key is configured: the copy Herald kept in the database is removed");
            }
            key
        }
        (None, Some(stored)) => SuppressionKey::from_base64(&stored)
            .map_err(|e| StoreError::Corrupt(format!("the database's stored suppression key {e}")))?,
        (None, None) if recorded.is_some() => {
            return Err(refused(
                "this database's suppression list is keyed with a configured suppression.key, and none is \
                 configured here; give every Herald process on one database the same suppression.key"
                    .into(),
            ));
        }
        (None, None) => {
            // A secret, not an identity: nothing sent is keyed by it.
            let mut drawn = [0u8; 32];
            rand::TryRngCore::try_fill_bytes(&mut rand::rngs::OsRng, &mut drawn)
                .map_err(|e| StoreError::Corrupt(format!("no randomness to draw a suppression key: {e}")))?;
            // Two processes starting at once: the first one written is everyone's.
            let stored = store.setting_get_or_insert(STORED_KEY, &STANDARD.encode(drawn)).await?;
            SuppressionKey::from_base64(&stored)
                .map_err(|e| StoreError::Corrupt(format!("the database's stored suppression key {e}")))?
        }
    };
    let fingerprint = store.setting_get_or_insert(STORED_FINGERPRINT, &key.fingerprint()).await?;
    if fingerprint != key.fingerprint() {
        return Err(refused(format!(
            "another process keyed this database's suppression list with the key of fingerprint {fingerprint} \
             as this one started (this one's is {}); give every Herald process on one database the same key",
            key.fingerprint()
        )));
    }
    let report = store.suppressions_rekey(&key).await?;
    if report.rekeyed > 0 || report.left > 0 {
        tracing::info!(
            rekeyed = report.rekeyed,
            left = report.left,
            "suppression list: entries of the old unkeyed hash rekeyed; those left (their intent pruned) are still matched"
        );
    }
    config.suppression.resolved = Some(key.clone());
    Ok(key)
}

/// The key `serve` settled on this database, found without writing anything:
/// for a command that only reads (`herald shadow compare`). The configured
/// key when the database's fingerprint agrees with it, else the one Herald
/// keeps in the database. A database no Herald has started on has neither:
/// a key is drawn for this command alone (nothing there is keyed yet).
pub async fn key_for_reading(config: &Config, store: &dyn DirectoryStore) -> Result<SuppressionKey, StoreError> {
    let refused = |why: String| StoreError::Schema(format!("suppression.key: {why}"));
    let recorded = store.setting_get(STORED_FINGERPRINT).await?;
    if let Some(text) = config.suppression.key.as_deref() {
        let key = SuppressionKey::from_base64(text).map_err(refused)?;
        return match recorded {
            Some(f) if f != key.fingerprint() => Err(refused(format!(
                "this database is keyed with the key of fingerprint {f}, and the configured key's is {}; use the \
                 configuration `herald serve` runs with",
                key.fingerprint()
            ))),
            _ => Ok(key),
        };
    }
    match (store.setting_get(STORED_KEY).await?, recorded) {
        (Some(stored), _) => SuppressionKey::from_base64(&stored)
            .map_err(|e| StoreError::Corrupt(format!("the database's stored suppression key {e}"))),
        (None, Some(_)) => Err(refused(
            "this database is keyed with a configured suppression.key, and none is configured here; use the \
             configuration `herald serve` runs with"
                .into(),
        )),
        (None, None) => {
            let mut drawn = [0u8; 32];
            rand::TryRngCore::try_fill_bytes(&mut rand::rngs::OsRng, &mut drawn)
                .map_err(|e| StoreError::Corrupt(format!("no randomness to draw a suppression key: {e}")))?;
            SuppressionKey::new(drawn.to_vec()).map_err(StoreError::Corrupt)
        }
    }
}

/// Rekeys, now and then, entries of the old scheme that appear after
/// start-up: during a rolling upgrade a process of the previous release
/// still writes them. Cheap when there are none (a partial index).
pub struct Rekeyer {
    pub store: std::sync::Arc<dyn DirectoryStore>,
    pub key: SuppressionKey,
    pub every: std::time::Duration,
}

impl Rekeyer {
    pub async fn run(self, mut shutdown: tokio::sync::watch::Receiver<bool>) {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(self.every) => {}
                _ = shutdown.changed() => return,
            }
            match self.store.suppressions_rekey(&self.key).await {
                Ok(report) if report.rekeyed > 0 => {
                    tracing::info!(
                        rekeyed = report.rekeyed,
                        "suppression list: entries of the old unkeyed hash rekeyed"
                    )
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "suppression list: rekeying failed; it is tried again later"),
            }
        }
    }
}
