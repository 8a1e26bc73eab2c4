//! Digest windows from due to closed, and the in-app inbox.

use super::*;

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
