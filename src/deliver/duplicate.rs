//! When a retry may tell someone twice. A retry after an `unknown` outcome is
//! safe only where the provider recognises it (an idempotency key it honours);
//! on one that cannot (Twilio's message creation), the earlier call may have
//! gone through, so a retry that may itself have gone through is recorded as
//! a possible duplicate — the honest answer to "were they told twice?".
//!
//! Every attempt after the first `unknown` on such a provider that may have
//! reached the person is one: accepted, `unknown` itself, or taken back as
//! `unknown` / `lease_expired` after its worker died in flight. Only an
//! attempt that says nothing left (a refused connection, a provider's
//! refusal, a call never made) is not. So the first `unknown` and the flagged
//! attempts after it are the messages that may have reached the person
//! ([`messages_may_have_reached`]).

use crate::channel::Outcome;
use crate::intent::OutcomeClass;
use crate::store::AttemptRow;

pub use crate::lifecycle::claim::repeats_unrecognised;

/// Who made an attempt: the provider's name, whether it recognises a retry,
/// and whether it is a member of a failover chain (where an earlier attempt
/// may have gone to another member).
pub struct Made<'a> {
    pub provider: &'a str,
    pub dedupes_retries: bool,
    pub chained: bool,
}

/// Whether attempt `n` may have repeated an earlier one: an earlier attempt's
/// outcome is `unknown`, this one may have reached the recipient too
/// (accepted, or unknown itself), and nothing can recognise the repeat — the
/// provider takes no idempotency key, or the earlier attempt went to another
/// provider (a failover after `unknown`). An attempt whose worker lost its
/// lease recorded no provider: in a chain it may have gone to any member.
/// `earlier` is None when the attempts could not be read: then only a
/// provider that dedupes, alone on its channel, rules it out.
pub fn possible_duplicate(made: Made<'_>, earlier: Option<&[AttemptRow]>, n: i64, outcome: &Outcome) -> bool {
    if !may_have_reached(outcome) {
        return false;
    }
    let Some(earlier) = earlier else { return !made.dedupes_retries || made.chained };
    earlier.iter().any(|a| {
        let elsewhere = a.provider.as_deref().map_or(made.chained, |p| p != made.provider);
        a.n < n && a.outcome == Some(OutcomeClass::Unknown) && (!made.dedupes_retries || elsewhere)
    })
}

/// How many messages may have reached the person, from an intent's attempts:
/// the first `unknown` or accepted one, and every possible duplicate after it.
/// Zero when no attempt may have reached the person.
pub fn messages_may_have_reached(attempts: &[AttemptRow]) -> usize {
    let reached = |a: &&AttemptRow| matches!(a.outcome, Some(OutcomeClass::Unknown | OutcomeClass::Accepted));
    let first = attempts.iter().find(reached).map(|a| a.n);
    let later = attempts.iter().filter(|a| a.possible_duplicate && first.is_some_and(|f| a.n > f)).count();
    usize::from(first.is_some()) + later
}

