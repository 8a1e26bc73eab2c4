//! What every channel's failover list must satisfy, whatever its providers
//! are (`[channels.sms]` and `[channels.email]` alike): names that can label
//! metrics, each listed once and configured by a named block, no block left
//! unlisted, and a circuit breaker that can open and close.

use super::{ConfigError, invalid};
use std::collections::BTreeMap;
use std::time::Duration;

/// A channel's failover settings as the checks read them.
pub(super) struct Chain<'a, T> {
    /// `channels.sms`, `channels.email`.
    pub key: &'a str,
    pub providers: &'a [String],
    pub named: &'a BTreeMap<String, T>,
    pub breaker_failures: u32,
    pub breaker_cool_down: Duration,
}

impl<T> Chain<'_, T> {
    /// Checks the list; `nested` says whether a block lists providers of its
    /// own, and `each` checks a block as one provider at its key.
    pub(super) fn check(
        &self,
        nested: impl Fn(&T) -> bool,
        mut each: impl FnMut(&str, &T) -> Result<(), ConfigError>,
    ) -> Result<(), ConfigError> {
        let key = self.key;
        if self.breaker_failures == 0 {
            return Err(invalid(format!("{key}.breaker_failures: must be at least 1")));
        }
        if self.breaker_cool_down.is_zero() {
            return Err(invalid(format!("{key}.breaker_cool_down: must be longer than zero")));
        }
        for (i, name) in self.providers.iter().enumerate() {
            let ok = (1..=32).contains(&name.len())
                && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
            if !ok {
                return Err(invalid(format!(
                    "{key}.providers[{i}]: {name:?} must be 1 to 32 of a-z, 0-9, _ and - (it labels metrics)"
                )));
            }
            if self.providers[..i].contains(name) {
                return Err(invalid(format!("{key}.providers[{i}]: {name:?} is listed twice")));
            }
            let Some(block) = self.named.get(name) else {
                return Err(invalid(format!(
                    "{key}.providers[{i}]: no [{key}.named.{name}] block configures {name:?}"
                )));
            };
            let block_key = format!("{key}.named.{name}");
            if nested(block) {
                return Err(invalid(format!(
                    "{block_key}: a named provider is one provider; it cannot list providers"
                )));
            }
            each(&block_key, block)?;
        }
        if let Some(name) = self.named.keys().find(|n| !self.providers.contains(n)) {
            return Err(invalid(format!("{key}.named.{name}: not listed in {key}.providers")));
        }
        Ok(())
    }
}
