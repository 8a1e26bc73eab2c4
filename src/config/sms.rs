//! `[channels.sms]` and `public_url`, checked at load: which keys each
//! provider takes, and that every value can be used as it stands (a SID that
//! goes into a URL path, a sender Twilio would accept, a callback base that is
//! an absolute URL).

use super::{ConfigError, SmsConfig, SmsProvider, invalid};

/// Keys only the Twilio provider reads.
const TWILIO_ONLY: [&str; 3] = ["account_sid", "from", "messaging_service_sid"];

impl SmsConfig {
    pub(super) fn validate(&self, public_url: Option<&str>) -> Result<(), ConfigError> {
        if self.providers.is_empty() {
            if let Some(name) = self.named.keys().next() {
                return Err(invalid(format!(
                    "channels.sms.named.{name}: named providers are used only when channels.sms.providers lists them"
                )));
            }
            return self.validate_one("channels.sms", public_url);
        }
        self.validate_failover(public_url)
    }

    /// One provider, at `key` (`channels.sms`, or a named block).
    fn validate_one(&self, key: &str, public_url: Option<&str>) -> Result<(), ConfigError> {
        match self.provider {
            SmsProvider::Http => self.validate_http(key),
            SmsProvider::Twilio => self.validate_twilio(key, public_url),
        }
    }

    fn validate_failover(&self, public_url: Option<&str>) -> Result<(), ConfigError> {
        let own =
            [("url", self.url.is_some()), ("sink", self.sink.is_some()), ("account_sid", self.account_sid.is_some())];
        if let Some((key, _)) = own.iter().find(|(_, set)| *set) {
            return Err(invalid(format!(
                "channels.sms.{key}: with channels.sms.providers each provider is a [channels.sms.named.NAME] block \
                 of its own; move it there"
            )));
        }
        let chain = super::failover::Chain {
            key: "channels.sms",
            providers: &self.providers,
            named: &self.named,
            breaker_failures: self.breaker_failures,
            breaker_cool_down: self.breaker_cool_down,
        };
        chain.check(
            |b: &SmsConfig| !b.providers.is_empty() || !b.named.is_empty(),
            |key, b| b.validate_one(key, public_url),
        )
    }

    fn validate_http(&self, key: &str) -> Result<(), ConfigError> {
        match (&self.url, &self.sink) {
            (None, None) | (Some(_), Some(_)) => return Err(invalid(format!("{key}: set exactly one of url or sink"))),
            (Some(url), None) if reqwest::Url::parse(url).is_err() => {
                return Err(invalid(format!("{key}.url: {url:?} is not a URL")));
            }
            _ => {}
        }
        let set = [&self.account_sid, &self.from, &self.messaging_service_sid];
        if let Some((field, _)) = TWILIO_ONLY.iter().zip(set).find(|(_, v)| v.is_some()) {
            return Err(invalid(format!(
                "{key}.{field}: only the twilio provider reads it; set {key}.provider = \"twilio\" or remove it"
            )));
        }
        Ok(())
    }

    fn validate_twilio(&self, key: &str, public_url: Option<&str>) -> Result<(), ConfigError> {
        if self.url.is_some() || self.sink.is_some() {
            let field = if self.url.is_some() { "url" } else { "sink" };
            return Err(invalid(format!(
                "{key}.{field}: not used by provider = \"twilio\" (it posts to base_url); remove it"
            )));
        }
        let sid = self.account_sid.as_deref().ok_or_else(|| {
            invalid(format!("{key}.account_sid: required by provider = \"twilio\" (the account's SID, AC…)"))
        })?;
        check_sid(&format!("{key}.account_sid"), sid)?;
        if self.auth_token.as_deref().is_none_or(|t| t.trim().is_empty()) {
            return Err(invalid(format!(
                "{key}.auth_token: required by provider = \"twilio\" (the account's auth token)"
            )));
        }
        match (&self.from, &self.messaging_service_sid) {
            (None, None) | (Some(_), Some(_)) => {
                return Err(invalid(format!(
                    "{key}: provider = \"twilio\" takes exactly one of from or messaging_service_sid"
                )));
            }
            (Some(from), None) => check_sender(&format!("{key}.from"), from)?,
            (None, Some(sid)) => check_sid(&format!("{key}.messaging_service_sid"), sid)?,
        }
        check_base(&format!("{key}.base_url"), &self.base_url)?;
        if public_url.is_none() {
            return Err(invalid(format!(
                "public_url: required by {key}.provider = \"twilio\": Twilio posts each message's delivery \
                 status to {{public_url}}/v1/receipts/twilio, so set it to where Twilio reaches this Herald, \
                 like https://herald.example.com"
            )));
        }
        Ok(())
    }

