//! Console sessions: a signed cookie, not a server-side table, so that any
//! Herald process behind one address (sharing `console.session_secret`)
//! recognises it and nothing is written per sign-in.
//!
//! The cookie names the token it was opened with (its config name and a
//! fingerprint of its hash) and when it expires; each request looks the token
//! up again, so removing or replacing a token in the config ends its sessions.
//! The session's random nonce is not near a send path: it only ties the CSRF
//! token to this session. A CSRF token is the HMAC of the nonce, checked on
//! every form that changes something; the sign-in form, which has no session
//! yet, is tied the same way to a short-lived pre-session cookie.

use super::error::ConsoleError;
use crate::api::{AppState, Caller, Scope};
use crate::config::Config;
use axum::extract::FromRequestParts;
use axum::http::HeaderMap;
use axum::http::request::Parts;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use hmac::{Hmac, Mac};
use rand::TryRngCore;
use sha2::Sha256;
use std::time::Duration;

pub const SESSION_COOKIE: &str = "herald_console";
pub const PRE_SESSION_COOKIE: &str = "herald_console_pre";
/// How long a sign-in form stays good for.
const PRE_SESSION_TTL: Duration = Duration::from_secs(3600);

/// Signs and opens session cookies.
pub struct SessionKeys {
    key: Vec<u8>,
    ttl: Duration,
    secure: bool,
}

impl SessionKeys {
    pub fn from_config(config: &Config) -> SessionKeys {
        let key = match &config.console.session_secret {
            Some(secret) => secret.as_bytes().to_vec(),
            None => random_bytes(32).unwrap_or_else(|| {
                // Without the OS's randomness there is no secret to sign with:
                // every cookie is refused (nobody can sign in) rather than
                // signed with something guessable.
                tracing::error!("console: no randomness for a session secret; set console.session_secret");
                Vec::new()
            }),
        };
        let secure = config.console.secure_cookie.unwrap_or_else(|| {
            config.public_url.as_deref().is_some_and(|u| u.to_ascii_lowercase().starts_with("https://"))
        });
        SessionKeys { key, ttl: config.console.session_ttl, secure }
    }

    fn mac(&self, purpose: &str, parts: &[&str]) -> Option<Vec<u8>> {
        if self.key.is_empty() {
            return None;
        }
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC accepts a key of any length");
        mac.update(purpose.as_bytes());
        for p in parts {
            mac.update(b"\n");
            mac.update(p.as_bytes());
        }
        Some(mac.finalize().into_bytes().to_vec())
    }

    fn verify(&self, purpose: &str, parts: &[&str], tag: &[u8]) -> bool {
        if self.key.is_empty() {
            return false;
        }
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC accepts a key of any length");
        mac.update(purpose.as_bytes());
        for p in parts {
            mac.update(b"\n");
            mac.update(p.as_bytes());
        }
        mac.verify_slice(tag).is_ok()
    }

    /// A session cookie's value for a signed-in token. `None` when no secret
    /// could be had.
    pub fn issue(&self, name: &str, fingerprint: &str, now_s: i64) -> Option<String> {
        let nonce = hex::encode(random_bytes(16)?);
        let name = B64.encode(name);
        let expires = (now_s + self.ttl.as_secs() as i64).to_string();
        let tag = self.mac("session", &[&name, fingerprint, &expires, &nonce])?;
        Some(format!("{name}.{fingerprint}.{expires}.{nonce}.{}", B64.encode(tag)))
    }

    /// The claims of a cookie this process (or one sharing its secret)
    /// signed, while it has not expired.
    pub fn open(&self, value: &str, now_s: i64) -> Option<Claims> {
        let mut parts = value.split('.');
        let (name, fingerprint, expires, nonce, tag) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() {
            return None;
        }
        let tag = B64.decode(tag).ok()?;
        if !self.verify("session", &[name, fingerprint, expires, nonce], &tag) {
            return None;
        }
        let expires: i64 = expires.parse().ok()?;
        if now_s >= expires {
            return None;
        }
        let name = String::from_utf8(B64.decode(name).ok()?).ok()?;
        Some(Claims { name, fingerprint: fingerprint.to_string(), nonce: nonce.to_string() })
    }

    /// The CSRF token of a session (or of a pre-session, for the sign-in form).
    pub fn csrf(&self, nonce: &str) -> String {
        self.mac("csrf", &[nonce]).map(|t| B64.encode(t)).unwrap_or_default()
    }

    pub fn csrf_ok(&self, nonce: &str, presented: &str) -> bool {
        B64.decode(presented).is_ok_and(|tag| self.verify("csrf", &[nonce], &tag))
    }

