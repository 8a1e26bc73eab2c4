//! What an attempt's outcome does to its intent: sent, a retry (queued, or
//! `unknown` when the call may have gone through), or dead. When to retry is
//! the retry policy's ([`super::retry`]); what its answer means for
//! the intent is decided here.

use super::Change;
use super::retry::Next;
use crate::clock::micros;
use crate::intent::{Reason, State};
use std::time::Duration;

/// What an attempt's outcome does to its intent and job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transition {
    Sent,
    Retry { run_at_us: i64, state: State },
    Dead { reason: Reason },
}

impl Transition {
    /// The state the intent takes.
    pub fn state(&self) -> State {
        match self {
            Transition::Sent => State::Sent,
            Transition::Retry { state, .. } => *state,
            Transition::Dead { .. } => State::Dead,
        }
    }

    /// The intent's reason: a dead end's; none otherwise (a retry's failure
    /// is the attempt's, not the intent's).
    pub fn reason(&self) -> Option<Reason> {
        match self {
            Transition::Dead { reason } => Some(*reason),
            Transition::Sent | Transition::Retry { .. } => None,
        }
    }

    /// When the job runs again; None when it is done.
    pub fn retry_at(&self) -> Option<i64> {
        match self {
            Transition::Retry { run_at_us, .. } => Some(*run_at_us),
            Transition::Sent | Transition::Dead { .. } => None,
        }
    }

    /// The intent's change, finished at `at`.
    pub fn change(&self, key: &str, at: i64) -> Change {
        Change::to(key, self.state(), at).reason(self.reason())
    }
}

/// What a provider call came to, as far as the intent is concerned (the
/// channel's `Outcome` says more: statuses, messages, error classes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Called {
    Accepted,
    Permanent {
        reason: Reason,
    },
    /// Worth trying again, not before the provider's `Retry-After`.
    Retryable {
        retry_after: Option<Duration>,
    },
    /// The call may have gone through.
    Unknown,
}

/// An outcome that ends its intent whatever the policy says, or the
/// provider's `Retry-After` and the state a retry waits in.
pub fn before_policy(called: Called) -> Result<(Option<Duration>, State), Transition> {
    match called {
        Called::Accepted => Err(Transition::Sent),
        Called::Permanent { reason } => Err(Transition::Dead { reason }),
        Called::Retryable { retry_after } => Ok((retry_after, State::Queued)),
        // The call may have gone through: the intent says so while it waits.
        Called::Unknown => Ok((None, State::Unknown)),
    }
}

/// The retry policy's answer for an intent that would wait in `state`, at
/// `now`. A chain that ran out of tries, or whose next try would fall past
/// its dedupe window, is dead: `retries_exhausted`.
pub fn after_policy(next: &Next, state: State, now: jiff::Timestamp) -> Transition {
    match next {
        Next::Retry { delay, .. } => {
            // Past the end of time is the end of time, never "now".
            let run_at = now.checked_add(*delay).unwrap_or(jiff::Timestamp::MAX);
            Transition::Retry { run_at_us: micros(run_at), state }
        }
        Next::Exhausted | Next::PastWindow { .. } => Transition::Dead { reason: Reason::RetriesExhausted },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_accepted_call_is_sent_and_a_permanent_failure_dead_whatever_the_policy() {
        assert_eq!(before_policy(Called::Accepted), Err(Transition::Sent));
        let refused = Called::Permanent { reason: Reason::Rejected };
        assert_eq!(before_policy(refused), Err(Transition::Dead { reason: Reason::Rejected }));
        assert_eq!(before_policy(Called::Unknown), Ok((None, State::Unknown)), "a retry after an unknown says so");
        let later = Some(Duration::from_secs(3));
        assert_eq!(before_policy(Called::Retryable { retry_after: later }), Ok((later, State::Queued)));
    }

    #[test]
    fn a_chain_that_runs_out_is_dead_and_a_retry_runs_at_its_delay() {
        let now = jiff::Timestamp::from_second(1_000).unwrap();
        let exhausted = Transition::Dead { reason: Reason::RetriesExhausted };
        assert_eq!(after_policy(&Next::Exhausted, State::Queued, now), exhausted);
        let past = Next::PastWindow { delay: Duration::from_secs(60) };
        assert_eq!(after_policy(&past, State::Unknown, now), exhausted);
        let retry = Next::Retry { delay: Duration::from_secs(2), retry_after: None };
        assert_eq!(
            after_policy(&retry, State::Unknown, now),
            Transition::Retry { run_at_us: 1_002_000_000, state: State::Unknown }
        );
        let forever = Next::Retry { delay: Duration::from_secs(u64::MAX / 4), retry_after: None };
        let Transition::Retry { run_at_us, .. } = after_policy(&forever, State::Queued, now) else { panic!() };
        assert_eq!(run_at_us, micros(jiff::Timestamp::MAX), "never now");
    }

    #[test]
    fn a_dead_end_carries_its_reason_to_the_intent_and_a_retry_clears_it() {
        let dead = Transition::Dead { reason: Reason::Rejected }.change("k", 5);
        assert_eq!((dead.to, dead.reason, dead.at), (State::Dead, Some(Some(Reason::Rejected)), 5));
        let retry = Transition::Retry { run_at_us: 9, state: State::Unknown };
        assert_eq!((retry.change("k", 5).reason, retry.retry_at()), (Some(None), Some(9)));
        assert_eq!(Transition::Sent.retry_at(), None);
    }
}
