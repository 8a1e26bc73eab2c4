//! The store suite: every store behaviour, on every configured backend.

mod common;

use common::{TestDb, backends};
use herald::event::Channel;
use herald::intent::{Decision, Mode, OutcomeClass, Reason, State};
use herald::store::*;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

const T0: i64 = 1_800_000_000_000_000;

fn new_intent(key: &str, channel: &str, run_at: Option<i64>) -> NewIntent {
    NewIntent {
        key: key.into(),
        channel: Channel::parse(channel).expect("a channel"),
        recipient_id: "u-1".into(),
        destination: Some("+15550000001".into()),
        locale: Some("en".into()),
        template_id: "po_approved".into(),
        template_revision: Some("1".into()),
        payload: Some((format!("digest-{key}"), r#"{"body":"hello"}"#.into())),
        decision: Decision::Send,
        reason: None,
        detail: None,
        state: State::Queued,
        run_at,
        preferences_version: None,
        digest: None,
        mode: herald::intent::Mode::Live,
    }
}

fn ingest(identity: &str, fingerprint: &str, intents: Vec<NewIntent>) -> Ingest {
    Ingest {
        tenant: "default".into(),
        identity: identity.into(),
        fingerprint: fingerprint.into(),
        event_key: "default|e|x|1|t".into(),
        content_digest: "content-1".into(),
        event_type: "purchase_order.approved".into(),
        entity_type: "purchase_order".into(),
        entity_id: "PO-1".into(),
        entity_version: Some(1),
        occurred_at: "2026-11-29T04:30:00.000000000Z".into(),
        event_body: "{}".into(),
        intents,
        now_us: T0,
        traceparent: None,
    }
}

fn key(n: u32) -> String {
    format!("{n:032x}")
}

/// A claim whose lease holds for the rest of the test.
fn claim(now: i64, limit: u32) -> Claim {
    Claim {
        now_us: now,
        limit,
        lease_us: 3_600_000_000,
        max_attempts: 3,
        dedupe_window_us: None,
        supersede_types: vec![],
        repeats_unrecognised: vec![],
    }
}

/// A claim whose lease ends at once, as if its worker died straight after.
fn claim_lapsing(now: i64, limit: u32) -> Claim {
    Claim { lease_us: 0, ..claim(now, limit) }
}

fn finished(key: &str, n: i64, outcome: OutcomeClass, transition: Transition) -> FinishedAttempt {
    FinishedAttempt {
        key: key.into(),
        n,
        finished_at_us: T0 + 10,
        outcome,
        error_class: None,
        provider_status: Some(200),
        provider_message_id: Some("m-1".into()),
        error: None,
        retry_after_us: None,
        transition,
        provider: Some("fake".into()),
        possible_duplicate: false,
    }
}

async fn each_backend<F, Fut>(test: F)
where
    F: Fn(Arc<dyn Store>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    for backend in backends() {
        let db = TestDb::new(backend).await;
        eprintln!("store suite on {backend:?}");
        test(db.store().await).await;
    }
}

#[tokio::test]
async fn an_ingest_creates_intents_and_queues_only_what_is_sendable() {
    each_backend(|store| async move {
        let mut suppressed = new_intent(&key(2), "email", None);
        suppressed.state = State::Suppressed;
        suppressed.decision = Decision::Suppress;
        suppressed.reason = Some(Reason::NoDestination);
        let out = store
            .events_ingest(ingest("r1", "fp1", vec![new_intent(&key(1), "sms", Some(T0)), suppressed]))
            .await
            .unwrap();
        let IngestOutcome::Accepted { response, any_created } = out else { panic!("{out:?}") };
        assert!(any_created);
        assert_eq!(response.intents.len(), 2);
        assert!(response.intents.iter().all(|i| i.created));
        let jobs = store.jobs_claim(claim(T0, 10)).await.unwrap();
        assert_eq!(jobs.iter().map(|j| j.intent.key.clone()).collect::<Vec<_>>(), vec![key(1)]);
        assert_eq!(jobs[0].content.as_deref(), Some(r#"{"body":"hello"}"#));
    })
    .await;
}

#[tokio::test]
async fn a_claimed_job_carries_its_requests_trace_on_every_retry() {
    each_backend(|store| async move {
        let tp = |n: u32| format!("00-{:032x}-00f067aa0ba902b7-01", 0xabc0 + n);
        let traced = |identity: &str, n: u32, k: u32| Ingest {
            event_key: format!("default|e|x|{identity}|t"),
            entity_id: identity.into(),
            traceparent: Some(tp(n)),
            ..ingest(identity, &format!("fp-{identity}"), vec![new_intent(&key(k), "sms", Some(T0))])
        };
        // One request alone, then a batch of two (Postgres writes a batch
        // set-wise), then one without a trace.
        store.events_ingest(traced("t1", 1, 1)).await.unwrap();
        for out in store.events_ingest_batch(vec![traced("t2", 2, 2), traced("t3", 3, 3)]).await {
            assert!(matches!(out, Ok(IngestOutcome::Accepted { .. })), "{out:?}");
        }
        let untraced = Ingest {
            event_key: "default|e|x|t4|t".into(),
            entity_id: "t4".into(),
            ..ingest("t4", "fp-t4", vec![new_intent(&key(4), "sms", Some(T0))])
        };
        store.events_ingest(untraced).await.unwrap();

        let trace_of = |jobs: &[ClaimedJob]| -> Vec<(String, Option<String>)> {
            let mut out: Vec<_> = jobs.iter().map(|j| (j.intent.key.clone(), j.traceparent.clone())).collect();
            out.sort();
            out
        };
        let expected = vec![(key(1), Some(tp(1))), (key(2), Some(tp(2))), (key(3), Some(tp(3))), (key(4), None)];
        let jobs = store.jobs_claim(claim(T0, 10)).await.unwrap();
        assert_eq!(trace_of(&jobs), expected);

        // Rescheduled: the retry's claim still carries the trace.
        let retries: Vec<FinishedAttempt> = (1..=4)
            .map(|k| {
                let retry = Transition::Retry { run_at_us: T0 + 1_000_000, state: State::Queued };
                finished(&key(k), 1, OutcomeClass::Retryable, retry)
            })
            .collect();
        store.attempts_finish(&retries).await.unwrap();
        let again = store.jobs_claim(claim(T0 + 2_000_000, 10)).await.unwrap();
        assert!(again.iter().all(|j| j.intent.attempts == 2));
        assert_eq!(trace_of(&again), expected);

        // The intent keeps its request's trace too (on Postgres, the batch's
        // two were written set-wise): a replay of the dead letter continues
        // the replay's trace, linked to the request that planned it.
        let dead: Vec<FinishedAttempt> = [2, 3]
            .into_iter()
            .map(|k| finished(&key(k), 2, OutcomeClass::Permanent, Transition::Dead { reason: Reason::Rejected }))
            .collect();
        store.attempts_finish(&dead).await.unwrap();
        let at = T0 + 3_000_000;
        let replayed =
            Replay { traceparent: Some(tp(9)), ..replay(ReplaySelector::Ids(vec![key(2), key(3)]), "default", at) };
        store.dead_letters_replay(replayed).await.unwrap();
        let mut links: Vec<_> = store
            .jobs_claim(claim(at, 10))
            .await
            .unwrap()
            .into_iter()
            .map(|j| (j.intent.key, j.traceparent, j.links))
            .collect();
        links.sort();
        assert_eq!(links, vec![(key(2), Some(tp(9)), Some(tp(2))), (key(3), Some(tp(9)), Some(tp(3)))]);
    })
    .await;
}

#[tokio::test]
async fn a_shadow_intent_ends_shadowed_at_its_claim_with_no_attempt() {
    each_backend(|store| async move {
        let shadow = NewIntent { mode: herald::intent::Mode::Shadow, ..new_intent(&key(2), "email", Some(T0)) };
        store.events_ingest(ingest("r1", "fp1", vec![new_intent(&key(1), "sms", Some(T0)), shadow])).await.unwrap();
        let jobs = store.jobs_claim(claim(T0, 10)).await.unwrap();
        let states: HashMap<String, State> = jobs.iter().map(|j| (j.intent.key.clone(), j.intent.state)).collect();
        assert_eq!(states, HashMap::from([(key(1), State::Sending), (key(2), State::Shadowed)]));
        let stored = store.intent_get("default", &key(2)).await.unwrap().unwrap();
        assert_eq!((stored.intent.state, stored.intent.mode), (State::Shadowed, herald::intent::Mode::Shadow));
        assert_eq!(stored.intent.attempts, 0);
        assert!(store.attempts_of(&[key(2)]).await.unwrap().is_empty(), "no attempt, so no provider call");
        // Its job is gone: nothing is claimed again.
        assert!(store.jobs_claim(claim(T0 + 1, 10)).await.unwrap().iter().all(|j| j.intent.key != key(2)));
    })
    .await;
}

#[tokio::test]
async fn the_ingest_tally_adds_up_and_the_report_reads_one_range_and_tenant() {
    each_backend(|store| async move {
        const MIN: i64 = 60_000_000;
        let row = |tenant: &str, minute_us: i64, kind: TallyKind, n: i64| TallyRow {
            tenant: tenant.into(),
            minute_us,
            kind,
            n,
        };
        store
            .ingest_tally_add(&[row("default", T0, TallyKind::New, 2), row("default", T0, TallyKind::Replay, 1)])
            .await
            .unwrap();
        store
            .ingest_tally_add(&[
                row("default", T0, TallyKind::New, 3),
                row("default", T0 + MIN, TallyKind::Mismatch, 1),
                row("default", T0 + 10 * MIN, TallyKind::New, 100),
                row("other", T0, TallyKind::New, 7),
            ])
            .await
            .unwrap();

        let sms = |k: u32, encoding: &str, segments: u32, state: &str| NewIntent {
            payload: Some((
                format!("digest-{k}"),
                format!(r#"{{"body":"b{k}","encoding":"{encoding}","segments":{segments}}}"#),
            )),
            state: State::parse(state).expect("a state"),
            run_at: None,
            ..new_intent(&key(k), "sms", None)
        };
        let broken = NewIntent {
            payload: None,
            state: State::Dead,
            reason: Some(Reason::TemplateError),
            run_at: None,
            ..new_intent(&key(5), "email", None)
        };
        let intents = vec![
            sms(1, "GSM-7", 1, "shadowed"),
            sms(2, "UCS-2", 3, "shadowed"),
            sms(3, "UCS-2", 2, "sent"),
            sms(4, "GSM-7", 1, "queued"),
            broken,
        ];
        store.events_ingest(ingest("r1", "fp1", intents)).await.unwrap();

        let rows = store
            .report_rows(ReportFilter { tenant: Some("default".into()), since_us: T0, until_us: T0 + 2 * MIN })
            .await
            .unwrap();
        assert_eq!(rows.tally, vec![(TallyKind::Mismatch, 1), (TallyKind::New, 5), (TallyKind::Replay, 1)]);
        let by = |channel: &str, state: &str| {
            rows.intents.iter().filter(|c| c.channel == channel && c.state == state).map(|c| c.n).sum::<i64>()
        };
        assert_eq!((by("sms", "shadowed"), by("sms", "sent"), by("sms", "queued"), by("email", "dead")), (2, 1, 1, 1));
        // Queued SMS are not counted: neither sent nor shadowed yet.
        assert_eq!(
            rows.sms,
            vec![
                SmsCount { encoding: Some("GSM-7".into()), messages: 1, segments: 1 },
                SmsCount { encoding: Some("UCS-2".into()), messages: 2, segments: 5 },
            ]
        );
        assert_eq!(
            rows.template_errors,
            vec![TemplateErrorCount { template_id: "po_approved".into(), reason: "template_error".into(), n: 1 }]
        );
        assert_eq!(rows.bus_rejected, 0);

        let everyone =
            store.report_rows(ReportFilter { tenant: None, since_us: T0, until_us: T0 + 2 * MIN }).await.unwrap();
        assert!(everyone.tally.contains(&(TallyKind::New, 12)), "{:?}", everyone.tally);
        let later = store
            .report_rows(ReportFilter { tenant: Some("default".into()), since_us: T0 + MIN, until_us: T0 + 11 * MIN })
            .await
            .unwrap();
        assert_eq!(later.tally, vec![(TallyKind::Mismatch, 1), (TallyKind::New, 100)]);
        assert!(later.intents.is_empty() && later.sms.is_empty() && later.template_errors.is_empty());

        // Retention prunes the tally's minutes by age, in batches.
        assert_eq!(store.retention_batch(PruneStep::IngestTally, T0 + MIN, 2).await.unwrap(), 2);
        assert_eq!(store.retention_batch(PruneStep::IngestTally, T0 + MIN, 2).await.unwrap(), 1);
        assert_eq!(store.retention_batch(PruneStep::IngestTally, T0 + MIN, 2).await.unwrap(), 0);
        let kept = store.report_rows(ReportFilter { tenant: None, since_us: 0, until_us: i64::MAX }).await.unwrap();
        assert_eq!(kept.tally, vec![(TallyKind::Mismatch, 1), (TallyKind::New, 100)]);
    })
    .await;
}

#[tokio::test]
async fn the_request_identity_decides_replay_or_mismatch() {
    each_backend(|store| async move {
        let first = store.events_ingest(ingest("r1", "fp1", vec![new_intent(&key(1), "sms", Some(T0))])).await.unwrap();
        let replay =
            store.events_ingest(ingest("r1", "fp1", vec![new_intent(&key(1), "sms", Some(T0))])).await.unwrap();
        let (IngestOutcome::Accepted { response: a, .. }, IngestOutcome::Replayed { response: b }) = (first, replay)
        else {
            panic!("want accepted then replayed")
        };
        assert!(b.replayed);
        assert_eq!(a.intents, b.intents);
        let mismatch =
            store.events_ingest(ingest("r1", "fp2", vec![new_intent(&key(1), "sms", Some(T0))])).await.unwrap();
        assert_eq!(mismatch, IngestOutcome::Mismatch);
        // another identity for the same intents: accepted, nothing created, no second job
        let other = store.events_ingest(ingest("r2", "fp1", vec![new_intent(&key(1), "sms", Some(T0))])).await.unwrap();
        let IngestOutcome::Accepted { response, any_created } = other else { panic!() };
        assert!(!any_created && !response.intents[0].created);
        assert_eq!(store.jobs_claim(claim(T0, 10)).await.unwrap().len(), 1);
    })
    .await;
}

#[tokio::test]
async fn a_recorded_identity_keeps_nothing_a_later_request_under_it_wrote() {
    // SQLite writes a request alone without reading its record first (the
    // pipeline read it before planning): a replay or a mismatch that gets
    // this far writes its rows, finds the record, and must take them back.
    each_backend(|store| async move {
        store.events_ingest(ingest("r1", "fp1", vec![new_intent(&key(1), "sms", Some(T0))])).await.unwrap();
        let replay = store.events_ingest(ingest("r1", "fp1", vec![new_intent(&key(2), "sms", Some(T0))]));
        assert!(matches!(replay.await.unwrap(), IngestOutcome::Replayed { .. }));
        let mismatch = store.events_ingest(ingest("r1", "fp2", vec![new_intent(&key(3), "sms", Some(T0))]));
        assert_eq!(mismatch.await.unwrap(), IngestOutcome::Mismatch);
        let left = store.intents_status("default", &[key(1), key(2), key(3)]).await.unwrap();
        assert_eq!(left.iter().map(|s| s.key.as_str()).collect::<Vec<_>>(), [key(1).as_str()]);
        let claimed = store.jobs_claim(claim(T0, 10)).await.unwrap();
        assert_eq!(claimed.iter().map(|j| j.intent.key.as_str()).collect::<Vec<_>>(), [key(1).as_str()]);
    })
    .await;
}

#[tokio::test]
async fn concurrent_ingests_of_one_identity_create_once() {
    each_backend(|store| async move {
        let mut tasks = Vec::new();
        for _ in 0..16 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                store.events_ingest(ingest("storm", "fp", vec![new_intent(&key(9), "sms", Some(T0))])).await.unwrap()
            }));
        }
        let mut accepted = 0;
        for t in tasks {
            match t.await.unwrap() {
                IngestOutcome::Accepted { any_created: true, .. } => accepted += 1,
                IngestOutcome::Replayed { .. } => {}
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(accepted, 1);
    })
    .await;
}

#[tokio::test]
async fn a_claim_writes_the_attempt_row_before_anything_is_sent() {
    each_backend(|store| async move {
        store.events_ingest(ingest("r1", "fp1", vec![new_intent(&key(1), "sms", Some(T0))])).await.unwrap();
        let jobs = store.jobs_claim(claim(T0, 10)).await.unwrap();
        assert_eq!(jobs[0].intent.attempts, 1);
        assert_eq!(jobs[0].intent.state, "sending");
        let d = store.intent_get("default", &key(1)).await.unwrap().unwrap();
        assert_eq!(d.attempts.len(), 1);
        assert_eq!((d.attempts[0].n, d.attempts[0].finished_at), (1, None));
        // leased: not claimed again while the lease holds
        assert!(store.jobs_claim(claim(T0 + 500_000, 10)).await.unwrap().is_empty());
    })
    .await;
}

#[tokio::test]
async fn a_job_is_not_claimed_before_its_run_at() {
    each_backend(|store| async move {
        store.events_ingest(ingest("r1", "fp1", vec![new_intent(&key(1), "sms", Some(T0 + 5_000_000))])).await.unwrap();
        assert!(store.jobs_claim(claim(T0, 10)).await.unwrap().is_empty());
        assert_eq!(store.jobs_claim(claim(T0 + 5_000_000, 10)).await.unwrap().len(), 1);
    })
    .await;
}

#[tokio::test]
async fn outcomes_move_intents_and_jobs() {
    each_backend(|store| async move {
        let intents = (1..=3).map(|n| new_intent(&key(n), "sms", Some(T0))).collect();
        store.events_ingest(ingest("r1", "fp1", intents)).await.unwrap();
        assert_eq!(store.jobs_claim(claim(T0, 10)).await.unwrap().len(), 3);
        let report = store
            .attempts_finish(&[
                finished(&key(1), 1, OutcomeClass::Accepted, Transition::Sent),
                FinishedAttempt {
                    retry_after_us: Some(1_500_000),
                    ..finished(
                        &key(2),
                        1,
                        OutcomeClass::Retryable,
                        Transition::Retry { run_at_us: T0 + 2_000_000, state: State::Queued },
                    )
                },
                finished(&key(3), 1, OutcomeClass::Permanent, Transition::Dead { reason: Reason::Rejected }),
            ])
            .await
            .unwrap();
        assert_eq!(report, FinishReport { applied: 3, stale: vec![] });
        let state = |k: String| {
            let store = store.clone();
            async move { store.intent_get("default", &k).await.unwrap().unwrap() }
        };
        assert_eq!(state(key(1)).await.intent.state, "sent");
        assert_eq!(state(key(1)).await.attempts[0].provider_message_id.as_deref(), Some("m-1"));
        let retried = state(key(2)).await;
        assert_eq!(retried.intent.state, "queued");
        let a = &retried.attempts[0];
        assert_eq!((a.retry_after, a.retry_at), (Some(1_500_000), Some(T0 + 2_000_000)), "what the retry waited for");
        assert_eq!((state(key(1)).await.attempts[0].retry_at), None);
        let dead = state(key(3)).await;
        assert_eq!((dead.intent.state.as_str(), dead.intent.reason.as_deref()), ("dead", Some("rejected")));
        // only the retry is left, and only once it is due
        assert!(store.jobs_claim(claim(T0 + 1_000_000, 10)).await.unwrap().is_empty());
        let again = store.jobs_claim(claim(T0 + 2_000_000, 10)).await.unwrap();
        assert_eq!((again.len(), again[0].intent.attempts), (1, 2));
    })
    .await;
}

#[tokio::test]
async fn an_expired_lease_turns_the_unfinished_attempt_unknown_and_a_late_outcome_is_skipped() {
    each_backend(|store| async move {
        store.events_ingest(ingest("r1", "fp1", vec![new_intent(&key(1), "sms", Some(T0))])).await.unwrap();
        store.jobs_claim(claim_lapsing(T0, 10)).await.unwrap();
        let retaken = store.jobs_claim(claim(T0 + 1_000_000, 10)).await.unwrap();
        assert_eq!((retaken[0].intent.attempts, retaken[0].rescued), (2, Some(1)));
        let d = store.intent_get("default", &key(1)).await.unwrap().unwrap();
        assert_eq!(d.attempts[0].outcome.map(|o| o.as_str()), Some("unknown"));
        assert_eq!(d.attempts[0].error_class.as_deref(), Some("lease_expired"));
        // the first worker reports after all: its attempt was already rescued
        let report =
            store.attempts_finish(&[finished(&key(1), 1, OutcomeClass::Accepted, Transition::Sent)]).await.unwrap();
        assert_eq!(report.stale, vec![(key(1), 1)]);
        assert_eq!(store.intent_get("default", &key(1)).await.unwrap().unwrap().intent.state, "sending");
    })
    .await;
}

#[tokio::test]
async fn a_rescue_after_the_last_attempt_is_dead_not_a_fourth_try() {
    each_backend(|store| async move {
        store.events_ingest(ingest("r1", "fp1", vec![new_intent(&key(1), "sms", Some(T0))])).await.unwrap();
        let mut now = T0;
        for _ in 0..3 {
            assert_eq!(store.jobs_claim(claim_lapsing(now, 10)).await.unwrap().len(), 1);
            now += 1_000_000; // each lease has expired
        }
        // Nothing to attempt: the claim reports the job it ended and the attempt it rescued.
        let last = store.jobs_claim(claim(now, 10)).await.unwrap();
        assert_eq!(last.iter().map(|j| (j.intent.state, j.rescued)).collect::<Vec<_>>(), vec![(State::Dead, Some(3))]);
        let d = store.intent_get("default", &key(1)).await.unwrap().unwrap();
        assert_eq!((d.intent.state.as_str(), d.intent.reason.as_deref()), ("dead", Some("retries_exhausted")));
        assert_eq!(d.attempts.len(), 3);
        assert!(d.attempts.iter().all(|a| a.outcome.map(|o| o.as_str()) == Some("unknown")));
    })
    .await;
}

/// A try whose worker died is not started again once its chain's dedupe
/// window (counted from the chain's first try) has run out: the claim that
/// finds the lapsed lease ends the intent dead. Sent again then, it would be
/// a possible duplicate nothing could dedupe any more. A chain still inside
/// its window is retried as before.
#[tokio::test]
async fn a_rescue_after_the_dedupe_window_is_dead_not_a_late_send() {
    each_backend(|store| async move {
        const HOUR: i64 = 3_600_000_000;
        let windowed = |now: i64, lease_us: i64| Claim { dedupe_window_us: Some(HOUR), lease_us, ..claim(now, 10) };
        let late = T0 + HOUR / 2;
        let intents = vec![new_intent(&key(1), "sms", Some(T0)), new_intent(&key(2), "sms", Some(late))];
        store.events_ingest(ingest("r1", "fp1", intents)).await.unwrap();
        // key(1)'s chain starts at T0; at `late` its lapsed try is rescued
        // (inside its window) and key(2)'s chain starts; both workers die.
        assert_eq!(store.jobs_claim(windowed(T0, 0)).await.unwrap().len(), 1);
        assert_eq!(store.jobs_claim(windowed(late, 0)).await.unwrap().len(), 2);
        // Just past key(1)'s window (its first try, not its last): it is dead; key(2) is retried.
        let claimed = store.jobs_claim(windowed(T0 + HOUR + 1, HOUR)).await.unwrap();
        let mut seen: Vec<(String, State, i64, Option<i64>)> =
            claimed.iter().map(|j| (j.intent.key.clone(), j.intent.state, j.intent.attempts, j.rescued)).collect();
        seen.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(seen, vec![(key(1), State::Dead, 2, Some(2)), (key(2), State::Sending, 2, Some(1))]);
        let d = store.intent_get("default", &key(1)).await.unwrap().unwrap();
        assert_eq!((d.intent.state.as_str(), d.intent.reason.as_deref()), ("dead", Some("retries_exhausted")));
        assert_eq!(d.attempts.len(), 2, "no third try");
        assert!(d.attempts.iter().all(|a| a.error_class.as_deref() == Some("lease_expired")));
    })
    .await;
}

/// An event of entity PO-1 at `version`, with these intents.
fn versioned(version: i64, intents: Vec<NewIntent>) -> Ingest {
    Ingest {
        identity: format!("v{version}"),
        fingerprint: format!("fp-v{version}"),
        event_key: format!("default|e|x|1|v{version}"),
        entity_version: Some(version),
        occurred_at: format!("2026-11-29T04:3{version}:00.000000000Z"),
        ..ingest("", "", intents)
    }
}

#[tokio::test]
async fn a_claim_supersedes_older_versions_in_one_batch_linking_the_newest_that_counts() {
    each_backend(|store| async move {
        let to = |k: u32, channel: &str, recipient: &str| NewIntent {
            recipient_id: recipient.into(),
            ..new_intent(&key(k), channel, Some(T0))
        };
        store
            .events_ingest(versioned(1, vec![to(1, "sms", "u-1"), to(5, "sms", "u-2"), to(6, "email", "u-1")]))
            .await
            .unwrap();
        store.events_ingest(versioned(2, vec![to(2, "sms", "u-1")])).await.unwrap();
        store.events_ingest(versioned(3, vec![to(3, "sms", "u-1")])).await.unwrap();
        // the newest version was opted out of: it does not count
        let opted_out = NewIntent {
            decision: Decision::Suppress,
            state: State::Suppressed,
            reason: Some(Reason::OptedOut),
            run_at: None,
            ..to(4, "sms", "u-1")
        };
        store.events_ingest(versioned(4, vec![opted_out])).await.unwrap();

        let supersede = Claim { supersede_types: vec!["purchase_order.approved".into()], ..claim(T0, 10) };
        let jobs = store.jobs_claim(supersede).await.unwrap();
        let started: HashSet<String> = jobs.iter().map(|j| j.intent.key.clone()).collect();
        assert_eq!(
            started,
            HashSet::from([key(3), key(5), key(6)]),
            "other recipients and channels are not older versions"
        );
        for old in [key(1), key(2)] {
            let d = store.intent_get("default", &old).await.unwrap().unwrap();
            let i = &d.intent;
            assert_eq!(
                (i.decision.as_str(), i.state.as_str(), i.reason.as_deref(), i.link_key.as_deref()),
                ("suppress", "suppressed", Some("superseded"), Some(key(3).as_str())),
                "{old}"
            );
            assert!(d.attempts.is_empty(), "never tried");
        }
        // their jobs are gone: nothing is left to claim once the leases lapse
        assert!(
            store
                .jobs_claim(claim(T0 + 7_200_000_000, 10))
                .await
                .unwrap()
                .iter()
                .all(|j| started.contains(&j.intent.key))
        );
        assert_eq!(store.queue_stats(None, i64::MAX).await.unwrap().total, 3);
    })
    .await;
}

#[tokio::test]
async fn concurrent_claims_never_hand_out_one_job_twice() {
    each_backend(|store| async move {
        let intents: Vec<_> = (0..200).map(|n| new_intent(&key(n), "sms", Some(T0))).collect();
        store.events_ingest(ingest("r1", "fp1", intents)).await.unwrap();
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                let mut got = Vec::new();
                loop {
                    let jobs = store.jobs_claim(claim(T0, 7)).await.unwrap();
                    if jobs.is_empty() {
                        return got;
                    }
                    got.extend(jobs.into_iter().map(|j| j.intent.key));
                }
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        let unique: HashSet<_> = all.iter().collect();
        assert_eq!((all.len(), unique.len()), (200, 200));
    })
    .await;
}

#[tokio::test]
async fn the_inbox_is_idempotent_per_intent_and_collapses_older_versions() {
    each_backend(|store| async move {
        let deliver = |key: String, version: i64| InboxDelivery {
            tenant: "default".into(),
            recipient_id: "u-1".into(),
            entity_type: "purchase_order".into(),
            entity_id: "PO-1".into(),
            version: Some(version),
            occurred_at: format!("2026-11-29T04:3{version}:00.000000000Z"),
            intent_key: key.clone(),
            payload_digest: format!("digest-{key}"),
            now_us: T0 + version,
        };
        store.inbox_deliver(deliver(key(2), 2)).await.unwrap();
        store.inbox_deliver(deliver(key(2), 2)).await.unwrap(); // a retry of the same intent
        store.inbox_deliver(deliver(key(1), 1)).await.unwrap();
        let page = store.inbox_list("default", "u-1", None, 10).await.unwrap();
        assert_eq!(page.items.len(), 1);
        assert_eq!((page.items[0].version, page.items[0].collapsed), (Some(2), 1));
        assert_eq!(page.items[0].intent_key, key(2));
        assert!(store.inbox_list("other", "u-1", None, 10).await.unwrap().items.is_empty());
    })
    .await;
}

#[tokio::test]
async fn a_preferences_version_names_one_set_of_preferences() {
    each_backend(|store| async move {
        let put = |prefs: &str, email: &str| RecipientPut {
            tenant: "default".into(),
            id: "u-1".into(),
            email: Some(email.into()),
            phone: None,
            locale: None,
            timezone: None,
            webhook_url: None,
            preferences: prefs.into(),
            now_us: T0,
        };
        assert_eq!(store.recipient_put(put("{}", "a@example.com")).await.unwrap().preferences_version, 1);
        assert_eq!(store.recipient_put(put("{}", "b@example.com")).await.unwrap().preferences_version, 1);
        let row = store.recipient_put(put(r#"{"channels":{"sms":false}}"#, "b@example.com")).await.unwrap();
        assert_eq!((row.preferences_version, row.email.as_deref()), (2, Some("b@example.com")));
        let rows = store.recipients_get("default", &["u-1".into(), "u-2".into()]).await.unwrap();
        assert_eq!(rows.len(), 1);
    })
    .await;
}

#[tokio::test]
async fn intents_are_scoped_by_tenant_and_paged_newest_first() {
    each_backend(|store| async move {
        let intents = (1..=5).map(|n| new_intent(&key(n), "sms", None)).collect();
        store.events_ingest(ingest("r1", "fp1", intents)).await.unwrap();
        assert!(store.intent_get("other", &key(1)).await.unwrap().is_none());
        let filter = |cursor: Option<Cursor>| IntentFilter {
            tenant: Some("default".into()),
            entity: Some(("purchase_order".into(), "PO-1".into())),
            recipient_id: Some("u-1".into()),
            state: None,
            cursor,
            limit: 2,
        };
        let mut seen = Vec::new();
        let mut cursor = None;
        loop {
            let page = store.intents_list(filter(cursor)).await.unwrap();
            seen.extend(page.items.iter().map(|i| i.key.clone()));
            match page.next {
                Some(n) => cursor = Some(n),
                None => break,
            }
        }
        assert_eq!(seen, (1..=5).rev().map(key).collect::<Vec<_>>());
    })
    .await;
}

#[tokio::test]
async fn dead_letters_are_listed_for_one_tenant_or_across_tenants() {
    each_backend(|store| async move {
        for (n, tenant) in [(1, "acme"), (2, "globex")] {
            let mut dead = new_intent(&key(n), "sms", None);
            (dead.state, dead.reason) = (State::Dead, Some(Reason::TemplateError));
            store
                .events_ingest(Ingest { tenant: tenant.into(), ..ingest(&format!("r{n}"), "fp", vec![dead]) })
                .await
                .unwrap();
        }
        let list = |tenant: Option<&str>| {
            let filter = DeadLetterFilter { tenant: tenant.map(String::from), limit: 10, ..Default::default() };
            let store = store.clone();
            async move {
                let page = store.dead_letters_list(filter).await.unwrap();
                page.items.iter().map(|d| (d.intent.tenant.clone(), d.intent.key.clone())).collect::<Vec<_>>()
            }
        };
        assert_eq!(list(Some("acme")).await, vec![("acme".to_string(), key(1))]);
        assert_eq!(list(Some("initech")).await, vec![]);
        let mut all = list(None).await;
        all.sort();
        assert_eq!(all, vec![("acme".to_string(), key(1)), ("globex".to_string(), key(2))]);
    })
    .await;
}

#[tokio::test]
async fn a_late_outcome_in_the_same_batch_as_the_retry_never_overrides_it() {
    each_backend(|store| async move {
        store.events_ingest(ingest("r1", "fp1", vec![new_intent(&key(1), "sms", Some(T0))])).await.unwrap();
        store.jobs_claim(claim_lapsing(T0, 10)).await.unwrap();
        store.jobs_claim(claim(T0 + 1_000_000, 10)).await.unwrap(); // lease expired: attempt 2
        let report = store
            .attempts_finish(&[
                finished(
                    &key(1),
                    1,
                    OutcomeClass::Retryable,
                    Transition::Retry { run_at_us: T0 + 9_000_000, state: State::Queued },
                ),
                finished(&key(1), 2, OutcomeClass::Accepted, Transition::Sent),
            ])
            .await
            .unwrap();
        assert_eq!(report, FinishReport { applied: 1, stale: vec![(key(1), 1)] });
        let d = store.intent_get("default", &key(1)).await.unwrap().unwrap();
        assert_eq!(d.intent.state, "sent");
        assert!(store.jobs_claim(claim(T0 + 10_000_000, 10)).await.unwrap().is_empty(), "no job left behind");
    })
    .await;
}

#[tokio::test]
async fn retention_keeps_content_that_is_reused_or_still_pending() {
    each_backend(|store| async move {
        let day = 86_400_000_000_i64;
        let mut old = ingest("r-old", "fp-old", vec![new_intent(&key(1), "sms", None)]);
        old.intents[0].payload = Some(("shared".into(), "{}".into()));
        store.events_ingest(old).await.unwrap();
        let mut pending = ingest("r-pending", "fp-pending", vec![new_intent(&key(2), "sms", Some(T0 + 100 * day))]);
        pending.intents[0].payload = Some(("pending".into(), "{}".into()));
        store.events_ingest(pending).await.unwrap();
        let mut lonely = ingest("r-lonely", "fp-lonely", vec![new_intent(&key(3), "sms", None)]);
        lonely.intents[0].payload = Some(("lonely".into(), "{}".into()));
        store.events_ingest(lonely).await.unwrap();
        // the shared content is used again, 60 days later
        let mut again = ingest("r-new", "fp-new", vec![new_intent(&key(4), "sms", None)]);
        again.intents[0].payload = Some(("shared".into(), "{}".into()));
        again.now_us = T0 + 60 * day;
        store.events_ingest(again).await.unwrap();

        let pruned = store.retention_batch(PruneStep::Payloads, T0 + 30 * day, 100).await.unwrap();
        assert!(pruned >= 1, "the unused content goes");
        let content = |k: String| {
            let store = store.clone();
            async move { store.intent_get("default", &k).await.unwrap().unwrap().content }
        };
        assert!(content(key(3)).await.is_none(), "unused and old: pruned");
        assert!(content(key(1)).await.is_some(), "reused recently: kept");
        assert!(content(key(2)).await.is_some(), "its job still waits: kept");
    })
    .await;
}

const DAY: i64 = 86_400_000_000;

/// An intent already in a final state (no job), updated at `at`.
fn settled(key: &str, channel: &str, state: &str, at: i64) -> Ingest {
    let mut it = new_intent(key, channel, None);
    it.state = State::parse(state).expect("a state");
    let mut ingest = ingest(&format!("r-{key}"), &format!("fp-{key}"), vec![it]);
    ingest.now_us = at;
    ingest
}

#[tokio::test]
async fn retention_forgets_a_closed_digest_window_only_once_its_digest_intent_is_gone() {
    each_backend(|store| async move {
        let window = |key: &str| digest_window(key, T0 + 3_600_000_000);
        // two windows with a member each; one will close, the other stays open
        for (n, w) in [(1, key(101)), (2, key(102))] {
            let mut member = new_intent(&key(n), "email", None);
            (member.decision, member.state, member.digest) = (Decision::Digest, State::Held, Some(window(&w)));
            store.events_ingest(ingest(&format!("r{n}"), &format!("fp{n}"), vec![member])).await.unwrap();
        }
        let due = store.digests_due(T0 + 3_600_000_000, 10).await.unwrap();
        let closing = due.iter().find(|d| d.key == key(101)).unwrap().clone();
        let mut digest_intent = new_intent(&key(101), "email", None);
        digest_intent.state = State::Sent; // as if delivered already
        let close = DigestClose {
            digest: closing,
            member_keys: vec![key(1)],
            shadow_members: vec![],
            traceparent: None,
            links: None,
            intent: digest_intent,
            event_digest: "digest-event".into(),
            event_body: "{}".into(),
            occurred_at: "2027-01-15T09:00:00.000000000Z".into(),
            now_us: T0 + 3_600_000_000,
        };
        assert_eq!(store.digest_close(close).await.unwrap(), DigestCloseOutcome::Closed);

        let long_after = T0 + 30 * DAY;
        let pruned = store.retention_batch(PruneStep::Digests, long_after, 100).await.unwrap();
        assert_eq!(pruned, 0, "the digest intent still exists: its window stays");
        assert_eq!(store.retention_batch(PruneStep::Intents, long_after, 100).await.unwrap(), 2, "digest + member");
        assert!(store.intent_get("default", &key(101)).await.unwrap().is_none());
        assert_eq!(store.retention_batch(PruneStep::Digests, long_after, 100).await.unwrap(), 1, "the closed window");
        assert_eq!(store.retention_batch(PruneStep::Digests, long_after, 100).await.unwrap(), 0);
        let open = store.digests_due(long_after, 10).await.unwrap();
        assert_eq!(open.iter().map(|d| d.key.clone()).collect::<Vec<_>>(), vec![key(102)], "never an open window");
    })
    .await;
}

#[tokio::test]
async fn retention_keeps_an_inbox_card_while_an_intent_of_it_lives() {
    each_backend(|store| async move {
        let deliver = |key: String, entity: &str| InboxDelivery {
            tenant: "default".into(),
            recipient_id: "u-1".into(),
            entity_type: "purchase_order".into(),
            entity_id: entity.into(),
            version: Some(1),
            occurred_at: "2026-11-29T04:30:00.000000000Z".into(),
            intent_key: key.clone(),
            payload_digest: format!("digest-{key}"),
            now_us: T0,
        };
        // PO-1's card: its intent is sent (final). PO-2's: its intent is still queued.
        store.events_ingest(settled(&key(1), "in_app", "sent", T0)).await.unwrap();
        let mut live = ingest("r2", "fp2", vec![new_intent(&key(2), "in_app", Some(T0 + 400 * DAY))]);
        live.entity_id = "PO-2".into();
        store.events_ingest(live).await.unwrap();
        store.inbox_deliver(deliver(key(1), "PO-1")).await.unwrap();
        store.inbox_deliver(deliver(key(2), "PO-2")).await.unwrap();

        let long_after = T0 + 200 * DAY;
        assert_eq!(
            store.retention_batch(PruneStep::InboxCards, long_after, 100).await.unwrap(),
            0,
            "both intents live"
        );
        assert_eq!(store.retention_batch(PruneStep::Intents, long_after, 100).await.unwrap(), 1, "the sent one");
        assert_eq!(store.retention_batch(PruneStep::InboxCards, T0 - 1, 100).await.unwrap(), 0, "too young");
        assert_eq!(store.retention_batch(PruneStep::InboxCards, long_after, 100).await.unwrap(), 1);
        let cards = store.inbox_list("default", "u-1", None, 10).await.unwrap().items;
        assert_eq!(cards.iter().map(|c| c.entity_id.clone()).collect::<Vec<_>>(), vec!["PO-2".to_string()]);
    })
    .await;
}

#[tokio::test]
async fn retention_forgets_a_dead_letter_replay_with_its_intent_or_by_age() {
    each_backend(|store| async move {
        for n in [1, 2] {
            store.events_ingest(settled(&key(n), "sms", "dead", T0)).await.unwrap();
        }
        let replay = |keys: Vec<String>, at: i64| Replay {
            tenant: "default".into(),
            selector: ReplaySelector::Ids(keys),
            now_us: at,
            requested_by: Some("test".into()),
            limit: 10,
            traceparent: None,
        };
        store.dead_letters_replay(replay(vec![key(1), key(2)], T0)).await.unwrap();
        // both die again: key 1 at once, key 2 much later
        store.jobs_claim(claim(T0, 10)).await.unwrap();
        let dead = |k: String, at: i64| FinishedAttempt {
            finished_at_us: at,
            ..finished(&k, 1, OutcomeClass::Permanent, Transition::Dead { reason: Reason::Rejected })
        };
        store.attempts_finish(&[dead(key(1), T0 + 10), dead(key(2), T0 + 100 * DAY)]).await.unwrap();

        let young = T0 - 1;
        assert_eq!(store.retention_batch(PruneStep::DeadLetterReplays, young, 100).await.unwrap(), 0);
        assert_eq!(store.retention_batch(PruneStep::Intents, T0 + DAY, 100).await.unwrap(), 1, "key 1 goes");
        assert_eq!(
            store.retention_batch(PruneStep::DeadLetterReplays, young, 100).await.unwrap(),
            1,
            "with its intent"
        );
        assert_eq!(store.retention_batch(PruneStep::DeadLetterReplays, T0 + 1, 100).await.unwrap(), 1, "by age");
        assert!(store.intent_get("default", &key(2)).await.unwrap().is_some(), "the intent itself stays");
    })
    .await;
}

#[tokio::test]
async fn retention_keeps_the_current_preferences_and_every_version_an_intent_names() {
    each_backend(|store| async move {
        for (n, at) in [(1, T0), (2, T0 + DAY), (3, T0 + 2 * DAY), (4, T0 + 100 * DAY)] {
            let put = RecipientPut {
                tenant: "default".into(),
                id: "u-1".into(),
                email: Some("a@example.com".into()),
                phone: None,
                locale: None,
                timezone: None,
                webhook_url: None,
                preferences: format!(r#"{{"channels":{{"sms":{}}},"n":{n}}}"#, n % 2 == 0),
                now_us: at,
            };
            assert_eq!(store.recipient_put(put).await.unwrap().preferences_version, n);
        }
        // an intent decided by version 2
        let mut decided = settled(&key(1), "email", "sent", T0 + DAY);
        decided.intents[0].preferences_version = Some(2);
        store.events_ingest(decided).await.unwrap();

        let kept = |versions: [i64; 4]| {
            let store = store.clone();
            async move {
                let mut out = Vec::new();
                for v in versions {
                    if store.recipient_preferences_get("default", "u-1", v).await.unwrap().is_some() {
                        out.push(v);
                    }
                }
                out
            }
        };
        // 50 days on: v1 was replaced 49 days ago and nothing names it; v3 was
        // current until day 100
        assert_eq!(store.retention_batch(PruneStep::PreferenceVersions, T0 + 50 * DAY, 100).await.unwrap(), 1);
        assert_eq!(kept([1, 2, 3, 4]).await, vec![2, 3, 4]);
        assert_eq!(store.retention_batch(PruneStep::PreferenceVersions, T0 + 200 * DAY, 100).await.unwrap(), 1);
        assert_eq!(kept([1, 2, 3, 4]).await, vec![2, 4], "v2 is named by an intent, v4 is current");
        assert_eq!(store.retention_batch(PruneStep::PreferenceVersions, T0 + 900 * DAY, 100).await.unwrap(), 0);
    })
    .await;
}

/// `ingest` for the event `default|e|x|1|t` with the given content.
fn ingest_content(identity: &str, fingerprint: &str, content: &str, intents: Vec<NewIntent>) -> Ingest {
    Ingest { content_digest: content.into(), ..ingest(identity, fingerprint, intents) }
}

#[tokio::test]
async fn another_content_for_an_accepted_event_key_is_a_conflict_that_leaves_nothing_behind() {
    each_backend(|store| async move {
        let intents = || vec![new_intent(&key(1), "sms", Some(T0))];
        let first = store.events_ingest(ingest_content("r1", "fp1", "c1", intents())).await.unwrap();
        assert!(matches!(first, IngestOutcome::Accepted { any_created: true, .. }), "{first:?}");
        // other content under a fresh identity
        let other = store.events_ingest(ingest_content("r2", "fp2", "c2", intents())).await.unwrap();
        assert_eq!(other, IngestOutcome::Conflict);
        // the identity r2 was not kept: the accepted content goes through under it
        let retry = store.events_ingest(ingest_content("r2", "fp1", "c1", intents())).await.unwrap();
        let IngestOutcome::Accepted { response, any_created: false } = retry else { panic!("{retry:?}") };
        assert!(!response.intents[0].created);
        // a reused identity with another body is a mismatch before it is a conflict
        let reused = store.events_ingest(ingest_content("r1", "fp3", "c2", intents())).await.unwrap();
        assert_eq!(reused, IngestOutcome::Mismatch);
        assert_eq!(store.jobs_claim(claim(T0, 10)).await.unwrap().len(), 1, "one job, from the first");
    })
    .await;
}

/// A dry run reads what the ingest transaction would check: the content an
/// event key was accepted with, and nothing for a key never accepted.
#[tokio::test]
async fn an_event_keys_accepted_content_is_read_back_as_the_first_post_left_it() {
    each_backend(|store| async move {
        let event = "default|e|x|1|t";
        assert_eq!(store.event_digest(event).await.unwrap(), None, "an event never posted");
        let intents = || vec![new_intent(&key(1), "sms", Some(T0))];
        store.events_ingest(ingest_content("r1", "fp1", "c1", intents())).await.unwrap();
        assert_eq!(store.event_digest(event).await.unwrap().as_deref(), Some("c1"));
        // A conflicting post changes nothing of it.
        let other = store.events_ingest(ingest_content("r2", "fp2", "c2", intents())).await.unwrap();
        assert_eq!(other, IngestOutcome::Conflict);
        assert_eq!(store.event_digest(event).await.unwrap().as_deref(), Some("c1"));
        // An event written in a batch (set-wise on Postgres) is read the same
        // way; the key names the tenant, so another tenant's is another event.
        let batched = Ingest {
            event_key: "other|e|x|2|t".into(),
            tenant: "other".into(),
            ..ingest_content("r3", "fp3", "c3", vec![new_intent(&key(2), "sms", Some(T0))])
        };
        let twin = Ingest { identity: "r4".into(), ..batched.clone() };
        for out in store.events_ingest_batch(vec![batched, twin]).await {
            assert!(matches!(out, Ok(IngestOutcome::Accepted { .. })), "{out:?}");
        }
        assert_eq!(store.event_digest("other|e|x|2|t").await.unwrap().as_deref(), Some("c3"));
        assert_eq!(store.event_digest("other|e|x|1|t").await.unwrap(), None, "the tenant is part of the key");
    })
    .await;
}

#[tokio::test]
async fn conflicting_contents_racing_for_one_event_key_make_one_set_of_intents() {
    each_backend(|store| async move {
        let mut tasks = Vec::new();
        for n in 0..16 {
            let store = store.clone();
            let content = if n % 2 == 0 { "even" } else { "odd" };
            let mut it = new_intent(&key(7), "sms", Some(T0));
            it.payload = Some((format!("content-{content}"), "{}".into()));
            tasks.push(tokio::spawn(async move {
                let out =
                    store.events_ingest(ingest_content(&format!("r{n}"), content, content, vec![it])).await.unwrap();
                (content, out)
            }));
        }
        let mut winners = HashSet::new();
        let mut created = 0;
        for t in tasks {
            match t.await.unwrap() {
                (content, IngestOutcome::Accepted { any_created, .. }) => {
                    winners.insert(content);
                    created += usize::from(any_created);
                }
                (_, IngestOutcome::Conflict) => {}
                other => panic!("{other:?}"),
            }
        }
        assert_eq!((winners.len(), created), (1, 1), "one content wins, one intent is created: {winners:?}");
        let winner = winners.into_iter().next().unwrap();
        let d = store.intent_get("default", &key(7)).await.unwrap().unwrap();
        assert_eq!(d.intent.payload_digest, Some(format!("content-{winner}")));
    })
    .await;
}

#[tokio::test]
async fn a_replay_reports_the_intents_as_they_are_now_and_keeps_created() {
    each_backend(|store| async move {
        let intents = || vec![new_intent(&key(1), "sms", Some(T0))];
        store.events_ingest(ingest("r1", "fp1", intents())).await.unwrap();
        store.jobs_claim(claim(T0, 10)).await.unwrap();
        store.attempts_finish(&[finished(&key(1), 1, OutcomeClass::Accepted, Transition::Sent)]).await.unwrap();
        let replay = store.events_ingest(ingest("r1", "fp1", intents())).await.unwrap();
        let IngestOutcome::Replayed { response } = replay else { panic!("{replay:?}") };
        assert_eq!((response.intents[0].state.as_str(), response.intents[0].created), ("sent", true));
        let now = store.intents_status("default", &[key(1), key(2)]).await.unwrap();
        assert_eq!(now.len(), 1);
        assert_eq!((now[0].key.as_str(), now[0].state.as_str()), (key(1).as_str(), "sent"));
        assert!(store.intents_status("other", &[key(1)]).await.unwrap().is_empty(), "scoped by tenant");
    })
    .await;
}

#[tokio::test]
async fn an_events_content_record_is_pruned_only_once_its_intents_are_gone() {
    each_backend(|store| async move {
        let day = 86_400_000_000_i64;
        let mut suppressed = new_intent(&key(1), "sms", None);
        suppressed.state = State::Suppressed;
        store.events_ingest(ingest_content("r1", "fp1", "c1", vec![suppressed.clone()])).await.unwrap();
        // old enough, but its intent is still there
        assert_eq!(store.retention_batch(PruneStep::Events, T0 + 100 * day, 100).await.unwrap(), 0);
        let conflict = store.events_ingest(ingest_content("r2", "fp2", "c2", vec![suppressed.clone()])).await;
        assert_eq!(conflict.unwrap(), IngestOutcome::Conflict);
        assert_eq!(store.retention_batch(PruneStep::Intents, T0 + 100 * day, 100).await.unwrap(), 1);
        // too young
        assert_eq!(store.retention_batch(PruneStep::Events, T0, 100).await.unwrap(), 0);
        assert_eq!(store.retention_batch(PruneStep::Events, T0 + 100 * day, 100).await.unwrap(), 1);
    })
    .await;
}

/// Two processes whose clocks disagree by an hour. On Postgres the lease is
/// set and judged by the database's clock, so neither takes the other's
/// leased job, and a lease lasts as long as asked whoever's clock is wrong.
/// SQLite is one process: its clock is the only one, and it judges.
#[tokio::test]
async fn leases_follow_the_database_clock_so_skewed_processes_never_share_a_job() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let store = db.store().await;
        let real = jiff::Timestamp::now().as_microsecond();
        let hour = 3_600_000_000;
        let due = real - 1_000_000;
        let mut ing =
            ingest("r1", "fp1", vec![new_intent(&key(1), "sms", Some(due)), new_intent(&key(2), "sms", Some(due))]);
        ing.now_us = real;
        store.events_ingest(ing).await.unwrap();
        let claim_at = |now: i64, limit: u32, lease_us: i64| Claim { lease_us, ..claim(now, limit) };
        let keys = |jobs: Vec<ClaimedJob>| jobs.into_iter().map(|j| j.intent.key).collect::<Vec<_>>();
        // A, on time, leases one job for 30s.
        let a = keys(store.jobs_claim(claim_at(real, 1, 30_000_000)).await.unwrap());
        assert_eq!(a.len(), 1);
        // B, an hour ahead, claims what it can, with a lease that ends at once
        // (as if it crashed right after).
        let b = keys(store.jobs_claim(claim_at(real + hour, 10, 0)).await.unwrap());
        match backend {
            common::Backend::Postgres => {
                assert!(!b.contains(&a[0]), "{backend:?}: B took A's leased job: {b:?}");
                assert_eq!(b.len(), 1, "B takes the free job");
                // C, on time, retakes B's job at once (its lease was 0 long by
                // the database's clock), and still not A's.
                let c = keys(store.jobs_claim(claim_at(real, 10, 30_000_000)).await.unwrap());
                assert_eq!(c, b, "{backend:?}: B's lease is judged by the database's clock, not B's");
            }
            common::Backend::Sqlite => {
                assert!(b.contains(&a[0]), "the one process's clock judges: {b:?}");
            }
        }
    }
}

#[tokio::test]
async fn a_request_record_is_found_before_planning_as_a_replay_or_a_mismatch() {
    each_backend(|store| async move {
        assert_eq!(store.request_find("default", "r1", "fp1").await.unwrap(), None, "an unseen identity");
        let first = store.events_ingest(ingest("r1", "fp1", vec![new_intent(&key(1), "sms", Some(T0))])).await.unwrap();
        let IngestOutcome::Accepted { response, .. } = first else { panic!("{first:?}") };
        let Some(RequestSeen::Replay(seen)) = store.request_find("default", "r1", "fp1").await.unwrap() else {
            panic!("want a replay")
        };
        assert!(seen.replayed);
        assert_eq!(seen.intents, response.intents);
        assert_eq!(store.request_find("default", "r1", "fp2").await.unwrap(), Some(RequestSeen::Mismatch));
        assert_eq!(store.request_find("other", "r1", "fp1").await.unwrap(), None, "identities are per tenant");
        // The replay shows the intent as it is now.
        assert_eq!(store.jobs_claim(claim(T0, 10)).await.unwrap().len(), 1);
        store.attempts_finish(&[finished(&key(1), 1, OutcomeClass::Accepted, Transition::Sent)]).await.unwrap();
        let Some(RequestSeen::Replay(now)) = store.request_find("default", "r1", "fp1").await.unwrap() else {
            panic!("want a replay")
        };
        assert_eq!((now.intents[0].state.as_str(), now.intents[0].created), ("sent", true));
    })
    .await;
}

fn lookup(tenant: &str, identity: &str, fingerprint: &str) -> RequestLookup {
    RequestLookup { tenant: tenant.into(), identity: identity.into(), fingerprint: fingerprint.into() }
}

#[tokio::test]
async fn many_request_records_are_read_at_once_each_answered_as_alone() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let store = db.store().await;
        store.events_ingest(ingest("r1", "fp1", vec![new_intent(&key(1), "sms", Some(T0))])).await.unwrap();
        store.events_ingest(ingest("r2", "fp2", vec![new_intent(&key(2), "sms", Some(T0))])).await.unwrap();
        // r1's intent is sent by now, r2's still sending: a replay shows each
        // as it is.
        assert_eq!(store.jobs_claim(claim(T0, 10)).await.unwrap().len(), 2);
        store.attempts_finish(&[finished(&key(1), 1, OutcomeClass::Accepted, Transition::Sent)]).await.unwrap();
        let lookups = [
            lookup("default", "r1", "fp1"),
            lookup("default", "r2", "fp-other"),
            lookup("default", "r3", "fp3"),
            lookup("other", "r1", "fp1"),
            lookup("default", "r2", "fp2"),
            lookup("default", "r1", "fp1"),
        ];
        let many = store.requests_find(&lookups).await;
        assert_eq!(many.len(), lookups.len(), "{backend:?}");
        for (l, got) in lookups.iter().zip(many) {
            let alone = store.request_find(&l.tenant, &l.identity, &l.fingerprint).await.unwrap();
            assert_eq!(got.unwrap(), alone, "{backend:?}: {l:?}");
        }
        let Some(RequestSeen::Replay(r1)) = store.requests_find(&lookups[..1]).await.remove(0).unwrap() else {
            panic!("{backend:?}: r1 is a replay")
        };
        assert_eq!(r1.intents[0].state.as_str(), "sent", "{backend:?}: the replay shows its intent as it is now");
        assert!(store.requests_find(&[]).await.is_empty());
        // A record whose stored answer cannot be read fails its own request,
        // not the others read with it.
        common::execute(&db, "UPDATE requests SET response = 'not json' WHERE identity = 'r2'").await;
        let many = store.requests_find(&lookups[..3]).await;
        assert!(matches!(many[0], Ok(Some(RequestSeen::Replay(_)))), "{backend:?}: {:?}", many[0]);
        assert_eq!(many[1].as_ref().unwrap(), &Some(RequestSeen::Mismatch), "{backend:?}: a mismatch needs no answer");
        assert_eq!(many[2].as_ref().unwrap(), &None, "{backend:?}");
        let many = store.requests_find(&[lookup("default", "r2", "fp2"), lookup("default", "r1", "fp1")]).await;
        assert!(matches!(many[0], Err(StoreError::Corrupt(_))), "{backend:?}: {:?}", many[0]);
        assert!(matches!(many[1], Ok(Some(RequestSeen::Replay(_)))), "{backend:?}: {:?}", many[1]);
    }
}

/// A request for its own event: `event` names the event key, `content` its
/// frozen content.
fn request(identity: &str, fingerprint: &str, event: &str, content: &str, intents: Vec<NewIntent>) -> Ingest {
    Ingest {
        event_key: format!("default|e|x|{event}|t"),
        content_digest: content.into(),
        entity_id: event.into(),
        ..ingest(identity, fingerprint, intents)
    }
}

/// The keys of every job due at T0, claimed, in order.
async fn claimed_keys(store: &Arc<dyn Store>) -> Vec<String> {
    let mut keys: Vec<String> =
        store.jobs_claim(claim(T0, 100)).await.unwrap().into_iter().map(|j| j.intent.key).collect();
    keys.sort();
    keys
}

#[tokio::test]
async fn a_batch_decides_each_request_as_transactions_in_a_row_would() {
    each_backend(|store| async move {
        let outcomes = store
            .events_ingest_batch(vec![
                request("a", "fa", "E1", "c1", vec![new_intent(&key(1), "sms", Some(T0))]),
                // The same event with other content: refused, nothing kept.
                request("b", "fb", "E1", "c1-changed", vec![new_intent(&key(1), "sms", Some(T0))]),
                request("x", "fx", "E2", "c2", vec![new_intent(&key(2), "sms", Some(T0))]),
                // The same identity twice more: an exact repeat, and another body.
                request("x", "fx", "E2", "c2", vec![new_intent(&key(2), "sms", Some(T0))]),
                request("x", "fx2", "E3", "c3", vec![new_intent(&key(3), "sms", Some(T0))]),
                // E2 under another identity, with one more recipient.
                request(
                    "y",
                    "fy",
                    "E2",
                    "c2",
                    vec![new_intent(&key(2), "sms", Some(T0)), new_intent(&key(4), "sms", Some(T0))],
                ),
            ])
            .await;
        let outcomes: Vec<IngestOutcome> = outcomes.into_iter().map(Result::unwrap).collect();
        let created = |o: &IngestOutcome| match o {
            IngestOutcome::Accepted { response, .. } | IngestOutcome::Replayed { response } => {
                response.intents.iter().map(|i| i.created).collect::<Vec<_>>()
            }
            _ => vec![],
        };
        assert!(matches!(outcomes[0], IngestOutcome::Accepted { any_created: true, .. }), "{:?}", outcomes[0]);
        assert_eq!(outcomes[1], IngestOutcome::Conflict);
        assert!(matches!(outcomes[2], IngestOutcome::Accepted { any_created: true, .. }), "{:?}", outcomes[2]);
        let IngestOutcome::Replayed { response } = &outcomes[3] else { panic!("{:?}", outcomes[3]) };
        assert!(response.replayed && response.intents[0].created, "the replay of x is x's answer: {response:?}");
        assert_eq!(outcomes[4], IngestOutcome::Mismatch);
        assert!(matches!(outcomes[5], IngestOutcome::Accepted { any_created: true, .. }));
        assert_eq!(created(&outcomes[5]), vec![false, true], "E2's intent existed, the new recipient's did not");
        // Nothing of the refused requests stayed; every intent has one job.
        assert_eq!(
            store.request_find("default", "b", "fb").await.unwrap(),
            None,
            "the conflict left its identity free"
        );
        assert_eq!(store.request_find("default", "x", "fx2").await.unwrap(), Some(RequestSeen::Mismatch));
        let status = store.intents_status("default", &[key(1), key(2), key(3), key(4)]).await.unwrap();
        assert_eq!(status.len(), 3, "the mismatching request created nothing: {status:?}");
        assert_eq!(claimed_keys(&store).await, vec![key(1), key(2), key(4)]);
        // A later batch replays what the first one accepted.
        let again = store.events_ingest_batch(vec![request("a", "fa", "E1", "c1", vec![])]).await;
        assert!(matches!(again[0], Ok(IngestOutcome::Replayed { .. })), "{:?}", again[0]);
    })
    .await;
}

#[tokio::test]
async fn a_request_the_database_refuses_fails_alone_and_leaves_nothing() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let store = db.store().await;
        // The database refuses any intent for the recipient "poison".
        match backend {
            common::Backend::Sqlite => {
                common::execute(
                    &db,
                    "CREATE TRIGGER poison BEFORE INSERT ON intents WHEN NEW.recipient_id = 'poison'
                     BEGIN SELECT RAISE(ABORT, 'poisoned row'); END",
                )
                .await
            }
            common::Backend::Postgres => {
                common::execute(
                    &db,
                    "CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$
                     BEGIN IF NEW.recipient_id = 'poison' THEN RAISE EXCEPTION 'poisoned row'; END IF; RETURN NEW; END $$",
                )
                .await;
                common::execute(
                    &db,
                    "CREATE TRIGGER poison BEFORE INSERT ON intents FOR EACH ROW EXECUTE FUNCTION poison()",
                )
                .await
            }
        }
        let poisoned = NewIntent { recipient_id: "poison".into(), ..new_intent(&key(2), "sms", Some(T0)) };
        let outcomes = store
            .events_ingest_batch(vec![
                request("a", "fa", "E1", "c1", vec![new_intent(&key(1), "sms", Some(T0))]),
                // Its first intent is fine, its second refused: neither stays.
                request("p", "fp", "E2", "c2", vec![new_intent(&key(5), "sms", Some(T0)), poisoned]),
                request("c", "fc", "E3", "c3", vec![new_intent(&key(3), "sms", Some(T0))]),
            ])
            .await;
        assert!(matches!(outcomes[0], Ok(IngestOutcome::Accepted { .. })), "{backend:?}: {:?}", outcomes[0]);
        assert!(matches!(outcomes[1], Err(StoreError::Database(_))), "{backend:?}: {:?}", outcomes[1]);
        assert!(matches!(outcomes[2], Ok(IngestOutcome::Accepted { .. })), "{backend:?}: {:?}", outcomes[2]);
        assert_eq!(store.request_find("default", "p", "fp").await.unwrap(), None, "{backend:?}");
        assert_eq!(common::count(&db, "SELECT COUNT(*) FROM events WHERE entity_id = 'E2'").await, 0, "{backend:?}");
        let status = store.intents_status("default", &[key(1), key(2), key(3), key(5)]).await.unwrap();
        let mut stored: Vec<String> = status.into_iter().map(|s| s.key).collect();
        stored.sort();
        assert_eq!(stored, vec![key(1), key(3)], "{backend:?}");
        assert_eq!(store.jobs_claim(claim(T0, 100)).await.unwrap().len(), 2, "{backend:?}");
    }
}

