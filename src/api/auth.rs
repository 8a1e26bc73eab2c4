//! Bearer tokens (DESIGN §4, §6): stored only as SHA-256, compared in constant
//! time, each bound to one tenant and a set of scopes. Without configured
//! tokens every caller is the `default` tenant with every scope (and the
//! config refuses to listen beyond loopback).

use super::{ApiError, AppState};
use crate::config::TokenConfig;
use crate::event::Tenant;
use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use sha2::{Digest, Sha256};
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    EventsWrite,
    IntentsRead,
    RecipientsWrite,
    /// The tenant's own dead letters and replays.
    Ops,
    /// The deployment operator: `/metrics`, the dead-letter digest to the
    /// operators' webhook, dead-letter views across tenants.
    Admin,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::EventsWrite => "events:write",
            Scope::IntentsRead => "intents:read",
            Scope::RecipientsWrite => "recipients:write",
            Scope::Ops => "ops",
            Scope::Admin => "admin",
        }
    }

    fn parse(s: &str) -> Option<Scope> {
        [Scope::EventsWrite, Scope::IntentsRead, Scope::RecipientsWrite, Scope::Ops, Scope::Admin]
            .into_iter()
            .find(|x| x.as_str() == s)
    }
}

struct Token {
    name: String,
    tenant: Tenant,
    sha256: [u8; 32],
    scopes: Vec<Scope>,
}

pub struct TokenTable {
    tokens: Vec<Token>,
}

impl TokenTable {
    /// Config validation has already checked the hashes' form; an unknown
    /// scope name grants nothing.
    pub fn from_config(tokens: &[TokenConfig]) -> TokenTable {
        let tokens = tokens
            .iter()
            .filter_map(|t| {
                let bytes = hex::decode(&t.token_sha256).ok()?;
                Some(Token {
                    name: t.name.clone(),
                    tenant: Tenant::new(t.tenant.clone()),
                    sha256: bytes.try_into().ok()?,
                    scopes: t.scopes.iter().filter_map(|s| Scope::parse(s)).collect(),
                })
            })
            .collect();
        TokenTable { tokens }
    }

    pub fn enabled(&self) -> bool {
        !self.tokens.is_empty()
    }

    /// Every configured hash is compared, in constant time, so the time taken
    /// says nothing about which token (or how much of one) matched.
    fn find(&self, presented: &str) -> Option<&Token> {
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        let mut found = None;
        for t in &self.tokens {
            let diff = t.sha256.iter().zip(digest.iter()).fold(0u8, |acc, (a, b)| acc | (a ^ b));
            if diff == 0 && found.is_none() {
                found = Some(t);
            }
        }
        found
    }

    /// The caller a presented token stands for, with a fingerprint of its hash
    /// that a console session carries: a token replaced under the same name
    /// ends the sessions opened with the old one.
    pub fn caller_of(&self, presented: &str) -> Option<(Caller, String)> {
        self.find(presented).map(|t| (t.caller(), t.fingerprint()))
    }

    /// The caller a console session names, while its token is still configured.
    pub fn caller_named(&self, name: &str, fingerprint: &str) -> Option<Caller> {
        self.tokens.iter().find(|t| t.name == name && t.fingerprint() == fingerprint).map(Token::caller)
    }
}

impl Token {
    fn caller(&self) -> Caller {
        Caller { tenant: self.tenant.clone(), name: Some(self.name.clone()), scopes: Some(self.scopes.clone()) }
    }

    /// Eight bytes of the hash: enough to tell two tokens apart, and the hash
    /// is not a secret anyway (the config holds it).
    fn fingerprint(&self) -> String {
        hex::encode(&self.sha256[..8])
    }
}

/// Who is calling: their tenant and what they may do.
#[derive(Debug, Clone)]
pub struct Caller {
    pub tenant: Tenant,
    pub name: Option<String>,
    scopes: Option<Vec<Scope>>,
}

impl Caller {
    /// Every scope, for the `default` tenant: what anyone is when no tokens are configured.
    pub fn unauthenticated() -> Caller {
        Caller { tenant: Tenant::default_tenant(), name: None, scopes: None }
    }

    pub fn has(&self, scope: Scope) -> bool {
        self.scopes.as_ref().is_none_or(|s| s.contains(&scope))
    }

