//! An address kept without being kept: the suppression list's keyed lookup
//! (HMAC-SHA256 under the deployment's suppression key), the opaque id an
//! entry is named by, and the unkeyed hash of the list's first scheme, read
//! only to find and rekey old entries. Pure: the store computes these inside
//! the transaction that reads an intent's destination, and
//! [`crate::suppression`] decides where the key comes from.

use super::{Kind, mask};
use crate::event::identity::sha256_hex;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The shortest key taken: HMAC-SHA256's own block of strength.
pub const MIN_KEY_BYTES: usize = 32;

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

    /// An address's tag in the shadow comparison: what a send in the old
    /// notifier's log is matched to an intent's destination by, and (its
    /// first digits) what an output shows beside the masked address, so two
    /// addresses that mask alike are told apart. Keyed and per tenant as the
    /// lookup is, under a purpose of its own, so a tag says nothing about
    /// the suppression list's lookups.
    pub fn tag(&self, tenant: &str, kind: Kind, address: &str) -> String {
        self.mac(&format!("shadow-compare|{tenant}|{}", normalised(kind, address)))
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
    /// until the next rekey, see [`crate::suppression::Rekeyer`]).
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
    fn a_comparison_tag_is_keyed_per_tenant_and_is_not_the_lists_lookup() {
        let k = key(7);
        let tag = k.tag("t1", Kind::Email, "Asha@Example.com");
        assert_eq!(tag, k.tag("t1", Kind::Email, " asha@example.com"));
        assert_ne!(tag, k.tag("t2", Kind::Email, "asha@example.com"));
        assert_ne!(tag, key(8).tag("t1", Kind::Email, "asha@example.com"));
        assert_ne!(tag, k.lookup("t1", Kind::Email, "asha@example.com"));
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
