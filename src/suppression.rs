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
use crate::event::identity::sha256_hex;
use crate::event::{Event, Tenant};
use crate::recipient::{Kind, mask};
use crate::store::{DirectoryStore, RecipientRow, StoreError, StoreResult, SuppressionRow};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::collections::HashMap;

/// The shortest key taken: HMAC-SHA256's own block of strength.
pub const MIN_KEY_BYTES: usize = 32;

/// The names the database keeps the key and its fingerprint under.
const STORED_KEY: &str = "suppression.key";
const STORED_FINGERPRINT: &str = "suppression.key.fingerprint";

/// The deployment's suppression key. Its bytes never appear in a log or a
/// `Debug`.
#[derive(Clone)]
pub struct SuppressionKey {
    bytes: Vec<u8>,
}

impl std::fmt::Debug for SuppressionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SuppressionKey(fingerprint {})", self.fingerprint())
    }
}

impl SuppressionKey {
    /// A key of at least [`MIN_KEY_BYTES`] bytes.
    pub fn new(bytes: Vec<u8>) -> Result<SuppressionKey, String> {
        if bytes.len() < MIN_KEY_BYTES {
            return Err(format!("must be at least {MIN_KEY_BYTES} bytes, base64-encoded; it has {}", bytes.len()));
        }
        Ok(SuppressionKey { bytes })
    }

    /// A key written as configured: base64 of 32 bytes or more.
    pub fn from_base64(text: &str) -> Result<SuppressionKey, String> {
        let bytes = STANDARD
            .decode(text.trim())
            .map_err(|_| "is not base64 (generate one with `openssl rand -base64 32`)".to_string())?;
        SuppressionKey::new(bytes)
    }

    fn mac(&self, input: &str) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.bytes).expect("HMAC accepts a key of any length");
        mac.update(input.as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }

    /// The list's key for an address: per tenant, so one tenant's entries
    /// say nothing about another's.
    pub fn lookup(&self, tenant: &str, kind: Kind, address: &str) -> String {
        self.mac(&format!("suppression|{tenant}|{}", normalised(kind, address)))
    }

    /// What this key is known by in the database and in logs: a MAC of a
    /// fixed text, which reveals nothing of the key.
    pub fn fingerprint(&self) -> String {
        self.mac("herald suppression key fingerprint")[..16].to_string()
    }

    /// The lookups an address is found under: the keyed one, and the old
    /// unkeyed one. An entry of the old scheme is matched until it is
    /// rekeyed or removed: one whose intent was pruned, or one a process of
    /// the previous release wrote during a rolling upgrade (it carries no id
    /// until the next rekey, see [`Rekeyer`]).
    pub fn lookups(&self, tenant: &str, kind: Kind, address: &str) -> Vec<String> {
        vec![self.lookup(tenant, kind, address), legacy_hash(tenant, kind, address)]
    }
}

/// The unkeyed hash entries were written under before the key: read only to
/// find and rekey them, never written.
pub fn legacy_hash(tenant: &str, kind: Kind, address: &str) -> String {
    sha256_hex(format!("suppression|{tenant}|{}", normalised(kind, address)).as_bytes())
}

/// Channels whose destinations can be suppressed.
pub fn kind_of(channel: &str) -> Option<Kind> {
    match channel {
        "email" => Some(Kind::Email),
        "sms" => Some(Kind::Phone),
        _ => None,
    }
}

/// An address as the list compares it: an email without case (providers
/// report them in any case), a number as given (E.164 already). An email and
/// a number never normalise alike (one has an `@`, the other starts `+`).
pub fn normalised(kind: Kind, address: &str) -> String {
    match kind {
        Kind::Email => address.trim().to_lowercase(),
        _ => address.trim().to_string(),
    }
}

/// The id an entry is named by outside the store: derived from the tenant
/// and the intent whose receipt put it there (one destination, so one
/// entry), never from the address.
pub fn entry_id(tenant: &str, source_intent: &str) -> String {
    sha256_hex(format!("suppression-entry|{tenant}|{source_intent}").as_bytes())[..24].to_string()
}

/// What a new entry stores.
pub struct EntryFacts {
    pub id: String,
    pub lookup: String,
    pub masked: String,
    pub domain: Option<String>,
}

pub fn facts(key: &SuppressionKey, tenant: &str, kind: Kind, address: &str, source_intent: &str) -> EntryFacts {
    let domain = match kind {
        Kind::Email => address.rsplit_once('@').map(|(_, d)| d.trim().to_lowercase()),
        _ => None,
    };
    EntryFacts {
        id: entry_id(tenant, source_intent),
        lookup: key.lookup(tenant, kind, address),
        masked: mask(kind, address),
        domain,
    }
}

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

