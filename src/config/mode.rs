//! Shadow mode's configuration: `mode = "live" | "shadow"` for the whole
//! deployment, a route (`[[routes]] mode`) or a channel (`[channels.X] mode`).
//! The most specific setting wins: channel, then route, then deployment.

use super::{Config, ConfigError, Route, invalid};
use crate::event::Channel;
use crate::intent::Mode;

impl Config {
    /// The mode an intent on `channel` of `route` is planned in now.
    pub fn mode_for(&self, route: &Route, channel: Channel) -> Mode {
        [self.channel_mode(channel), route.mode.as_deref(), self.mode.as_deref()]
            .into_iter()
            .flatten()
            .find_map(Mode::parse)
            .unwrap_or(Mode::Live)
    }

    /// Whether anything is configured to run in shadow.
    pub fn any_shadow(&self) -> bool {
        let channels = [Channel::Email, Channel::Sms, Channel::Webhook, Channel::InApp];
        let all = [self.mode.as_deref()]
            .into_iter()
            .chain(self.routes.iter().map(|r| r.mode.as_deref()))
            .chain(channels.map(|c| self.channel_mode(c)));
        all.flatten().any(|m| m == Mode::Shadow.as_str())
    }

    fn channel_mode(&self, channel: Channel) -> Option<&str> {
        let c = &self.channels;
        match channel {
            Channel::Email => c.email.as_ref()?.mode.as_deref(),
            Channel::Sms => c.sms.as_ref()?.mode.as_deref(),
            Channel::Webhook => c.webhook.as_ref()?.mode.as_deref(),
            Channel::InApp => c.in_app.as_ref()?.mode.as_deref(),
        }
    }

    pub(super) fn validate_modes(&self) -> Result<(), ConfigError> {
        let c = &self.channels;
        let named = self.routes.iter().enumerate().map(|(i, r)| (format!("routes[{i}].mode"), r.mode.as_deref()));
        let keys = [
            ("mode".to_string(), self.mode.as_deref()),
            ("channels.email.mode".to_string(), c.email.as_ref().and_then(|e| e.mode.as_deref())),
            ("channels.sms.mode".to_string(), c.sms.as_ref().and_then(|e| e.mode.as_deref())),
            ("channels.webhook.mode".to_string(), c.webhook.as_ref().and_then(|e| e.mode.as_deref())),
            ("channels.in_app.mode".to_string(), c.in_app.as_ref().and_then(|e| e.mode.as_deref())),
        ];
        for (key, value) in keys.into_iter().chain(named) {
            if let Some(v) = value
                && Mode::parse(v).is_none()
            {
                return Err(invalid(format!("{key}: {v:?} must be \"live\" or \"shadow\"")));
            }
        }
        if let Some(sms) = &c.sms
            && let Some((name, _)) = sms.named.iter().find(|(_, n)| n.mode.is_some())
        {
            return Err(invalid(format!(
                "channels.sms.named.{name}.mode: a mode belongs to the channel (channels.sms.mode), not to one of its providers"
            )));
        }
        Ok(())
    }
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

    #[test]
    fn a_mode_that_is_neither_live_nor_shadow_is_refused_naming_its_key() {
        assert_eq!(default_with("HERALD_MODE", "shadow").unwrap().mode.as_deref(), Some("shadow"));
        let e = default_with("HERALD_MODE", "dry").unwrap_err().to_string();
        assert!(e.contains("mode: \"dry\" must be") && e.contains("HERALD_MODE"), "{e}");
        let e = default_with("HERALD_CHANNELS__SMS__MODE", "Shadow").unwrap_err().to_string();
        assert!(e.contains("channels.sms.mode") && e.contains("HERALD_CHANNELS__SMS__MODE"), "{e}");
        let mut c = config("");
        c.routes[1].mode = Some("off".into());
        assert!(c.validate_modes().unwrap_err().to_string().starts_with("routes[1].mode: \"off\""));
        assert!(!default_with("HERALD_DEPLOYMENT", "x").unwrap().any_shadow());
    }
}
