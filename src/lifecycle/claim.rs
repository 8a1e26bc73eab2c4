//! What happens to a job when a worker takes it, before any provider is
//! called. The store leases the jobs, fetches these facts and writes the
//! answers, all in the claiming transaction; the answers are decided here,
//! where a reader looks for them, and not in SQL.
//!
//! - DESIGN rule 3: a job whose worker died during its last try is dead
//!   (`retries_exhausted`), not tried once more: the policy's `attempts`
//!   bounds provider calls (counted since the last replay).
//! - DESIGN rule 2, the chain ends: a job whose worker died during a try is
//!   dead (`retries_exhausted`) when the claim finds it after its chain's
//!   dedupe window has run out (counted from the chain's first try, as in
//!   [`crate::deliver::retry`]). The try it would start is a retry after an
//!   `unknown` attempt, and after the window nothing (the Redis keys, the
//!   request records) could dedupe it any more. The retry policy cannot see
//!   this coming: when it schedules a retry it does not know when the claim
//!   will come, nor whether a worker will die.
//! - DESIGN rule 4, per route: a versioned intent whose entity already has a
//!   newer version queued, held, being sent or sent to the same recipient on
//!   the same channel is `superseded`, linked to the newest such intent.
//! - Shadow mode: an intent planned in shadow that would be sent now ends
//!   `shadowed`, and no provider is called. The rules above come first, so a
//!   shadowed intent is one that live would have sent.

use super::Change;
use crate::intent::{Decision, Mode, Reason, State};

/// What the rules read of one leased job (the store's `ClaimCandidate`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job<'a> {
    pub key: &'a str,
    pub event_type: &'a str,
    pub entity_version: Option<i64>,
    pub mode: Mode,
    /// Attempts made, and those made before the last replay.
    pub attempts: i64,
    pub retry_base: i64,
    pub created_at: i64,
    /// An attempt was left unfinished: the worker that made it lost its lease.
    pub lease_lapsed: bool,
}

/// What the rules read of the claim (the store's `Claim`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terms {
    /// The claimer's clock.
    pub now_us: i64,
    /// The retry policy's `attempts`.
    pub max_attempts: i64,
    /// The retry policy's dedupe window (None: chains unbounded by it).
    pub dedupe_window_us: Option<i64>,
    /// Event types whose routes skip superseded versions.
    pub supersede_types: Vec<String>,
}

/// A newer version of a claimed intent's entity, for the same recipient on
/// the same channel, whatever its state: the rules choose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewerVersion {
    /// The claimed intent's key.
    pub of: String,
    pub key: String,
    pub entity_version: i64,
    pub state: State,
}

/// What a claim does with one leased job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OnClaim {
    /// Its next attempt starts now.
    Start,
    /// It ends without another try, for this reason.
    Dead(Reason),
    /// It ends suppressed: the intent `by` carries a newer version.
    Superseded { by: String },
    /// It ends `shadowed`: planned in shadow mode, it would be sent now.
    Shadowed,
}

impl OnClaim {
    /// How the intent ends at `at`; None when its attempt starts (the
    /// claim's own statement makes it `sending`, which nobody is told of).
    pub fn change(&self, key: &str, at: i64) -> Option<Change> {
        Some(match self {
            OnClaim::Start => return None,
            OnClaim::Dead(reason) => Change::to(key, State::Dead, at).reason(Some(*reason)),
            OnClaim::Superseded { by } => Change::to(key, State::Suppressed, at)
                .decision(Decision::Suppress)
                .reason(Some(Reason::Superseded))
                .link_key(Some(by.clone())),
            // As live would have sent it: no reason to give.
            OnClaim::Shadowed => Change::to(key, State::Shadowed, at).reason(None),
        })
    }
}

/// Whether the claim has to look for newer versions of this job's entity.
pub fn may_be_superseded(c: &Job<'_>, claim: &Terms) -> bool {
    c.entity_version.is_some() && claim.supersede_types.iter().any(|t| t == c.event_type)
}

/// The rules in order: a lapsed last try, or a lapsed try whose chain has
/// outlived its dedupe window, first (the chain is over whatever else is
/// true), then a newer version, then shadow mode. `chain_started`: when the
/// chain's first try (the first since the last replay) started, µs; None when
/// it is not on record, and the intent's creation counts, the earliest it
/// can be.
pub fn on_claim(c: &Job<'_>, newer: &[NewerVersion], chain_started: Option<i64>, claim: &Terms) -> OnClaim {
    let tries = c.attempts - c.retry_base;
    if c.lease_lapsed && tries >= claim.max_attempts {
        return OnClaim::Dead(Reason::RetriesExhausted);
    }
    if c.lease_lapsed && past_window(chain_started.unwrap_or(c.created_at), claim.dedupe_window_us, claim.now_us) {
        return OnClaim::Dead(Reason::RetriesExhausted);
    }
    if may_be_superseded(c, claim)
        && let Some(by) = superseded_by(c, newer)
    {
        return OnClaim::Superseded { by };
    }
    if c.mode == Mode::Shadow {
        return OnClaim::Shadowed;
    }
    OnClaim::Start
}