#[tokio::test]
async fn concurrent_batches_reusing_one_identity_for_other_events_keep_only_the_first() {
    each_backend(|store| async move {
        let mut tasks = Vec::new();
        for n in 0..8u32 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                // Each batch also carries a request of its own, which must be
                // accepted whatever becomes of the shared identity.
                let shared = request(
                    "k",
                    &format!("f{n}"),
                    &format!("E{n}"),
                    "c",
                    vec![new_intent(&key(100 + n), "sms", Some(T0))],
                );
                let own = request(
                    &format!("own{n}"),
                    "fo",
                    &format!("O{n}"),
                    "c",
                    vec![new_intent(&key(200 + n), "sms", Some(T0))],
                );
                let mut out = store.events_ingest_batch(vec![shared, own]).await;
                let own = out.pop().unwrap().unwrap();
                assert!(matches!(own, IngestOutcome::Accepted { any_created: true, .. }), "{own:?}");
                out.pop().unwrap().unwrap()
            }));
        }
        let mut accepted = 0;
        for t in tasks {
            match t.await.unwrap() {
                IngestOutcome::Accepted { any_created: true, .. } => accepted += 1,
                IngestOutcome::Mismatch => {}
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(accepted, 1);
        let keys: Vec<String> = (0..8).map(|n| key(100 + n)).collect();
        assert_eq!(store.intents_status("default", &keys).await.unwrap().len(), 1, "a refused request created nothing");
    })
    .await;
}