    /// Every Twilio account configured (the channel's own, or named blocks').
    pub fn twilio_accounts(&self) -> Vec<&SmsConfig> {
        std::iter::once(self)
            .chain(self.named.values())
            .filter(|s| s.provider == SmsProvider::Twilio && s.account_sid.is_some())
            .collect()
    }
}

/// A SID goes into the request's path: letters, digits and `-` only.
fn check_sid(key: &str, sid: &str) -> Result<(), ConfigError> {
    let ok = !sid.is_empty() && sid.len() <= 64 && sid.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if !ok {
        return Err(invalid(format!("{key}: {sid:?} is not a SID (letters and digits, like AC0123…)")));
    }
    Ok(())
}

/// What Twilio takes as `From`: a number in E.164, a short code (digits), or
/// an alphanumeric sender id (at most 11 letters, digits and spaces, with at
/// least one letter).
fn check_sender(key: &str, from: &str) -> Result<(), ConfigError> {
    if from.starts_with('+') {
        return crate::recipient::validate_phone(from).map(|_| ()).map_err(|e| invalid(format!("{key}: {e}")));
    }
    let short_code = (3..=8).contains(&from.len()) && from.bytes().all(|b| b.is_ascii_digit());
    let alphanumeric = (1..=11).contains(&from.len())
        && from.bytes().all(|b| b.is_ascii_alphanumeric() || b == b' ')
        && from.bytes().any(|b| b.is_ascii_alphabetic());
    if !short_code && !alphanumeric {
        return Err(invalid(format!(
            "{key}: {from:?} is not a sender: a number in E.164 (+15005550006), \
             a short code, or an alphanumeric sender id of at most 11 characters"
        )));
    }
    Ok(())
}