/// Whether a chain that started at `chain_started` has outlived its dedupe
/// window (`window_us`, None: unbounded) at `now_us`; exactly at the window's
/// end is still inside it, as for a scheduled retry.
pub fn past_window(chain_started: i64, window_us: Option<i64>, now_us: i64) -> bool {
    window_us.is_some_and(|w| now_us > chain_started.saturating_add(w))
}

/// Whether attempt `n`, taken back as `unknown` after its worker lost its
/// lease (so it may have reached the person, and no provider is on record),
/// may have repeated an earlier one: an earlier attempt (the first `unknown`
/// is `first_unknown`) was `unknown` too, and on this channel a repeat can go
/// unrecognised (see [`repeats_unrecognised`]).
pub fn rescued_possible_duplicate(repeats_unrecognised: bool, first_unknown: Option<i64>, n: i64) -> bool {
    repeats_unrecognised && first_unknown.is_some_and(|first| first < n)
}

/// Whether, on this channel, a retry after an `unknown` attempt may go
/// unrecognised: the provider takes no idempotency key it honours, or it is a
/// failover chain, whose members cannot recognise each other's sends.
pub fn repeats_unrecognised(dedupes_retries: bool, chained: bool) -> bool {
    !dedupes_retries || chained
}

/// The newest version of the same entity for the same recipient and channel
/// that is still on its way or was sent (or shadowed); one that was suppressed, digested or
/// died does not count (the older version may be all the recipient gets).
fn superseded_by(c: &Job<'_>, newer: &[NewerVersion]) -> Option<String> {
    let own = c.entity_version?;
    newer
        .iter()
        .filter(|n| n.of == c.key && n.entity_version > own)
        .filter(|n| counts_as_newer(n.state))
        .max_by(|a, b| (a.entity_version, &a.key).cmp(&(b.entity_version, &b.key)))
        .map(|n| n.key.clone())
}

/// A shadowed version counts as sent: live would have sent it (and the system
/// Herald shadows did), so shadow and live decide alike.
fn counts_as_newer(state: State) -> bool {
    matches!(state, State::Queued | State::Held | State::Sending | State::Sent | State::Unknown | State::Shadowed)
}