/// The daily digest's claim is leased like a job: on Postgres by the database's
/// clock, so a process an hour ahead cannot take a digest another process is
/// posting and post it twice. SQLite is one process; its clock judges.
#[tokio::test]
async fn the_daily_digest_claim_is_leased_by_the_database_clock() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let store = db.store().await;
        let real = jiff::Timestamp::now().as_microsecond();
        let hour = 3_600_000_000;
        let claim = |now_us: i64, lease_us: i64| OpsDigestClaim {
            slot: "2026-11-30".into(),
            since_us: real - 24 * hour,
            until_us: real,
            now_us,
            lease_us,
        };
        // A, on time, claims the slot for ten minutes.
        let a = store.ops_digest_claim(claim(real, 600_000_000)).await.unwrap();
        assert_eq!(a, Some((real - 24 * hour, real)));
        // B, an hour ahead, tries the same slot.
        let b = store.ops_digest_claim(claim(real + hour, 600_000_000)).await.unwrap();
        match backend {
            common::Backend::Postgres => assert_eq!(b, None, "B took A's digest lease by its own clock"),
            common::Backend::Sqlite => assert!(b.is_some(), "the one process's clock judges"),
        }
        // Once posted, nobody claims it again, whatever their clock.
        store.ops_digest_posted("2026-11-30", real, 0).await.unwrap();
        assert_eq!(store.ops_digest_claim(claim(real + 48 * hour, 0)).await.unwrap(), None);
    }
}