/// An absolute http(s) URL with nothing after its path: a base that other
/// paths are appended to.
pub(super) fn check_base(key: &str, url: &str) -> Result<(), ConfigError> {
    let parsed = reqwest::Url::parse(url).map_err(|_| invalid(format!("{key}: {url:?} is not a URL")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(invalid(format!("{key}: {url:?} must be an http:// or https:// URL")));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(invalid(format!("{key}: {url:?} must not have a query or a fragment: paths are added to it")));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(invalid(format!("{key}: must not carry credentials")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, ConfigError, SmsProvider};

    fn load(text: &str) -> Result<Config, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("herald.toml");
        std::fs::write(&path, text).unwrap();
        Config::load_with_env(Some(&path), &[])
    }

    const TWILIO: &str = "public_url = \"https://herald.example.com\"\n[channels.sms]\nprovider = \"twilio\"\n\
                          account_sid = \"AC0123456789abcdef0123456789abcdef\"\nauth_token = \"tok3n-s3cret\"\n";

    #[test]
    fn a_twilio_provider_takes_its_keys() {
        let c = load(&format!("{TWILIO}from = \"+15005550006\"\n")).unwrap();
        let sms = c.channels.sms.unwrap();
        assert_eq!(sms.provider, SmsProvider::Twilio);
        assert_eq!(sms.base_url, "https://api.twilio.com");
        assert!(load(&format!("{TWILIO}messaging_service_sid = \"MG0123\"\n")).is_ok());
        assert!(load(&format!("{TWILIO}from = \"Herald\"\nbase_url = \"http://127.0.0.1:9/\"\n")).is_ok());
    }

    #[test]
    fn each_missing_or_bad_twilio_key_is_named() {
        for (toml, key) in [
            (TWILIO.to_string(), "from or messaging_service_sid"),
            (format!("{TWILIO}from = \"+1500\"\nmessaging_service_sid = \"MG1\"\n"), "exactly one"),
            (format!("{TWILIO}from = \"not a sender!\"\n"), "channels.sms.from"),
            (format!("{TWILIO}from = \"+0123\"\n"), "channels.sms.from"),
            (format!("{TWILIO}from = \"+15005550006\"\nbase_url = \"ftp://x\"\n"), "channels.sms.base_url"),
            (format!("{TWILIO}from = \"+15005550006\"\nurl = \"http://x/sms\"\n"), "channels.sms.url"),
            (TWILIO.replace("AC0123456789abcdef0123456789abcdef", "AC/../x") + "from = \"Herald\"\n", "account_sid"),
            (TWILIO.replace("auth_token = \"tok3n-s3cret\"\n", "from = \"Herald\"\n"), "channels.sms.auth_token"),
            (TWILIO.replace("public_url = \"https://herald.example.com\"\n", "") + "from = \"Herald\"\n", "public_url"),
            (
                TWILIO.replace("https://herald.example.com", "https://h.example.com/?x=1") + "from = \"Herald\"\n",
                "public_url",
            ),
        ] {
            let e = load(&toml).unwrap_err().to_string();
            assert!(e.contains(key), "{key}: {e}");
            assert!(!e.contains("tok3n-s3cret"), "{e}");
        }
    }

    #[test]
    fn twilio_keys_on_the_http_provider_are_refused() {
        let e = load("[channels.sms]\nurl = \"http://x/sms\"\nfrom = \"+15005550006\"\n").unwrap_err().to_string();
        assert!(e.contains("channels.sms.from") && e.contains("twilio"), "{e}");
        let e = load("[channels.sms]\nprovider = \"twillio\"\nurl = \"http://x/sms\"\n").unwrap_err().to_string();
        assert!(e.contains("channels.sms.provider") && e.contains("twilio"), "{e}");
    }

    const FAILOVER: &str = "[channels.sms]\nproviders = [\"primary\", \"backup\"]\n\
                            [channels.sms.named.primary]\nurl = \"http://127.0.0.1:9/sms\"\n\
                            [channels.sms.named.backup]\nurl = \"http://127.0.0.1:10/sms\"\n";

    #[test]
    fn failover_providers_are_named_blocks_each_checked_as_one_provider() {
        let c = load(FAILOVER).unwrap();
        let sms = c.channels.sms.unwrap();
        assert_eq!(sms.providers, ["primary", "backup"]);
        assert_eq!((sms.breaker_failures, sms.breaker_cool_down), (5, std::time::Duration::from_secs(30)));
        for (toml, key) in [
            (FAILOVER.replace("\"backup\"]", "\"backup\", \"spare\"]"), "providers[2]"),
            (FAILOVER.replace("\"primary\", \"backup\"]", "\"primary\"]"), "channels.sms.named.backup"),
            (FAILOVER.replace("\"backup\"]", "\"Backup\"]"), "providers[1]"),
            (FAILOVER.replace("url = \"http://127.0.0.1:10/sms\"", "url = \"nope\""), "channels.sms.named.backup.url"),
            (FAILOVER.replace("[channels.sms.named.primary]\n", "url = \"http://x/sms\"\n[channels.sms.named.primary]\n"), "channels.sms.url"),
            (FAILOVER.replace("providers = ", "breaker_failures = 0\nproviders = "), "breaker_failures"),
            (FAILOVER.replace("[channels.sms.named.backup]\nurl = \"http://127.0.0.1:10/sms\"", "[channels.sms.named.backup]\nprovider = \"twilio\"\naccount_sid = \"AC1\"\nauth_token = \"t\"\nfrom = \"Herald\""), "public_url"),
        ] {
            let e = load(&toml).unwrap_err().to_string();
            assert!(e.contains(key), "{key}: {e}");
        }
        let e = load("[channels.sms]\nurl = \"http://x/sms\"\n[channels.sms.named.a]\nurl = \"http://y/sms\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("channels.sms.named.a"), "{e}");
    }
}
