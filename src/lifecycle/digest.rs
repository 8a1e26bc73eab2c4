//! How a digest ends its members. A closed digest that rendered carries its
//! live members: every member ends `digested`. One that could not be rendered
//! strands nobody: each member goes out on its own with the content it froze,
//! and one planned in shadow ends `shadowed` where live would queue it. A
//! member that arrives after its window closed goes out on its own too.

use super::Change;
use crate::intent::{Decision, State};

/// Why a member planned in shadow is `digested` though the live digest went
/// without it.
pub const LEFT_OUT_IN_SHADOW: &str =
    "planned in shadow mode, left out of the live digest, which carries only the members planned live";
/// Why a member went out on its own: its digest could not be rendered.
pub const UNRENDERED: &str = "its digest could not be rendered; sent on its own";
/// The same, for a member planned in shadow: it ends there.
pub const UNRENDERED_IN_SHADOW: &str =
    "its digest could not be rendered; planned in shadow mode, it ends shadowed on its own";
/// Why a member went out on its own: its window had closed when it arrived.
pub const WINDOW_CLOSED: &str = "its digest window had already closed; sent on its own";

/// How each of a closed digest's `members` ends at `at`; `in_shadow` are
/// those planned in shadow mode, `rendered` whether the digest could be.
/// A member that ends `queued` needs a job of its own.
pub fn closed(members: &[String], in_shadow: &[String], rendered: bool, at: i64) -> Vec<Change> {
    members
        .iter()
        .map(|key| {
            let shadow = in_shadow.contains(key);
            match (rendered, shadow) {
                (true, false) => Change::to(key, State::Digested, at),
                (true, true) => Change::to(key, State::Digested, at).detail(LEFT_OUT_IN_SHADOW),
                // No job: nothing counts it again.
                (false, true) => {
                    Change::to(key, State::Shadowed, at).decision(Decision::Send).detail(UNRENDERED_IN_SHADOW)
                }
                (false, false) => Change::to(key, State::Queued, at).decision(Decision::Send).detail(UNRENDERED),
            }
        })
        .collect()
}

/// A member whose window closed between planning and its write: it goes out
/// on its own, no longer linked to the digest.
pub fn too_late(key: &str, at: i64) -> Change {
    Change::to(key, State::Queued, at).decision(Decision::Send).link_key(None).detail(WINDOW_CLOSED)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(k: &[&str]) -> Vec<String> {
        k.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_rendered_digest_ends_every_member_digested_and_says_why_a_shadow_one_was_left_out() {
        let changes = closed(&keys(&["a", "s"]), &keys(&["s"]), true, 7);
        assert_eq!(changes.iter().map(|c| c.to).collect::<Vec<_>>(), vec![State::Digested, State::Digested]);
        assert_eq!(changes[0].detail, None);
        assert_eq!(changes[1].detail, Some(Some(LEFT_OUT_IN_SHADOW.to_string())));
        assert!(changes.iter().all(|c| c.decision.is_none() && c.at == 7));
    }

    #[test]
    fn an_unrendered_digest_sends_each_live_member_alone_and_ends_each_shadow_one() {
        let changes = closed(&keys(&["a", "s"]), &keys(&["s"]), false, 7);
        let got: Vec<_> = changes.iter().map(|c| (c.to, c.decision, c.detail.clone().flatten())).collect();
        assert_eq!(
            got,
            vec![
                (State::Queued, Some(Decision::Send), Some(UNRENDERED.to_string())),
                (State::Shadowed, Some(Decision::Send), Some(UNRENDERED_IN_SHADOW.to_string())),
            ]
        );
    }

    #[test]
    fn a_member_too_late_for_its_window_is_unlinked_and_queued() {
        let c = too_late("k", 3);
        assert_eq!((c.to, c.decision, c.link_key), (State::Queued, Some(Decision::Send), Some(None)));
    }
}
