//! The lifecycle of an intent: every rule that moves one from a state to
//! another, as pure functions of the facts the store fetched (no database,
//! no clock but the one passed in). A rule answers with a [`Change`]; the
//! store's one writer for changes (`intents_apply` in each backend) writes it
//! and, in the same statement or transaction, the publication row that
//! [`publishes`] asks for. Nothing in SQL decides a state, and no trigger
//! writes anything.
//!
//! Where each rule lives:
//! - [`claim`]: what a claim does with a leased job (start it, or end it
//!   dead, superseded or shadowed), and whether a rescued try may have been a
//!   duplicate.
//! - [`outcome`]: what an attempt's outcome leads to (sent, a retry, dead).
//! - [`receipt`]: how far a message's delivery status has come, and what a
//!   receipt that moved it does to the intent.
//! - [`digest`]: how a closed digest ends its members.
//! - [`replay`]: a dead letter queued again.
//! - [`State::is_final`]: what retention may delete.

pub mod claim;
pub mod digest;
pub mod outcome;
pub mod receipt;
pub mod replay;
pub mod retry;

use crate::intent::{Decision, Reason, State};

pub use outcome::Transition;

/// Whether arriving at `to` is a status publication (the bus's
/// `herald.status.…`): the one list of published transitions. A `delivered`
/// receipt is one too ([`receipt::publishes_delivered`]). Only an arrival
/// counts: a change that leaves the state as it was publishes nothing.
pub fn publishes(to: State) -> bool {
    match to {
        State::Sent
        | State::Dead
        | State::Suppressed
        | State::Held
        | State::Digested
        | State::Unknown
        | State::Shadowed => true,
        State::Queued | State::Sending => false,
    }
}

impl State {
    /// States from which nothing more will happen on its own: retention
    /// deletes intents only in these.
    pub fn is_final(self) -> bool {
        matches!(self, State::Sent | State::Dead | State::Suppressed | State::Digested | State::Shadowed)
    }

    /// Every final state (see [`State::is_final`]).
    pub fn finals() -> impl Iterator<Item = State> {
        State::ALL.iter().copied().filter(|s| s.is_final())
    }
}

/// One intent's move to a new state, as a rule decided it; what the store
/// writes, with the publication it leads to. A field left `None` keeps what
/// the intent has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub key: String,
    pub to: State,
    pub decision: Option<Decision>,
    /// `Some(None)` clears the reason.
    pub reason: Option<Option<Reason>>,
    /// The human explanation shown beside the state; `Some(None)` clears it.
    pub detail: Option<Option<String>>,
    /// The intent this one is linked to (the one that superseded it, its
    /// digest); `Some(None)` clears the link.
    pub link_key: Option<Option<String>>,
    /// A new retry chain starts: the tries counted against the policy start
    /// again from the attempts made so far (a replay).
    pub restarts_chain: bool,
    /// When it happened (µs): the intent's `updated_at`, and the publication's.
    pub at: i64,
}

impl Change {
    /// A move to `to` at `at` that changes nothing else.
    pub fn to(key: impl Into<String>, to: State, at: i64) -> Change {
        Change {
            key: key.into(),
            to,
            decision: None,
            reason: None,
            detail: None,
            link_key: None,
            restarts_chain: false,
            at,
        }
    }

    pub fn decision(self, decision: Decision) -> Change {
        Change { decision: Some(decision), ..self }
    }

    /// The reason is written, cleared when None.
    pub fn reason(self, reason: Option<Reason>) -> Change {
        Change { reason: Some(reason), ..self }
    }

    pub fn detail(self, detail: impl Into<String>) -> Change {
        Change { detail: Some(Some(detail.into())), ..self }
    }

    /// The link is written, cleared when None.
    pub fn link_key(self, link_key: Option<String>) -> Change {
        Change { link_key: Some(link_key), ..self }
    }

    /// Whether the change publishes when it moves the intent from `from`.
    pub fn publishes_from(&self, from: State) -> bool {
        from != self.to && publishes(self.to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_states_a_subscriber_hears_of_are_the_ends_and_the_waits_it_cannot_see_coming() {
        let published: Vec<State> = State::ALL.iter().copied().filter(|s| publishes(*s)).collect();
        assert_eq!(
            published,
            vec![
                State::Held,
                State::Sent,
                State::Unknown,
                State::Dead,
                State::Suppressed,
                State::Digested,
                State::Shadowed
            ]
        );
    }

    #[test]
    fn only_an_arrival_publishes() {
        let dead = Change::to("k", State::Dead, 1).reason(Some(Reason::Rejected));
        assert!(dead.publishes_from(State::Sending));
        assert!(!dead.publishes_from(State::Dead), "dead again is no new transition");
        assert!(!Change::to("k", State::Queued, 1).publishes_from(State::Dead), "a replay is not published");
    }

    #[test]
    fn every_final_state_publishes_and_a_held_intent_is_not_final() {
        for s in State::finals() {
            assert!(publishes(s), "{s:?}");
        }
        assert!(!State::Held.is_final() && !State::Unknown.is_final() && !State::Queued.is_final());
    }
}
