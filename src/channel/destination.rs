//! Where a webhook may go. A tenant chooses `webhook_url`, so without a guard
//! it could point Herald at `127.0.0.1`, the cloud metadata service
//! (`169.254.169.254`) or an internal host, and read the reply back in
//! `attempts[].error` (server-side request forgery). By default Herald
//! refuses loopback, private, link-local, unique-local, multicast,
//! unspecified and reserved addresses, and IPv6 forms that carry or tunnel to
//! such an IPv4 address (mapped, translated, NAT64 and local-use NAT64, 6to4,
//! Teredo):
//!
//! - at input (`PUT /v1/recipients/{id}`, inline on an event): the URL's
//!   literal host in any notation the URL parser accepts (`2130706433`,
//!   `0x7f.1`, `[::ffff:127.0.0.1]`), `localhost` names, and what a name
//!   resolves to now;
//! - at send time, on the addresses the connection itself uses: the HTTP
//!   client's resolver drops forbidden addresses, so a name that was public at
//!   input and private now (DNS rebinding) is refused, not connected to.
//!
//! `channels.webhook.allow_private_destinations = true` turns the guard off
//! (tests, on-premise receivers). Redirects are never followed either way.

use async_trait::async_trait;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use url::{Host, Url};

/// How long input validation waits for name lookups before leaving the
/// decision to send time.
const INPUT_LOOKUP_TIMEOUT: Duration = Duration::from_secs(2);
/// The most distinct names one request resolves at input; the rest are
/// checked at send time only.
const MAX_INPUT_LOOKUPS: usize = 16;

const HOW_TO_ALLOW: &str = "set channels.webhook.allow_private_destinations = true to deliver to such addresses";

/// Why an address is out of bounds; `None` for a public unicast address.
pub fn forbidden_class(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => v4_class(v4),
        IpAddr::V6(v6) => v6_class(v6),
    }
}

fn v4_class(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    match (a, b, c) {
        (0, _, _) => Some("unspecified"),
        (127, _, _) => Some("loopback"),
        (10, _, _) | (172, 16..=31, _) | (192, 168, _) => Some("private"),
        // Shared address space (carrier-grade NAT): private in all but name.
        (100, 64..=127, _) => Some("private"),
        (169, 254, _) => Some("link-local"),
        (224..=239, _, _) => Some("multicast"),
        // 240/4 and the broadcast address; protocol assignments,
        // documentation and benchmarking ranges route nowhere public.
        // The 6to4 relay anycast block (deprecated, RFC 7526) hands traffic to
        // whichever relay is nearest, inside the deployment's network too.
        (240..=255, _, _)
        | (192, 0, 0)
        | (192, 0, 2)
        | (198, 51, 100)
        | (203, 0, 113)
        | (198, 18..=19, _)
        | (192, 88, 99) => Some("reserved"),
        _ => None,
    }
}

fn v6_class(ip: Ipv6Addr) -> Option<&'static str> {
    let s = ip.segments();
    if ip.is_unspecified() {
        return Some("unspecified");
    }
    if ip.is_loopback() {
        return Some("loopback");
    }
    // An IPv4 address in IPv6 clothing is judged as the IPv4 address: mapped
    // (::ffff:a.b.c.d), translated (::ffff:0:a.b.c.d, RFC 6145), through the
    // well-known NAT64 prefix (64:ff9b::/96, RFC 6052) or 6to4 (2002::/16).
    let v4_at = |i: usize| Ipv4Addr::from((u32::from(s[i]) << 16) | u32::from(s[i + 1]));
    let carried = match s {
        [0, 0, 0, 0, 0, 0xffff, ..] | [0, 0, 0, 0, 0xffff, 0, ..] | [0x64, 0xff9b, 0, 0, 0, 0, ..] => Some(v4_at(6)),
        [0x2002, ..] => Some(v4_at(1)),
        _ => None,
    };
    if let Some(v4) = carried {
        return v4_class(v4);
    }
    match s {
        // Local-use NAT64 (RFC 8215): translated by the deployment's own
        // gateway, to whatever IPv4 network it serves.
        [0x64, 0xff9b, 1, ..] => Some("local-use NAT64"),
        // The rest of 0000::/8: IPv4-compatible (deprecated), NAT64 outside
        // its /96, unassigned.
        [x, ..] if x & 0xff00 == 0 => Some("reserved"),
        // Teredo tunnels to an IPv4 host through a relay the guard cannot see.
        [0x2001, 0, ..] => Some("Teredo"),
        // The rest of the IETF protocol block (benchmarking, ORCHID, …).
        [0x2001, x, ..] if x < 0x0200 => Some("reserved"),
        [0x2001, 0x0db8, ..] => Some("reserved"),               // documentation
        [0x3fff, x, ..] if x & 0xf000 == 0 => Some("reserved"), // documentation (RFC 9637)
        [0x0100, 0, 0, 0, ..] => Some("reserved"),              // discard-only
        [x, ..] if x & 0xffc0 == 0xfe80 => Some("link-local"),
        [x, ..] if x & 0xffc0 == 0xfec0 => Some("private"), // site-local (deprecated)
        [x, ..] if x & 0xfe00 == 0xfc00 => Some("unique-local"),
        [x, ..] if x & 0xff00 == 0xff00 => Some("multicast"),
        _ => None,
    }
}