    /// A fresh pre-session nonce for a sign-in form, with its expiry signed in.
    pub fn pre_session(&self, now_s: i64) -> Option<String> {
        let nonce = hex::encode(random_bytes(16)?);
        let expires = (now_s + PRE_SESSION_TTL.as_secs() as i64).to_string();
        let tag = self.mac("pre", &[&nonce, &expires])?;
        Some(format!("{nonce}.{expires}.{}", B64.encode(tag)))
    }

    /// The nonce of a valid pre-session cookie.
    pub fn open_pre_session(&self, value: &str, now_s: i64) -> Option<String> {
        let mut parts = value.split('.');
        let (nonce, expires, tag) = (parts.next()?, parts.next()?, parts.next()?);
        let tag = B64.decode(tag).ok()?;
        if parts.next().is_some() || !self.verify("pre", &[nonce, expires], &tag) {
            return None;
        }
        (now_s < expires.parse::<i64>().ok()?).then(|| value.to_string())
    }

    /// The name a cookie goes by. A `Secure` cookie is `__Host-` prefixed: a
    /// browser then takes it only from this very host, over HTTPS, for
    /// `Path=/` and without a `Domain`, so a sibling subdomain (or a network
    /// attacker over plain HTTP) cannot plant or shadow a session or a
    /// pre-session. Over plain HTTP the prefix cannot be had, and the cookie
    /// keeps its plain name and `/console` path.
    pub fn cookie_name(&self, base: &str) -> String {
        if self.secure { format!("__Host-{base}") } else { base.to_string() }
    }

    /// The value of cookie `base` under the name this deployment gives it
    /// (an unprefixed cookie is not read when the prefix is in use).
    pub fn read<'h>(&self, headers: &'h HeaderMap, base: &str) -> Option<&'h str> {
        cookie_value(headers, &self.cookie_name(base))
    }

    /// `Set-Cookie` for `name`; `None` clears it.
    pub fn cookie(&self, name: &str, value: Option<&str>, max_age: Option<Duration>) -> String {
        let (name, path, secure) = match self.secure {
            true => (self.cookie_name(name), "/", "; Secure"),
            false => (name.to_string(), "/console", ""),
        };
        match value {
            Some(v) => {
                let age = max_age.unwrap_or(self.ttl).as_secs();
                format!("{name}={v}; Path={path}; Max-Age={age}; HttpOnly; SameSite=Strict{secure}")
            }
            None => format!("{name}=; Path={path}; Max-Age=0; HttpOnly; SameSite=Strict{secure}"),
        }
    }

    pub fn pre_session_cookie(&self, value: &str) -> String {
        self.cookie(PRE_SESSION_COOKIE, Some(value), Some(PRE_SESSION_TTL))
    }
}

fn random_bytes(n: usize) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; n];
    rand::rngs::OsRng.try_fill_bytes(&mut buf).ok()?;
    Some(buf)
}

/// What a valid session cookie says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    pub name: String,
    pub fingerprint: String,
    pub nonce: String,
}

/// The signed-in operator: their tenant (an operator sees only it), and the
/// CSRF token their forms carry.
#[derive(Debug, Clone)]
pub struct Operator {
    pub caller: Caller,
    pub nonce: String,
    pub csrf: String,
}

impl Operator {
    pub fn tenant(&self) -> &str {
        self.caller.tenant.as_str()
    }

    pub fn name(&self) -> &str {
        self.caller.name.as_deref().unwrap_or("local")
    }

    /// The deployment operator, who reads every tenant's notifications.
    pub fn is_admin(&self) -> bool {
        self.caller.has(Scope::Admin)
    }

    /// Whose notifications this operator reads: their tenant's, or every
    /// tenant's (None) with `admin`. Changes (replays) stay in their tenant.
    pub fn reads(&self) -> Option<&str> {
        if self.is_admin() { None } else { Some(self.tenant()) }
    }

    /// Refuses a form that does not carry this session's CSRF token.
    pub fn check_csrf(&self, keys: &SessionKeys, presented: &str) -> Result<(), ConsoleError> {
        if keys.csrf_ok(&self.nonce, presented) { Ok(()) } else { Err(ConsoleError::Csrf) }
    }
}

/// The console is for operators: a token with `ops` (its tenant's dead
/// letters and replays) or `admin`.
pub fn may_operate(caller: &Caller) -> bool {
    caller.has(Scope::Ops) || caller.has(Scope::Admin)
}

pub fn cookie_value<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v)
}

