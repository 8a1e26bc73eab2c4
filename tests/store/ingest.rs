//! Ingest: request records, replays and mismatches, event content and conflicts, batches on every write path, the ingest tally.

use super::*;

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

/// A request that planned one intent keeps its event body in that intent's
/// row and writes no payload row for it; a broadcast writes one payload row
/// that its intents share. Every reader finds the body either way
/// (migration 0066).
#[tokio::test]
async fn an_event_body_is_kept_in_its_one_intents_row_or_once_for_a_broadcast() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let store = db.store().await;
        let alone = Ingest { event_body: r#"{"audience":"one"}"#.into(), ..dead_letter("default", 1, "rejected", T0) };
        store.events_ingest(alone).await.unwrap();
        let mut dead = dead_letter("default", 3, "rejected", T0).intents.remove(0);
        dead.recipient_id = "u-2".into();
        let broadcast = Ingest {
            event_body: r#"{"audience":"two"}"#.into(),
            ..request("r2", "fp-two", "E2", "c2", vec![new_intent(&key(2), "sms", Some(T0)), dead])
        };
        store.events_ingest(broadcast).await.unwrap();

        let payloads = "SELECT digest FROM payloads WHERE digest IN ('fp1', 'fp-two')";
        assert_eq!(common::texts(&db, payloads).await, vec!["fp-two"], "{backend:?}: only the broadcast's body, once");
        let inline = "SELECT key FROM intents WHERE event_body IS NOT NULL";
        assert_eq!(common::texts(&db, inline).await, vec![key(1)], "{backend:?}: the lone intent carries its own");

        let body = |audience: &str| Some(format!(r#"{{"audience":"{audience}"}}"#));
        for (k, audience) in [(key(1), "one"), (key(2), "two"), (key(3), "two")] {
            let shown = store.intent_get("default", &k).await.unwrap().unwrap();
            assert_eq!(shown.event_body, body(audience), "{backend:?}: {k}");
        }
        let filter = DeadLetterFilter { tenant: Some("default".into()), limit: 10, ..Default::default() };
        let mut letters: Vec<(String, Option<String>)> = (store.dead_letters_list(filter).await.unwrap().items)
            .into_iter()
            .map(|d| (d.intent.key, d.event_body))
            .collect();
        letters.sort();
        assert_eq!(letters, vec![(key(1), body("one")), (key(3), body("two"))], "{backend:?}");
    }
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
        // The database's refusal, from sqlx or (SQLite's writer's own
        // connection) from rusqlite.
        let refused = matches!(outcomes[1], Err(StoreError::Database(_) | StoreError::Sqlite(_)));
        assert!(refused, "{backend:?}: {:?}", outcomes[1]);
        assert!(outcomes[1].as_ref().is_err_and(|e| e.to_string().contains("poisoned row")), "{backend:?}");
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
    insert_event(&mut other, &first).await.unwrap();
    insert_request(&mut other, &first).await.unwrap();
    let batch = vec![ingest_content("key:K", "fp2", "c2", vec![]), ingest_content("key:L", "fp3", "c2", vec![])];
    let writer = store.clone();
    let outcomes = tokio::spawn(async move { writer.events_ingest_batch(batch).await });
    assert_eq!(until_waiting(&store).await, 1, "the batch waits on the uncommitted event");
    other.commit().await.unwrap();
    let out: Vec<_> = outcomes.await.unwrap().into_iter().map(Result::unwrap).collect();
    assert_eq!(out, vec![IngestOutcome::Mismatch, IngestOutcome::Conflict]);
}

/// Two processes writing one event at once: one (the row-by-row path of
/// another process) has written the event's record and not yet its request
/// record; this one's batch, guessed all new, waits at the event. It must
/// hold nothing the other needs while it waits: the other's request record
/// goes in at once, and no deadlock is left for Postgres to find. (The
/// all-new statement once wrote its request record first, so the other's
/// insert waited for it while it waited for the event: Postgres aborted one
/// after its `deadlock_timeout`.) The batch then finds the other's record:
/// a replay.
#[tokio::test]
async fn a_batch_guessed_new_waits_for_anothers_event_holding_nothing_the_other_needs() {
    let Some(db) = common::postgres_db().await else { return };
    let store = Arc::new(PostgresStore::connect(&db.url).await.unwrap());
    store.migrate().await.unwrap();
    let request = ingest("key:K", "fp1", vec![new_intent(&key(1), "sms", Some(T0))]);
    let mut other = store.pool().begin().await.unwrap();
    insert_event(&mut other, &request).await.unwrap();
    let writer = store.clone();
    let batch = vec![request.clone()];
    let outcomes = tokio::spawn(async move { writer.events_ingest_batch(batch).await });
    assert_eq!(until_waiting(&store).await, 1, "the batch waits on the uncommitted event");
    // Well within Postgres's `deadlock_timeout` (a second): a wait here is
    // a wait for the batch's own request record.
    sqlx::query("SET LOCAL lock_timeout = '300ms'").execute(&mut *other).await.unwrap();
    let recorded = insert_request(&mut other, &request).await;
    assert!(recorded.is_ok(), "the other's request record waited for the batch: {recorded:?}");
    other.commit().await.unwrap();
    let out: Vec<_> = outcomes.await.unwrap().into_iter().map(Result::unwrap).collect();
    assert!(matches!(out.as_slice(), [IngestOutcome::Replayed { .. }]), "{out:?}");
    let deadlocks: i64 =
        sqlx::query_scalar("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
            .fetch_one(store.pool())
            .await
            .unwrap();
    assert_eq!(deadlocks, 0);
}

/// A request's event record, written in `tx` as another process's
/// row-by-row path writes it first.
async fn insert_event(tx: &mut sqlx::PgTransaction<'_>, r: &Ingest) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO events (event_key, tenant, event_type, entity_type, entity_id, occurred_at, content_digest, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(&r.event_key)
    .bind(&r.tenant)
    .bind(&r.event_type)
    .bind(&r.entity_type)
    .bind(&r.entity_id)
    .bind(&r.occurred_at)
    .bind(&r.content_digest)
    .bind(T0)
    .execute(&mut **tx)
    .await
    .map(drop)
}

/// A request's record, answered with no intents, written in `tx` as another
/// process's row-by-row path writes it last.
async fn insert_request(tx: &mut sqlx::PgTransaction<'_>, r: &Ingest) -> Result<(), sqlx::Error> {
    let response = format!(r#"{{"event_key":"{}","replayed":false,"intents":[]}}"#, r.event_key);
    sqlx::query(
        "INSERT INTO requests (tenant, identity, fingerprint, created_at, status, response) VALUES ($1, $2, $3, $4, 202, $5)",
    )
    .bind(&r.tenant)
    .bind(&r.identity)
    .bind(&r.fingerprint)
    .bind(T0)
    .bind(response)
    .execute(&mut **tx)
    .await
    .map(drop)
}

/// How many of the database's sessions wait for a lock, once one does (or
/// none did within five seconds).
async fn until_waiting(store: &PostgresStore) -> i64 {
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
    waiting
}