/// `localhost` and anything under it (RFC 6761) is this machine, whatever a
/// resolver says.
fn is_local_name(name: &str) -> bool {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name == "localhost" || name.ends_with(".localhost")
}

/// The checks that need no lookup. `Ok(Some(name))` is a name still to be
/// resolved; `Ok(None)` a public literal address.
pub fn check_literal(url: &Url) -> Result<Option<String>, String> {
    let ip = match url.host() {
        None => return Err("has no host".into()),
        Some(Host::Domain(name)) if is_local_name(name) => {
            return Err(format!("{name} is this machine (loopback); {HOW_TO_ALLOW}"));
        }
        Some(Host::Domain(name)) => return Ok(Some(name.to_string())),
        Some(Host::Ipv4(v4)) => IpAddr::V4(v4),
        Some(Host::Ipv6(v6)) => IpAddr::V6(v6),
    };
    match forbidden_class(ip) {
        Some(class) => Err(format!("{ip} is a {class} address; {HOW_TO_ALLOW}")),
        None => Ok(None),
    }
}

/// Name resolution, replaceable in tests.
#[async_trait]
pub trait Lookup: Send + Sync {
    async fn lookup(&self, name: &str) -> std::io::Result<Vec<IpAddr>>;
}

/// The system resolver (getaddrinfo, through tokio).
pub struct SystemLookup;

#[async_trait]
impl Lookup for SystemLookup {
    async fn lookup(&self, name: &str) -> std::io::Result<Vec<IpAddr>> {
        Ok(tokio::net::lookup_host((name, 0)).await?.map(|a| a.ip()).collect())
    }
}

/// A connection refused because every address of its host is out of bounds.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ForbiddenDestination(pub String);

fn all_forbidden(name: &str) -> ForbiddenDestination {
    ForbiddenDestination(format!(
        "{name} resolves only to loopback, private, link-local or otherwise non-public addresses; {HOW_TO_ALLOW}"
    ))
}

/// This guard's refusal, if it is anywhere in an HTTP client error's chain
/// of causes.
pub fn refusal_in<'e>(error: &'e (dyn std::error::Error + 'static)) -> Option<&'e ForbiddenDestination> {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if let Some(refusal) = e.downcast_ref::<ForbiddenDestination>() {
            return Some(refusal);
        }
        cause = e.source();
    }
    None
}

