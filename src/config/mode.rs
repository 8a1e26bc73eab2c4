//! Shadow mode's configuration: `mode = "live" | "shadow"` for the whole
//! deployment, a route (`[[routes]] mode`) or a channel (`[channels.X] mode`).
//! The most specific setting wins: channel, then route, then deployment.

use super::{Config, ConfigError, Route, invalid};
use crate::event::Channel;
use crate::intent::Mode;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};

impl Config {
    /// The mode an intent on `channel` of `route` is planned in now.
    pub fn mode_for(&self, route: &Route, channel: Channel) -> Mode {
        self.channel_mode(channel).or(route.mode).or(self.mode).unwrap_or(Mode::Live)
    }

    /// Whether anything is configured to run in shadow.
    pub fn any_shadow(&self) -> bool {
        let channels = [Channel::Email, Channel::Sms, Channel::Webhook, Channel::InApp];
        let all = [self.mode]
            .into_iter()
            .chain(self.routes.iter().map(|r| r.mode))
            .chain(channels.map(|c| self.channel_mode(c)));
        all.flatten().any(|m| m == Mode::Shadow)
    }

    fn channel_mode(&self, channel: Channel) -> Option<Mode> {
        let c = &self.channels;
        match channel {
            Channel::Email => c.email.as_ref()?.mode,
            Channel::Sms => c.sms.as_ref()?.mode,
            Channel::Webhook => c.webhook.as_ref()?.mode,
            Channel::InApp => c.in_app.as_ref()?.mode,
        }
    }

    pub(super) fn validate_modes(&self) -> Result<(), ConfigError> {
        if let Some(sms) = &self.channels.sms
            && let Some((name, _)) = sms.named.iter().find(|(_, n)| n.mode.is_some())
        {
            return Err(invalid(format!(
                "channels.sms.named.{name}.mode: a mode belongs to the channel (channels.sms.mode), not to one of its providers"
            )));
        }
        Ok(())
    }
}

/// A `mode` key, read into a [`Mode`] as it is loaded; the error is prefixed
/// with the key (and where it was set) by loading.
pub(super) fn optional<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Mode>, D::Error> {
    let Some(text) = Option::<String>::deserialize(d)? else { return Ok(None) };
    Mode::parse(&text).map(Some).ok_or_else(|| D::Error::custom(format!("{text:?} must be \"live\" or \"shadow\"")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn default_with(key: &str, value: &str) -> Result<Config, ConfigError> {
        Config::load_with_env(None, &[(key.to_string(), value.to_string())])
    }

    fn config(extra: &str) -> Config {
        let text = format!(
            "{extra}\n[[routes]]\nevent = \"a\"\ntemplate = \"t\"\nchannels = [\"email\", \"sms\"]\n\
             [[routes]]\nevent = \"b\"\ntemplate = \"t\"\nchannels = [\"email\"]\nmode = \"shadow\"\n\
             [channels.email]\nsink = \"out\"\n[channels.sms]\nsink = \"out\"\nmode = \"live\"\n"
        );
        toml::from_str(&text).unwrap()
    }

    #[test]
    fn the_most_specific_mode_wins() {
        let live = config("");
        let (a, b) = (&live.routes[0], &live.routes[1]);
        assert_eq!(live.mode_for(a, Channel::Email), Mode::Live);
        assert_eq!(live.mode_for(b, Channel::Email), Mode::Shadow);
        let shadow = config("mode = \"shadow\"");
        assert_eq!(shadow.mode_for(&shadow.routes[0], Channel::Email), Mode::Shadow);
        // The channel says live, over the deployment's and the route's shadow.
        assert_eq!(shadow.mode_for(&shadow.routes[0], Channel::Sms), Mode::Live);
        assert_eq!(shadow.mode_for(&shadow.routes[1], Channel::Sms), Mode::Live);
        assert!(live.any_shadow() && shadow.any_shadow());
    }

    fn load(text: &str) -> Result<Config, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("herald.toml");
        std::fs::write(&path, text).unwrap();
        Config::load_with_env(Some(&path), &[])
    }

    #[test]
    fn a_mode_that_is_neither_live_nor_shadow_is_refused_naming_its_key() {
        assert_eq!(default_with("HERALD_MODE", "shadow").unwrap().mode, Some(Mode::Shadow));
        let e = default_with("HERALD_MODE", "dry").unwrap_err().to_string();
        assert!(e.contains("mode: \"dry\" must be") && e.contains("HERALD_MODE"), "{e}");
        let e = default_with("HERALD_CHANNELS__SMS__MODE", "Shadow").unwrap_err().to_string();
        assert!(e.contains("channels.sms.mode") && e.contains("HERALD_CHANNELS__SMS__MODE"), "{e}");
        let route = "[[routes]]\nevent = \"a\"\ntemplate = \"t\"\nchannels = [\"email\"]\n";
        let e = load(&format!("{route}{route}mode = \"off\"\n")).unwrap_err().to_string();
        assert!(e.starts_with("routes[1].mode: \"off\" must be \"live\" or \"shadow\""), "{e}");
        assert!(e.contains("herald.toml"), "{e}");
        for channel in ["email", "sms", "webhook", "in_app"] {
            let e = load(&format!("[channels.{channel}]\nmode = \"dark\"\n")).unwrap_err().to_string();
            assert!(e.contains(&format!("channels.{channel}.mode: \"dark\" must be")), "{e}");
        }
        assert!(!default_with("HERALD_DEPLOYMENT", "x").unwrap().any_shadow());
    }

    #[test]
    fn an_empty_mode_variable_leaves_the_mode_unset() {
        let c = load("mode = \"shadow\"\n").unwrap();
        assert_eq!(c.mode, Some(Mode::Shadow));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("herald.toml");
        std::fs::write(&path, "mode = \"shadow\"\n").unwrap();
        let c = Config::load_with_env(Some(&path), &[("HERALD_MODE".into(), String::new())]).unwrap();
        assert_eq!(c.mode, None);
    }
}