/// An intent's `detail` as a planner before the keyed list wrote it named
/// the entry by its unkeyed hash (`entry 70f1…` in 64 hex digits): the same
/// text naming the entry by its id. Other text is returned as it is.
pub fn named_detail<'a>(tenant: &str, detail: &'a str) -> std::borrow::Cow<'a, str> {
    let hash_at = |s: &str| {
        let start = s.find("(entry ")? + "(entry ".len();
        let hash = s.get(start..start + 64)?;
        hash.bytes().all(|b| b.is_ascii_hexdigit()).then_some(start)
    };
    let Some(start) = hash_at(detail) else { return std::borrow::Cow::Borrowed(detail) };
    let rest = &detail[start + 64..];
    let intent = rest
        .strip_prefix(", from intent ")
        .map(|r| r.split(|c: char| !c.is_ascii_alphanumeric()).next().unwrap_or_default());
    let id = match intent {
        Some(source) if !source.is_empty() => entry_id(tenant, source),
        _ => "(an entry of the old list)".to_string(),
    };
    std::borrow::Cow::Owned(format!("{}{id}{rest}", &detail[..start]))
}

/// What rekeying the old entries did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RekeyReport {
    /// Entries now under the keyed lookup.
    pub rekeyed: u64,
    /// Entries whose address could not be found (the intent that put them
    /// there was pruned): still matched under the old hash, never shown.
    pub left: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> SuppressionKey {
        SuppressionKey::new(vec![byte; 32]).unwrap()
    }

    #[test]
    fn an_email_is_matched_whatever_its_case_and_only_in_its_tenant() {
        let k = key(7);
        let a = k.lookup("t1", Kind::Email, "Asha@Example.com");
        assert_eq!(a, k.lookup("t1", Kind::Email, "asha@example.com"));
        assert_ne!(a, k.lookup("t2", Kind::Email, "asha@example.com"));
    }

    #[test]
    fn the_lookup_depends_on_the_key_so_no_candidate_can_be_checked_without_it() {
        let number = "+9779800000001";
        let (a, b) = (key(1).lookup("t", Kind::Phone, number), key(2).lookup("t", Kind::Phone, number));
        assert_ne!(a, b);
        assert_ne!(a, legacy_hash("t", Kind::Phone, number), "not the old unkeyed hash");
        assert_ne!(a, sha256_hex(number.as_bytes()));
    }

    #[test]
    fn a_short_or_unreadable_key_is_refused() {
        assert!(SuppressionKey::new(vec![0; 31]).is_err());
        assert!(SuppressionKey::from_base64("not base64!").is_err());
        assert!(SuppressionKey::from_base64(&STANDARD.encode([9u8; 16])).unwrap_err().contains("at least 32"));
        assert!(SuppressionKey::from_base64(&STANDARD.encode([9u8; 32])).is_ok());
    }

    #[test]
    fn the_key_never_shows_in_debug() {
        let k = SuppressionKey::new(b"0123456789abcdef0123456789abcdef".to_vec()).unwrap();
        let shown = format!("{k:?}");
        assert!(!shown.contains("0123456789") && shown.contains(&k.fingerprint()), "{shown}");
    }

    #[test]
    fn an_entry_is_named_by_its_source_intent_never_by_its_address() {
        let k = key(3);
        let f = facts(&k, "t", Kind::Email, "asha@Example.com", "intent-1");
        assert_eq!((f.masked.as_str(), f.domain.as_deref()), ("a***@Example.com", Some("example.com")));
        assert_eq!(f.id, entry_id("t", "intent-1"));
        assert_eq!(f.id, facts(&k, "t", Kind::Email, "other@example.com", "intent-1").id);
        let f = facts(&k, "t", Kind::Phone, "+9779800000000", "intent-2");
        assert_eq!((f.masked.as_str(), f.domain), ("+97798******00", None));
    }

    #[test]
    fn old_entries_are_looked_up_under_both() {
        let both = key(4).lookups("t", Kind::Phone, "+15550000000");
        assert_eq!(both[1], legacy_hash("t", Kind::Phone, "+15550000000"));
    }

    #[test]
    fn an_old_detail_names_the_entry_by_its_id_not_its_hash() {
        let hash = legacy_hash("t", Kind::Phone, "+9779800000001");
        let old = format!("on the suppression list since 2026-11-30T10:00:00Z (entry {hash}, from intent abc123)");
        let named = named_detail("t", &old);
        assert_eq!(
            named,
            format!(
                "on the suppression list since 2026-11-30T10:00:00Z (entry {}, from intent abc123)",
                entry_id("t", "abc123")
            )
        );
        assert!(!named.contains(&hash));
        let new = format!("on the suppression list since … (entry {}, from intent abc123)", entry_id("t", "abc123"));
        assert_eq!(named_detail("t", &new), new, "a new detail is left as it is");
        assert_eq!(named_detail("t", "quiet hours"), "quiet hours");
    }
}
