//! The retry policy (DESIGN rule 3) as a pure function of (attempts made,
//! provider hint, random source), so it can be tested without a clock.

use rand::Rng;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Every try counts: 6 = the first + 5 retries.
    pub attempts: u32,
    pub base: Duration,
    pub max: Duration,
}

impl RetryPolicy {
    pub fn new(attempts: u32, base: Duration, max: Duration) -> RetryPolicy {
        RetryPolicy { attempts, base, max }
    }

    /// The upper bound of the delay before retry `n` (n = 1 … attempts−1):
    /// min(max, base·2^(n−1)).
    pub fn window(&self, n: u32) -> Duration {
        let factor = 2u32.checked_pow(n.saturating_sub(1)).unwrap_or(u32::MAX);
        self.base.checked_mul(factor).map_or(self.max, |d| d.min(self.max))
    }

    /// Σ window(n) over every retry: the longest a retry chain can run, and so
    /// the shortest dedupe window that is safe (rule 2).
    pub fn horizon(&self) -> Duration {
        (1..self.attempts).map(|n| self.window(n)).sum()
    }

    /// A provider's `Retry-After` as honoured: a floor under the next delay,
    /// but never above `max`, so a provider cannot park a job for years (or,
    /// with a number that overflows, make the retry immediate).
    pub fn honoured_retry_after(&self, asked: Duration) -> Duration {
        asked.min(self.max)
    }

    /// The delay before the next try after `attempts_made` tries, or `None` when
    /// none is left. Full jitter: uniform(0, window), so a burst of failures does
    /// not retry in formation; a provider's `Retry-After` is a floor, capped
    /// at `max`.
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
    fn retry_after_is_capped_at_the_max() {
        let mut rng = SmallRng::seed_from_u64(5);
        let ten_years = Duration::from_secs(10 * 365 * 86_400);
        for asked in [ten_years, Duration::from_secs(u64::MAX), Duration::MAX] {
            assert_eq!(policy().next_delay(1, Some(asked), &mut rng), Some(Duration::from_secs(3600)));
        }
        assert_eq!(policy().honoured_retry_after(Duration::from_secs(90)), Duration::from_secs(90));
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
