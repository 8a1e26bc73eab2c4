//! Console sign-in throttling, per client address: after `limit` wrong
//! tokens within `window` of the first, every sign-in from that address is
//! refused (`429` with `Retry-After`) until the window has passed. Then it
//! starts afresh: nobody is locked out for good.
//!
//! While the throttle holds, a correct token is refused too, unchecked:
//! answering it would let guessing go on at full speed (a guess that is
//! right would still get in). The cost is that an operator behind the same
//! address as someone guessing waits out the window (at most `window`); the
//! bearer API is never throttled, so no running integration is affected.
//!
//! The address is the connection's peer. Herald has no trusted-proxy setting,
//! so it never reads `X-Forwarded-For` (anyone could write it); behind a
//! reverse proxy every client shares the proxy's address, and so its throttle.
//! An IPv6 client is counted by its /64, which one host usually holds whole.
//!
//! Memory is bounded: at most `MAX_ADDRESSES` addresses are tracked; when
//! full, expired windows go first, then the oldest.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Mutex;

/// The most client addresses tracked at once.
pub const MAX_ADDRESSES: usize = 10_000;

#[derive(Debug, Clone, Copy)]
struct Window {
    start_s: i64,
    failures: u32,
}

pub struct SignInThrottle {
    limit: u32,
    window_s: i64,
    cap: usize,
    windows: Mutex<HashMap<IpAddr, Window>>,
}

/// What a failure did to its address's window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    Counted,
    /// This failure reached the limit: the address is refused from now on,
    /// for this many seconds.
    NowThrottled(i64),
}

impl SignInThrottle {
    pub fn new(limit: u32, window_s: i64) -> SignInThrottle {
        SignInThrottle::with_cap(limit, window_s, MAX_ADDRESSES)
    }

    fn with_cap(limit: u32, window_s: i64, cap: usize) -> SignInThrottle {
        SignInThrottle { limit: limit.max(1), window_s: window_s.max(1), cap: cap.max(1), windows: Mutex::default() }
    }

    pub fn from_config(config: &crate::config::Config) -> SignInThrottle {
        let c = &config.console;
        SignInThrottle::new(c.sign_in_attempts, c.sign_in_window.as_secs() as i64)
    }

    /// `Err(seconds)` while `client` must wait before trying again.
    pub fn check(&self, client: Option<IpAddr>, now_s: i64) -> Result<(), i64> {
        let windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        match windows.get(&key(client)) {
            Some(w) if now_s < w.start_s + self.window_s && w.failures >= self.limit => {
                Err(w.start_s + self.window_s - now_s)
            }
            _ => Ok(()),
        }
    }

    /// Counts a wrong token from `client`.
    pub fn failed(&self, client: Option<IpAddr>, now_s: i64) -> Failure {
        let mut windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        let key = key(client);
        if !windows.contains_key(&key) && windows.len() >= self.cap {
            self.make_room(&mut windows, now_s);
        }
        let w = windows.entry(key).or_insert(Window { start_s: now_s, failures: 0 });
        if now_s >= w.start_s + self.window_s {
            *w = Window { start_s: now_s, failures: 0 };
        }
        w.failures = w.failures.saturating_add(1);
        match w.failures == self.limit {
            true => Failure::NowThrottled(w.start_s + self.window_s - now_s),
            false => Failure::Counted,
        }
    }

    /// A sign-in from `client` that succeeded (a known token with the scope the
    /// console needs, checked while not throttled) clears its count.
    pub fn succeeded(&self, client: Option<IpAddr>) {
        self.windows.lock().unwrap_or_else(|e| e.into_inner()).remove(&key(client));
    }

    fn make_room(&self, windows: &mut HashMap<IpAddr, Window>, now_s: i64) {
        windows.retain(|_, w| now_s < w.start_s + self.window_s);
        while windows.len() >= self.cap {
            let Some(oldest) = windows.iter().min_by_key(|(_, w)| w.start_s).map(|(k, _)| *k) else { break };
            windows.remove(&oldest);
        }
    }

    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.windows.lock().unwrap().len()
    }
}