    pub fn require(&self, scope: Scope) -> Result<(), ApiError> {
        match &self.scopes {
            None => Ok(()),
            Some(s) if s.contains(&scope) => Ok(()),
            Some(_) => Err(ApiError::Forbidden(format!("this token lacks the {} scope", scope.as_str()))),
        }
    }
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Caller, ApiError> {
        if !state.tokens.enabled() {
            return Ok(Caller::unauthenticated());
        }
        let client = ClientAddr::of(parts).0;
        let header = parts.headers.get(axum::http::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        let Some(presented) =
            header.and_then(|h| h.strip_prefix("Bearer ").or_else(|| h.strip_prefix("bearer "))).map(str::trim)
        else {
            auth_failed("api", None, client);
            return Err(ApiError::Unauthorized("send Authorization: Bearer TOKEN".into()));
        };
        let Some(token) = state.tokens.find(presented) else {
            auth_failed("api", Some(presented), client);
            return Err(ApiError::Unauthorized("unknown token".into()));
        };
        Ok(Caller { tenant: token.tenant.clone(), name: Some(token.name.clone()), scopes: Some(token.scopes.clone()) })
    }
}

/// What a log line may say of a presented token that matched none: the first
/// eight hex digits of its SHA-256 — enough to tell one client's repeated
/// attempts from another's, nothing to sign in with.
pub fn presented_fingerprint(presented: &str) -> String {
    hex::encode(&Sha256::digest(presented.as_bytes())[..4])
}

/// Counts and logs a failed authentication (`surface`: `api` or `console`):
/// the token only by fingerprint, the client by its address. Never the path,
/// which can hold an address (a recipient id may be one, and a caller may
/// write one into any path).
pub fn auth_failed(surface: &'static str, presented: Option<&str>, client: Option<IpAddr>) {
    crate::ops::metrics::auth_failure(surface);
    let client = client.map_or_else(|| "unknown".to_string(), |ip| ip.to_string());
    match presented {
        Some(token) => tracing::warn!(
            surface, token_fingerprint = %presented_fingerprint(token), client,
            "authentication failed: unknown token"
        ),
        None => tracing::warn!(surface, client, "authentication failed: no token"),
    }
}

/// The connection's peer address, when the server was started with it
/// (`herald serve` is). Never a forwarded header: Herald has no trusted proxy
/// to believe one from.
#[derive(Debug, Clone, Copy)]
pub struct ClientAddr(pub Option<IpAddr>);

impl ClientAddr {
    fn of(parts: &Parts) -> ClientAddr {
        ClientAddr(parts.extensions.get::<ConnectInfo<SocketAddr>>().map(|c| c.0.ip()))
    }
}

impl<S: Send + Sync> FromRequestParts<S> for ClientAddr {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<ClientAddr, Infallible> {
        Ok(ClientAddr::of(parts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> TokenTable {
        let sha = |t: &str| hex::encode(Sha256::digest(t.as_bytes()));
        TokenTable::from_config(&[
            TokenConfig {
                name: "a".into(),
                tenant: "acme".into(),
                token_sha256: sha("tok-a"),
                scopes: vec!["events:write".into()],
            },
            TokenConfig { name: "b".into(), tenant: "globex".into(), token_sha256: sha("tok-b"), scopes: vec![] },
        ])
    }

    #[test]
    fn a_token_is_found_by_its_hash_only() {
        let t = table();
        assert_eq!(t.find("tok-a").map(|t| t.tenant.as_str()), Some("acme"));
        assert_eq!(t.find("tok-b").map(|t| t.tenant.as_str()), Some("globex"));
        assert!(t.find("tok-c").is_none());
        assert!(t.find("").is_none());
    }

    #[test]
    fn a_presented_token_is_logged_as_eight_hex_digits_of_its_hash() {
        let fp = presented_fingerprint("wrong-token");
        assert_eq!(fp, hex::encode(Sha256::digest(b"wrong-token"))[..8]);
        assert!(!fp.contains("wrong"));
    }

    #[test]
    fn scopes_are_enforced() {
        let t = table();
        let tok = t.find("tok-a").unwrap();
        let caller = Caller { tenant: tok.tenant.clone(), name: None, scopes: Some(tok.scopes.clone()) };
        assert!(caller.require(Scope::EventsWrite).is_ok());
        assert!(matches!(caller.require(Scope::Ops), Err(ApiError::Forbidden(_))));
        assert!(matches!(caller.require(Scope::Admin), Err(ApiError::Forbidden(_))));
        assert_eq!(Scope::parse("admin"), Some(Scope::Admin));
    }
}
