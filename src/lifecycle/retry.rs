//! The retry policy (DESIGN rule 3) as a pure function of (attempts made,
//! provider hint, the clock's now, when the chain's dedupe window ends, random
//! source), so it can be tested without a clock of its own.
//!
//! A provider's `Retry-After` is a floor under the next delay, never cut by
//! `max` (a retry before the provider asked is one it will refuse again), only
//! by its own ceiling `max_retry_after`. A `Retry-After` can so stretch the
//! chain past the retry horizon that the dedupe-window check counts on, and
//! here the chain ends instead (rule 2): a retry that would run after the
//! dedupe window has run out, counted from the chain's first try, is not
//! scheduled, and the intent is dead as after its last try.
//!
//! A try whose worker dies is taken up again by a later claim, not through
//! this policy; that claim ends the chain the same way once the window has
//! run out ([`crate::lifecycle::claim`]). The policy leaves no lease's room for
//! such a rescue: it cannot know when the claim will come (a backlog, a
//! restart, a second rescue each push it later than any margin), and a
//! margin would end every stretched chain a lease early for a worker that
//! seldom dies.

use rand::Rng;
use std::time::Duration;

/// The ceiling on a provider's `Retry-After` unless configured.
pub const DEFAULT_MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Every try counts: 6 = the first + 5 retries.
    pub attempts: u32,
    pub base: Duration,
    pub max: Duration,
    /// The most a provider's `Retry-After` is honoured, so that no provider
    /// can park a job for years.
    pub max_retry_after: Duration,
    /// The dedupe window a chain must end within (see [`RetryPolicy::next`]),
    /// counted from its first try; None leaves chains unbounded by it.
    pub dedupe_window: Option<Duration>,
}

/// What follows a try that failed retryably (or ended `unknown`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Try again after `delay`; `retry_after` is the provider's `Retry-After`
    /// as honoured, when it gave one.
    Retry { delay: Duration, retry_after: Option<Duration> },
    /// That was the last try.
    Exhausted,
    /// The next try would run after the chain's dedupe window has ended
    /// (`delay` is when it would have run): the chain ends here, as after
    /// the last try.
    PastWindow { delay: Duration },
}

impl RetryPolicy {
    pub fn new(attempts: u32, base: Duration, max: Duration) -> RetryPolicy {
        RetryPolicy { attempts, base, max, max_retry_after: DEFAULT_MAX_RETRY_AFTER, dedupe_window: None }
    }

    /// The same policy with another ceiling on a provider's `Retry-After`.
    pub fn with_max_retry_after(self, max_retry_after: Duration) -> RetryPolicy {
        RetryPolicy { max_retry_after, ..self }
    }

    /// The same policy, its chains ending within `dedupe_window`.
    pub fn within(self, dedupe_window: Duration) -> RetryPolicy {
        RetryPolicy { dedupe_window: Some(dedupe_window), ..self }
    }

    /// When the dedupe window of a chain whose first try started at
    /// `chain_started` runs out (None without a window).
    pub fn window_ends(&self, chain_started: jiff::Timestamp) -> Option<jiff::Timestamp> {
        let window = jiff::SignedDuration::try_from(self.dedupe_window?).ok();
        Some(window.and_then(|w| chain_started.checked_add(w).ok()).unwrap_or(jiff::Timestamp::MAX))
    }

    /// The upper bound of the delay before retry `n` (n = 1 … attempts−1):
    /// min(max, base·2^(n−1)).
    pub fn window(&self, n: u32) -> Duration {
        let factor = 2u32.checked_pow(n.saturating_sub(1)).unwrap_or(u32::MAX);
        self.base.checked_mul(factor).map_or(self.max, |d| d.min(self.max))
    }

    /// Σ window(n) over every retry: the longest a retry chain can run without
    /// a provider's `Retry-After`, and so the shortest dedupe window that is
    /// safe (rule 2). A `Retry-After` can stretch a chain beyond it; [`next`]
    /// ends such a chain at the dedupe window instead.
    ///
    /// [`next`]: RetryPolicy::next
    pub fn horizon(&self) -> Duration {
        (1..self.attempts).map(|n| self.window(n)).sum()
    }

    /// A provider's `Retry-After` as honoured: in full up to `max_retry_after`
    /// (whatever `max` is), so a provider cannot park a job for years (or,
    /// with a number that overflows, make the retry immediate).
    pub fn honoured_retry_after(&self, asked: Duration) -> Duration {
        asked.min(self.max_retry_after)
    }

    /// The delay before the next try after `attempts_made` tries, or `None` when
    /// none is left. Full jitter: uniform(0, window), so a burst of failures does
    /// not retry in formation; a provider's `Retry-After` (up to its ceiling) is
    /// a floor under it.
    pub fn next_delay(
        &self,
        attempts_made: u32,
        retry_after: Option<Duration>,
        rng: &mut impl Rng,
    ) -> Option<Duration> {
        if attempts_made >= self.attempts {
            return None;
        }
        let window = self.window(attempts_made).as_micros() as u64;
        let jittered = Duration::from_micros(rng.random_range(0..=window));
        Some(retry_after.map_or(jittered, |asked| jittered.max(self.honoured_retry_after(asked))))
    }