/// Each attempt names the provider it went to, and whether it may have
/// repeated an earlier call the provider could not recognise.
#[tokio::test]
async fn an_attempt_keeps_its_provider_and_whether_it_may_be_a_duplicate() {
    each_backend(|store| async move {
        store.events_ingest(ingest("r1", "fp1", vec![new_intent(&key(1), "sms", Some(T0))])).await.unwrap();
        store.jobs_claim(claim(T0, 10)).await.unwrap();
        let attempt = FinishedAttempt {
            provider: Some("twilio".into()),
            possible_duplicate: true,
            ..finished(&key(1), 1, OutcomeClass::Accepted, Transition::Sent)
        };
        store.attempts_finish(&[attempt]).await.unwrap();
        let rows = store.attempts_of(&[key(1)]).await.unwrap();
        assert_eq!((rows[0].provider.as_deref(), rows[0].possible_duplicate), (Some("twilio"), true));
    })
    .await;
}

#[tokio::test]
async fn a_batch_of_distinct_requests_decides_replays_conflicts_and_new_audiences_each_on_its_own() {
    each_backend(|store| async move {
        let sms = |n: u32| new_intent(&key(n), "sms", Some(T0));
        let first = store
            .events_ingest_batch(vec![
                request("a", "fa", "E1", "c1", vec![sms(1)]),
                request("x", "fx", "E2", "c2", vec![sms(2)]),
                request("z", "fz", "E6", "c6", vec![sms(6)]),
            ])
            .await;
        assert!(first.iter().all(|o| matches!(o, Ok(IngestOutcome::Accepted { any_created: true, .. }))), "{first:?}");
        let second = store
            .events_ingest_batch(vec![
                request("a", "fa", "E1", "c1", vec![sms(1)]),
                request("x", "fx2", "E4", "c4", vec![sms(4)]),
                request("b", "fb", "E2", "c2-changed", vec![sms(2), sms(22)]),
                request("c", "fc", "E6", "c6", vec![sms(6), sms(66)]),
                request("d", "fd", "E3", "c3", vec![sms(3)]),
            ])
            .await;
        let second: Vec<IngestOutcome> = second.into_iter().map(Result::unwrap).collect();
        let IngestOutcome::Replayed { response } = &second[0] else { panic!("{:?}", second[0]) };
        assert!(response.replayed && response.intents[0].created);
        assert_eq!(second[1], IngestOutcome::Mismatch);
        assert_eq!(second[2], IngestOutcome::Conflict);
        let IngestOutcome::Accepted { response, any_created: true } = &second[3] else { panic!("{:?}", second[3]) };
        let created: Vec<bool> = response.intents.iter().map(|i| i.created).collect();
        assert_eq!(created, vec![false, true], "E6's intent existed; the new recipient's is new");
        assert_eq!(response.intents[0].state, "queued", "the existing intent as it stands");
        assert!(matches!(second[4], IngestOutcome::Accepted { any_created: true, .. }));
        // The refused requests left nothing; the accepted ones replay.
        assert_eq!(store.request_find("default", "b", "fb").await.unwrap(), None);
        let stored = store.intents_status("default", &[key(4), key(22), key(66), key(3)]).await.unwrap();
        let mut stored: Vec<String> = stored.into_iter().map(|s| s.key).collect();
        stored.sort();
        assert_eq!(stored, vec![key(3), key(66)]);
        for (identity, fingerprint) in [("c", "fc"), ("d", "fd")] {
            let seen = store.request_find("default", identity, fingerprint).await.unwrap();
            assert!(matches!(seen, Some(RequestSeen::Replay(_))), "{identity}: {seen:?}");
        }
        let Some(RequestSeen::Replay(c)) = store.request_find("default", "c", "fc").await.unwrap() else { panic!() };
        assert_eq!(c.intents.iter().map(|i| i.created).collect::<Vec<_>>(), vec![false, true], "stored as answered");
        assert_eq!(claimed_keys(&store).await, vec![key(1), key(2), key(3), key(6), key(66)], "one job per new intent");
    })
    .await;
}

/// A batch of new identities goes set-wise (one statement per table), and a
/// request in it whose event was accepted with other content is decided as
/// it would be alone: a conflict, or — when its identity was used before for
/// another body — a mismatch first. SQLite's set-wise pass does not read the
/// request records, so it must leave such a request to be decided on its own.
#[tokio::test]
async fn a_set_wise_batch_decides_a_conflict_and_a_reused_identity_as_a_request_alone_would() {
    each_backend(|store| async move {
        let sms = |n: u32| new_intent(&key(n), "sms", Some(T0));
        let first = store.events_ingest(request("a", "fa", "E1", "c1", vec![sms(1)])).await.unwrap();
        assert!(matches!(first, IngestOutcome::Accepted { any_created: true, .. }), "{first:?}");
        let batch = store
            .events_ingest_batch(vec![
                request("b", "fb", "E1", "c1-changed", vec![sms(1)]),
                request("c", "fc", "E5", "c5", vec![sms(5)]),
                request("d", "fd", "E6", "c6", vec![sms(6)]),
            ])
            .await;
        let batch: Vec<IngestOutcome> = batch.into_iter().map(Result::unwrap).collect();
        assert_eq!(batch[0], IngestOutcome::Conflict);
        assert!(batch[1..].iter().all(|o| matches!(o, IngestOutcome::Accepted { any_created: true, .. })), "{batch:?}");
        assert_eq!(store.request_find("default", "b", "fb").await.unwrap(), None, "the conflict kept nothing");
        // Identity "a" again, for E1 with other content: its record decides.
        let reused = store
            .events_ingest_batch(vec![
                request("a", "fa2", "E1", "c1-changed", vec![sms(1)]),
                request("e", "fe", "E7", "c7", vec![sms(7)]),
            ])
            .await;
        assert_eq!(reused[0].as_ref().unwrap(), &IngestOutcome::Mismatch);
        assert!(matches!(reused[1], Ok(IngestOutcome::Accepted { any_created: true, .. })), "{:?}", reused[1]);
        assert_eq!(claimed_keys(&store).await, vec![key(1), key(5), key(6), key(7)], "one job per new intent");
    })
    .await;
}