/// Whether the call may have reached the recipient.
pub fn may_have_reached(outcome: &Outcome) -> bool {
    matches!(outcome, Outcome::Accepted { .. } | Outcome::Unknown { .. })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intent::Reason;

    fn attempt(n: i64, outcome: &str) -> AttemptRow {
        AttemptRow {
            intent_key: "k".into(),
            n,
            started_at: 0,
            finished_at: Some(1),
            outcome: OutcomeClass::parse(outcome),
            error_class: None,
            provider_status: None,
            provider_message_id: None,
            error: None,
            retry_after: None,
            retry_at: None,
            provider: Some("twilio".into()),
            possible_duplicate: false,
        }
    }

    fn by(provider: &str, dedupes_retries: bool, chained: bool) -> Made<'_> {
        Made { provider, dedupes_retries, chained }
    }

    fn accepted() -> Outcome {
        Outcome::Accepted { status: Some(201), message_id: Some("SM1".into()) }
    }

    #[test]
    fn a_retry_after_unknown_on_a_provider_without_a_key_may_be_a_duplicate() {
        let earlier = [attempt(1, "unknown")];
        assert!(possible_duplicate(by("twilio", false, false), Some(&earlier), 2, &accepted()));
        let unknown = Outcome::Unknown { class: Reason::Timeout, error: String::new() };
        assert!(possible_duplicate(by("twilio", false, false), Some(&earlier), 2, &unknown));
        assert!(
            possible_duplicate(by("twilio", false, false), None, 2, &accepted()),
            "unreadable: cannot be ruled out"
        );
    }

    #[test]
    fn a_key_the_provider_honours_or_a_definite_answer_rules_it_out() {
        let earlier = [attempt(1, "unknown")];
        assert!(!possible_duplicate(by("twilio", true, false), Some(&earlier), 2, &accepted()), "the provider dedupes");
        assert!(!possible_duplicate(by("twilio", true, false), None, 2, &accepted()));
        let refused =
            Outcome::Retryable { class: Reason::Unreachable, status: None, error: String::new(), retry_after: None };
        assert!(
            !possible_duplicate(by("twilio", false, false), Some(&earlier), 2, &refused),
            "nothing was sent this time"
        );
        let before = [attempt(1, "retryable")];
        assert!(!possible_duplicate(by("twilio", false, false), Some(&before), 2, &accepted()), "nothing went before");
        let same = [attempt(2, "unknown")];
        assert!(
            !possible_duplicate(by("twilio", false, false), Some(&same), 2, &accepted()),
            "only earlier attempts count"
        );
    }

    #[test]
    fn a_failover_after_unknown_may_be_a_duplicate_even_where_each_provider_dedupes() {
        let earlier = [attempt(1, "unknown")]; // went to "twilio"
        assert!(possible_duplicate(by("backup", true, false), Some(&earlier), 2, &accepted()));
        assert!(!possible_duplicate(by("twilio", true, false), Some(&earlier), 2, &accepted()));
    }

    /// A retry that died in flight after an `unknown`: on a provider that
    /// cannot recognise a retry (or in a chain) it may have been a second
    /// message, whatever came of it; the first `unknown` itself is not.
    #[test]
    fn the_messages_that_may_have_reached_the_person_are_the_first_unknown_and_the_duplicates() {
        let flagged = |a: AttemptRow| AttemptRow { possible_duplicate: true, ..a };
        let three = [attempt(1, "unknown"), flagged(attempt(2, "unknown")), flagged(attempt(3, "accepted"))];
        assert_eq!(messages_may_have_reached(&three), 3);
        let refused_first = [attempt(1, "retryable"), attempt(2, "unknown"), flagged(attempt(3, "accepted"))];
        assert_eq!(messages_may_have_reached(&refused_first), 2);
        let deduped = [attempt(1, "unknown"), attempt(2, "accepted")];
        assert_eq!(messages_may_have_reached(&deduped), 1, "the provider recognised the retry");
        assert_eq!(messages_may_have_reached(&[attempt(1, "retryable"), attempt(2, "permanent")]), 0);
        assert_eq!(messages_may_have_reached(&[]), 0);
    }

    /// An attempt taken back after its worker's lease has no provider on
    /// record. Alone on its channel the provider is the same one, and its key
    /// recognises the retry; in a failover chain the attempt may have gone
    /// through another member, whose send this one cannot recognise.
    #[test]
    fn a_rescued_attempt_in_a_chain_may_have_gone_through_any_member() {
        let rescued = [AttemptRow { provider: None, ..attempt(1, "unknown") }];
        assert!(!possible_duplicate(by("primary", true, false), Some(&rescued), 2, &accepted()), "alone");
        assert!(possible_duplicate(by("primary", true, true), Some(&rescued), 2, &accepted()), "a member");
        let elsewhere = [AttemptRow { provider: Some("backup".into()), ..attempt(1, "unknown") }];
        assert!(possible_duplicate(by("primary", true, true), Some(&elsewhere), 2, &accepted()));
        let here = [AttemptRow { provider: Some("primary".into()), ..attempt(1, "unknown") }];
        assert!(!possible_duplicate(by("primary", true, true), Some(&here), 2, &accepted()), "the same member");
        assert!(possible_duplicate(by("primary", true, true), None, 2, &accepted()), "unreadable, in a chain");
    }
}