impl FromRequestParts<AppState> for Operator {
    type Rejection = ConsoleError;

    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Operator, ConsoleError> {
        let keys = &app.console;
        let now = app.clock.now().as_second();
        let claims =
            keys.read(&parts.headers, SESSION_COOKIE).and_then(|v| keys.open(v, now)).ok_or(ConsoleError::SignedOut)?;
        let caller = if app.tokens.enabled() {
            app.tokens.caller_named(&claims.name, &claims.fingerprint).ok_or(ConsoleError::SignedOut)?
        } else if claims.fingerprint == "none" {
            Caller::unauthenticated()
        } else {
            return Err(ConsoleError::SignedOut);
        };
        if !may_operate(&caller) {
            return Err(ConsoleError::SignedOut);
        }
        let csrf = keys.csrf(&claims.nonce);
        Ok(Operator { caller, nonce: claims.nonce, csrf })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(secret: &str) -> SessionKeys {
        SessionKeys { key: secret.as_bytes().to_vec(), ttl: Duration::from_secs(600), secure: false }
    }

    #[test]
    fn a_session_opens_with_its_own_secret_until_it_expires() {
        let k = keys("a secret of at least thirty-two characters");
        let cookie = k.issue("ops-acme", "0011223344556677", 1_000).unwrap();
        let claims = k.open(&cookie, 1_599).unwrap();
        assert_eq!((claims.name.as_str(), claims.fingerprint.as_str()), ("ops-acme", "0011223344556677"));
        assert!(k.open(&cookie, 1_600).is_none(), "expired at issue + ttl");
        assert!(keys("another secret of at least thirty-two chars").open(&cookie, 1_001).is_none());
    }

    #[test]
    fn a_tampered_session_is_refused() {
        let k = keys("a secret of at least thirty-two characters");
        let cookie = k.issue("ops-acme", "0011223344556677", 1_000).unwrap();
        let other = B64.encode("ops-globex");
        let forged = format!("{other}{}", &cookie[cookie.find('.').unwrap()..]);
        assert!(k.open(&forged, 1_001).is_none());
        let later = cookie.replace(".1600.", ".9999.");
        assert!(k.open(&later, 1_001).is_none());
        assert!(k.open("", 1_001).is_none());
        assert!(k.open("a.b.c.d.e.f", 1_001).is_none());
    }

    #[test]
    fn a_csrf_token_belongs_to_one_session() {
        let k = keys("a secret of at least thirty-two characters");
        let a = k.open(&k.issue("x", "f", 0).unwrap(), 1).unwrap();
        let b = k.open(&k.issue("x", "f", 0).unwrap(), 1).unwrap();
        assert_ne!(a.nonce, b.nonce);
        assert!(k.csrf_ok(&a.nonce, &k.csrf(&a.nonce)));
        assert!(!k.csrf_ok(&b.nonce, &k.csrf(&a.nonce)));
        assert!(!k.csrf_ok(&a.nonce, ""));
    }

    #[test]
    fn without_a_secret_nothing_is_signed_or_opened() {
        let k = keys("");
        assert!(k.issue("x", "f", 0).is_none());
        assert!(!k.csrf_ok("n", &k.csrf("n")));
    }

    #[test]
    fn cookies_are_http_only_and_same_site_strict() {
        let mut k = keys("a secret of at least thirty-two characters");
        let c = k.cookie(SESSION_COOKIE, Some("v"), None);
        assert!(c.contains("HttpOnly") && c.contains("SameSite=Strict") && !c.contains("Secure"));
        assert!(c.starts_with("herald_console=v; Path=/console;"), "{c}");
        k.secure = true;
        assert!(k.cookie(SESSION_COOKIE, None, None).ends_with("; Secure"));
    }

    #[test]
    fn a_secure_cookie_is_host_prefixed_for_the_whole_host_without_a_domain() {
        let mut k = keys("a secret of at least thirty-two characters");
        k.secure = true;
        for c in
            [k.cookie(SESSION_COOKIE, Some("v"), None), k.cookie(SESSION_COOKIE, None, None), k.pre_session_cookie("p")]
        {
            assert!(c.starts_with("__Host-herald_console"), "{c}");
            assert!(c.contains("; Path=/;") && c.ends_with("; Secure") && !c.contains("Domain"), "{c}");
        }
        let mut headers = HeaderMap::new();
        headers.insert(
            axum::http::header::COOKIE,
            "herald_console=plain; __Host-herald_console=prefixed".parse().unwrap(),
        );
        assert_eq!(k.read(&headers, SESSION_COOKIE), Some("prefixed"));
        k.secure = false;
        assert_eq!(k.read(&headers, SESSION_COOKIE), Some("plain"));
    }
}
