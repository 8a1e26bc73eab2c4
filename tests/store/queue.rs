//! The queue: claims and their attempt rows, leases and rescues, outcomes, superseded versions, the wake-up of a waiting worker.

use super::*;

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
