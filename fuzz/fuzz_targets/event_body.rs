//! The event body parser: `read_strict` then `parse_event`, on any bytes.
//!
//! Beyond "never panics": whatever `read_strict` accepts, serde_json reads as
//! the same value; and an accepted event's canonical form — what its
//! fingerprint is taken over, and what is stored — is itself an acceptable
//! body that parses back to the same event key, fingerprint and content.
#![no_main]

use herald::event::json::read_strict;
use herald::event::{Tenant, canonical_json, parse_event};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = read_strict(data) else { return };
    let plain: serde_json::Value = serde_json::from_slice(data).expect("read_strict accepted what serde_json refuses");
    assert_eq!(value, plain, "read_strict and serde_json read one body differently");
    let Ok(event) = parse_event(&value) else { return };

    let tenant = Tenant::new("fuzz");
    let canonical = canonical_json(&event.canonical());
    let again = read_strict(canonical.as_bytes())
        .unwrap_or_else(|e| panic!("the canonical form is refused ({e}): {canonical}"));
    let again = parse_event(&again).unwrap_or_else(|e| panic!("the canonical form is refused ({e}): {canonical}"));
    assert_eq!(event.event_key(&tenant), again.event_key(&tenant));
    assert_eq!(event.fingerprint(), again.fingerprint(), "{canonical}");
    assert_eq!(event.content_digest(), again.content_digest(), "{canonical}");
    assert_eq!(canonical, canonical_json(&again.canonical()));
});
