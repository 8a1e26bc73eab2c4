//! `[channels.email]`, checked at load: one SMTP server or sink, or a
//! failover list of named ones (each checked as one provider).

use super::{ConfigError, EmailConfig, invalid};

impl EmailConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.providers.is_empty() {
            if let Some(name) = self.named.keys().next() {
                return Err(invalid(format!(
                    "channels.email.named.{name}: named providers are used only when channels.email.providers lists them"
                )));
            }
            return self.validate_one("channels.email");
        }
        if let Some(key) = [("smtp_url", self.smtp_url.is_some()), ("sink", self.sink.is_some())]
            .iter()
            .find_map(|(key, set)| set.then_some(key))
        {
            return Err(invalid(format!(
                "channels.email.{key}: with channels.email.providers each provider is a \
                 [channels.email.named.NAME] block of its own; move it there"
            )));
        }
        if let Some((name, _)) = self.named.iter().find(|(_, n)| n.mode.is_some()) {
            return Err(invalid(format!(
                "channels.email.named.{name}.mode: a mode belongs to the channel (channels.email.mode), not to one \
                 of its providers"
            )));
        }
        let chain = super::failover::Chain {
            key: "channels.email",
            providers: &self.providers,
            named: &self.named,
            breaker_failures: self.breaker_failures,
            breaker_cool_down: self.breaker_cool_down,
        };
        chain.check(|b: &EmailConfig| !b.providers.is_empty() || !b.named.is_empty(), |key, b| b.validate_one(key))
    }

    fn validate_one(&self, key: &str) -> Result<(), ConfigError> {
        match (&self.smtp_url, &self.sink) {
            (None, None) | (Some(_), Some(_)) => {
                return Err(invalid(format!("{key}: set exactly one of smtp_url or sink")));
            }
            (Some(url), None) if !url.starts_with("smtp://") && !url.starts_with("smtps://") => {
                return Err(invalid(format!("{key}.smtp_url: must start with smtp:// or smtps://")));
            }
            _ => {}
        }
        if !self.from.contains('@') {
            return Err(invalid(format!("{key}.from: must be an address, like Herald <noreply@example.com>")));
        }
        Ok(())
    }

    /// Every domain Herald writes `Message-ID`s under (a failover list's
    /// providers may each have their own).
    pub fn message_id_domains(&self) -> Vec<&str> {
        let mut domains: Vec<&str> =
            std::iter::once(self).chain(self.named.values()).map(|e| e.message_id_domain.as_str()).collect();
        domains.sort_unstable();
        domains.dedup();
        domains
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    fn load(toml: &str) -> Result<Config, crate::config::ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("herald.toml");
        std::fs::write(&path, toml).unwrap();
        Config::load_with_env(Some(&path), &[])
    }

    const FAILOVER: &str = "[channels.email]\nproviders = [\"mail_a\", \"mail_b\"]\n\
                            [channels.email.named.mail_a]\nsmtp_url = \"smtp://127.0.0.1:2525\"\n\
                            message_id_domain = \"a.herald.test\"\n\
                            [channels.email.named.mail_b]\nsmtp_url = \"smtp://127.0.0.1:2526\"\n";

    #[test]
    fn email_failover_providers_are_named_blocks_each_checked_as_one_provider() {
        let c = load(FAILOVER).unwrap();
        let email = c.channels.email.unwrap();
        assert_eq!(email.providers, ["mail_a", "mail_b"]);
        assert_eq!(email.message_id_domains(), ["a.herald.test", "herald.local"]);
        for (toml, key) in [
            (FAILOVER.replace("\"mail_b\"]", "\"mail_b\", \"mail_c\"]"), "channels.email.providers[2]"),
            (FAILOVER.replace("\"mail_a\", \"mail_b\"]", "\"mail_a\"]"), "channels.email.named.mail_b"),
            (
                FAILOVER.replace("smtp://127.0.0.1:2526", "http://127.0.0.1:2526"),
                "channels.email.named.mail_b.smtp_url",
            ),
            (FAILOVER.replace("providers = ", "smtp_url = \"smtp://x\"\nproviders = "), "channels.email.smtp_url"),
            (
                FAILOVER.replace("providers = ", "breaker_cool_down = \"0s\"\nproviders = "),
                "channels.email.breaker_cool_down",
            ),
            (
                format!(
                    "{FAILOVER}[channels.sms]\nproviders = [\"mail_a\"]\n[channels.sms.named.mail_a]\nurl = \"http://x/sms\"\n"
                ),
                "SMS provider's name",
            ),
        ] {
            let e = load(&toml).unwrap_err().to_string();
            assert!(e.contains(key), "{key}: {e}");
        }
    }
}
