//! A dead letter replayed: queued again, its reason cleared, and a new retry
//! chain started (the policy's tries, and the dedupe window, count from the
//! next attempt).

use super::Change;
use crate::intent::State;

/// Only a dead letter is replayed; anything else is on its way or ended as
/// it should have.
pub fn may_replay(state: State) -> bool {
    state == State::Dead
}

/// The replayed intent, at `at`.
pub fn replayed(key: &str, at: i64) -> Change {
    Change { restarts_chain: true, ..Change::to(key, State::Queued, at).reason(None) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replayed_dead_letter_is_queued_on_a_new_chain_without_its_reason() {
        assert!(may_replay(State::Dead));
        assert!(State::ALL.iter().filter(|s| **s != State::Dead).all(|s| !may_replay(*s)));
        let c = replayed("k", 9);
        assert_eq!((c.to, c.reason, c.restarts_chain, c.at), (State::Queued, Some(None), true, 9));
        assert!(!c.publishes_from(State::Dead), "a replay is not a publication");
    }
}
