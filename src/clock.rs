//! Time: an injectable clock, and the microsecond form both databases store.

use jiff::Timestamp;

pub trait Clock: Send + Sync {
    fn now(&self) -> Timestamp;
}

/// The system clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

pub fn micros(t: Timestamp) -> i64 {
    t.as_microsecond()
}

/// A duration in the microseconds stored times are counted in; one too long
/// to count saturates.
pub fn duration_us(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// The RFC 3339 form of a stored time (`None` for an out-of-range value).
pub fn rfc3339(us: i64) -> Option<String> {
    Timestamp::from_microsecond(us).ok().map(|t| t.to_string())
}
