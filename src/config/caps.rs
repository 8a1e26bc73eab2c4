//! `[caps]`: how many messages one recipient may be sent on one channel in a
//! period, whatever events asked for them. Idempotency stops the same
//! notification twice; a cap stops a caller that posts a thousand different
//! events about one thing. A route may set its own caps in place of the
//! deployment's, or be marked `uncapped` (one-time codes: never held back).
//!
//! ```toml
//! [caps]
//! sms = { max = 10, per = "1h" }
//! email = { max = 50, per = "1d" }
//!
//! [[routes]]
//! event = "auth.code"
//! uncapped = true
//! ```
//!
//! What the cap counts, and where it is decided, is in [`crate::store::caps`].

use super::{ConfigError, Route, format_duration, invalid};
use crate::event::Channel;
use serde::Deserialize;
use std::time::Duration;

/// One cap per channel; a channel without one is not capped.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Caps {
    pub email: Option<Cap>,
    pub sms: Option<Cap>,
    pub in_app: Option<Cap>,
    pub webhook: Option<Cap>,
}

/// At most `max` messages per `per`, to one recipient on one channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cap {
    pub max: u32,
    #[serde(deserialize_with = "super::duration")]
    pub per: Duration,
}

/// The cap an intent is held to, and the key it was set at (for its detail:
/// `caps.sms`, or `routes[2].caps.sms` for route `po.approved`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub cap: Cap,
    pub source: String,
}

impl Caps {
    pub fn get(&self, channel: Channel) -> Option<Cap> {
        match channel {
            Channel::Email => self.email,
            Channel::Sms => self.sms,
            Channel::InApp => self.in_app,
            Channel::Webhook => self.webhook,
        }
    }

    fn each(&self) -> impl Iterator<Item = (Channel, Cap)> + '_ {
        Channel::ALL.into_iter().filter_map(|c| self.get(c).map(|cap| (c, cap)))
    }

    /// The cap for `channel` on `route`: the route's own when it sets one for
    /// that channel, else the deployment's; none on an uncapped route.
    pub fn applied(&self, route: &Route, channel: Channel) -> Option<Applied> {
        if route.uncapped {
            return None;
        }
        if let Some(cap) = route.caps.as_ref().and_then(|own| own.get(channel)) {
            return Some(Applied { cap, source: format!("caps.{} of route {}", channel.as_str(), route.event) });
        }
        self.get(channel).map(|cap| Applied { cap, source: format!("caps.{}", channel.as_str()) })
    }

    /// Each cap is at least one message per at least a second, and no longer
    /// than the intents it counts are kept.
    fn validate(&self, key: &str, kept: Duration) -> Result<(), ConfigError> {
        for (channel, cap) in self.each() {
            let at = format!("{key}.{}", channel.as_str());
            if cap.max == 0 {
                return Err(invalid(format!(
                    "{at}.max: must be at least 1 (to send nothing on a channel, leave it out of the route)"
                )));
            }
            if cap.per < Duration::from_secs(1) {
                return Err(invalid(format!("{at}.per: must be at least 1s")));
            }
            if cap.per > kept {
                return Err(invalid(format!(
                    "{at}.per: {} is longer than retention.intents ({}); the cap counts the recipient's intents, \
                     and older ones are pruned",
                    format_duration(cap.per),
                    format_duration(kept)
                )));
            }
        }
        Ok(())
    }
}

impl super::Config {
    /// `[caps]` and each route's `caps` / `uncapped`.
    pub(super) fn validate_caps(&self) -> Result<(), ConfigError> {
        let kept = self.retention.intents;
        self.caps.validate("caps", kept)?;
        for (i, route) in self.routes.iter().enumerate() {
            let Some(own) = &route.caps else { continue };
            if route.uncapped {
                return Err(invalid(format!(
                    "routes[{i}].caps: route {:?} is marked uncapped; set one or the other",
                    route.event
                )));
            }
            own.validate(&format!("routes[{i}].caps"), kept)?;
            if let Some((channel, _)) = own.each().find(|(c, _)| !route.channels.contains(c)) {
                return Err(invalid(format!(
                    "routes[{i}].caps.{}: route {:?} does not send {}",
                    channel.as_str(),
                    route.event,
                    channel.as_str()
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn load(text: &str, env: &[(String, String)]) -> Result<Config, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("herald.toml");
        std::fs::write(&path, text).unwrap();
        Config::load_with_env(Some(&path), env)
    }

    const ROUTE: &str =
        "[[routes]]\nevent = \"po.approved\"\ntemplate = \"po_approved\"\nchannels = [\"sms\", \"email\"]\n";

    #[test]
    fn a_route_s_own_cap_replaces_the_deployment_s_and_uncapped_has_none() {
        let toml = format!(
            "[caps]\nsms = {{ max = 10, per = \"1h\" }}\nemail = {{ max = 50, per = \"1d\" }}\n{ROUTE}\
             [routes.caps]\nsms = {{ max = 3, per = \"1h\" }}\n\
             [[routes]]\nevent = \"auth.code\"\ntemplate = \"po_approved\"\nchannels = [\"sms\"]\nuncapped = true\n"
        );
        let c = load(&toml, &[]).unwrap();
        let (po, code) = (&c.routes[0], &c.routes[1]);
        let sms = c.caps.applied(po, Channel::Sms).unwrap();
        assert_eq!((sms.cap.max, sms.source.as_str()), (3, "caps.sms of route po.approved"));
        let email = c.caps.applied(po, Channel::Email).unwrap();
        assert_eq!(
            (email.cap, email.source.as_str()),
            (Cap { max: 50, per: Duration::from_secs(86_400) }, "caps.email")
        );
        assert_eq!(c.caps.applied(code, Channel::Sms), None);
        assert_eq!(c.caps.applied(po, Channel::InApp), None);
    }

    #[test]
    fn a_cap_that_cannot_work_is_refused_naming_its_key() {
        let cases = [
            ("[caps]\nsms = { max = 0, per = \"1h\" }\n".to_string(), "caps.sms.max: must be at least 1"),
            ("[caps]\nsms = { max = 5, per = \"500ms\" }\n".into(), "caps.sms.per: must be at least 1s"),
            (
                "[caps]\nsms = { max = 5, per = \"200d\" }\n".into(),
                "caps.sms.per: 4800h is longer than retention.intents (2160h)",
            ),
            ("[caps]\nsms = { max = 5, per = 3600 }\n".into(), "\"3600s\""),
            ("[caps]\nsms = { max = 5 }\n".into(), "per"),
            ("[caps]\nfax = { max = 5, per = \"1h\" }\n".into(), "fax"),
            (
                format!("{ROUTE}uncapped = true\n[routes.caps]\nsms = {{ max = 3, per = \"1h\" }}\n"),
                "routes[0].caps: route \"po.approved\" is marked uncapped",
            ),
            (
                format!("{ROUTE}[routes.caps]\nwebhook = {{ max = 3, per = \"1h\" }}\n"),
                "routes[0].caps.webhook: route \"po.approved\" does not send webhook",
            ),
        ];
        for (toml, expected) in cases {
            let e = load(&toml, &[]).unwrap_err().to_string();
            assert!(e.contains(expected), "{toml}\n→ {e}");
        }
    }
}
