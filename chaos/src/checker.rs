//! The invariants, checked at the end of a run from what the database holds
//! (read with plain SQL) and what every provider logged. Pure: the run's
//! evidence in, a report out, so each invariant has a test that feeds it a
//! doctored database or log.

use crate::provider::Call;
use std::collections::{BTreeMap, HashMap, HashSet};

#[derive(Debug, Clone, Default, sqlx::FromRow)]
pub struct IntentRow {
    pub key: String,
    pub tenant: String,
    pub event_type: String,
    pub entity_type: String,
    pub entity_id: String,
    pub entity_version: Option<i64>,
    pub occurred_at: String,
    pub channel: String,
    pub recipient_id: String,
    pub decision: String,
    pub reason: Option<String>,
    pub state: String,
    pub attempts: i64,
    pub link_key: Option<String>,
}

impl IntentRow {
    pub fn event_key(&self) -> String {
        format!("{}|{}|{}|{}|{}", self.tenant, self.event_type, self.entity_type, self.entity_id, self.occurred_at)
    }
}

#[derive(Debug, Clone, Default, sqlx::FromRow)]
pub struct AttemptRow {
    pub intent_key: String,
    pub n: i64,
    pub outcome: Option<String>,
}

#[derive(Debug, Clone, Default, sqlx::FromRow)]
pub struct JobRow {
    pub intent_key: String,
    pub locked_until: Option<i64>,
}

#[derive(Debug, Clone, Default, sqlx::FromRow)]
pub struct RequestRow {
    pub identity: String,
    pub response: Option<String>,
}

/// What the database holds at the end, and its clock then (µs since the epoch).
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub intents: Vec<IntentRow>,
    pub attempts: Vec<AttemptRow>,
    pub jobs: Vec<JobRow>,
    pub requests: Vec<RequestRow>,
    /// Digest windows (their key is the digest intent's key).
    pub digest_keys: Vec<String>,
    pub now_us: i64,
}

/// An intent the driver's accepted posts call for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expected {
    pub key: String,
    pub event_key: String,
    pub channel: String,
    pub recipient_id: String,
}

/// Everything the checker judges.
#[derive(Debug, Clone, Default)]
pub struct Evidence {
    pub snapshot: Snapshot,
    pub expected: Vec<Expected>,
    /// Every call every provider saw.
    pub calls: Vec<Call>,
    /// Which providers (named as the channel they serve) honour keys.
    pub honouring: HashSet<String>,
    /// Channels whose effects live in Herald's own database (in_app): no provider log.
    pub internal_channels: HashSet<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub kind: &'static str,
    pub detail: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Duplicates {
    pub explained: u64,
    pub unexplained: u64,
}

#[derive(Debug, Default)]
pub struct Report {
    pub violations: Vec<Violation>,
    pub intents: u64,
    pub by_state: BTreeMap<String, u64>,
    pub lost: u64,
    pub effects: BTreeMap<String, u64>,
    pub duplicates: BTreeMap<String, Duplicates>,
}

impl Report {
    fn flag(&mut self, kind: &'static str, detail: String) {
        self.violations.push(Violation { kind, detail });
    }

    #[cfg(test)]
    pub fn kinds(&self) -> Vec<&'static str> {
        let mut k: Vec<&'static str> = self.violations.iter().map(|v| v.kind).collect();
        k.dedup();
        k
    }
}

const WAITING: [&str; 3] = ["queued", "sending", "unknown"];

