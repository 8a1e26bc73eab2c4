//! What happens to a job when a worker takes it, before any provider is
//! called. The store leases the jobs, fetches these facts and writes the
//! answers, all in the claiming transaction; the answers are decided here,
//! where a reader looks for them, and not in SQL.
//!
//! - DESIGN rule 3: a job whose worker died during its last try is dead
//!   (`retries_exhausted`), not tried once more: the policy's `attempts`
//!   bounds provider calls (counted since the last replay).
//! - DESIGN rule 4, per route: a versioned intent whose entity already has a
//!   newer version queued, held, being sent or sent to the same recipient on
//!   the same channel is `superseded`, linked to the newest such intent.
//! - Shadow mode: an intent planned in shadow that would be sent now ends
//!   `shadowed`, and no provider is called. The rules above come first, so a
//!   shadowed intent is one that live would have sent.

use crate::intent::{Mode, Reason, State};
use crate::store::{Claim, ClaimCandidate, NewerVersion};

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

/// Whether the claim has to look for newer versions of this job's entity.
pub fn may_be_superseded(c: &ClaimCandidate, claim: &Claim) -> bool {
    c.intent.entity_version.is_some() && claim.supersede_types.contains(&c.intent.event_type)
}

/// The rules in order: a lapsed last try first (the attempt is spent whatever
/// else is true), then a newer version, then shadow mode.
pub fn on_claim(c: &ClaimCandidate, newer: &[NewerVersion], claim: &Claim) -> OnClaim {
    let tries = c.intent.attempts - c.intent.retry_base;
    if c.lease_lapsed && tries >= claim.max_attempts {
        return OnClaim::Dead(Reason::RetriesExhausted);
    }
    if may_be_superseded(c, claim)
        && let Some(by) = superseded_by(c, newer)
    {
        return OnClaim::Superseded { by };
    }
    if c.intent.mode == Mode::Shadow {
        return OnClaim::Shadowed;
    }
    OnClaim::Start
}

/// The newest version of the same entity for the same recipient and channel
/// that is still on its way or was sent (or shadowed); one that was suppressed, digested or
/// died does not count (the older version may be all the recipient gets).
fn superseded_by(c: &ClaimCandidate, newer: &[NewerVersion]) -> Option<String> {
    let own = c.intent.entity_version?;
    newer
        .iter()
        .filter(|n| n.of == c.intent.key && n.entity_version > own)
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
    use crate::event::Channel;
    use crate::intent::Decision;
    use crate::store::IntentRow;

    fn candidate(key: &str, version: Option<i64>, attempts: i64, lease_lapsed: bool) -> ClaimCandidate {
        ClaimCandidate {
            intent: IntentRow {
                key: key.into(),
                tenant: "default".into(),
                event_type: "po.updated".into(),
                entity_type: "po".into(),
                entity_id: "PO-1".into(),
                entity_version: version,
                occurred_at: "2026-11-29T10:00:00.000000000Z".into(),
                channel: Channel::Sms,
                recipient_id: "u-1".into(),
                destination: None,
                locale: None,
                template_id: "t".into(),
                template_revision: None,
                event_digest: "e".into(),
                payload_digest: None,
                decision: Decision::Send,
                reason: None,
                detail: None,
                state: State::Queued,
                attempts,
                created_at: 0,
                updated_at: 0,
                preferences_version: None,
                link_key: None,
                retry_base: 0,
                mode: Mode::Live,
            },
            content: None,
            lease_lapsed,
            traceparent: None,
            links: None,
        }
    }

    fn claim(supersede: &[&str]) -> Claim {
        Claim {
            now_us: 0,
            limit: 10,
            lease_us: 1,
            max_attempts: 3,
            supersede_types: supersede.iter().map(|s| s.to_string()).collect(),
            repeats_unrecognised: Vec::new(),
        }
    }

    fn newer(of: &str, key: &str, version: i64, state: &str) -> NewerVersion {
        NewerVersion { of: of.into(), key: key.into(), entity_version: version, state: State::parse(state).unwrap() }
    }

    #[test]
    fn a_lapsed_last_try_is_dead_and_an_earlier_one_is_tried_again() {
        let c = claim(&[]);
        assert_eq!(on_claim(&candidate("a", None, 3, true), &[], &c), OnClaim::Dead(Reason::RetriesExhausted));
        assert_eq!(on_claim(&candidate("a", None, 2, true), &[], &c), OnClaim::Start);
        // Not lapsed: a job rescheduled after its third try was already judged by the policy.
        assert_eq!(on_claim(&candidate("a", None, 3, false), &[], &c), OnClaim::Start);
    }

    #[test]
    fn tries_count_from_the_last_replay() {
        let mut replayed = candidate("a", None, 5, true);
        replayed.intent.retry_base = 3;
        assert_eq!(on_claim(&replayed, &[], &claim(&[])), OnClaim::Start);
        replayed.intent.retry_base = 2;
        assert_eq!(on_claim(&replayed, &[], &claim(&[])), OnClaim::Dead(Reason::RetriesExhausted));
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
        assert_eq!(on_claim(&old, &versions, &c), OnClaim::Superseded { by: "v3".into() });
        let gone = [newer("v1", "v4", 4, "dead"), newer("v1", "v5", 5, "digested")];
        assert_eq!(on_claim(&old, &gone, &c), OnClaim::Start);
    }

    #[test]
    fn only_versioned_intents_of_opted_in_routes_are_superseded() {
        let versions = [newer("v1", "v2", 2, "sent")];
        assert_eq!(on_claim(&candidate("v1", Some(1), 0, false), &versions, &claim(&[])), OnClaim::Start);
        assert_eq!(on_claim(&candidate("v1", Some(1), 0, false), &versions, &claim(&["other"])), OnClaim::Start);
        assert_eq!(on_claim(&candidate("v1", None, 0, false), &versions, &claim(&["po.updated"])), OnClaim::Start);
        assert!(!may_be_superseded(&candidate("v1", None, 0, false), &claim(&["po.updated"])));
    }

    #[test]
    fn a_shadow_intent_ends_shadowed_only_where_live_would_send() {
        let mut c = candidate("v1", Some(1), 0, false);
        c.intent.mode = Mode::Shadow;
        assert_eq!(on_claim(&c, &[], &claim(&[])), OnClaim::Shadowed);
        // Superseded in shadow as in live: the same decision either way.
        // A shadowed newer version counts as sent, as it would have been live.
        let versions = [newer("v1", "v2", 2, "shadowed")];
        assert_eq!(on_claim(&c, &versions, &claim(&["po.updated"])), OnClaim::Superseded { by: "v2".into() });
    }

    #[test]
    fn a_spent_last_try_is_dead_even_when_a_newer_version_exists() {
        let versions = [newer("v1", "v2", 2, "sent")];
        let c = candidate("v1", Some(1), 3, true);
        assert_eq!(on_claim(&c, &versions, &claim(&["po.updated"])), OnClaim::Dead(Reason::RetriesExhausted));
    }
}