/// The resolver the webhook client connects through: the addresses a
/// connection uses are the ones checked here, so no second lookup can answer
/// differently. Forbidden addresses are dropped; none left is a refusal.
pub struct GuardedResolver {
    lookup: Arc<dyn Lookup>,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let lookup = self.lookup.clone();
        let name = name.as_str().to_string();
        Box::pin(async move {
            if is_local_name(&name) {
                return Err(Box::new(all_forbidden(&name)) as _);
            }
            let found = lookup.lookup(&name).await?;
            if found.is_empty() {
                return Err(format!("{name} has no addresses").into());
            }
            let allowed: Vec<SocketAddr> = found
                .into_iter()
                .filter(|ip| forbidden_class(*ip).is_none())
                .map(|ip| SocketAddr::new(ip, 0))
                .collect();
            if allowed.is_empty() {
                return Err(Box::new(all_forbidden(&name)) as _);
            }
            Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// The deployment's rule for webhook destinations.
#[derive(Clone)]
pub struct DestinationPolicy {
    allow_private: bool,
    lookup: Arc<dyn Lookup>,
}

impl DestinationPolicy {
    pub fn new(allow_private: bool, lookup: Arc<dyn Lookup>) -> DestinationPolicy {
        DestinationPolicy { allow_private, lookup }
    }

    /// From `channels.webhook.allow_private_destinations` (refusing when the
    /// channel is not configured: a directory entry may still carry a URL).
    pub fn from_config(config: &crate::config::Config) -> DestinationPolicy {
        let allow = config.channels.webhook.as_ref().is_some_and(|w| w.allow_private_destinations);
        DestinationPolicy::new(allow, Arc::new(SystemLookup))
    }

    pub fn allows_private(&self) -> bool {
        self.allow_private
    }

    /// The resolver a webhook client must connect through, unless private
    /// destinations are allowed.
    pub fn resolver(&self) -> Option<Arc<GuardedResolver>> {
        (!self.allow_private).then(|| Arc::new(GuardedResolver { lookup: self.lookup.clone() }))
    }

    /// The send-time check of what the URL says by itself (a literal IP host
    /// never reaches the resolver).
    pub fn check_before_send(&self, url: &str) -> Result<(), String> {
        if self.allow_private {
            return Ok(());
        }
        let url = Url::parse(url).map_err(|e| format!("webhook_url is not a URL: {e}"))?;
        check_literal(&url).map(|_| ())
    }

    /// Input validation of `(field, url)` pairs, each already a valid http(s)
    /// URL: the first refused one as `(field, message)`. Names are resolved
    /// concurrently under one deadline; a name that does not resolve (or not
    /// in time) is left to the send-time check, which is the authority.
    pub async fn check_input(&self, urls: &[(String, String)]) -> Result<(), (String, String)> {
        if self.allow_private {
            return Ok(());
        }
        let mut names: BTreeMap<String, String> = BTreeMap::new();
        for (field, text) in urls {
            let url = Url::parse(text).map_err(|e| (field.clone(), format!("is not a URL: {e}")))?;
            if let Some(name) = check_literal(&url).map_err(|m| (field.clone(), m))? {
                names.entry(name).or_insert_with(|| field.clone());
            }
        }
        let mut lookups = tokio::task::JoinSet::new();
        for (name, field) in names.into_iter().take(MAX_INPUT_LOOKUPS) {
            let lookup = self.lookup.clone();
            lookups.spawn(async move {
                let found = lookup.lookup(&name).await.unwrap_or_default();
                let refused = !found.is_empty() && found.iter().all(|ip| forbidden_class(*ip).is_some());
                refused.then(|| (field, all_forbidden(&name).0))
            });
        }
        let first_refusal = async {
            while let Some(done) = lookups.join_next().await {
                if let Ok(Some(refusal)) = done {
                    return Some(refusal);
                }
            }
            None
        };
        match tokio::time::timeout(INPUT_LOOKUP_TIMEOUT, first_refusal).await {
            Ok(Some(refusal)) => Err(refusal),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn refused(url: &str) -> bool {
        check_literal(&Url::parse(url).unwrap()).is_err()
    }

    #[test]
    fn non_public_addresses_are_refused_in_every_notation() {
        for url in [
            "http://127.0.0.1/",
            "http://127.1/",
            "http://2130706433/",
            "http://0177.0.0.1/",
            "http://0x7f.0.0.1/",
            "http://0x7f000001/",
            "http://169.254.169.254/latest/meta-data/",
            "http://10.0.0.5/",
            "http://172.16.0.1/",
            "http://172.31.255.255/",
            "http://192.168.1.1/",
            "http://100.64.0.1/",
            "http://0.0.0.0/",
            "http://0/",
            "http://224.0.0.1/",
            "http://255.255.255.255/",
            "http://[::]/",
            "http://[::1]/",
            "http://[::ffff:127.0.0.1]/",
            "http://[::ffff:169.254.169.254]/",
            "http://[64:ff9b::a00:5]/",
            "http://[2002:7f00:1::]/",
            "http://[fe80::1]/",
            "http://[fd00::1]/",
            "http://[fc00::1]/",
            "http://[ff02::1]/",
            "http://localhost/",
            "http://LOCALHOST./",
            "http://api.localhost/",
        ] {
            assert!(refused(url), "{url} should be refused");
        }
    }

    #[test]
    fn tunnels_and_translators_that_reach_inside_are_refused() {
        for url in [
            // RFC 8215 local-use NAT64: the translator is the deployment's own
            "http://[64:ff9b:1::a9fe:a9fe]/",
            "http://[64:ff9b:1:ffff::1]/",
            // the well-known NAT64 prefix carrying a forbidden IPv4 address
            "http://[64:ff9b::a9fe:a9fe]/",
            "http://[64:ff9b::7f00:1]/",
            "http://[64:ff9b::192.168.0.1]/",
            // Teredo (2001::/32) and the rest of the IETF protocol block
            "http://[2001::1]/",
            "http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/",
            "http://[2001:2::1]/",
            "http://[2001:10::1]/",
            // IPv4 addresses written in IPv6 forms around ::ffff:0:0/96
            "http://[::ffff:0:7f00:1]/",
            "http://[::ffff:0:a9fe:a9fe]/",
            "http://[::ffff:7f00:1]/",
            "http://[::127.0.0.1]/",
            "http://[::1:0:0:1]/",
            // the 6to4 relay anycast block, and 6to4 around an address inside
            "http://192.88.99.1/",
            "http://[2002:c058:6301::1]/",
            "http://[2002:a9fe:a9fe::1]/",
            // IPv6 documentation (RFC 9637)
            "http://[3fff::1]/",
        ] {
            assert!(refused(url), "{url} should be refused");
        }
        // a translator or tunnel carrying a public address is as public as it
        for url in ["http://[64:ff9b::808:808]/", "http://[2002:808:808::1]/", "http://[::ffff:8.8.8.8]/"] {
            assert!(!refused(url), "{url} should pass");
        }
    }

    #[test]
    fn public_addresses_and_names_pass_the_literal_check() {
        for url in
            ["https://93.184.216.34/hook", "https://[2606:2800:220:1::1]/", "http://172.32.0.1/", "http://8.8.8.8"]
        {
            assert_eq!(check_literal(&Url::parse(url).unwrap()), Ok(None), "{url}");
        }
        assert_eq!(
            check_literal(&Url::parse("https://hooks.example.com/x").unwrap()),
            Ok(Some("hooks.example.com".into()))
        );
    }

    struct Fixed(HashMap<&'static str, Vec<IpAddr>>);

    #[async_trait]
    impl Lookup for Fixed {
        async fn lookup(&self, name: &str) -> std::io::Result<Vec<IpAddr>> {
            self.0.get(name).cloned().ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "no such name"))
        }
    }

    fn policy(allow_private: bool) -> DestinationPolicy {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let names = HashMap::from([
            ("internal.example.com", vec![ip("10.1.2.3")]),
            ("mixed.example.com", vec![ip("10.1.2.3"), ip("93.184.216.34")]),
            ("public.example.com", vec![ip("93.184.216.34")]),
        ]);
        DestinationPolicy::new(allow_private, Arc::new(Fixed(names)))
    }

    fn input(urls: &[&str]) -> Vec<(String, String)> {
        urls.iter().enumerate().map(|(i, u)| (format!("recipients[{i}].webhook_url"), u.to_string())).collect()
    }

    #[tokio::test]
    async fn input_names_are_judged_by_what_they_resolve_to() {
        let p = policy(false);
        let ok = ["https://public.example.com/a", "https://mixed.example.com/b", "https://unknown.example.com/c"];
        assert_eq!(p.check_input(&input(&ok)).await, Ok(()));
        let err = p.check_input(&input(&["https://public.example.com/", "http://internal.example.com/x"])).await;
        assert_eq!(err.unwrap_err().0, "recipients[1].webhook_url");
        let err = p.check_input(&input(&["http://[::ffff:10.0.0.1]/"])).await.unwrap_err();
        assert!(err.1.contains("private") && err.1.contains("allow_private_destinations"), "{err:?}");
        assert_eq!(
            policy(true).check_input(&input(&["http://127.0.0.1/", "http://internal.example.com/"])).await,
            Ok(())
        );
    }

    #[tokio::test]
    async fn the_connection_resolver_drops_forbidden_addresses() {
        use reqwest::dns::Resolve;
        let resolver = policy(false).resolver().unwrap();
        let resolve = |name: &'static str| resolver.resolve(name.parse().unwrap());
        let mixed: Vec<SocketAddr> = resolve("mixed.example.com").await.unwrap().collect();
        assert_eq!(mixed, vec!["93.184.216.34:0".parse().unwrap()]);
        let err = resolve("internal.example.com").await.err().unwrap();
        assert!(refusal_in(err.as_ref()).is_some(), "{err}");
        let err = resolve("localhost").await.err().unwrap();
        assert!(refusal_in(err.as_ref()).is_some(), "{err}");
        let err = resolve("unknown.example.com").await.err().unwrap();
        assert!(refusal_in(err.as_ref()).is_none(), "an unresolvable name is not a refusal: {err}");
        assert!(policy(true).resolver().is_none());
    }
}
