//! Latencies as they were measured, one per request or transaction, and the
//! percentiles read off them (nearest rank: the figure a reader can find in
//! the sorted list, not an interpolation).

use std::time::Duration;

#[derive(Default)]
pub struct Latencies {
    micros: Vec<u32>,
}

impl Latencies {
    pub fn push(&mut self, d: Duration) {
        self.micros.push(d.as_micros().min(u128::from(u32::MAX)) as u32);
    }

    pub fn merge(&mut self, other: Latencies) {
        self.micros.extend(other.micros);
    }

    /// The `p`-th percentile in milliseconds (0 when nothing was measured).
    pub fn percentile_ms(&mut self, p: f64) -> f64 {
        if self.micros.is_empty() {
            return 0.0;
        }
        self.micros.sort_unstable();
        let rank = ((p / 100.0) * self.micros.len() as f64).ceil() as usize;
        f64::from(self.micros[rank.clamp(1, self.micros.len()) - 1]) / 1000.0
    }
}
