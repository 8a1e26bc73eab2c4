//! Failover between a channel's providers, and a circuit breaker per provider.
//!
//! The rule is the one that never trades a duplicate for silence by accident:
//! a retry moves to the next provider only after a *definite* non-acceptance
//! (nothing was sent: a refused connection, a 429, a 5xx). After an `unknown`
//! outcome the retry stays on the same provider, whose idempotency key can
//! still recognise it, unless the route asks for `failover_on_unknown` (an
//! alert where a possible duplicate beats silence). A provider that fails
//! `failures` times in a row is skipped for `cool_down`, then tried again.

use super::{Delivery, Outcome, Provider};
use crate::clock::Clock;
use crate::intent::OutcomeClass;
use crate::store::AttemptRow;
use async_trait::async_trait;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A provider under its configured name: attempts record it, metrics label it.
pub struct Named {
    pub name: String,
    pub inner: Arc<dyn Provider>,
}

#[async_trait]
impl Provider for Named {
    fn name(&self) -> &str {
        &self.name
    }

    fn dedupes_retries(&self) -> bool {
        self.inner.dedupes_retries()
    }

    fn timeout(&self) -> Duration {
        self.inner.timeout()
    }

    async fn send(&self, d: &Delivery) -> Outcome {
        self.inner.send(d).await
    }
}

/// How a breaker stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    Closed,
    /// Skipped until the cool-down ends.
    Open,
    /// The cool-down is over: the next call decides.
    HalfOpen,
}

impl BreakerState {
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }
}

/// Consecutive failures of one provider, judged by the injected clock.
pub struct Breaker {
    pub provider: String,
    failures: u32,
    cool_down: Duration,
    clock: Arc<dyn Clock>,
    state: Mutex<(u32, Option<jiff::Timestamp>)>,
}

impl Breaker {
    pub fn new(provider: &str, failures: u32, cool_down: Duration, clock: Arc<dyn Clock>) -> Breaker {
        Breaker { provider: provider.into(), failures: failures.max(1), cool_down, clock, state: Mutex::new((0, None)) }
    }

    pub fn state(&self) -> BreakerState {
        match self.lock().1 {
            None => BreakerState::Closed,
            Some(until) if self.clock.now() < until => BreakerState::Open,
            Some(_) => BreakerState::HalfOpen,
        }
    }

    /// A provider that answered (accepted or refused for good) is healthy; one
    /// that could not take the message, or whose answer never came, is not.
    pub fn record(&self, outcome: &Outcome) {
        let failed = matches!(outcome.class(), OutcomeClass::Retryable | OutcomeClass::Unknown);
        let mut s = self.lock();
        if !failed {
            if s.1.is_some() {
                tracing::info!(provider = %self.provider, "circuit closed: the provider answered again");
            }
            *s = (0, None);
        } else {
            s.0 = s.0.saturating_add(1);
            let half_open = s.1.is_some_and(|until| self.clock.now() >= until);
            if s.0 >= self.failures || half_open {
                let until = self.clock.now().checked_add(self.cool_down).unwrap_or(jiff::Timestamp::MAX);
                if s.1.is_none() || half_open {
                    tracing::warn!(provider = %self.provider, failures = s.0, "circuit opened: the provider is skipped for its cool-down");
                    crate::ops::metrics::circuit_opened(&self.provider);
                }
                s.1 = Some(until);
            }
        }
        drop(s);
        crate::ops::metrics::circuit_state(&self.provider, self.state() == BreakerState::Open);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (u32, Option<jiff::Timestamp>)> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Every breaker of the deployment, for `/readyz`.
#[derive(Default)]
pub struct Breakers(Mutex<Vec<Arc<Breaker>>>);

impl Breakers {
    pub fn add(&self, b: Arc<Breaker>) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(b);
    }

    /// (provider, state), in configuration order.
    pub fn states(&self) -> Vec<(String, BreakerState)> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).iter().map(|b| (b.provider.clone(), b.state())).collect()
    }
}

/// A channel's providers in order of preference.
pub struct Chain {
    members: Vec<(Arc<Named>, Arc<Breaker>)>,
    /// Event types whose routes set `failover_on_unknown`.
    failover_on_unknown: HashSet<String>,
}

impl Chain {
    pub fn new(members: Vec<(Arc<Named>, Arc<Breaker>)>, failover_on_unknown: HashSet<String>) -> Chain {
        Chain { members, failover_on_unknown }
    }

    /// The member this attempt goes to, given the intent's earlier attempts.
    fn choose(&self, d: &Delivery, earlier: &[AttemptRow]) -> usize {
        let last = earlier.iter().filter(|a| a.n < d.attempt && a.finished_at.is_some()).max_by_key(|a| a.n);
        let index_of = |name: &str| self.members.iter().position(|(m, _)| m.name == name);
        let Some(last) = last else { return self.first_available(0) };
        let Some(at) = last.provider.as_deref().and_then(index_of) else { return self.first_available(0) };
        match last.outcome {
            // It may have gone through: stay where a retry can be recognised.
            Some(OutcomeClass::Unknown) if !self.failover_on_unknown.contains(&d.event_type) => at,
            Some(OutcomeClass::Unknown | OutcomeClass::Retryable) => self.first_available(at + 1),
            _ => self.first_available(0),
        }
    }

    /// The first member from `start` on (wrapping) whose breaker lets a call
    /// through; when every breaker is open, the one at `start` all the same
    /// (a message is never held back for want of a healthy provider).
    fn first_available(&self, start: usize) -> usize {
        let n = self.members.len();
        (0..n).map(|i| (start + i) % n).find(|&i| self.members[i].1.state() != BreakerState::Open).unwrap_or(start % n)
    }
}

#[async_trait]
impl Provider for Chain {
    fn name(&self) -> &str {
        "failover"
    }

    /// Each member answers for itself; see [`Provider::pick`].
    fn dedupes_retries(&self) -> bool {
        self.members.iter().all(|(m, _)| m.dedupes_retries())
    }

    fn timeout(&self) -> Duration {
        self.members.iter().map(|(m, _)| m.timeout()).max().unwrap_or_default()
    }

    fn needs_history(&self) -> bool {
        true
    }

    fn pick(&self, d: &Delivery, earlier: &[AttemptRow]) -> Option<&dyn Provider> {
        Some(self.members[self.choose(d, earlier)].0.as_ref())
    }

    fn observe(&self, member: &str, outcome: &Outcome) {
        if let Some((_, breaker)) = self.members.iter().find(|(m, _)| m.name == member) {
            breaker.record(outcome);
        }
    }

    /// A call without history (the worker always picks first): the first
    /// available member.
    async fn send(&self, d: &Delivery) -> Outcome {
        self.members[self.first_available(0)].0.send(d).await
    }
}

#[cfg(test)]
mod tests;