/// On Postgres a batch is first written as one statement on the guess that
/// all of it is new. Each way the guess can be wrong — an event, an intent or
/// a request identity already there — must leave nothing of the guess behind
/// and the batch decided as it would be without it.
#[tokio::test]
async fn a_batch_guessed_new_keeps_nothing_of_the_guess_when_a_row_was_there() {
    each_backend(|store| async move {
        let sms = |n: u32| new_intent(&key(n), "sms", Some(T0));
        store.events_ingest(request("a", "fa", "E1", "c1", vec![sms(1)])).await.unwrap();
        // An intent there already, under a new event and identity (as a key
        // reused across events would be): not created again, no second job.
        let intent = store
            .events_ingest_batch(vec![
                request("b", "fb", "E2", "c2", vec![sms(1), sms(2)]),
                request("c", "fc", "E3", "c3", vec![sms(3)]),
            ])
            .await;
        let IngestOutcome::Accepted { response, any_created: true } = intent[0].as_ref().unwrap() else {
            panic!("{:?}", intent[0])
        };
        assert_eq!(response.intents.iter().map(|i| i.created).collect::<Vec<_>>(), vec![false, true]);
        assert!(matches!(intent[1], Ok(IngestOutcome::Accepted { any_created: true, .. })), "{:?}", intent[1]);
        // An identity there already, for a new event: a mismatch, and its
        // event and intent are not kept.
        let identity = store
            .events_ingest_batch(vec![
                request("a", "fa2", "E4", "c4", vec![sms(4)]),
                request("d", "fd", "E5", "c5", vec![sms(5)]),
            ])
            .await;
        assert_eq!(identity[0].as_ref().unwrap(), &IngestOutcome::Mismatch);
        assert!(matches!(identity[1], Ok(IngestOutcome::Accepted { any_created: true, .. })), "{:?}", identity[1]);
        assert!(store.intents_status("default", &[key(4)]).await.unwrap().is_empty(), "the mismatch created nothing");
        assert_eq!(claimed_keys(&store).await, vec![key(1), key(2), key(3), key(5)], "one job per new intent");
        for (identity, fingerprint) in [("b", "fb"), ("c", "fc"), ("d", "fd")] {
            let seen = store.request_find("default", identity, fingerprint).await.unwrap();
            assert!(matches!(seen, Some(RequestSeen::Replay(_))), "{identity}: {seen:?}");
        }
    })
    .await;
}

/// A receipt is recorded once, moves the delivery status only forward, and a
/// bounce puts the address on its intent's tenant's list (and nowhere else).
#[tokio::test]
async fn a_receipt_is_recorded_once_moves_forward_and_a_bounce_suppresses_in_its_tenant() {
    use herald::receipt::DeliveryStatus;
    each_backend(|store| async move {
        let mut intent = new_intent(&key(1), "sms", Some(T0));
        intent.destination = Some("+9779800000099".into());
        store.events_ingest(ingest("r1", "fp1", vec![intent])).await.unwrap();
        store.jobs_claim(claim(T0, 10)).await.unwrap();
        let mut sent = finished(&key(1), 1, OutcomeClass::Accepted, Transition::Sent);
        sent.provider_message_id = Some("SM-1".into());
        store.attempts_finish(&[sent]).await.unwrap();
        let receipt = |status: DeliveryStatus, target: ReceiptTarget| NewReceipt {
            target,
            channel: Some("sms".into()),
            source: "twilio".into(),
            provider_message_id: Some("SM-1".into()),
            status,
            provider_status: status.as_str().into(),
            reason: None,
            now_us: T0 + 100,
            suppression_key: test_suppression_key(),
        };
        let by_sid = || ReceiptTarget::ProviderMessageId("SM-1".into());
        let out = store.receipt_record(receipt(DeliveryStatus::Delivered, by_sid())).await.unwrap();
        assert!(matches!(out, ReceiptOutcome::Recorded { applied: true, duplicate: false, .. }), "{out:?}");
        let out = store.receipt_record(receipt(DeliveryStatus::Delivered, by_sid())).await.unwrap();
        assert!(matches!(out, ReceiptOutcome::Recorded { applied: false, duplicate: true, .. }), "{out:?}");
        let out = store.receipt_record(receipt(DeliveryStatus::Sent, ReceiptTarget::Key(key(1)))).await.unwrap();
        let ReceiptOutcome::Recorded { applied, delivery_status, .. } = out else { panic!("{out:?}") };
        assert_eq!((applied, delivery_status), (false, Some(DeliveryStatus::Delivered)));
        let mut email_only = receipt(DeliveryStatus::Bounced, ReceiptTarget::Key(key(1)));
        email_only.channel = Some("email".into());
        assert_eq!(store.receipt_record(email_only).await.unwrap(), ReceiptOutcome::NotFound);
        let out = store.receipt_record(receipt(DeliveryStatus::Bounced, by_sid())).await.unwrap();
        let ReceiptOutcome::Recorded { dead, suppressed, .. } = out else { panic!("{out:?}") };
        assert_eq!((dead, suppressed), (Some(Reason::HardBounce), true));
        assert_eq!(store.receipts_of(&[key(1)]).await.unwrap().len(), 3);

        let hash = test_suppression_key().lookup("default", herald::recipient::Kind::Phone, "+9779800000099");
        let entries = store.suppressions_match("default", std::slice::from_ref(&hash)).await.unwrap();
        assert_eq!(
            (entries[0].reason.as_str(), entries[0].source_intent.as_str()),
            ("address_bounced", key(1).as_str())
        );
        assert!(store.suppressions_match("other", std::slice::from_ref(&hash)).await.unwrap().is_empty());
        // What a new request reads before it is planned, in one: the same rows
        // as the two reads, and nothing of another tenant's.
        store
            .recipient_put(RecipientPut {
                tenant: "default".into(),
                id: "u-9".into(),
                email: Some("a@example.com".into()),
                phone: None,
                locale: Some("ne".into()),
                timezone: None,
                webhook_url: None,
                preferences: r#"{"channels":{"sms":false}}"#.into(),
                now_us: T0,
            })
            .await
            .unwrap();
        let ids = ["u-9".to_string(), "u-404".to_string()];
        let other = test_suppression_key().lookup("default", herald::recipient::Kind::Phone, "+9779800000098");
        let hashes = [hash.clone(), other];
        let (recipients, suppressions) = store.recipients_and_suppressions("default", &ids, &hashes).await.unwrap();
        assert_eq!(recipients, store.recipients_get("default", &ids).await.unwrap());
        assert_eq!(recipients.len(), 1);
        assert_eq!(suppressions, entries);
        let (recipients, suppressions) = store.recipients_and_suppressions("other", &ids, &hashes).await.unwrap();
        assert!(recipients.is_empty() && suppressions.is_empty());
        let (_, none) = store.recipients_and_suppressions("default", &ids, &[]).await.unwrap();
        assert!(none.is_empty());
        // Many requests' reads at once: each answered with what it would
        // read alone, an id named twice found once, tenants kept apart.
        let read = |tenant: &str, ids: &[&str], hashes: &[String]| DirectoryRead {
            tenant: tenant.into(),
            ids: ids.iter().map(|s| s.to_string()).collect(),
            hashes: hashes.to_vec(),
        };
        let reads = [
            read("default", &["u-9", "u-404", "u-9"], &hashes),
            read("other", &["u-9"], &hashes),
            read("default", &[], &[]),
            read("default", &["u-9"], &[hash.clone(), hash.clone()]),
        ];
        // Another tenant's recipient with the same id is that tenant's alone.
        let theirs = store
            .recipient_put(RecipientPut {
                tenant: "other".into(),
                id: "u-9".into(),
                email: Some("b@example.com".into()),
                phone: None,
                locale: None,
                timezone: None,
                webhook_url: None,
                preferences: "{}".into(),
                now_us: T0,
            })
            .await
            .unwrap();
        let ours = store.recipients_get("default", &ids).await.unwrap();
        let many: Vec<DirectoryRows> = store.directories_read(&reads).await.into_iter().map(|r| r.unwrap()).collect();
        assert_eq!(
            many,
            vec![(ours.clone(), entries.clone()), (vec![theirs], vec![]), (vec![], vec![]), (ours, entries.clone())]
        );
        let many = store.directories_read(&reads).await;
        assert_eq!(many.len(), reads.len());
        for (r, got) in reads.iter().zip(many) {
            let alone = store.recipients_and_suppressions(&r.tenant, &r.ids, &r.hashes).await.unwrap();
            assert_eq!(got.unwrap(), alone, "{r:?}");
        }
        assert!(store.directories_read(&[]).await.is_empty());
        let (once, _) = store.recipients_and_suppressions("default", &ids, &[]).await.unwrap();
        let (twice, _) = store.recipients_and_suppressions("default", &reads[0].ids, &[]).await.unwrap();
        assert_eq!(once, twice, "an id named twice is one entry");
        assert_eq!(store.suppressions_list("default", None, 10).await.unwrap().items.len(), 1);
        assert_eq!(store.bounces_by_domain(None, T0, T0 + 1_000).await.unwrap(), vec![("(sms)".to_string(), 1)]);
        let id = entries[0].id.clone().expect("a new entry is named");
        assert_eq!(id, herald::suppression::entry_id("default", &key(1)));
        assert!(!store.suppression_remove("default", &hash).await.unwrap(), "never by its lookup");
        assert!(!store.suppression_remove("other", &id).await.unwrap());
        assert!(store.suppression_remove("default", &id).await.unwrap());
        assert!(store.suppressions_list("default", None, 10).await.unwrap().items.is_empty());
    })
    .await;
}

/// A receipt for an intent waiting for a retry ends it (sent, or dead for a
/// bounce) and removes its job; a repeat of it changes nothing more.
#[tokio::test]
async fn a_receipt_ends_a_pending_retry_and_takes_its_job_off_the_queue() {
    use herald::receipt::DeliveryStatus;
    each_backend(|store| async move {
        for (n, status, state) in [(1, DeliveryStatus::Delivered, "sent"), (2, DeliveryStatus::Bounced, "dead")] {
            let mut intent = new_intent(&key(n), "email", Some(T0));
            intent.destination = Some(format!("r{n}@example.com"));
            store.events_ingest(ingest(&format!("r{n}"), &format!("fp{n}"), vec![intent])).await.unwrap();
            store.jobs_claim(claim(T0, 10)).await.unwrap();
            let retry = Transition::Retry { run_at_us: T0 + 60_000_000, state: State::Unknown };
            store.attempts_finish(&[finished(&key(n), 1, OutcomeClass::Unknown, retry)]).await.unwrap();
            let receipt = NewReceipt {
                target: ReceiptTarget::Key(key(n)),
                channel: Some("email".into()),
                source: "ses".into(),
                provider_message_id: Some(format!("ses-{n}")),
                status,
                provider_status: status.as_str().into(),
                reason: None,
                now_us: T0 + 100,
                suppression_key: test_suppression_key(),
            };
            let out = store.receipt_record(receipt.clone()).await.unwrap();
            let ReceiptOutcome::Recorded { ended_retry, dead, .. } = out else { panic!("{out:?}") };
            assert!(ended_retry, "{status}");
            assert_eq!(dead, (state == "dead").then_some(Reason::HardBounce));
            let detail = store.intent_get("default", &key(n)).await.unwrap().unwrap();
            assert_eq!(detail.intent.state.as_str(), state);
            assert!(detail.receipts[0].ended_retry);
            let out = store.receipt_record(receipt).await.unwrap();
            assert!(matches!(out, ReceiptOutcome::Recorded { duplicate: true, ended_retry: false, .. }), "{out:?}");
        }
        // Past the retries' time, nothing is left to claim.
        assert!(store.jobs_claim(claim(T0 + 120_000_000, 10)).await.unwrap().is_empty());
    })
    .await;
}

#[tokio::test]
async fn a_rejected_bus_message_is_recorded_once_and_seen_only_by_its_tenant() {
    each_backend(|store| async move {
        let row = |tenant: &str, seq: i64, at: i64| RejectedMessage {
            id: RejectedMessage::id_of("orders", seq),
            tenant: tenant.into(),
            stream: "orders".into(),
            consumer: "herald".into(),
            subject: "orders.approved".into(),
            stream_seq: seq,
            deliveries: 1,
            status: 400,
            code: "malformed_json".into(),
            message: "body is not valid JSON".into(),
            body: Some("{".into()),
            created_at: at,
        };
        assert!(store.rejected_record(row("acme", 1, 10)).await.unwrap());
        assert!(!store.rejected_record(row("acme", 1, 11)).await.unwrap(), "the same message again is one row");
        assert!(store.rejected_record(row("acme", 2, 20)).await.unwrap());
        assert!(store.rejected_record(row("globex", 3, 30)).await.unwrap());
        let mut refused = row("initech", 4, 21);
        refused.code = "unknown_event_type".into();
        assert!(store.rejected_record(refused).await.unwrap());
        // The daily digest's counts: by code, in a window, for one tenant or all.
        let every = store.rejected_summary(None, 0, 100).await.unwrap();
        assert_eq!(every, vec![("malformed_json".to_string(), 3), ("unknown_event_type".to_string(), 1)]);
        let acme = store.rejected_summary(Some("acme"), 15, 30).await.unwrap();
        assert_eq!(acme, vec![("malformed_json".to_string(), 1)], "one tenant's, from `since` on");
        assert!(store.rejected_summary(Some("globex"), 0, 30).await.unwrap().is_empty(), "until is exclusive");
        let first = store.rejected_list(Some("acme"), None, 1).await.unwrap();
        assert_eq!(first.items.iter().map(|r| r.stream_seq).collect::<Vec<_>>(), vec![2]);
        let rest = store.rejected_list(Some("acme"), first.next.as_ref(), 10).await.unwrap();
        assert_eq!(rest.items.iter().map(|r| r.stream_seq).collect::<Vec<_>>(), vec![1]);
        assert_eq!(rest.items[0], row("acme", 1, 10));
        assert!(rest.next.is_none());
        let id = RejectedMessage::id_of("orders", 3);
        assert!(store.rejected_get("acme", &id).await.unwrap().is_none(), "another tenant's is not found");
        assert_eq!(store.rejected_get("globex", &id).await.unwrap().map(|r| r.stream_seq), Some(3));
        // Retention: the bodies go first, then the records.
        assert_eq!(
            store.retention_batch(PruneStep::RejectedBodies, 25, 100).await.unwrap(),
            3,
            "acme's two and initech's"
        );
        let kept = store.rejected_list(Some("acme"), None, 10).await.unwrap().items;
        assert!(kept.iter().all(|r| r.body.is_none() && r.code == "malformed_json"), "{kept:?}");
        assert_eq!(store.retention_batch(PruneStep::RejectedMessages, 25, 100).await.unwrap(), 3);
        assert!(store.rejected_list(Some("acme"), None, 10).await.unwrap().items.is_empty());
        assert_eq!(store.rejected_list(Some("globex"), None, 10).await.unwrap().items.len(), 1);
        let every: Vec<String> =
            store.rejected_list(None, None, 10).await.unwrap().items.into_iter().map(|r| r.tenant).collect();
        assert_eq!(every, vec!["globex".to_string()], "every tenant's, for an admin");
    })
    .await;
}

/// A batch that fails because the database cannot be reached fails every
/// request at once, as unreachable: running each alone would keep the last
/// caller waiting out one connection timeout per request in the batch.
#[tokio::test]
async fn a_batch_the_database_cannot_take_fails_every_request_at_once() {
    // The pool to close is Postgres's; SQLite's writer is in-process.
    let Some(db) = common::postgres_db().await else { return };
    let store = PostgresStore::connect(&db.url).await.unwrap();
    store.migrate().await.unwrap();
    store.pool().close().await;
    let batch = vec![ingest("r1", "fp1", vec![]), ingest("r2", "fp2", vec![]), ingest("r3", "fp3", vec![])];
    let out = store.events_ingest_batch(batch).await;
    assert_eq!(out.len(), 3);
    for outcome in out {
        assert!(matches!(outcome, Err(StoreError::Unreachable(_))), "{outcome:?}");
    }
}