/// The address a client is counted by: IPv4 as it is (an IPv4-mapped IPv6
/// address as its IPv4 one), IPv6 by its /64; no known peer all together.
fn key(client: Option<IpAddr>) -> IpAddr {
    match client.map(|ip| ip.to_canonical()) {
        Some(IpAddr::V6(v6)) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !((1u128 << 64) - 1))),
        Some(v4) => v4,
        None => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn ten_failures_a_minute_then_a_wait_until_the_window_has_passed() {
        let t = SignInThrottle::new(10, 60);
        for n in 0..9 {
            assert_eq!(t.failed(ip("203.0.113.7"), 1_000 + n), Failure::Counted);
            assert_eq!(t.check(ip("203.0.113.7"), 1_000 + n), Ok(()));
        }
        assert_eq!(t.failed(ip("203.0.113.7"), 1_010), Failure::NowThrottled(50));
        assert_eq!(t.check(ip("203.0.113.7"), 1_010), Err(50));
        assert_eq!(t.check(ip("203.0.113.7"), 1_059), Err(1));
        assert_eq!(t.check(ip("203.0.113.7"), 1_060), Ok(()), "the window has passed");
        assert_eq!(t.failed(ip("203.0.113.7"), 1_060), Failure::Counted, "and counting starts afresh");
        assert_eq!(t.check(ip("198.51.100.1"), 1_010), Ok(()), "another address is not affected");
    }

    #[test]
    fn a_success_clears_the_count() {
        let t = SignInThrottle::new(3, 60);
        t.failed(ip("203.0.113.7"), 0);
        t.failed(ip("203.0.113.7"), 1);
        t.succeeded(ip("203.0.113.7"));
        assert_eq!(t.failed(ip("203.0.113.7"), 2), Failure::Counted);
        assert_eq!(t.failed(ip("203.0.113.7"), 2), Failure::Counted);
        assert_eq!(t.failed(ip("203.0.113.7"), 2), Failure::NowThrottled(60));
    }

    #[test]
    fn an_ipv6_host_is_counted_by_its_64_and_a_mapped_ipv4_as_ipv4() {
        let t = SignInThrottle::new(2, 60);
        t.failed(ip("2001:db8:1:2::1"), 0);
        t.failed(ip("2001:db8:1:2:ffff::9"), 0);
        assert!(t.check(ip("2001:db8:1:2::abcd"), 1).is_err(), "one /64");
        assert!(t.check(ip("2001:db8:1:3::1"), 1).is_ok(), "the next /64 is another client");
        t.failed(ip("::ffff:203.0.113.9"), 0);
        t.failed(ip("203.0.113.9"), 0);
        assert!(t.check(ip("203.0.113.9"), 1).is_err());
    }

    #[test]
    fn memory_is_bounded_expired_windows_first_then_the_oldest() {
        let t = SignInThrottle::with_cap(2, 60, 100);
        for n in 0..100u32 {
            let addr = IpAddr::V4(std::net::Ipv4Addr::from(u32::from(std::net::Ipv4Addr::new(10, 0, 0, 0)) + n));
            t.failed(Some(addr), i64::from(n));
        }
        assert_eq!(t.tracked(), 100);
        // Full: the ones whose window has passed make room first.
        t.failed(ip("198.51.100.1"), 70);
        assert_eq!(t.tracked(), 90, "the eleven windows started by 10s had passed");
        for n in 0..1_000u32 {
            t.failed(
                Some(IpAddr::V4(std::net::Ipv4Addr::from(u32::from(std::net::Ipv4Addr::new(172, 16, 0, 0)) + n))),
                71,
            );
        }
        assert_eq!(t.tracked(), 100, "never more than the cap");
        t.failed(ip("198.51.100.2"), 71);
        t.failed(ip("198.51.100.2"), 71);
        assert!(t.check(ip("198.51.100.2"), 72).is_err(), "a new address is still throttled when the map is full");
    }
}