#[cfg(test)]
mod tests {
    use super::*;
    fn candidate(key: &'static str, version: Option<i64>, attempts: i64, lease_lapsed: bool) -> Job<'static> {
        Job {
            key,
            event_type: "po.updated",
            entity_version: version,
            mode: Mode::Live,
            attempts,
            retry_base: 0,
            created_at: 0,
            lease_lapsed,
        }
    }

    fn claim(supersede: &[&str]) -> Terms {
        Terms {
            now_us: 0,
            max_attempts: 3,
            dedupe_window_us: None,
            supersede_types: supersede.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn newer(of: &str, key: &str, version: i64, state: &str) -> NewerVersion {
        NewerVersion { of: of.into(), key: key.into(), entity_version: version, state: State::parse(state).unwrap() }
    }

    #[test]
    fn a_lapsed_last_try_is_dead_and_an_earlier_one_is_tried_again() {
        let c = claim(&[]);
        assert_eq!(on_claim(&candidate("a", None, 3, true), &[], None, &c), OnClaim::Dead(Reason::RetriesExhausted));
        assert_eq!(on_claim(&candidate("a", None, 2, true), &[], None, &c), OnClaim::Start);
        // Not lapsed: a job rescheduled after its third try was already judged by the policy.
        assert_eq!(on_claim(&candidate("a", None, 3, false), &[], None, &c), OnClaim::Start);
    }

    const HOUR: i64 = 3_600_000_000;

    /// A chain stretched by a `Retry-After` has a try a minute before its
    /// dedupe window ends, and its worker dies: the claim that finds the
    /// lapsed lease after the window does not send again (a possible
    /// duplicate nothing could dedupe any more); inside the window it does.
    #[test]
    fn a_lapsed_try_found_after_the_dedupe_window_ends_the_chain() {
        let c = Terms { now_us: 10 * HOUR, dedupe_window_us: Some(HOUR), ..claim(&[]) };
        let lapsed = candidate("a", None, 2, true);
        let dead = OnClaim::Dead(Reason::RetriesExhausted);
        assert_eq!(on_claim(&lapsed, &[], Some(9 * HOUR - 1), &c), dead);
        // Exactly at the window's end is still inside it.
        assert_eq!(on_claim(&lapsed, &[], Some(9 * HOUR), &c), OnClaim::Start);
        // Not on record: counted from the intent's creation (0 here), the earliest it can be.
        assert_eq!(on_claim(&lapsed, &[], None, &c), dead);
        // A chain without a window is bounded by its attempts only.
        assert_eq!(on_claim(&lapsed, &[], Some(0), &Terms { dedupe_window_us: None, ..c.clone() }), OnClaim::Start);
        // A job that was not rescued was judged by the policy when it was scheduled.
        assert_eq!(on_claim(&candidate("a", None, 2, false), &[], Some(0), &c), OnClaim::Start);
        // The chain is over before a newer version or shadow mode is looked at.
        let mut shadow = candidate("v1", Some(1), 1, true);
        shadow.mode = Mode::Shadow;
        let versions = [newer("v1", "v2", 2, "sent")];
        assert_eq!(
            on_claim(&shadow, &versions, Some(0), &Terms { supersede_types: vec!["po.updated".into()], ..c }),
            dead
        );
    }

    proptest::proptest! {
        /// Whatever the times: a rescued try starts only inside its chain's
        /// dedupe window, and the window never ends a job that was not rescued.
        #[test]
        fn a_rescued_try_starts_only_inside_the_window(
            started in 0i64..(100 * HOUR),
            window in proptest::option::of(1i64..(48 * HOUR)),
            now in 0i64..(200 * HOUR),
            lapsed: bool,
        ) {
            let c = Terms { now_us: now, dedupe_window_us: window, ..claim(&[]) };
            let job = candidate("a", None, 1, lapsed);
            let end = on_claim(&job, &[], Some(started), &c);
            let outlived = window.is_some_and(|w| now > started + w);
            proptest::prop_assert_eq!(past_window(started, window, now), outlived);
            if lapsed && outlived {
                proptest::prop_assert_eq!(end, OnClaim::Dead(Reason::RetriesExhausted));
            } else {
                proptest::prop_assert_eq!(end, OnClaim::Start);
            }
        }
    }

    #[test]
    fn tries_count_from_the_last_replay() {
        let mut replayed = candidate("a", None, 5, true);
        replayed.retry_base = 3;
        assert_eq!(on_claim(&replayed, &[], None, &claim(&[])), OnClaim::Start);
        replayed.retry_base = 2;
        assert_eq!(on_claim(&replayed, &[], None, &claim(&[])), OnClaim::Dead(Reason::RetriesExhausted));
    }

    #[test]
    fn the_newest_live_version_supersedes_and_the_others_do_not() {
        let c = claim(&["po.updated"]);
        let old = candidate("v1", Some(1), 0, false);
        let versions = [
            newer("v1", "v2", 2, "sent"),
            newer("v1", "v4", 4, "suppressed"),
            newer("v1", "v3", 3, "queued"),
            newer("other", "v9", 9, "sent"),
        ];
        assert_eq!(on_claim(&old, &versions, None, &c), OnClaim::Superseded { by: "v3".into() });
        let gone = [newer("v1", "v4", 4, "dead"), newer("v1", "v5", 5, "digested")];
        assert_eq!(on_claim(&old, &gone, None, &c), OnClaim::Start);
    }

    #[test]
    fn only_versioned_intents_of_opted_in_routes_are_superseded() {
        let versions = [newer("v1", "v2", 2, "sent")];
        assert_eq!(on_claim(&candidate("v1", Some(1), 0, false), &versions, None, &claim(&[])), OnClaim::Start);
        assert_eq!(on_claim(&candidate("v1", Some(1), 0, false), &versions, None, &claim(&["other"])), OnClaim::Start);
        assert_eq!(
            on_claim(&candidate("v1", None, 0, false), &versions, None, &claim(&["po.updated"])),
            OnClaim::Start
        );
        assert!(!may_be_superseded(&candidate("v1", None, 0, false), &claim(&["po.updated"])));
    }

    #[test]
    fn a_shadow_intent_ends_shadowed_only_where_live_would_send() {
        let mut c = candidate("v1", Some(1), 0, false);
        c.mode = Mode::Shadow;
        assert_eq!(on_claim(&c, &[], None, &claim(&[])), OnClaim::Shadowed);
        // Superseded in shadow as in live: the same decision either way.
        // A shadowed newer version counts as sent, as it would have been live.
        let versions = [newer("v1", "v2", 2, "shadowed")];
        assert_eq!(on_claim(&c, &versions, None, &claim(&["po.updated"])), OnClaim::Superseded { by: "v2".into() });
    }

    #[test]
    fn a_spent_last_try_is_dead_even_when_a_newer_version_exists() {
        let versions = [newer("v1", "v2", 2, "sent")];
        let c = candidate("v1", Some(1), 3, true);
        assert_eq!(on_claim(&c, &versions, None, &claim(&["po.updated"])), OnClaim::Dead(Reason::RetriesExhausted));
    }

    #[test]
    fn a_retry_that_died_in_flight_after_an_unknown_may_be_a_duplicate() {
        assert!(rescued_possible_duplicate(repeats_unrecognised(false, false), Some(1), 2));
        assert!(rescued_possible_duplicate(repeats_unrecognised(true, true), Some(1), 3), "in a chain");
        assert!(!rescued_possible_duplicate(repeats_unrecognised(true, false), Some(1), 2), "the provider dedupes");
        assert!(!rescued_possible_duplicate(true, None, 2), "nothing unknown before it");
        assert!(!rescued_possible_duplicate(true, Some(2), 2), "it is the first unknown itself");
    }
}
