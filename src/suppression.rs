//! The suppression list: addresses a tenant must not be sent to, because a
//! provider reported a hard bounce or a complaint. An address is kept only as
//! a hash (with its masked form to show, and an email's domain for the daily
//! digest), so the list cannot be read back as a list of addresses.

use crate::event::identity::sha256_hex;
use crate::event::{Event, Tenant};
use crate::recipient::{Kind, mask};
use crate::store::{RecipientRow, Store, StoreResult, SuppressionRow};
use std::collections::HashMap;

/// Channels whose destinations can be suppressed.
pub fn kind_of(channel: &str) -> Option<Kind> {
    match channel {
        "email" => Some(Kind::Email),
        "sms" => Some(Kind::Phone),
        _ => None,
    }
}

/// An address as the list compares it: an email without case (providers
/// report them in any case), a number as given (E.164 already).
fn normalised(kind: Kind, address: &str) -> String {
    match kind {
        Kind::Email => address.trim().to_lowercase(),
        _ => address.trim().to_string(),
    }
}

/// The list's key for an address: per tenant, so one tenant's entries say
/// nothing about another's.
pub fn address_hash(tenant: &str, kind: Kind, address: &str) -> String {
    sha256_hex(format!("suppression|{tenant}|{}", normalised(kind, address)).as_bytes())
}

/// The hash of what a user typed: an email when it has an `@`, a number
/// otherwise.
pub fn hash_of_input(tenant: &str, address: &str) -> String {
    let kind = if address.contains('@') { Kind::Email } else { Kind::Phone };
    address_hash(tenant, kind, address)
}

/// Whether `s` is already a list key (64 lowercase hex characters).
pub fn is_hash(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// What a new entry stores besides its hash.
pub struct EntryFacts {
    pub address_hash: String,
    pub masked: String,
    pub domain: Option<String>,
}

pub fn facts(tenant: &str, kind: Kind, address: &str) -> EntryFacts {
    let domain = match kind {
        Kind::Email => address.rsplit_once('@').map(|(_, d)| d.trim().to_lowercase()),
        _ => None,
    };
    EntryFacts { address_hash: address_hash(tenant, kind, address), masked: mask(kind, address), domain }
}

/// The hashes of the emails and numbers the event's recipients give inline:
/// read with the directory, before the directory can add any.
pub fn inline_hashes(tenant: &Tenant, event: &Event) -> Vec<String> {
    hashes(tenant, event, &HashMap::new())
}

fn hashes(tenant: &Tenant, event: &Event, directory: &HashMap<String, RecipientRow>) -> Vec<String> {
    let mut hashes = Vec::new();
    for inline in &event.recipients {
        let r = crate::plan::snapshot(inline, directory.get(&inline.id));
        hashes.extend(r.email.as_deref().map(|e| address_hash(tenant.as_str(), Kind::Email, e)));
        hashes.extend(r.phone.as_deref().map(|p| address_hash(tenant.as_str(), Kind::Phone, p)));
    }
    hashes
}

/// The tenant's entries for every email and number the event's recipients
/// have (inline or from the directory), by hash: what the planner checks.
/// `looked_up` are hashes already read (with `found` the entries among them);
/// only the addresses the directory adds are read here, if any.
pub async fn entries_for(
    store: &dyn Store,
    tenant: &Tenant,
    event: &Event,
    directory: &HashMap<String, RecipientRow>,
    looked_up: &[String],
    found: Vec<SuppressionRow>,
) -> StoreResult<HashMap<String, SuppressionRow>> {
    let mut rest = hashes(tenant, event, directory);
    rest.retain(|h| !looked_up.contains(h));
    let more = match rest.is_empty() {
        true => Vec::new(),
        false => store.suppressions_match(tenant.as_str(), &rest).await?,
    };
    Ok(found.into_iter().chain(more).map(|row| (row.address_hash.clone(), row)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_email_is_matched_whatever_its_case_and_only_in_its_tenant() {
        let a = address_hash("t1", Kind::Email, "Asha@Example.com");
        assert_eq!(a, address_hash("t1", Kind::Email, "asha@example.com"));
        assert_ne!(a, address_hash("t2", Kind::Email, "asha@example.com"));
        assert!(is_hash(&a));
        assert_eq!(hash_of_input("t1", "asha@example.com"), a);
        assert_eq!(hash_of_input("t1", "+9779800000000"), address_hash("t1", Kind::Phone, "+9779800000000"));
    }

    #[test]
    fn an_entry_keeps_a_mask_and_an_emails_domain_never_the_address() {
        let f = facts("t", Kind::Email, "asha@Example.com");
        assert_eq!((f.masked.as_str(), f.domain.as_deref()), ("a***@Example.com", Some("example.com")));
        let f = facts("t", Kind::Phone, "+9779800000000");
        assert_eq!((f.masked.as_str(), f.domain), ("+97798******00", None));
    }
}