pub fn check(e: &Evidence) -> Report {
    let mut r = Report::default();
    let s = &e.snapshot;
    let intents: HashMap<&str, &IntentRow> = s.intents.iter().map(|i| (i.key.as_str(), i)).collect();
    let digests: HashSet<&str> = s.digest_keys.iter().map(String::as_str).collect();
    r.intents = s.intents.len() as u64;
    for i in &s.intents {
        *r.by_state.entry(i.state.clone()).or_default() += 1;
    }

    // Every accepted event became exactly its intents: none missing, none extra.
    let expected: HashMap<&str, &Expected> = e.expected.iter().map(|x| (x.key.as_str(), x)).collect();
    for x in &e.expected {
        match intents.get(x.key.as_str()) {
            None => {
                r.lost += 1;
                r.flag(
                    "lost",
                    format!("{} ({} to {}) was accepted but has no intent", x.key, x.channel, x.recipient_id),
                );
            }
            Some(i) if i.channel != x.channel || i.recipient_id != x.recipient_id || i.event_key() != x.event_key => r
                .flag(
                    "wrong_intent",
                    format!("{} is {} to {} of {}, expected {x:?}", i.key, i.channel, i.recipient_id, i.event_key()),
                ),
            Some(_) => {}
        }
    }
    for i in &s.intents {
        if !expected.contains_key(i.key.as_str()) && !digests.contains(i.key.as_str()) {
            r.flag(
                "extra_intent",
                format!("{} ({} to {} of {}) was never asked for", i.key, i.channel, i.recipient_id, i.event_key()),
            );
        }
    }

    // Every intent final or explained.
    for i in &s.intents {
        let explained = match i.state.as_str() {
            "sent" => true,
            "dead" | "suppressed" | "held" => i.reason.is_some() || i.decision == "digest",
            "digested" => i.link_key.as_deref().is_some_and(|d| intents.contains_key(d) || digests.contains(d)),
            _ => false,
        };
        if WAITING.contains(&i.state.as_str()) {
            r.lost += 1;
            r.flag("unfinished", format!("{} ({}) is still {} at the end", i.key, i.channel, i.state));
        } else if !explained {
            r.flag("unexplained", format!("{} is {} without a reason ({:?})", i.key, i.state, i.reason));
        }
        if i.reason.as_deref() == Some("superseded") {
            let newer = i.link_key.as_deref().and_then(|k| intents.get(k));
            let fits = newer.is_some_and(|n| {
                n.entity_type == i.entity_type
                    && n.entity_id == i.entity_id
                    && n.recipient_id == i.recipient_id
                    && n.channel == i.channel
                    && n.entity_version > i.entity_version
            });
            if !fits {
                r.flag(
                    "superseded_wrongly",
                    format!("{} is superseded by {:?}, which is not a newer version of it", i.key, i.link_key),
                );
            }
        }
    }

    // The attempt ledger: no orphans, numbered 1..=n without gaps, matching the intent's count.
    let mut per_intent: HashMap<&str, Vec<&AttemptRow>> = HashMap::new();
    for a in &s.attempts {
        if !intents.contains_key(a.intent_key.as_str()) {
            r.flag("orphan_attempt", format!("attempt {} of {} has no intent", a.n, a.intent_key));
        }
        per_intent.entry(a.intent_key.as_str()).or_default().push(a);
    }
    for (key, list) in per_intent.iter_mut() {
        list.sort_by_key(|a| a.n);
        let numbers: Vec<i64> = list.iter().map(|a| a.n).collect();
        if numbers.iter().enumerate().any(|(at, n)| *n != at as i64 + 1) {
            r.flag("attempt_gap", format!("{key} has attempts numbered {numbers:?}"));
        }
        if let Some(i) = intents.get(key)
            && i.attempts != list.len() as i64
        {
            r.flag("attempt_count", format!("{key} counts {} attempts but the ledger has {}", i.attempts, list.len()));
        }
    }
    for i in &s.intents {
        let list = per_intent.get(i.key.as_str());
        if i.state == "sent" && !list.is_some_and(|l| l.iter().any(|a| a.outcome.as_deref() == Some("accepted"))) {
            r.flag("sent_unattempted", format!("{} is sent without an accepted attempt", i.key));
        }
        if !WAITING.contains(&i.state.as_str()) && list.is_some_and(|l| l.iter().any(|a| a.outcome.is_none())) {
            r.flag("attempt_unfinished", format!("{} is {} with an attempt that never finished", i.key, i.state));
        }
    }

    // The queue at the end: no job past its lease, none for a finished intent.
    for j in &s.jobs {
        match intents.get(j.intent_key.as_str()) {
            None => r.flag("orphan_job", format!("a job for {} which has no intent", j.intent_key)),
            Some(i) if !WAITING.contains(&i.state.as_str()) && i.state != "held" => {
                r.flag("job_of_final_intent", format!("a job is left for {}, which is {}", i.key, i.state))
            }
            Some(_) => {}
        }
        if j.locked_until.is_some_and(|until| until < s.now_us) {
            r.flag("lease_expired", format!("the job of {} is leased past its lease", j.intent_key));
        }
    }

    // Stored answers agree with the intents.
    for q in &s.requests {
        let Some(text) = &q.response else { continue };
        let Ok(answer) = serde_json::from_str::<serde_json::Value>(text) else {
            r.flag("request_disagrees", format!("request {} stores an answer that is not JSON", q.identity));
            continue;
        };
        let event_key = answer["event_key"].as_str().unwrap_or_default();
        for item in answer["intents"].as_array().into_iter().flatten() {
            let key = item["key"].as_str().or(item["id"].as_str()).unwrap_or_default();
            match intents.get(key) {
                None => r.flag(
                    "request_disagrees",
                    format!("request {} answered intent {key}, which does not exist", q.identity),
                ),
                Some(i)
                    if Some(i.channel.as_str()) != item["channel"].as_str()
                        || Some(i.recipient_id.as_str()) != item["recipient_id"].as_str()
                        || i.event_key() != event_key =>
                {
                    r.flag(
                        "request_disagrees",
                        format!(
                            "request {} answered {key} as {item}, but it is {} to {} of {}",
                            q.identity,
                            i.channel,
                            i.recipient_id,
                            i.event_key()
                        ),
                    )
                }
                Some(_) => {}
            }
        }
    }

    // One notification, one key: an event's marker reaches a recipient on a
    // channel under one key only — never in two digests, never in a digest
    // and on its own as well.
    let mut keys_of: BTreeMap<(&str, &str, &str), Vec<&str>> = BTreeMap::new();
    for c in e.calls.iter().filter(|c| c.effect) {
        let Some(i) = intents.get(c.key.as_str()) else { continue };
        for m in c.marker.split(' ').filter(|m| !m.is_empty()) {
            let keys = keys_of.entry((m, i.recipient_id.as_str(), i.channel.as_str())).or_default();
            if !keys.contains(&c.key.as_str()) {
                keys.push(c.key.as_str());
            }
        }
    }
    for ((m, recipient, channel), keys) in keys_of.iter().filter(|(_, k)| k.len() > 1) {
        let kind = if keys.iter().any(|k| digests.contains(k)) { "digest_member_twice" } else { "one_event_two_keys" };
        r.flag(kind, format!("{m} reached {recipient} by {channel} under {} keys: {keys:?}", keys.len()));
    }

    // Effects at the providers.
    let mut effects: HashMap<&str, u64> = HashMap::new();
    for c in e.calls.iter().filter(|c| c.effect) {
        *r.effects.entry(c.provider.clone()).or_default() += 1;
        if !intents.contains_key(c.key.as_str()) {
            r.flag(
                "effect_without_intent",
                format!("{} acted on a call with key {:?}, which is no intent", c.provider, c.key),
            );
            continue;
        }
        *effects.entry(c.key.as_str()).or_default() += 1;
    }
    for i in &s.intents {
        if e.internal_channels.contains(&i.channel) {
            continue;
        }
        let done = effects.get(i.key.as_str()).copied().unwrap_or(0);
        let unknown = per_intent
            .get(i.key.as_str())
            .map_or(0, |l| l.iter().filter(|a| a.outcome.as_deref() == Some("unknown")).count() as u64);
        if i.state == "sent" && done == 0 {
            r.lost += 1;
            r.flag("sent_without_effect", format!("{} is sent but {} never acted on it", i.key, i.channel));
        }
        if i.state != "sent" && done > 0 && unknown == 0 {
            r.flag(
                "effect_of_unsent",
                format!("{} acted on {}, which is {} with no unknown attempt", i.channel, i.key, i.state),
            );
        }
        if done > 1 {
            let d = r.duplicates.entry(i.channel.clone()).or_default();
            let extra = done - 1;
            let explained = if e.honouring.contains(&i.channel) { 0 } else { extra.min(unknown) };
            d.explained += explained;
            d.unexplained += extra - explained;
            if explained < extra {
                r.flag(
                    "duplicate_effect",
                    format!("{} acted {done} times on {} after {unknown} unknown attempt(s)", i.channel, i.key),
                );
            }
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn intent(key: &str, channel: &str, state: &str) -> IntentRow {
        IntentRow {
            key: key.into(),
            tenant: "default".into(),
            event_type: "chaos.happened".into(),
            entity_type: "order".into(),
            entity_id: "o-1".into(),
            entity_version: Some(1),
            occurred_at: "2026-11-30T00:00:00.000000000Z".into(),
            channel: channel.into(),
            recipient_id: "r-1".into(),
            decision: "send".into(),
            reason: None,
            state: state.into(),
            attempts: 0,
            link_key: None,
        }
    }

    fn attempt(key: &str, n: i64, outcome: &str) -> AttemptRow {
        AttemptRow { intent_key: key.into(), n, outcome: Some(outcome.into()) }
    }

    fn call(provider: &str, key: &str, effect: bool) -> Call {
        Call { provider: provider.into(), key: key.into(), marker: "evt~1~".into(), effect }
    }

    /// A clean run: one SMS sent at the first try, one in-app card, one
    /// suppressed for want of an address.
    fn clean() -> Evidence {
        let mut sms = intent("k1", "sms", "sent");
        sms.attempts = 1;
        let mut inbox = intent("k2", "in_app", "sent");
        inbox.attempts = 1;
        let mut none = intent("k3", "webhook", "suppressed");
        none.decision = "suppress".into();
        none.reason = Some("no_destination".into());
        let intents = vec![sms, inbox, none];
        let expected = intents
            .iter()
            .map(|i| Expected {
                key: i.key.clone(),
                event_key: i.event_key(),
                channel: i.channel.clone(),
                recipient_id: i.recipient_id.clone(),
            })
            .collect();
        let answer = serde_json::json!({"event_key": intents[0].event_key(), "intents": [
            {"key": "k1", "channel": "sms", "recipient_id": "r-1"}]});
        Evidence {
            snapshot: Snapshot {
                intents,
                attempts: vec![attempt("k1", 1, "accepted"), attempt("k2", 1, "accepted")],
                jobs: vec![],
                requests: vec![RequestRow { identity: "event:x".into(), response: Some(answer.to_string()) }],
                digest_keys: vec![],
                now_us: 1_000,
            },
            expected,
            calls: vec![call("sms", "k1", true)],
            honouring: ["sms".to_string()].into(),
            internal_channels: ["in_app".to_string()].into(),
        }
    }

    fn kinds(e: &Evidence) -> Vec<&'static str> {
        check(e).kinds()
    }

    #[test]
    fn a_clean_run_passes() {
        let r = check(&clean());
        assert!(r.violations.is_empty(), "{:?}", r.violations);
        assert_eq!(r.lost, 0);
    }

    #[test]
    fn a_missing_intent_is_lost() {
        let mut e = clean();
        e.snapshot.intents.retain(|i| i.key != "k3");
        assert_eq!(kinds(&e), ["lost"]);
        assert_eq!(check(&e).lost, 1);
    }

    #[test]
    fn an_intent_nobody_asked_for_is_extra() {
        let mut e = clean();
        let mut x = intent("k9", "sms", "suppressed");
        x.reason = Some("no_destination".into());
        e.snapshot.intents.push(x);
        assert_eq!(kinds(&e), ["extra_intent"]);
    }

    #[test]
    fn an_intent_of_another_recipient_under_the_key_is_wrong() {
        let mut e = clean();
        e.expected[2].recipient_id = "r-2".into();
        assert_eq!(kinds(&e), ["wrong_intent"]);
    }

    #[test]
    fn an_intent_still_waiting_is_unfinished_and_counted_lost() {
        let mut e = clean();
        e.snapshot.intents[2].state = "queued".into();
        e.snapshot.jobs.push(JobRow { intent_key: "k3".into(), locked_until: None });
        assert_eq!(kinds(&e), ["unfinished"]);
        assert_eq!(check(&e).lost, 1);
    }

    #[test]
    fn a_dead_or_suppressed_intent_needs_a_reason() {
        let mut e = clean();
        e.snapshot.intents[2].reason = None;
        assert_eq!(kinds(&e), ["unexplained"]);
    }

    #[test]
    fn superseded_must_name_a_newer_version() {
        let mut e = clean();
        e.snapshot.intents[2].reason = Some("superseded".into());
        e.snapshot.intents[2].link_key = Some("k1".into()); // another channel, same version
        assert_eq!(kinds(&e), ["superseded_wrongly"]);
    }

    #[test]
    fn an_attempt_without_its_intent_is_an_orphan() {
        let mut e = clean();
        e.snapshot.attempts.push(attempt("nope", 1, "accepted"));
        assert!(kinds(&e).contains(&"orphan_attempt"));
    }

    #[test]
    fn attempts_are_numbered_without_gaps() {
        let mut e = clean();
        e.snapshot.intents[0].attempts = 2;
        e.snapshot.attempts.push(attempt("k1", 3, "accepted"));
        assert_eq!(kinds(&e), ["attempt_gap"]);
    }

    #[test]
    fn the_intents_attempt_count_matches_the_ledger() {
        let mut e = clean();
        e.snapshot.intents[0].attempts = 2;
        assert_eq!(kinds(&e), ["attempt_count"]);
    }

    #[test]
    fn sent_needs_an_accepted_attempt() {
        let mut e = clean();
        e.snapshot.attempts[0].outcome = Some("unknown".into());
        assert_eq!(kinds(&e), ["sent_unattempted"]);
    }

    #[test]
    fn an_attempt_left_open_on_a_final_intent_is_caught() {
        let mut e = clean();
        e.snapshot.intents[0].attempts = 2;
        e.snapshot.attempts.push(AttemptRow { intent_key: "k1".into(), n: 2, outcome: None });
        assert_eq!(kinds(&e), ["attempt_unfinished"]);
    }

    #[test]
    fn a_job_past_its_lease_is_caught() {
        let mut e = clean();
        e.snapshot.intents[2].state = "sending".into();
        e.snapshot.jobs.push(JobRow { intent_key: "k3".into(), locked_until: Some(10) });
        assert_eq!(kinds(&e), ["unfinished", "lease_expired"]);
    }

    #[test]
    fn a_job_left_for_a_finished_intent_or_none_is_caught() {
        let mut e = clean();
        e.snapshot.jobs.push(JobRow { intent_key: "k1".into(), locked_until: None });
        e.snapshot.jobs.push(JobRow { intent_key: "gone".into(), locked_until: None });
        assert_eq!(kinds(&e), ["job_of_final_intent", "orphan_job"]);
    }

    #[test]
    fn a_stored_answer_naming_a_missing_or_other_intent_disagrees() {
        let mut e = clean();
        let answer = serde_json::json!({"event_key": e.snapshot.intents[0].event_key(), "intents": [
            {"key": "k1", "channel": "email", "recipient_id": "r-1"}, {"key": "k7", "channel": "sms", "recipient_id": "r-1"}]});
        e.snapshot.requests[0].response = Some(answer.to_string());
        let r = check(&e);
        assert_eq!(r.kinds(), ["request_disagrees"]);
        assert_eq!(r.violations.len(), 2);
    }

    #[test]
    fn a_member_in_two_digests_is_caught() {
        let mut e = clean();
        for d in ["d1", "d2"] {
            let mut i = intent(d, "email", "sent");
            i.attempts = 1;
            e.snapshot.intents.push(i);
            e.snapshot.attempts.push(attempt(d, 1, "accepted"));
            e.snapshot.digest_keys.push(d.into());
            e.calls.push(Call {
                provider: "email".into(),
                key: d.into(),
                marker: "evt~1~ evt~2~".into(),
                effect: true,
            });
        }
        assert_eq!(kinds(&e), ["digest_member_twice"]);
    }

    #[test]
    fn a_member_sent_alone_and_in_a_digest_is_caught() {
        let mut e = clean();
        let mut d = intent("d1", "sms", "sent");
        d.attempts = 1;
        e.snapshot.intents.push(d);
        e.snapshot.attempts.push(attempt("d1", 1, "accepted"));
        e.snapshot.digest_keys.push("d1".into());
        e.calls.push(Call { provider: "sms".into(), key: "d1".into(), marker: "evt~1~ evt~5~".into(), effect: true });
        assert_eq!(kinds(&e), ["digest_member_twice"]);
    }

    #[test]
    fn one_event_reaching_a_recipient_under_two_keys_is_caught() {
        let mut e = clean();
        let mut twin = intent("k1b", "sms", "sent");
        twin.attempts = 1;
        e.snapshot.intents.push(twin);
        e.snapshot.attempts.push(attempt("k1b", 1, "accepted"));
        e.expected.push(Expected {
            key: "k1b".into(),
            event_key: e.expected[0].event_key.clone(),
            channel: "sms".into(),
            recipient_id: "r-1".into(),
        });
        e.calls.push(call("sms", "k1b", true));
        assert_eq!(kinds(&e), ["one_event_two_keys"]);
    }

    #[test]
    fn a_second_effect_at_an_honouring_provider_is_never_explained() {
        let mut e = clean();
        e.snapshot.intents[0].attempts = 2;
        e.snapshot.attempts[0].outcome = Some("unknown".into());
        e.snapshot.attempts.push(attempt("k1", 2, "accepted"));
        e.calls.push(call("sms", "k1", true));
        let r = check(&e);
        assert_eq!(r.kinds(), ["duplicate_effect"]);
        assert_eq!(r.duplicates["sms"], Duplicates { explained: 0, unexplained: 1 });
    }

    #[test]
    fn at_a_plain_provider_a_duplicate_after_an_unknown_is_explained_and_counted() {
        let mut e = clean();
        e.honouring.clear();
        e.snapshot.intents[0].attempts = 2;
        e.snapshot.attempts[0].outcome = Some("unknown".into());
        e.snapshot.attempts.push(attempt("k1", 2, "accepted"));
        e.calls.push(call("sms", "k1", true));
        let r = check(&e);
        assert!(r.violations.is_empty(), "{:?}", r.violations);
        assert_eq!(r.duplicates["sms"], Duplicates { explained: 1, unexplained: 0 });
    }

    #[test]
    fn at_a_plain_provider_a_duplicate_without_an_unknown_is_not() {
        let mut e = clean();
        e.honouring.clear();
        e.calls.push(call("sms", "k1", true));
        let r = check(&e);
        assert_eq!(r.kinds(), ["duplicate_effect"]);
        assert_eq!(r.duplicates["sms"], Duplicates { explained: 0, unexplained: 1 });
    }

    #[test]
    fn an_effect_without_an_intent_is_caught() {
        let mut e = clean();
        e.calls.push(call("sms", "stranger", true));
        e.calls.push(call("sms", "refused-call", false));
        assert_eq!(kinds(&e), ["effect_without_intent"]);
    }

    #[test]
    fn sent_without_the_provider_acting_is_lost() {
        let mut e = clean();
        e.calls.clear();
        assert_eq!(kinds(&e), ["sent_without_effect"]);
        assert_eq!(check(&e).lost, 1);
    }

    #[test]
    fn an_effect_herald_believes_failed_needs_an_unknown_attempt() {
        let mut e = clean();
        e.snapshot.intents[0].state = "dead".into();
        e.snapshot.intents[0].reason = Some("rejected".into());
        e.snapshot.attempts[0].outcome = Some("permanent".into());
        assert_eq!(kinds(&e), ["effect_of_unsent"]);
        e.snapshot.attempts[0].outcome = Some("unknown".into());
        assert!(kinds(&e).is_empty());
    }
}