    /// What follows a retryable try, the clock reading `now`: `window_ends`
    /// is when the chain's dedupe window runs out ([`RetryPolicy::window_ends`],
    /// counted from the chain's first try, as the retry horizon is), None for
    /// a chain with no such bound. A retry due after `window_ends` is not
    /// scheduled: the promise of rule 2 — no chain outlives the dedupe window
    /// — holds by ending the chain rather than by sending late. The backoff
    /// alone never gets there (`config check` keeps the horizon inside the
    /// window); a provider's `Retry-After` can.
    pub fn next(
        &self,
        attempts_made: u32,
        retry_after: Option<Duration>,
        now: jiff::Timestamp,
        window_ends: Option<jiff::Timestamp>,
        rng: &mut impl Rng,
    ) -> Next {
        let Some(delay) = self.next_delay(attempts_made, retry_after, rng) else { return Next::Exhausted };
        if let Some(ends) = window_ends {
            // Past the end of time is past any window.
            let runs = jiff::SignedDuration::try_from(delay).ok().and_then(|d| now.checked_add(d).ok());
            if runs.is_none_or(|at| at > ends) {
                return Next::PastWindow { delay };
            }
        }
        Next::Retry { delay, retry_after: retry_after.map(|asked| self.honoured_retry_after(asked)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    fn policy() -> RetryPolicy {
        RetryPolicy::new(6, Duration::from_secs(30), Duration::from_secs(3600))
    }

    #[test]
    fn six_attempts_from_30s_have_a_15m30s_horizon() {
        assert_eq!(policy().horizon(), Duration::from_secs(930));
    }

    #[test]
    fn windows_double_up_to_the_max() {
        let p = RetryPolicy::new(10, Duration::from_secs(30), Duration::from_secs(300));
        let w: Vec<u64> = (1..10).map(|n| p.window(n).as_secs()).collect();
        assert_eq!(w, vec![30, 60, 120, 240, 300, 300, 300, 300, 300]);
    }

    #[test]
    fn huge_attempt_counts_do_not_overflow() {
        let p = RetryPolicy::new(100, Duration::from_secs(30), Duration::from_secs(3600));
        assert_eq!(p.window(99), Duration::from_secs(3600));
        assert_eq!(
            p.horizon(),
            Duration::from_secs(30 + 60 + 120 + 240 + 480 + 960 + 1920) + Duration::from_secs(3600) * 92
        );
    }

    #[test]
    fn there_is_no_retry_after_the_last_attempt() {
        let mut rng = SmallRng::seed_from_u64(1);
        assert!(policy().next_delay(5, None, &mut rng).is_some());
        assert!(policy().next_delay(6, None, &mut rng).is_none());
        assert!(
            RetryPolicy::new(1, Duration::from_secs(1), Duration::from_secs(1)).next_delay(1, None, &mut rng).is_none()
        );
    }

    #[test]
    fn delays_stay_inside_the_window_and_spread_over_it() {
        let mut rng = SmallRng::seed_from_u64(7);
        for n in 1..6 {
            let window = policy().window(n);
            let delays: Vec<Duration> = (0..2000).map(|_| policy().next_delay(n, None, &mut rng).unwrap()).collect();
            assert!(delays.iter().all(|d| *d <= window));
            // full jitter: both halves of the window are used, not a fixed point
            let low = delays.iter().filter(|d| **d < window / 2).count();
            assert!((700..1300).contains(&low), "retry {n}: {low} of 2000 in the lower half");
        }
    }

    #[test]
    fn retry_after_is_capped_at_its_own_ceiling() {
        let mut rng = SmallRng::seed_from_u64(5);
        let ten_years = Duration::from_secs(10 * 365 * 86_400);
        for asked in [ten_years, Duration::from_secs(u64::MAX), Duration::MAX] {
            assert_eq!(policy().next_delay(1, Some(asked), &mut rng), Some(DEFAULT_MAX_RETRY_AFTER));
        }
        let p = policy().with_max_retry_after(Duration::from_secs(7200));
        assert_eq!(p.next_delay(1, Some(ten_years), &mut rng), Some(Duration::from_secs(7200)));
        assert_eq!(policy().honoured_retry_after(Duration::from_secs(90)), Duration::from_secs(90));
    }

    /// With `retry.max = 200ms` a provider's `Retry-After: 1` was retried
    /// after 0.2 s, before the provider asked.
    #[test]
    fn retry_after_is_not_cut_by_retry_max() {
        let mut rng = SmallRng::seed_from_u64(9);
        let p = RetryPolicy::new(4, Duration::from_millis(20), Duration::from_millis(200));
        for n in 1..4 {
            assert_eq!(p.next_delay(n, Some(Duration::from_secs(1)), &mut rng), Some(Duration::from_secs(1)));
        }
        assert_eq!(
            p.next(1, Some(Duration::from_secs(1)), t(0), Some(t(3600)), &mut rng),
            Next::Retry { delay: Duration::from_secs(1), retry_after: Some(Duration::from_secs(1)) }
        );
    }

    fn t(secs: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    #[test]
    fn a_retry_after_the_dedupe_window_ends_the_chain() {
        let mut rng = SmallRng::seed_from_u64(11);
        let p = policy().with_max_retry_after(Duration::from_secs(3 * 3600));
        let two_hours = Some(Duration::from_secs(7200));
        // The chain's window ends an hour after its first try: asked to come back in 2h.
        assert_eq!(
            p.next(1, two_hours, t(60), Some(t(3600)), &mut rng),
            Next::PastWindow { delay: Duration::from_secs(7200) }
        );
        // Exactly at the window's end is still inside it.
        assert!(matches!(p.next(1, two_hours, t(0), Some(t(7200)), &mut rng), Next::Retry { .. }));
        // Without a window only the ceiling bounds it.
        assert!(matches!(p.next(1, two_hours, t(60), None, &mut rng), Next::Retry { .. }));
        // The window counts from the chain's first try.
        let p = p.within(Duration::from_secs(3600));
        assert_eq!(p.window_ends(t(100)), Some(t(3700)));
        assert_eq!(RetryPolicy::new(2, Duration::from_secs(1), Duration::from_secs(1)).window_ends(t(0)), None);
        // The last try is the last, window or not.
        assert_eq!(p.next(6, None, t(0), Some(t(86_400)), &mut rng), Next::Exhausted);
        // A delay past the end of time is past any window.
        let forever =
            RetryPolicy::new(2, Duration::from_secs(1), Duration::from_secs(1)).with_max_retry_after(Duration::MAX);
        assert_eq!(
            forever.next(1, Some(Duration::MAX), t(0), Some(jiff::Timestamp::MAX), &mut rng),
            Next::PastWindow { delay: Duration::MAX }
        );
    }

    proptest::proptest! {
        /// Whatever the policy and the provider asked: the delay is at least
        /// what the provider asked up to the ceiling, at most the larger of the
        /// backoff window and that floor, and a scheduled retry runs inside
        /// the dedupe window.
        #[test]
        fn the_next_try_honours_the_floor_the_ceiling_and_the_window(
            attempts in 1u32..20,
            made in 1u32..25,
            base_ms in 1u64..60_000,
            max_factor in 1u64..200,
            ceiling_s in 1u64..(30 * 86_400),
            asked_s in proptest::option::of(0u64..(400 * 86_400)),
            elapsed_s in 0i64..(3 * 86_400),
            window_s in proptest::option::of(1i64..(3 * 86_400)),
            seed in 0u64..u64::MAX,
        ) {
            let base = Duration::from_millis(base_ms);
            let p = RetryPolicy::new(attempts, base, base * max_factor as u32)
                .with_max_retry_after(Duration::from_secs(ceiling_s));
            let asked = asked_s.map(Duration::from_secs);
            let mut rng = SmallRng::seed_from_u64(seed);
            let ends = window_s.map(t);
            match p.next(made, asked, t(elapsed_s), ends, &mut rng) {
                Next::Exhausted => proptest::prop_assert!(made >= attempts),
                Next::Retry { delay, retry_after } => {
                    proptest::prop_assert!(made < attempts);
                    let floor = asked.map_or(Duration::ZERO, |a| a.min(p.max_retry_after));
                    proptest::prop_assert!(delay >= floor);
                    proptest::prop_assert!(delay <= p.window(made).max(floor));
                    proptest::prop_assert_eq!(retry_after, asked.map(|_| floor));
                    if let Some(ends) = ends {
                        let runs = t(elapsed_s).checked_add(jiff::SignedDuration::try_from(delay).unwrap()).unwrap();
                        proptest::prop_assert!(runs <= ends);
                    }
                }
                Next::PastWindow { delay } => {
                    proptest::prop_assert!(made < attempts);
                    let ends = ends.expect("only a chain with a window ends at it");
                    let runs = t(elapsed_s).checked_add(jiff::SignedDuration::try_from(delay).unwrap()).unwrap();
                    proptest::prop_assert!(runs > ends);
                }
            }
        }
    }

    #[test]
    fn retry_after_is_a_floor() {
        let mut rng = SmallRng::seed_from_u64(3);
        let floor = Duration::from_secs(120);
        for _ in 0..200 {
            let d = policy().next_delay(1, Some(floor), &mut rng).unwrap();
            assert!(d >= floor);
        }
    }
}
