//! When a retry may tell someone twice. A retry after an `unknown` outcome is
//! safe only where the provider recognises it (an idempotency key it honours);
//! on one that cannot (Twilio's message creation), the earlier call may have
//! gone through, so a retry that may itself have gone through is recorded as
//! a possible duplicate — the honest answer to "were they told twice?".

use crate::channel::Outcome;
use crate::intent::OutcomeClass;
use crate::store::AttemptRow;

/// Whether attempt `n` may have repeated an earlier one: the provider cannot
/// recognise retries, an earlier attempt's outcome is `unknown`, and this one
/// may have reached the recipient too (accepted, or unknown itself).
pub fn possible_duplicate(dedupes_retries: bool, earlier: &[AttemptRow], n: i64, outcome: &Outcome) -> bool {
    if dedupes_retries || !may_have_reached(outcome) {
        return false;
    }
    earlier.iter().any(|a| a.n < n && a.outcome == Some(OutcomeClass::Unknown))
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

    fn accepted() -> Outcome {
        Outcome::Accepted { status: Some(201), message_id: Some("SM1".into()) }
    }

    #[test]
    fn a_retry_after_unknown_on_a_provider_without_a_key_may_be_a_duplicate() {
        let earlier = [attempt(1, "unknown")];
        assert!(possible_duplicate(false, &earlier, 2, &accepted()));
        let unknown = Outcome::Unknown { class: Reason::Timeout, error: String::new() };
        assert!(possible_duplicate(false, &earlier, 2, &unknown));
    }

    #[test]
    fn a_key_the_provider_honours_or_a_definite_answer_rules_it_out() {
        let earlier = [attempt(1, "unknown")];
        assert!(!possible_duplicate(true, &earlier, 2, &accepted()), "the provider dedupes");
        let refused =
            Outcome::Retryable { class: Reason::Unreachable, status: None, error: String::new(), retry_after: None };
        assert!(!possible_duplicate(false, &earlier, 2, &refused), "nothing was sent this time");
        assert!(!possible_duplicate(false, &[attempt(1, "retryable")], 2, &accepted()), "nothing went before");
        assert!(!possible_duplicate(false, &[attempt(2, "unknown")], 2, &accepted()), "only earlier attempts count");
    }
}
