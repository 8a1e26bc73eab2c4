//! `[console]`: the operator console's sign-in sessions.

use super::{ConfigError, duration, invalid};
use serde::Deserialize;
use std::time::Duration;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsoleConfig {
    #[serde(default = "super::yes")]
    pub enabled: bool,
    /// Signs the session cookies. Every Herald process behind one address
    /// needs the same secret, or a session opened on one is unknown to the
    /// next. Absent: a secret drawn at start-up, so sessions end with the process.
    pub session_secret: Option<String>,
    /// How long a session lasts from sign-in.
    #[serde(default = "default_session_ttl", deserialize_with = "duration")]
    pub session_ttl: Duration,
    /// Marks the cookie `Secure`. Absent: set when `public_url` is https.
    pub secure_cookie: Option<bool>,
    /// Wrong tokens one client address may try within `sign_in_window`
    /// before its sign-ins are refused until the window has passed.
    #[serde(default = "default_sign_in_attempts")]
    pub sign_in_attempts: u32,
    #[serde(default = "default_sign_in_window", deserialize_with = "duration")]
    pub sign_in_window: Duration,
}

impl Default for ConsoleConfig {
    fn default() -> ConsoleConfig {
        ConsoleConfig {
            enabled: true,
            session_secret: None,
            session_ttl: default_session_ttl(),
            secure_cookie: None,
            sign_in_attempts: default_sign_in_attempts(),
            sign_in_window: default_sign_in_window(),
        }
    }
}

fn default_sign_in_attempts() -> u32 {
    10
}

fn default_sign_in_window() -> Duration {
    Duration::from_secs(60)
}

fn default_session_ttl() -> Duration {
    Duration::from_secs(8 * 3600)
}

impl ConsoleConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(secret) = &self.session_secret
            && secret.len() < 32
        {
            return Err(invalid("console.session_secret: must be at least 32 characters"));
        }
        if self.session_ttl < Duration::from_secs(60) || self.session_ttl > Duration::from_secs(7 * 86_400) {
            return Err(invalid("console.session_ttl: must be between 1m and 7d"));
        }
        if !(1..=1000).contains(&self.sign_in_attempts) {
            return Err(invalid("console.sign_in_attempts: must be between 1 and 1000"));
        }
        if self.sign_in_window < Duration::from_secs(1) || self.sign_in_window > Duration::from_secs(86_400) {
            return Err(invalid("console.sign_in_window: must be between 1s and 1d"));
        }
        Ok(())
    }
}