/// Another transaction holds the event and the record of an Idempotency-Key
/// it has not committed yet; a batch reusing that key with other data waits
/// for it on the event's row. Had the other committed first, the reuse would
/// be a mismatch (422: the identity decides before the event), and it must
/// be one after the wait as well, not a conflict (409) decided from a read of
/// the records made before it. A second request for the event, under a key
/// of its own, is the conflict. (Two requests for one event: the batch is
/// decided request by request.)
#[tokio::test]
async fn a_key_reused_while_its_first_use_commits_is_a_mismatch_not_a_conflict() {
    let Some(db) = common::postgres_db().await else { return };
    let store = Arc::new(PostgresStore::connect(&db.url).await.unwrap());
    store.migrate().await.unwrap();
    let first = ingest_content("key:K", "fp1", "c1", vec![]);
    let mut other = store.pool().begin().await.unwrap();
    sqlx::query(
        "INSERT INTO events (event_key, tenant, event_type, entity_type, entity_id, occurred_at, content_digest, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(&first.event_key)
    .bind(&first.tenant)
    .bind(&first.event_type)
    .bind(&first.entity_type)
    .bind(&first.entity_id)
    .bind(&first.occurred_at)
    .bind(&first.content_digest)
    .bind(T0)
    .execute(&mut *other)
    .await
    .unwrap();
    let response = format!(r#"{{"event_key":"{}","replayed":false,"intents":[]}}"#, first.event_key);
    sqlx::query(
        "INSERT INTO requests (tenant, identity, fingerprint, created_at, status, response) VALUES ($1, $2, $3, $4, 202, $5)",
    )
    .bind(&first.tenant)
    .bind(&first.identity)
    .bind(&first.fingerprint)
    .bind(T0)
    .bind(response)
    .execute(&mut *other)
    .await
    .unwrap();
    let batch = vec![ingest_content("key:K", "fp2", "c2", vec![]), ingest_content("key:L", "fp3", "c2", vec![])];
    let writer = store.clone();
    let outcomes = tokio::spawn(async move { writer.events_ingest_batch(batch).await });
    // Until the batch waits for the other transaction's lock.
    let mut waiting = 0_i64;
    for _ in 0..500 {
        waiting = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(store.pool())
        .await
        .unwrap();
        if waiting > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(waiting, 1, "the batch waits on the uncommitted event");
    other.commit().await.unwrap();
    let out: Vec<_> = outcomes.await.unwrap().into_iter().map(Result::unwrap).collect();
    assert_eq!(out, vec![IngestOutcome::Mismatch, IngestOutcome::Conflict]);
}

// Every `Store` method is exercised above or below, on every backend:
// schema_state, ping and migrate; the digest windows from due to closed; the
// inbox's read mark; the dead letters' summary, examples and replay; the
// daily digest's bookkeeping; each retention step; and the wake-up.

#[tokio::test]
async fn a_store_knows_whether_it_is_migrated_and_answers_pings() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let store = herald::store::connect(&db.url).await.unwrap();
        store.ping().await.unwrap();
        assert_eq!(store.schema_state().await.unwrap(), SchemaState::Missing, "{backend:?}");
        store.migrate().await.unwrap();
        assert_eq!(store.schema_state().await.unwrap(), SchemaState::Current, "{backend:?}");
        store.migrate().await.unwrap();
        assert_eq!(store.schema_state().await.unwrap(), SchemaState::Current, "migrating again changes nothing");
    }
}

const WINDOW: u32 = 101;

/// Intent `key(n)`, held as a member of `u-1`'s email digest window `key(WINDOW)`
/// (opened at T0, closing a day later).
fn window_member(n: u32) -> NewIntent {
    let mut member = new_intent(&key(n), "email", None);
    member.digest = Some(digest_window(&key(WINDOW), T0 + DAY));
    (member.decision, member.state) = (Decision::Digest, State::Held);
    member
}

/// `u-1`'s email digest window `key` for comments on PO-1, opened at T0.
fn digest_window(key: &str, closes_at: i64) -> NewDigest {
    NewDigest {
        key: key.into(),
        event_type: "comment.created".into(),
        channel: Channel::Email,
        recipient_id: "u-1".into(),
        group_key: "PO-1".into(),
        destination: Some("a@example.com".into()),
        locale: Some("en".into()),
        window_start: T0,
        closes_at,
    }
}

/// Two members waiting in one digest window, ingested as two requests.
async fn two_members_in_a_window(store: &Arc<dyn Store>) -> DigestRow {
    for n in [1, 2] {
        let member = window_member(n);
        let mut ingest = ingest(&format!("r{n}"), &format!("fp{n}"), vec![member]);
        ingest.now_us = T0 + i64::from(n);
        store.events_ingest(ingest).await.unwrap();
    }
    assert!(store.digests_due(T0 + DAY - 1, 10).await.unwrap().is_empty(), "not due before it closes");
    let due = store.digests_due(T0 + DAY, 10).await.unwrap();
    assert_eq!(
        due.iter().map(|d| (d.key.clone(), d.state.clone())).collect::<Vec<_>>(),
        vec![(key(WINDOW), "open".into())]
    );
    due[0].clone()
}

fn closing(window: DigestRow, member_keys: Vec<String>, intent: NewIntent) -> DigestClose {
    DigestClose {
        digest: window,
        member_keys,
        shadow_members: vec![],
        traceparent: None,
        links: None,
        intent,
        event_digest: "digest-event".into(),
        event_body: r#"{"digest":"w"}"#.into(),
        occurred_at: "2026-11-30T04:30:00.000000000Z".into(),
        now_us: T0 + DAY,
    }
}

#[tokio::test]
async fn a_digest_window_closes_once_into_its_digest_intent() {
    each_backend(|store| async move {
        let window = two_members_in_a_window(&store).await;
        let members = store.digest_members(&key(WINDOW)).await.unwrap();
        assert_eq!(members.iter().map(|m| m.intent.key.clone()).collect::<Vec<_>>(), vec![key(1), key(2)]);
        assert!(members.iter().all(|m| m.intent.link_key.as_deref() == Some(key(WINDOW).as_str())));
        assert_eq!(members[0].content.as_deref(), Some(r#"{"body":"hello"}"#));
        assert_eq!(members[0].event_body.as_deref(), Some("{}"));

        let digest = new_intent(&key(WINDOW), "email", Some(T0 + DAY));
        // rendered from one member while a second joined: nothing is written
        let stale = closing(window.clone(), vec![key(1)], digest.clone());
        assert_eq!(store.digest_close(stale).await.unwrap(), DigestCloseOutcome::MembersChanged);
        assert!(store.intent_get("default", &key(WINDOW)).await.unwrap().is_none());
        assert_eq!(store.digests_due(T0 + DAY, 10).await.unwrap().len(), 1, "still open");

        let close = closing(window.clone(), vec![key(1), key(2)], digest.clone());
        assert_eq!(store.digest_close(close.clone()).await.unwrap(), DigestCloseOutcome::Closed);
        assert_eq!(store.digest_close(close).await.unwrap(), DigestCloseOutcome::AlreadyClosed);
        assert!(store.digests_due(T0 + DAY, 10).await.unwrap().is_empty());
        for member in [key(1), key(2)] {
            let d = store.intent_get("default", &member).await.unwrap().unwrap();
            assert_eq!((d.intent.state.as_str(), d.intent.decision.as_str()), ("digested", "digest"));
        }
        let jobs = store.jobs_claim(claim(T0 + DAY, 10)).await.unwrap();
        assert_eq!(
            jobs.iter().map(|j| j.intent.key.clone()).collect::<Vec<_>>(),
            vec![key(WINDOW)],
            "the digest alone"
        );
        assert_eq!(jobs[0].content.as_deref(), Some(r#"{"body":"hello"}"#));
        let d = store.intent_get("default", &key(WINDOW)).await.unwrap().unwrap();
        assert_eq!(d.event_body.as_deref(), Some(r#"{"digest":"w"}"#), "the digest's event is its member list");
    })
    .await;
}

#[tokio::test]
async fn a_digest_that_could_not_be_rendered_sends_its_members_on_their_own() {
    each_backend(|store| async move {
        let window = two_members_in_a_window(&store).await;
        let mut failed = new_intent(&key(WINDOW), "email", None);
        (failed.payload, failed.state, failed.reason) = (None, State::Dead, Some(Reason::TemplateError));
        let close = closing(window, vec![key(1), key(2)], failed);
        assert_eq!(store.digest_close(close).await.unwrap(), DigestCloseOutcome::Closed);
        let dead = store.intent_get("default", &key(WINDOW)).await.unwrap().unwrap();
        assert_eq!((dead.intent.state.as_str(), dead.intent.reason.as_deref()), ("dead", Some("template_error")));
        let mut sent: Vec<String> =
            store.jobs_claim(claim(T0 + DAY, 10)).await.unwrap().into_iter().map(|j| j.intent.key).collect();
        sent.sort();
        assert_eq!(sent, vec![key(1), key(2)], "each member goes out with the content it froze");
        let member = store.intent_get("default", &key(1)).await.unwrap().unwrap();
        assert_eq!(member.intent.decision, "send");
    })
    .await;
}

#[tokio::test]
async fn an_inbox_card_is_marked_read_only_by_its_own_recipient() {
    each_backend(|store| async move {
        store
            .inbox_deliver(InboxDelivery {
                tenant: "default".into(),
                recipient_id: "u-1".into(),
                entity_type: "purchase_order".into(),
                entity_id: "PO-1".into(),
                version: Some(1),
                occurred_at: "2026-11-29T04:30:00.000000000Z".into(),
                intent_key: key(1),
                payload_digest: format!("digest-{}", key(1)),
                now_us: T0,
            })
            .await
            .unwrap();
        let card = inbox_card_id("default", "u-1", "purchase_order", "PO-1");
        assert!(!store.inbox_mark_read("default", "u-2", &card, T0 + 1).await.unwrap(), "another recipient's card");
        assert!(!store.inbox_mark_read("other", "u-1", &card, T0 + 1).await.unwrap(), "another tenant's card");
        assert!(!store.inbox_mark_read("default", "u-1", &key(9), T0 + 1).await.unwrap(), "no such card");
        assert_eq!(store.inbox_list("default", "u-1", None, 10).await.unwrap().items[0].read_at, None);
        assert!(store.inbox_mark_read("default", "u-1", &card, T0 + 5).await.unwrap());
        assert_eq!(store.inbox_list("default", "u-1", None, 10).await.unwrap().items[0].read_at, Some(T0 + 5));
    })
    .await;
}

/// A dead letter of `tenant` with `reason`, dead since `at`.
fn dead_letter(tenant: &str, n: u32, reason: &str, at: i64) -> Ingest {
    let mut dead = new_intent(&key(n), "sms", None);
    (dead.state, dead.reason) = (State::Dead, Some(Reason::parse(reason).expect("a reason")));
    Ingest { tenant: tenant.into(), now_us: at, ..ingest(&format!("r{n}"), &format!("fp{n}"), vec![dead]) }
}

#[tokio::test]
async fn dead_letters_are_counted_by_reason_with_examples_per_tenant_or_across() {
    each_backend(|store| async move {
        for (tenant, n, reason) in
            [("acme", 1, "rejected"), ("acme", 2, "rejected"), ("acme", 3, "template_error"), ("globex", 4, "rejected")]
        {
            store.events_ingest(dead_letter(tenant, n, reason, T0 + i64::from(n))).await.unwrap();
        }
        let all = store.dead_letters_summary(None, T0, T0 + 10).await.unwrap();
        assert_eq!(all, vec![("rejected".into(), 3), ("template_error".into(), 1)]);
        let acme = store.dead_letters_summary(Some("acme"), T0, T0 + 10).await.unwrap();
        assert_eq!(acme, vec![("rejected".into(), 2), ("template_error".into(), 1)]);
        let later = store.dead_letters_summary(None, T0 + 2, T0 + 4).await.unwrap();
        assert_eq!(later, vec![("rejected".into(), 1), ("template_error".into(), 1)], "[since, until)");

        let groups = store.dead_letters_groups(Some("acme")).await.unwrap();
        let group = |tenant: &str, reason: &str, count, oldest_at| DeadLetterGroup {
            tenant: tenant.into(),
            reason: reason.into(),
            count,
            oldest_at,
        };
        assert_eq!(groups, vec![group("acme", "rejected", 2, T0 + 1), group("acme", "template_error", 1, T0 + 3)]);
        assert_eq!(
            store.dead_letters_groups(Some("globex")).await.unwrap(),
            vec![group("globex", "rejected", 1, T0 + 4)]
        );
        assert!(store.dead_letters_groups(Some("initech")).await.unwrap().is_empty());
        // Every tenant's (an admin's console), each group naming its tenant.
        assert_eq!(
            store.dead_letters_groups(None).await.unwrap(),
            vec![
                group("acme", "rejected", 2, T0 + 1),
                group("acme", "template_error", 1, T0 + 3),
                group("globex", "rejected", 1, T0 + 4)
            ]
        );

        let examples = |tenant: Option<&'static str>, limit: u32| {
            let store = store.clone();
            async move {
                let rows = store.dead_letters_examples(tenant, "rejected", T0, T0 + 10, limit).await.unwrap();
                rows.into_iter().map(|r| r.key).collect::<Vec<_>>()
            }
        };
        assert_eq!(examples(None, 2).await, vec![key(4), key(2)], "the newest first");
        assert_eq!(examples(Some("acme"), 10).await, vec![key(2), key(1)]);
        assert_eq!(examples(Some("initech"), 10).await, Vec::<String>::new());

        // The console's page: the newest of every group at once, by tenant and reason.
        let newest = |tenant: Option<&'static str>, per_group: u32| {
            let store = store.clone();
            async move {
                let rows = store.dead_letters_newest(tenant, per_group).await.unwrap();
                rows.into_iter().map(|r| r.key).collect::<Vec<_>>()
            }
        };
        assert_eq!(newest(Some("acme"), 10).await, vec![key(2), key(1), key(3)]);
        assert_eq!(newest(Some("acme"), 1).await, vec![key(2), key(3)], "the newest of each reason");
        assert_eq!(newest(None, 1).await, vec![key(2), key(3), key(4)], "every tenant's");
        assert!(newest(Some("initech"), 10).await.is_empty());
    })
    .await;
}

fn replay(selector: ReplaySelector, tenant: &str, at: i64) -> Replay {
    Replay {
        tenant: tenant.into(),
        selector,
        now_us: at,
        requested_by: Some("ops".into()),
        limit: 10,
        traceparent: None,
    }
}

/// An SMS provider's receipt for the first test intent (`key(1)`, message `m-1`).
fn sms_receipt(status: herald::receipt::DeliveryStatus, at: i64) -> NewReceipt {
    NewReceipt {
        target: ReceiptTarget::Key(key(1)),
        channel: Some("sms".into()),
        source: "twilio".into(),
        provider_message_id: Some("m-1".into()),
        status,
        provider_status: status.as_str().into(),
        reason: None,
        now_us: at,
        suppression_key: test_suppression_key(),
    }
}

#[tokio::test]
async fn a_dead_letter_replay_queues_what_can_go_again_and_says_why_not_for_the_rest() {
    each_backend(|store| async move {
        // key 1 dies after a try; key 2 never had content; key 3 was sent;
        // key 4's content is pruned by retention.
        store.events_ingest(dead_letter("default", 4, "rejected", T0)).await.unwrap();
        store.retention_batch(PruneStep::Payloads, T0 + 1, 100).await.unwrap();
        let later = T0 + DAY;
        let mut tried = ingest("r1", "fp1", vec![new_intent(&key(1), "sms", Some(later))]);
        tried.now_us = later;
        store.events_ingest(tried).await.unwrap();
        store.jobs_claim(claim(later, 10)).await.unwrap();
        store
            .attempts_finish(&[finished(
                &key(1),
                1,
                OutcomeClass::Permanent,
                Transition::Dead { reason: Reason::Rejected },
            )])
            .await
            .unwrap();
        let mut no_content = dead_letter("default", 2, "template_error", later);
        no_content.intents[0].payload = None;
        store.events_ingest(no_content).await.unwrap();
        store.events_ingest(settled(&key(3), "sms", "sent", later)).await.unwrap();

        let ids = ReplaySelector::Ids(vec![key(1), key(2), key(3), key(4), key(99)]);
        let out = store.dead_letters_replay(replay(ids, "default", later + 100)).await.unwrap();
        let outcomes: Vec<(String, ReplayOutcome)> = out.into_iter().map(|r| (r.key, r.outcome)).collect();
        assert_eq!(
            outcomes,
            vec![
                (key(1), ReplayOutcome::Queued),
                (key(2), ReplayOutcome::NoContent("template_error".into())),
                (key(3), ReplayOutcome::NotDead(State::Sent)),
                (key(4), ReplayOutcome::ContentPruned("rejected".into())),
                (key(99), ReplayOutcome::NotFound),
            ]
        );
        let d = store.intent_get("default", &key(1)).await.unwrap().unwrap();
        assert_eq!((d.intent.state.as_str(), d.intent.reason.as_deref(), d.intent.retry_base), ("queued", None, 1));
        // the same key and frozen content, a fresh budget counted from the replay
        let again = store.jobs_claim(claim(later + 100, 10)).await.unwrap();
        assert_eq!(again.len(), 1);
        assert_eq!((again[0].intent.key.clone(), again[0].intent.attempts), (key(1), 2));
        assert_eq!(again[0].content.as_deref(), Some(r#"{"body":"hello"}"#));
        // another tenant cannot replay it
        let foreign =
            store.dead_letters_replay(replay(ReplaySelector::Ids(vec![key(2)]), "acme", later)).await.unwrap();
        assert_eq!(foreign[0].outcome, ReplayOutcome::NotFound);
    })
    .await;
}

#[tokio::test]
async fn a_replay_by_reason_takes_the_replayable_first_up_to_its_limit() {
    each_backend(|store| async move {
        let mut no_content = dead_letter("default", 1, "rejected", T0);
        no_content.intents[0].payload = None;
        store.events_ingest(no_content).await.unwrap();
        for n in [2, 3, 4] {
            store.events_ingest(dead_letter("default", n, "rejected", T0 + i64::from(n))).await.unwrap();
        }
        store.events_ingest(dead_letter("default", 5, "hard_bounce", T0)).await.unwrap();
        let by_reason = ReplaySelector::Reason { reason: "rejected".into(), since_us: None };
        let out =
            store.dead_letters_replay(Replay { limit: 2, ..replay(by_reason, "default", T0 + 10) }).await.unwrap();
        let queued: Vec<String> =
            out.iter().filter(|r| r.outcome == ReplayOutcome::Queued).map(|r| r.key.clone()).collect();
        assert_eq!((out.len(), queued), (2, vec![key(2), key(3)]), "oldest replayable first");
        let since = ReplaySelector::Reason { reason: "rejected".into(), since_us: Some(T0 + 4) };
        let out = store.dead_letters_replay(replay(since, "default", T0 + 20)).await.unwrap();
        assert_eq!(out.iter().map(|r| r.key.clone()).collect::<Vec<_>>(), vec![key(4)], "only those dead since");
        let hard = store.intent_get("default", &key(5)).await.unwrap().unwrap();
        assert_eq!(hard.intent.state, "dead", "another reason is left alone");
    })
    .await;
}

#[tokio::test]
async fn the_next_daily_digest_starts_where_the_last_posted_one_ended() {
    each_backend(|store| async move {
        assert_eq!(store.ops_digest_last_until().await.unwrap(), None);
        let hour = 3_600_000_000;
        let now = jiff::Timestamp::now().as_microsecond();
        let claim = |slot: &str, until_us: i64| OpsDigestClaim {
            slot: slot.into(),
            since_us: until_us - 24 * hour,
            until_us,
            now_us: now,
            lease_us: 600_000_000,
        };
        assert!(store.ops_digest_claim(claim("2026-11-29", T0)).await.unwrap().is_some());
        assert_eq!(store.ops_digest_last_until().await.unwrap(), None, "claimed is not posted");
        store.ops_digest_posted("2026-11-29", now, 3).await.unwrap();
        assert_eq!(store.ops_digest_last_until().await.unwrap(), Some(T0));
        let last =
            OpsDigestRow { slot: "2026-11-29".into(), since: T0 - 24 * hour, until: T0, posted_at: now, total: 3 };
        assert_eq!(store.ops_digest_last().await.unwrap(), Some(last.clone()), "what the console's health page shows");
        // a manual post (`POST /v1/ops/dlq-digest`) does not move the schedule
        assert!(store.ops_digest_claim(claim("manual:1", T0 + 2 * hour)).await.unwrap().is_some());
        store.ops_digest_posted("manual:1", now, 0).await.unwrap();
        assert_eq!(store.ops_digest_last_until().await.unwrap(), Some(T0));
        assert_eq!(store.ops_digest_last().await.unwrap(), Some(last), "nor the last daily digest");
        assert!(store.ops_digest_claim(claim("2026-11-30", T0 + 24 * hour)).await.unwrap().is_some());
        store.ops_digest_posted("2026-11-30", now, 0).await.unwrap();
        assert_eq!(store.ops_digest_last_until().await.unwrap(), Some(T0 + 24 * hour));
    })
    .await;
}

#[tokio::test]
async fn retention_drops_old_attempt_text_and_keeps_the_outcome() {
    each_backend(|store| async move {
        store.events_ingest(ingest("r1", "fp1", vec![new_intent(&key(1), "sms", Some(T0))])).await.unwrap();
        store.jobs_claim(claim(T0, 10)).await.unwrap();
        let failed = FinishedAttempt {
            error: Some("550 no such mailbox".into()),
            error_class: Some(Reason::Rejected),
            ..finished(&key(1), 1, OutcomeClass::Permanent, Transition::Dead { reason: Reason::Rejected })
        };
        store.attempts_finish(&[failed]).await.unwrap();
        assert_eq!(store.retention_batch(PruneStep::AttemptDiagnostics, T0 + 10, 100).await.unwrap(), 0, "too young");
        assert_eq!(store.retention_batch(PruneStep::AttemptDiagnostics, T0 + 11, 100).await.unwrap(), 1);
        assert_eq!(store.retention_batch(PruneStep::AttemptDiagnostics, T0 + 11, 100).await.unwrap(), 0);
        let attempts = store.attempts_of(&[key(1)]).await.unwrap();
        assert_eq!(attempts[0].error, None);
        assert_eq!(
            (attempts[0].outcome.map(|o| o.as_str()), attempts[0].error_class.as_deref()),
            (Some("permanent"), Some("rejected"))
        );
    })
    .await;
}

#[tokio::test]
async fn retention_forgets_old_request_records_so_the_identity_is_new_again() {
    each_backend(|store| async move {
        let post = || ingest("r1", "fp1", vec![new_intent(&key(1), "sms", Some(T0))]);
        store.events_ingest(post()).await.unwrap();
        assert!(matches!(store.events_ingest(post()).await.unwrap(), IngestOutcome::Replayed { .. }));
        assert_eq!(store.retention_batch(PruneStep::Requests, T0, 100).await.unwrap(), 0, "too young");
        assert_eq!(store.retention_batch(PruneStep::Requests, T0 + 1, 100).await.unwrap(), 1);
        // the intent is still there: a new request for it creates nothing
        let again = store.events_ingest(post()).await.unwrap();
        let IngestOutcome::Accepted { response, any_created } = again else { panic!("{again:?}") };
        assert!(!any_created && !response.intents[0].created);
    })
    .await;
}

#[tokio::test]
async fn new_work_wakes_a_waiting_worker() {
    each_backend(|store| async move {
        // nothing new: the wait ends when its time is up
        store.wait_for_work(std::time::Duration::from_millis(10)).await;
        let waiter = {
            let store = store.clone();
            tokio::spawn(async move { store.wait_for_work(std::time::Duration::from_secs(3600)).await })
        };
        store.events_ingest(ingest("r1", "fp1", vec![new_intent(&key(1), "sms", Some(T0))])).await.unwrap();
        tokio::time::timeout(std::time::Duration::from_secs(60), waiter)
            .await
            .expect("the new job woke the waiter")
            .unwrap();
    })
    .await;
}

/// On Postgres another process's worker learns of new jobs by LISTEN. The
/// notifications are gathered (at most one per short window), so one asked
/// for while another was just sent must still come: each of several commits
/// in a row wakes the other store's waiting worker.
#[tokio::test]
async fn new_work_wakes_a_worker_of_another_process_each_time() {
    for backend in backends().into_iter().filter(|b| matches!(b, common::Backend::Postgres)) {
        let db = TestDb::new(backend).await;
        let (ours, theirs) = (db.store().await, db.store().await);
        for n in 1..=3 {
            let waiter = {
                let theirs = theirs.clone();
                tokio::spawn(async move { theirs.wait_for_work(std::time::Duration::from_secs(3600)).await })
            };
            // Each round's commit follows the last one's notification within
            // its window: it is asked for while the announcer waits. (A wake-up
            // that comes before the wait begins is kept for it; each commit
            // wakes the other store once, so none is left from a round before.)
            let request = ingest(&format!("r{n}"), &format!("fp{n}"), vec![new_intent(&key(n), "sms", Some(T0))]);
            ours.events_ingest(request).await.unwrap();
            tokio::time::timeout(std::time::Duration::from_secs(10), waiter)
                .await
                .unwrap_or_else(|_| panic!("commit {n} did not wake the other process's worker"))
                .unwrap();
        }
    }
}

/// A dead letter replayed (and a digest closed) queues work as an ingest
/// does: on Postgres another process's worker is told too, not left to its
/// next poll.
#[tokio::test]
async fn a_replayed_dead_letter_wakes_a_worker_of_another_process() {
    for backend in backends().into_iter().filter(|b| matches!(b, common::Backend::Postgres)) {
        let db = TestDb::new(backend).await;
        let ours = db.store().await;
        // A dead letter queues no job: nothing to tell anyone yet.
        ours.events_ingest(dead_letter("default", 1, "rejected", T0)).await.unwrap();
        let theirs = db.store().await;
        let waiter = {
            let theirs = theirs.clone();
            tokio::spawn(async move { theirs.wait_for_work(std::time::Duration::from_secs(3600)).await })
        };
        let out = ours.dead_letters_replay(replay(ReplaySelector::Ids(vec![key(1)]), "default", T0 + 1)).await;
        assert_eq!(out.unwrap()[0].outcome, ReplayOutcome::Queued);
        tokio::time::timeout(std::time::Duration::from_secs(10), waiter)
            .await
            .expect("the replay did not wake the other process's worker")
            .unwrap();
    }
}

/// Every notable transition, on every write path, leaves one publication row
/// in its own transaction — but only for a store that publishes.
#[tokio::test]
async fn each_notable_transition_leaves_one_publication_for_a_publishing_store() {
    use herald::receipt::DeliveryStatus;
    for backend in backends() {
        let db = TestDb::new(backend).await;
        // A process without [publish.nats] writes none.
        let quiet = db.store().await;
        quiet.events_ingest(ingest("r0", "fp0", vec![new_intent(&key(9), "sms", Some(T0))])).await.unwrap();
        quiet.jobs_claim(claim(T0, 10)).await.unwrap();
        quiet.attempts_finish(&[finished(&key(9), 1, OutcomeClass::Accepted, Transition::Sent)]).await.unwrap();
        assert_eq!(quiet.publications_backlog().await.unwrap().unpublished, 0, "{backend:?}");
        drop(quiet);

        let store = db.store_with(StoreOptions { publications: true }).await;
        let held = NewIntent {
            decision: Decision::Hold,
            state: State::Held,
            reason: Some(Reason::QuietHours),
            ..new_intent(&key(2), "sms", Some(T0 + 1_000_000_000))
        };
        let suppressed = NewIntent {
            decision: Decision::Suppress,
            state: State::Suppressed,
            reason: Some(Reason::OptedOut),
            ..new_intent(&key(3), "email", None)
        };
        let mut intents = vec![new_intent(&key(1), "sms", Some(T0)), held, suppressed];
        intents.push(new_intent(&key(4), "sms", Some(T0)));
        let mut first = ingest("r1", "fp1", intents);
        first.entity_id = "PO-2".into();
        store.events_ingest(first.clone()).await.unwrap();
        // A replay writes nothing new.
        store.events_ingest(first).await.unwrap();
        assert_eq!(store.jobs_claim(claim(T0, 10)).await.unwrap().len(), 2);
        let mut sent = finished(&key(1), 1, OutcomeClass::Accepted, Transition::Sent);
        sent.provider_message_id = Some("SM-P".into());
        store
            .attempts_finish(&[
                sent,
                finished(
                    &key(4),
                    1,
                    OutcomeClass::Unknown,
                    Transition::Retry { run_at_us: T0 + 5, state: State::Unknown },
                ),
            ])
            .await
            .unwrap();
        store.jobs_claim(claim(T0 + 5, 10)).await.unwrap();
        store
            .attempts_finish(&[finished(
                &key(4),
                2,
                OutcomeClass::Permanent,
                Transition::Dead { reason: Reason::Rejected },
            )])
            .await
            .unwrap();
        let delivered = NewReceipt {
            target: ReceiptTarget::ProviderMessageId("SM-P".into()),
            channel: Some("sms".into()),
            source: "twilio".into(),
            provider_message_id: Some("SM-P".into()),
            status: DeliveryStatus::Delivered,
            provider_status: "delivered".into(),
            reason: None,
            now_us: T0 + 100,
            suppression_key: test_suppression_key(),
        };
        store.receipt_record(delivered.clone()).await.unwrap();
        store.receipt_record(delivered).await.unwrap();

        let backlog = store.publications_backlog().await.unwrap();
        assert_eq!(backlog, PublicationBacklog { unpublished: 6, oldest_at_us: Some(T0) }, "{backend:?}");
        let lease = |lease_us| PublicationClaim { now_us: T0 + 200, lease_us, limit: 100 };
        // A lease of nothing lapses at once: the rows are offered again.
        assert_eq!(store.publications_claim(lease(0)).await.unwrap().len(), 6, "{backend:?}");
        let mut claimed = store.publications_claim(lease(3_600_000_000)).await.unwrap();
        claimed.sort_by(|a, b| a.msg_id.cmp(&b.msg_id));
        let ids: Vec<&str> = claimed.iter().map(|p| p.msg_id.as_str()).collect();
        let want = [
            // Each intent's publications numbered 1, 2, … in the order they happened.
            format!("{}:delivered:2", key(1)),
            format!("{}:sent:1", key(1)),
            format!("{}:held:1", key(2)),
            format!("{}:suppressed:1", key(3)),
            format!("{}:dead:2", key(4)),
            format!("{}:unknown:1", key(4)),
        ];
        assert_eq!(ids, want.iter().map(String::as_str).collect::<Vec<_>>(), "{backend:?}");
        let dead = claimed.iter().find(|p| p.state == "dead").unwrap();
        assert_eq!(
            (dead.reason.as_deref(), dead.entity_id.as_str(), dead.channel.as_str(), dead.attempts),
            (Some("rejected"), "PO-2", "sms", 2)
        );
        // Leased: another publisher gets none of them.
        assert!(store.publications_claim(lease(3_600_000_000)).await.unwrap().is_empty());
        let marked: Vec<String> = ids[..4].iter().map(|s| s.to_string()).collect();
        assert_eq!(store.publications_mark(&marked, T0 + 400).await.unwrap(), 4);
        assert_eq!(store.publications_mark(&marked, T0 + 401).await.unwrap(), 0, "marked once");
        assert_eq!(store.publications_backlog().await.unwrap().unpublished, 2);
        // Retention prunes only what was published, by its age.
        assert_eq!(store.retention_batch(PruneStep::Publications, T0 + 400, 100).await.unwrap(), 0);
        assert_eq!(store.retention_batch(PruneStep::Publications, T0 + 500, 100).await.unwrap(), 4);
        assert_eq!(store.publications_backlog().await.unwrap().unpublished, 2);
    }
}

#[tokio::test]
async fn the_consoles_health_figures_are_one_tenants_or_every_tenants() {
    each_backend(|store| async move {
        // acme: two intents due at T0, one scheduled later, one held for
        // quiet hours; globex: one due.
        let mut held = new_intent(&key(5), "email", Some(T0 + 7_200_000_000));
        held.state = State::Held;
        let acme: Vec<NewIntent> = vec![
            new_intent(&key(1), "sms", Some(T0)),
            new_intent(&key(2), "sms", Some(T0 + 5)),
            new_intent(&key(3), "sms", Some(T0 + 3_600_000_000)),
            held,
        ];
        store.events_ingest(Ingest { tenant: "acme".into(), ..ingest("r1", "fp1", acme) }).await.unwrap();
        let globex = vec![new_intent(&key(4), "sms", Some(T0 + 1))];
        let mut other = ingest("r2", "fp2", globex);
        (other.tenant, other.event_key) = ("globex".into(), "globex|e|x|1|t".into());
        store.events_ingest(other).await.unwrap();

        let now = T0 + 10;
        let q = store.queue_stats(Some("acme"), now).await.unwrap();
        assert_eq!(q, QueueStats { due: 2, total: 4, oldest_due_us: Some(T0) });
        let q = store.queue_stats(Some("globex"), now).await.unwrap();
        assert_eq!(q, QueueStats { due: 1, total: 1, oldest_due_us: Some(T0 + 1) });
        assert_eq!(
            store.queue_stats(Some("initech"), now).await.unwrap(),
            QueueStats { due: 0, total: 0, oldest_due_us: None }
        );
        assert_eq!(
            store.queue_stats(None, now).await.unwrap(),
            QueueStats { due: 3, total: 5, oldest_due_us: Some(T0) }
        );

        // Attempts by outcome: only finished ones, in [since, until).
        assert_eq!(store.jobs_claim(claim(now, 10)).await.unwrap().len(), 3);
        store
            .attempts_finish(&[
                finished(&key(1), 1, OutcomeClass::Accepted, Transition::Sent),
                finished(&key(2), 1, OutcomeClass::Permanent, Transition::Dead { reason: Reason::Rejected }),
                finished(&key(4), 1, OutcomeClass::Accepted, Transition::Sent),
            ])
            .await
            .unwrap();
        let acme = store.attempts_by_outcome(Some("acme"), T0, T0 + 11).await.unwrap();
        assert_eq!(acme, vec![("accepted".to_string(), 1), ("permanent".to_string(), 1)]);
        let all = store.attempts_by_outcome(None, T0, T0 + 11).await.unwrap();
        assert_eq!(all, vec![("accepted".to_string(), 2), ("permanent".to_string(), 1)], "most first");
        assert!(
            store.attempts_by_outcome(None, T0 + 11, T0 + 20).await.unwrap().is_empty(),
            "since is inclusive, until not"
        );
        assert!(store.attempts_by_outcome(Some("initech"), T0, T0 + 11).await.unwrap().is_empty());

        // An admin finds any tenant's intent by key, and searches every tenant.
        assert_eq!(store.intent_tenant(&key(4)).await.unwrap().as_deref(), Some("globex"));
        assert_eq!(store.intent_tenant(&key(9)).await.unwrap(), None);
        let every = |entity: Option<(&str, &str)>, recipient: Option<&str>| IntentFilter {
            tenant: None,
            entity: entity.map(|(t, i)| (t.to_string(), i.to_string())),
            recipient_id: recipient.map(String::from),
            state: None,
            cursor: None,
            limit: 10,
        };
        let found = store.intents_list(every(Some(("purchase_order", "PO-1")), None)).await.unwrap();
        let mut tenants: Vec<String> = found.items.iter().map(|i| i.tenant.clone()).collect();
        tenants.sort();
        assert_eq!(tenants, ["acme", "acme", "acme", "acme", "globex"]);
        assert_eq!(store.intents_list(every(None, Some("u-1"))).await.unwrap().items.len(), 5);
        let acme_only = IntentFilter { tenant: Some("acme".into()), ..every(None, Some("u-1")) };
        assert_eq!(store.intents_list(acme_only).await.unwrap().items.len(), 4);
    })
    .await;
}

const TP_A: &str = "00-0000000000000000000000000000000a-000000000000000a-01";
const TP_B: &str = "00-0000000000000000000000000000000b-000000000000000b-01";

#[tokio::test]
async fn a_digest_close_marks_the_members_it_leaves_out_digested_and_queues_its_trace_with_links() {
    each_backend(|store| async move {
        // Two requests in one batch, each with its trace (on Postgres, the
        // savepoint path: digest members never go set-wise; the set-wise
        // path is a_claimed_job_carries_its_requests_trace_on_every_retry's);
        // one member planned in shadow.
        let batch: Vec<Ingest> = [(1, TP_A, Mode::Shadow), (2, TP_B, Mode::Live)]
            .into_iter()
            .map(|(n, tp, mode)| {
                let member = NewIntent { mode, ..window_member(n) };
                let mut ingest = ingest(&format!("r{n}"), &format!("fp{n}"), vec![member]);
                (ingest.event_key, ingest.now_us, ingest.traceparent) =
                    (format!("default|e|x|{n}|t"), T0 + i64::from(n), Some(tp.into()));
                ingest
            })
            .collect();
        for outcome in store.events_ingest_batch(batch).await {
            assert!(matches!(outcome.unwrap(), IngestOutcome::Accepted { any_created: true, .. }));
        }
        let members = store.digest_members(&key(WINDOW)).await.unwrap();
        let traces: Vec<Option<&str>> = members.iter().map(|m| m.traceparent.as_deref()).collect();
        assert_eq!(traces, vec![Some(TP_A), Some(TP_B)], "each intent keeps the trace that planned it");

        let window = store.digests_due(T0 + DAY, 10).await.unwrap().remove(0);
        let close = DigestClose {
            shadow_members: vec![key(1)],
            traceparent: Some("00-000000000000000000000000000000dd-00000000000000dd-01".into()),
            links: Some(format!("{TP_A} {TP_B}")),
            ..closing(window, vec![key(1), key(2)], new_intent(&key(WINDOW), "email", Some(T0 + DAY)))
        };
        assert_eq!(store.digest_close(close).await.unwrap(), DigestCloseOutcome::Closed);
        let state = |d: IntentDetail| (d.intent.state, d.intent.link_key);
        let left_out = store.intent_get("default", &key(1)).await.unwrap().unwrap();
        assert!(left_out.intent.detail.as_deref().unwrap_or_default().contains("left out of the live digest"));
        assert_eq!(
            state(left_out),
            (State::Digested, Some(key(WINDOW))),
            "planned in shadow: a live Herald would have batched it, no message of its own"
        );
        let digested = store.intent_get("default", &key(2)).await.unwrap().unwrap();
        assert_eq!(state(digested), (State::Digested, Some(key(WINDOW))));

        let jobs = store.jobs_claim(claim(T0 + DAY, 10)).await.unwrap();
        assert_eq!(jobs.len(), 1, "the digest alone");
        assert_eq!(jobs[0].traceparent.as_deref(), Some("00-000000000000000000000000000000dd-00000000000000dd-01"));
        assert_eq!(jobs[0].links, Some(format!("{TP_A} {TP_B}")));
    })
    .await;
}

#[tokio::test]
async fn a_replayed_dead_letter_continues_the_replays_trace_linked_to_its_original() {
    each_backend(|store| async move {
        let mut dead = settled(&key(1), "sms", "dead", T0);
        dead.traceparent = Some(TP_A.into());
        store.events_ingest(dead).await.unwrap();
        let replay =
            Replay { traceparent: Some(TP_B.into()), ..replay(ReplaySelector::Ids(vec![key(1)]), "default", T0 + 10) };
        let results = store.dead_letters_replay(replay).await.unwrap();
        assert_eq!(results[0].outcome, ReplayOutcome::Queued);
        let jobs = store.jobs_claim(claim(T0 + 10, 10)).await.unwrap();
        assert_eq!(
            (jobs[0].traceparent.as_deref(), jobs[0].links.as_deref()),
            (Some(TP_B), Some(TP_A)),
            "the replay's trace, linked to the request that planned it"
        );
    })
    .await;
}

/// A replayed dead letter can end again without another attempt: a late
/// receipt for the try it already had ends the wait (dead again on a bounce,
/// sent again on a complaint). Each of those transitions is its own
/// publication, with its own `Nats-Msg-Id`; the same transition offered again
/// keeps its id, so the stream's duplicate window still drops a re-publication.
#[tokio::test]
async fn a_replayed_dead_letter_that_ends_again_without_a_try_is_published_again() {
    use herald::receipt::DeliveryStatus;
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let store = db.store_with(StoreOptions { publications: true }).await;
        store.events_ingest(ingest("r1", "fp1", vec![new_intent(&key(1), "sms", Some(T0))])).await.unwrap();
        store.jobs_claim(claim(T0, 10)).await.unwrap();
        store.attempts_finish(&[finished(&key(1), 1, OutcomeClass::Accepted, Transition::Sent)]).await.unwrap();
        let replay = |at: i64| replay(ReplaySelector::Ids(vec![key(1)]), "default", at);
        let state = || async { store.intent_get("default", &key(1)).await.unwrap().unwrap().intent };

        // sent → dead (undelivered) → replayed → dead (hard_bounce) → replayed → sent (complained)
        store.receipt_record(sms_receipt(DeliveryStatus::Undelivered, T0 + 20)).await.unwrap();
        store.dead_letters_replay(replay(T0 + 30)).await.unwrap();
        store.receipt_record(sms_receipt(DeliveryStatus::Bounced, T0 + 40)).await.unwrap();
        let again = state().await;
        assert_eq!((again.state, again.reason.as_deref(), again.attempts), (State::Dead, Some("hard_bounce"), 1));
        store.dead_letters_replay(replay(T0 + 50)).await.unwrap();
        store.receipt_record(sms_receipt(DeliveryStatus::Complained, T0 + 60)).await.unwrap();
        let last = state().await;
        assert_eq!((last.state, last.attempts), (State::Sent, 1), "{backend:?}");

        let claim = |now_us| PublicationClaim { now_us, lease_us: 0, limit: 100 };
        let mut rows = store.publications_claim(claim(T0 + 100)).await.unwrap();
        rows.sort_by_key(|p| p.at);
        let seen: Vec<(&str, Option<&str>, i64)> =
            rows.iter().map(|p| (p.state.as_str(), p.reason.as_deref(), p.at)).collect();
        assert_eq!(
            seen,
            vec![
                ("sent", None, T0 + 10),
                ("dead", Some("undelivered"), T0 + 20),
                ("dead", Some("hard_bounce"), T0 + 40),
                ("sent", None, T0 + 60),
            ],
            "{backend:?}: every transition is a publication"
        );
        let ids: HashSet<&str> = rows.iter().map(|p| p.msg_id.as_str()).collect();
        assert_eq!(ids.len(), 4, "{backend:?}: each transition its own msg_id: {ids:?}");
        // Offered again (the lease lapsed): the same transitions, the same ids.
        let offered_again = store.publications_claim(claim(T0 + 200)).await.unwrap();
        let ids_again: HashSet<&str> = offered_again.iter().map(|p| p.msg_id.as_str()).collect();
        assert_eq!(ids_again, ids, "{backend:?}");
    }
}

/// Applies this checkout's migrations up to `last` only, as an older Herald
/// would have left the database.
async fn migrate_up_to(db: &TestDb, last: i64) {
    let dialect = match db.backend {
        common::Backend::Sqlite => "sqlite",
        common::Backend::Postgres => "postgres",
    };
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(format!("{}/migrations/{dialect}", env!("CARGO_MANIFEST_DIR"))).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        let version: i64 = name.split('_').next().unwrap().parse().unwrap();
        if version <= last {
            std::fs::copy(&path, dir.path().join(&name)).unwrap();
        }
    }
    let migrator = sqlx::migrate::Migrator::new(dir.path()).await.unwrap();
    match db.backend {
        common::Backend::Sqlite => {
            let options = sqlx::sqlite::SqliteConnectOptions::new().filename(db.url.trim_start_matches("sqlite://"));
            let pool = sqlx::SqlitePool::connect_with(options.create_if_missing(true)).await.unwrap();
            migrator.run(&pool).await.unwrap();
            pool.close().await;
        }
        common::Backend::Postgres => {
            let pool = sqlx::PgPool::connect(&db.url).await.unwrap();
            migrator.run(&pool).await.unwrap();
            pool.close().await;
        }
    }
}

/// Rows an older Herald published were numbered by the intent's attempt
/// count (`key:dead:1`). After the upgrade (migration 0043) the intent's next
/// transition takes a number above those, so it is not dropped as a repeat of
/// an old one.
#[tokio::test]
async fn after_the_upgrade_a_transition_is_not_taken_for_one_published_before_it() {
    use herald::receipt::DeliveryStatus;
    for backend in backends() {
        let db = TestDb::new(backend).await;
        migrate_up_to(&db, 42).await;
        // The old Herald: sent at the first try, then dead by a receipt, both published.
        let old = herald::store::connect_with(&db.url, StoreOptions::default()).await.unwrap();
        old.events_ingest(ingest("r1", "fp1", vec![new_intent(&key(1), "sms", None)])).await.unwrap();
        // Its job as that Herald wrote it (this one's carries a tenant, which
        // the older schema has no column for).
        common::execute(&db, &format!("INSERT INTO jobs (intent_key, run_at) VALUES ('{}', {T0})", key(1))).await;
        old.jobs_claim(claim(T0, 10)).await.unwrap();
        old.attempts_finish(&[finished(&key(1), 1, OutcomeClass::Accepted, Transition::Sent)]).await.unwrap();
        old.receipt_record(sms_receipt(DeliveryStatus::Undelivered, T0 + 20)).await.unwrap();
        drop(old);
        for (state, at) in [("sent", T0 + 10), ("dead", T0 + 20)] {
            common::execute(
                &db,
                &format!(
                    "INSERT INTO publications (msg_id, tenant, intent_key, entity_type, entity_id, channel,
                                               recipient_id, state, attempts, at, published_at)
                     VALUES ('{k}:{state}:1', 'default', '{k}', 'purchase_order', 'PO-1', 'sms', 'u-1', '{state}', 1,
                             {at}, {at})",
                    k = key(1)
                ),
            )
            .await;
        }

        // The new Herald: the dead letter replayed, and a late bounce ends it again.
        let store = db.store_with(StoreOptions { publications: true }).await;
        store.dead_letters_replay(replay(ReplaySelector::Ids(vec![key(1)]), "default", T0 + 30)).await.unwrap();
        store.receipt_record(sms_receipt(DeliveryStatus::Bounced, T0 + 40)).await.unwrap();
        let rows =
            store.publications_claim(PublicationClaim { now_us: T0 + 100, lease_us: 0, limit: 100 }).await.unwrap();
        let new: Vec<(&str, &str, Option<&str>)> =
            rows.iter().map(|p| (p.msg_id.as_str(), p.state.as_str(), p.reason.as_deref())).collect();
        let want = format!("{}:dead:2", key(1));
        assert_eq!(new, vec![(want.as_str(), "dead", Some("hard_bounce"))], "{backend:?}");
    }
}

/// A database an older Herald left (before migration 0052) keeps its dead
/// letters and its queue when their indexes move off the intent's state: a
/// dead letter is listed, counted and replayed by the time it died, a waiting
/// job is counted in its tenant's queue, and a job whose intent was gone is
/// not carried over.
#[tokio::test]
async fn an_older_databases_dead_letters_and_queue_are_carried_over() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        migrate_up_to(&db, 51).await;
        let intent = |n: u32, tenant: &str, state: &str, reason: &str, at: i64| {
            format!(
                "INSERT INTO intents (key, tenant, event_type, entity_type, entity_id, occurred_at, channel,
                                      recipient_id, template_id, event_digest, payload_digest, decision, reason,
                                      state, attempts, created_at, updated_at)
                 VALUES ('{k}', '{tenant}', 'purchase_order.approved', 'purchase_order', 'PO-{n}',
                         '2026-11-29T04:30:00Z', 'sms', 'u-1', 'po_approved', 'event-1', 'content-1', 'send', {reason},
                         '{state}', 1, {T0}, {at})",
                k = key(n)
            )
        };
        for sql in [
            format!(
                "INSERT INTO payloads (digest, body, created_at) VALUES ('content-1', '{{\"body\":\"hi\"}}', {T0})"
            ),
            intent(1, "acme", "dead", "'hard_bounce'", T0 + 20),
            intent(2, "acme", "queued", "NULL", T0),
            intent(3, "globex", "sent", "NULL", T0 + 5),
            format!("INSERT INTO jobs (intent_key, run_at) VALUES ('{}', {T0})", key(2)),
            format!("INSERT INTO jobs (intent_key, run_at) VALUES ('{}', {T0})", key(9)),
        ] {
            common::execute(&db, &sql).await;
        }

        let store = db.store().await;
        let filter = DeadLetterFilter { tenant: Some("acme".into()), limit: 10, ..Default::default() };
        let listed = store.dead_letters_list(filter.clone()).await.unwrap();
        let listed: Vec<(&str, i64)> =
            listed.items.iter().map(|d| (d.intent.key.as_str(), d.intent.updated_at)).collect();
        assert_eq!(listed, vec![(key(1).as_str(), T0 + 20)], "{backend:?}");
        let groups = store.dead_letters_groups(None).await.unwrap();
        assert_eq!(
            groups,
            vec![DeadLetterGroup { tenant: "acme".into(), reason: "hard_bounce".into(), count: 1, oldest_at: T0 + 20 }],
            "{backend:?}"
        );
        assert_eq!(store.dead_letters_summary(None, T0 + 20, T0 + 21).await.unwrap(), vec![("hard_bounce".into(), 1)]);
        assert_eq!(store.dead_letters_summary(None, T0 + 21, T0 + 99).await.unwrap(), vec![], "{backend:?}");
        let q = store.queue_stats(Some("acme"), T0 + 1).await.unwrap();
        assert_eq!(q, QueueStats { due: 1, total: 1, oldest_due_us: Some(T0) }, "{backend:?}");
        assert_eq!(store.queue_stats(None, T0 + 1).await.unwrap().total, 1, "{backend:?}: the orphan job is gone");

        // Replayed by reason since the time it died: off the list, on the queue.
        let selector = ReplaySelector::Reason { reason: "hard_bounce".into(), since_us: Some(T0 + 20) };
        let replayed = store.dead_letters_replay(replay(selector, "acme", T0 + 30)).await.unwrap();
        assert_eq!(replayed.len(), 1, "{backend:?}: {replayed:?}");
        assert!(store.dead_letters_list(filter).await.unwrap().items.is_empty(), "{backend:?}");
        assert_eq!(store.dead_letters_groups(Some("acme")).await.unwrap(), vec![], "{backend:?}");
        assert_eq!(store.queue_stats(Some("acme"), T0 + 31).await.unwrap().total, 2, "{backend:?}");
    }
}

/// Postgres changes a row in place (a HOT update, writing no index) only
/// when no column an index reads changes. The worker changes an intent's
/// state twice on its way out; none of the columns those changes write may
/// be read by an index on `intents`, in its key, expressions or predicate.
/// (Before migration 0052 three indexes read `state` or `updated_at`.)
#[tokio::test]
async fn no_index_on_intents_reads_a_column_that_a_delivery_changes() {
    if !backends().contains(&common::Backend::Postgres) {
        return;
    }
    use sqlx::Connection;
    let indexed = |db: TestDb| async move {
        let mut conn = sqlx::PgConnection::connect(&db.url).await.unwrap();
        // Key columns from pg_index; the columns of expressions and
        // predicates from the dependencies Postgres records for them.
        let columns: Vec<String> = sqlx::query_scalar(
            "SELECT a.attname FROM pg_index x
                 JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = ANY(x.indkey)
                 WHERE x.indrelid = 'intents'::regclass
                 UNION
                 SELECT a.attname FROM pg_index x
                 JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = x.indexrelid
                                 AND d.refclassid = 'pg_class'::regclass AND d.refobjid = x.indrelid
                 JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = d.refobjsubid
                 WHERE x.indrelid = 'intents'::regclass
                 ORDER BY 1",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap();
        columns
    };
    // What starting an attempt and recording its outcome write.
    let changed = ["attempts", "publication_seq", "state", "updated_at"];
    let old = TestDb::new(common::Backend::Postgres).await;
    migrate_up_to(&old, 51).await;
    let before = indexed(old).await;
    assert!(before.iter().any(|c| c == "state"), "the check sees a predicate's column: {before:?}");
    let db = TestDb::new(common::Backend::Postgres).await;
    db.store().await;
    let now = indexed(db).await;
    let read: Vec<&String> = now.iter().filter(|c| changed.contains(&c.as_str())).collect();
    assert!(read.is_empty(), "indexed columns a delivery changes: {read:?} (of {now:?})");
}

#[tokio::test]
async fn postgres_sessions_plan_for_a_working_set_in_memory_unless_someone_chose_otherwise() {
    let Some(db) = common::postgres_db().await else { return };
    let cost = |store: PostgresStore| async move {
        let mut conn = store.pool().acquire().await.unwrap();
        sqlx::query_scalar::<_, String>("SHOW random_page_cost").fetch_one(&mut *conn).await.unwrap()
    };
    assert_eq!(cost(PostgresStore::connect(&db.url).await.unwrap()).await, RANDOM_PAGE_COST);
    // A setting someone chose, higher or lower, is kept.
    for chosen in ["2", "1"] {
        common::execute(
                &db,
                &format!(
                    "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET random_page_cost = {chosen}', current_database()); END $$"
                ),
            )
            .await;
        assert_eq!(cost(PostgresStore::connect(&db.url).await.unwrap()).await, chosen);
    }
}

/// The replay check's generic plan, made on an empty table as it is when a
/// deployment starts: Postgres keeps it for the connection's life, so it must
/// probe the primary key once per identity, not scan the tenant's rows (as
/// `tenant = $2 AND identity = ANY($1)` was planned, a bitmap scan filtered
/// by the list, 9,900 rows a lookup by 10,000 requests).
#[tokio::test]
async fn the_replay_checks_plan_probes_each_identity_from_an_empty_table_on() {
    let Some(db) = common::postgres_db().await else { return };
    let store = PostgresStore::connect(&db.url).await.unwrap();
    store.migrate().await.unwrap();
    let mut conn = store.pool().acquire().await.unwrap();
    sqlx::query("SET plan_cache_mode = force_generic_plan").execute(&mut *conn).await.unwrap();
    sqlx::query(&format!("PREPARE replay_check(text[], text) AS {REQUESTS_OF_TENANT}"))
        .execute(&mut *conn)
        .await
        .unwrap();
    let plan: Vec<String> = sqlx::query_scalar("EXPLAIN EXECUTE replay_check(ARRAY['a', 'b'], 'default')")
        .fetch_all(&mut *conn)
        .await
        .unwrap();
    let plan = plan.join("\n");
    assert!(plan.contains("Index Scan using requests_pkey"), "{plan}");
    assert!(plan.contains("Index Cond: ((tenant = $2) AND (identity = u.identity))"), "{plan}");
    for scan in ["Seq Scan", "Bitmap", "Hash"] {
        assert!(!plan.contains(scan), "{scan} in the replay check's plan:\n{plan}");
    }
}

/// The suppression key the store tests' receipts are recorded with.
fn test_suppression_key() -> herald::suppression::SuppressionKey {
    herald::suppression::SuppressionKey::new(vec![42; 32]).unwrap()
}

/// A deployment-wide setting is settled by the first writer: every later
/// caller, whatever value it offers, gets the first one.
#[tokio::test]
async fn a_setting_is_settled_once_for_every_process() {
    each_backend(|store| async move {
        assert_eq!(store.setting_get_or_insert("suppression.key", "first").await.unwrap(), "first");
        assert_eq!(store.setting_get_or_insert("suppression.key", "second").await.unwrap(), "first");
        assert_eq!(store.setting_get_or_insert("other", "x").await.unwrap(), "x");
    })
    .await;
}

/// Rekeying an old list: an entry whose source intent still has its
/// destination moves to the keyed lookup and is named; one whose intent is
/// gone keeps its old hash, is named, and is still found by it; a second
/// run changes nothing.
#[tokio::test]
async fn the_old_suppression_list_is_rekeyed_from_its_intents_and_none_is_lost() {
    use herald::recipient::Kind;
    use herald::suppression::{RekeyReport, entry_id, legacy_hash};
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let store = db.store().await;
        let mut intent = new_intent(&key(1), "sms", Some(T0));
        intent.destination = Some("+9779800000031".into());
        store.events_ingest(ingest("r1", "fp1", vec![intent])).await.unwrap();
        // As an older Herald wrote them (migration 0060 left them unkeyed and unnamed).
        for (number, source) in [("+9779800000031", key(1)), ("+9779800000032", key(2))] {
            common::execute(
                &db,
                &format!(
                    "INSERT INTO suppressions (tenant, address_hash, channel, masked, reason, source_intent, created_at)
                     VALUES ('default', '{}', 'sms', 'masked', 'address_bounced', '{source}', {T0})",
                    legacy_hash("default", Kind::Phone, number)
                ),
            )
            .await;
        }
        let k = test_suppression_key();
        let report = store.suppressions_rekey(&k).await.unwrap();
        assert_eq!(report, RekeyReport { rekeyed: 1, left: 1 }, "{backend:?}");
        let kept = store.suppressions_match("default", &[k.lookup("default", Kind::Phone, "+9779800000031")]).await;
        assert_eq!(kept.unwrap()[0].id.as_deref(), Some(entry_id("default", &key(1)).as_str()));
        let left = store.suppressions_match("default", &[legacy_hash("default", Kind::Phone, "+9779800000032")]).await;
        assert_eq!(left.unwrap()[0].id.as_deref(), Some(entry_id("default", &key(2)).as_str()), "named, still found");
        assert_eq!(store.suppressions_list("default", None, 10).await.unwrap().items.len(), 2, "none lost");
        let again = store.suppressions_rekey(&k).await.unwrap();
        assert_eq!(again, RekeyReport { rekeyed: 0, left: 1 }, "{backend:?}: nothing more to do");
    }
}
