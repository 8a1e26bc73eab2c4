//! When a retry may tell someone twice. A retry after an `unknown` outcome is
//! safe only where the provider recognises it (an idempotency key it honours);
//! on one that cannot (Twilio's message creation), the earlier call may have
//! gone through, so a retry that may itself have gone through is recorded as
//! a possible duplicate — the honest answer to "were they told twice?".

use crate::channel::Outcome;
use crate::intent::OutcomeClass;
use crate::store::AttemptRow;

/// Whether attempt `n`, made through `provider`, may have repeated an earlier
/// one: an earlier attempt's outcome is `unknown`, this one may have reached
/// the recipient too (accepted, or unknown itself), and nothing can recognise
/// the repeat — the provider takes no idempotency key, or the earlier attempt
/// went to another provider (a failover after `unknown`). `earlier` is None
/// when the attempts could not be read: then only a provider that dedupes
/// rules it out.
pub fn possible_duplicate(
    provider: &str,
    dedupes_retries: bool,
    earlier: Option<&[AttemptRow]>,
    n: i64,
    outcome: &Outcome,
) -> bool {
    if !may_have_reached(outcome) {
        return false;
    }
    let Some(earlier) = earlier else { return !dedupes_retries };
    earlier.iter().any(|a| {
        let elsewhere = a.provider.as_deref().is_some_and(|p| p != provider);
        a.n < n && a.outcome == Some(OutcomeClass::Unknown) && (!dedupes_retries || elsewhere)
    })
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
        assert!(possible_duplicate("twilio", false, Some(&earlier), 2, &accepted()));
        let unknown = Outcome::Unknown { class: Reason::Timeout, error: String::new() };
        assert!(possible_duplicate("twilio", false, Some(&earlier), 2, &unknown));
        assert!(possible_duplicate("twilio", false, None, 2, &accepted()), "unreadable: cannot be ruled out");
    }

    #[test]
    fn a_key_the_provider_honours_or_a_definite_answer_rules_it_out() {
        let earlier = [attempt(1, "unknown")];
        assert!(!possible_duplicate("twilio", true, Some(&earlier), 2, &accepted()), "the provider dedupes");
        assert!(!possible_duplicate("twilio", true, None, 2, &accepted()));
        let refused =
            Outcome::Retryable { class: Reason::Unreachable, status: None, error: String::new(), retry_after: None };
        assert!(!possible_duplicate("twilio", false, Some(&earlier), 2, &refused), "nothing was sent this time");
        let before = [attempt(1, "retryable")];
        assert!(!possible_duplicate("twilio", false, Some(&before), 2, &accepted()), "nothing went before");
        let same = [attempt(2, "unknown")];
        assert!(!possible_duplicate("twilio", false, Some(&same), 2, &accepted()), "only earlier attempts count");
    }

    #[test]
    fn a_failover_after_unknown_may_be_a_duplicate_even_where_each_provider_dedupes() {
        let earlier = [attempt(1, "unknown")]; // went to "twilio"
        assert!(possible_duplicate("backup", true, Some(&earlier), 2, &accepted()));
        assert!(!possible_duplicate("twilio", true, Some(&earlier), 2, &accepted()));
    }
}
