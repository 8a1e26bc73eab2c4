//! Operations: retention, dead-letter replays, the daily digest.

use super::*;

#[tokio::test]
async fn retention_clears_an_old_message_and_event_body_unless_the_intent_still_needs_them() {
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
        // the same message rendered for another intent, 60 days later: each
        // intent holds its own, which ages with it
        let mut again = ingest("r-new", "fp-new", vec![new_intent(&key(4), "sms", None)]);
        again.intents[0].payload = Some(("shared".into(), "{}".into()));
        again.now_us = T0 + 60 * day;
        store.events_ingest(again).await.unwrap();
        // suppressed: nothing rendered, only the event body in its row
        let mut quiet = ingest("r-quiet", "fp-quiet", vec![new_intent(&key(5), "sms", None)]);
        let it = &mut quiet.intents[0];
        (it.payload, it.decision, it.state) = (None, Decision::Suppress, State::Suppressed);
        store.events_ingest(quiet).await.unwrap();

        let pruned = store.retention_batch(PruneStep::Contents, T0 + 30 * day, 100).await.unwrap();
        assert_eq!(pruned, 3, "the three old intents nothing waits for give up what they carry");
        let detail = |k: String| {
            let store = store.clone();
            async move { store.intent_get("default", &k).await.unwrap().unwrap() }
        };
        let gone = detail(key(1)).await;
        assert!(gone.content.is_none(), "old, and nothing waits for it: cleared");
        assert!(gone.event_body.is_none(), "its event body with it");
        assert_eq!(gone.intent.payload_digest.as_deref(), Some("shared"), "its digest stays on the record");
        assert_eq!(gone.intent.event_digest, "fp-old", "and the event's");
        assert!(detail(key(3)).await.content.is_none(), "old, and nothing waits for it: cleared");
        let quiet = detail(key(5)).await;
        assert!(quiet.content.is_none() && quiet.event_body.is_none(), "an event body alone is cleared too");
        let young = detail(key(4)).await;
        assert!(young.content.is_some() && young.event_body.is_some(), "the young intent keeps its own");
        let waiting = detail(key(2)).await;
        assert!(waiting.content.is_some() && waiting.event_body.is_some(), "its job still waits: kept");
        assert_eq!(store.retention_batch(PruneStep::Contents, T0 + 30 * day, 100).await.unwrap(), 0, "once");
    })
    .await;
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

#[tokio::test]
async fn a_dead_letter_replay_queues_what_can_go_again_and_says_why_not_for_the_rest() {
    each_backend(|store| async move {
        // key 1 dies after a try; key 2 never had content; key 3 was sent;
        // key 4's content is pruned by retention.
        store.events_ingest(dead_letter("default", 4, "rejected", T0)).await.unwrap();
        assert_eq!(store.retention_batch(PruneStep::Contents, T0 + 1, 100).await.unwrap(), 1);
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
        // retention at a cutoff before the replay leaves the re-queued
        // intent its content (the claim below reads it)
        store.retention_batch(PruneStep::Contents, later + 50, 100).await.unwrap();
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
