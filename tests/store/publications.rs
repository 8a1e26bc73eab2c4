//! Publications of notable transitions, across upgrades.

use super::*;

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

        let store = db.publishing_store().await;
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
        let store = db.publishing_store().await;
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

/// Rows an older Herald published were numbered by the intent's attempt
/// count (`key:dead:1`). After the upgrade (migration 0043) the intent's next
/// transition takes a number above those, so it is not dropped as a repeat of
/// an old one; and a deployment that published before the triggers went
/// (0061) publishes after, before any process has started with the bus.
#[tokio::test]
async fn after_the_upgrade_a_transition_is_not_taken_for_one_published_before_it() {
    use herald::receipt::DeliveryStatus;
    for backend in backends() {
        let db = TestDb::new(backend).await;
        migrate_up_to(&db, 42).await;
        // The old Herald (its rows as it wrote them, this release's statements
        // being for the schema after it): sent at the first try, then dead by
        // a receipt, both published.
        let k = key(1);
        for sql in [
            format!("INSERT INTO payloads (digest, body, created_at) VALUES ('p-1', '{{}}', {T0})"),
            format!(
                "INSERT INTO intents (key, tenant, event_type, entity_type, entity_id, occurred_at, channel,
                                      recipient_id, destination, template_id, event_digest, payload_digest, decision,
                                      reason, state, attempts, created_at, updated_at)
                 VALUES ('{k}', 'default', 'po.created', 'purchase_order', 'PO-1', '2026-11-29T10:00:00Z', 'sms',
                         'u-1', '+15550000001', 't', 'e-1', 'p-1', 'send', 'undelivered', 'dead', 1, {T0}, {})",
                T0 + 20
            ),
            format!(
                "INSERT INTO attempts (intent_key, n, started_at, finished_at, outcome, provider_message_id)
                 VALUES ('{k}', 1, {T0}, {}, 'accepted', 'm-1')",
                T0 + 10
            ),
        ]
        .into_iter()
        .chain([("sent", T0 + 10), ("dead", T0 + 20)].map(|(state, at)| {
            format!(
                "INSERT INTO publications (msg_id, tenant, intent_key, entity_type, entity_id, channel,
                                           recipient_id, state, attempts, at, published_at)
                 VALUES ('{k}:{state}:1', 'default', '{k}', 'purchase_order', 'PO-1', 'sms', 'u-1', '{state}', 1,
                         {at}, {at})"
            )
        })) {
            common::execute(&db, &sql).await;
        }
        // The new Herald: the dead letter replayed, and a late bounce ends it
        // again. No process of it has started with the bus: the deployment
        // published, so the upgrade (0061) keeps it publishing.
        let store = db.store().await;
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

/// Every publication waiting, by id.
async fn waiting(store: &Arc<dyn Store>) -> Vec<String> {
    let claim = PublicationClaim { now_us: T0 + 2 * DAY, lease_us: 0, limit: 100 };
    let mut ids: Vec<String> = store.publications_claim(claim).await.unwrap().into_iter().map(|p| p.msg_id).collect();
    ids.sort();
    ids
}

/// The defect this release mends: a process without `[publish.nats]` (an
/// API-only one) published nothing it changed, and a Postgres session that
/// lost its setting (a transaction-mode pooler) neither. Whether to publish
/// is the database's now: once any publishing process has started, every
/// process publishes; removing the setting stops it.
#[tokio::test]
async fn a_process_without_the_bus_publishes_what_it_changes_once_the_deployment_publishes() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        // A process with the bus started once, and is gone.
        drop(db.publishing_store().await);
        let api = db.store().await;
        let suppressed = NewIntent {
            decision: Decision::Suppress,
            state: State::Suppressed,
            reason: Some(Reason::OptedOut),
            ..new_intent(&key(1), "email", None)
        };
        api.events_ingest(ingest("r1", "fp1", vec![suppressed, new_intent(&key(2), "sms", Some(T0))])).await.unwrap();
        api.jobs_claim(claim(T0, 10)).await.unwrap();
        api.attempts_finish(&[finished(&key(2), 1, OutcomeClass::Accepted, Transition::Sent)]).await.unwrap();
        assert_eq!(
            waiting(&api).await,
            vec![format!("{}:suppressed:1", key(1)), format!("{}:sent:1", key(2))],
            "{backend:?}"
        );

        // Turned off (docs/bus.md): nothing more is written.
        assert!(api.setting_remove(PUBLICATIONS_SETTING).await.unwrap());
        api.events_ingest(ingest("r3", "fp3", vec![new_intent(&key(3), "sms", Some(T0))])).await.unwrap();
        api.jobs_claim(claim(T0, 10)).await.unwrap();
        api.attempts_finish(&[finished(&key(3), 1, OutcomeClass::Accepted, Transition::Sent)]).await.unwrap();
        assert_eq!(api.publications_backlog().await.unwrap().unpublished, 2, "{backend:?}");
    }
}

/// The paths to a published state the first test does not take: a claim
/// that ends a job (superseded, shadowed, dead after its worker died on the
/// last try), an intent dead when planned, and a digest closing (its members
/// digested when it rendered, each on its own when it did not). Each arrival
/// is one publication; a change that is no arrival is none.
#[tokio::test]
async fn each_way_a_claim_or_a_digest_ends_an_intent_is_one_publication() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let store = db.publishing_store().await;
        let versioned = |n: u32, entity: &str, version: i64, intents: Vec<NewIntent>| Ingest {
            entity_id: entity.into(),
            entity_version: Some(version),
            event_key: format!("default|e|{entity}|{version}|t"),
            ..ingest(&format!("r{n}"), &format!("fp{n}"), intents)
        };
        store.events_ingest(versioned(1, "PO-1", 1, vec![new_intent(&key(1), "sms", Some(T0))])).await.unwrap();
        store.events_ingest(versioned(2, "PO-1", 2, vec![new_intent(&key(2), "sms", Some(T0 + DAY))])).await.unwrap();
        let shadow = NewIntent { mode: Mode::Shadow, ..new_intent(&key(3), "sms", Some(T0)) };
        store.events_ingest(versioned(3, "PO-3", 1, vec![shadow])).await.unwrap();
        store.events_ingest(versioned(4, "PO-4", 1, vec![new_intent(&key(4), "sms", Some(T0))])).await.unwrap();
        let mut dead = new_intent(&key(5), "sms", None);
        (dead.state, dead.reason) = (State::Dead, Some(Reason::TemplateError));
        store.events_ingest(versioned(5, "PO-5", 1, vec![dead])).await.unwrap();

        // key 1 superseded by key 2, key 3 shadowed, key 4 started, and its
        // worker dies on its last try.
        let once =
            Claim { supersede_types: vec!["purchase_order.approved".into()], max_attempts: 1, ..claim_lapsing(T0, 10) };
        let started: Vec<String> =
            store.jobs_claim(once.clone()).await.unwrap().into_iter().map(|j| j.intent.key).collect();
        assert!(started.contains(&key(4)), "{backend:?}: {started:?}");
        store.jobs_claim(Claim { now_us: T0 + 1, ..once }).await.unwrap();
        let state = |n: u32| {
            let store = store.clone();
            async move { store.intent_get("default", &key(n)).await.unwrap().unwrap().intent.state }
        };
        assert_eq!(
            (state(1).await, state(3).await, state(4).await, state(5).await),
            (State::Suppressed, State::Shadowed, State::Dead, State::Dead),
            "{backend:?}"
        );
        // A dead letter planned dead is listed from when it was planned.
        let listed =
            common::count(&db, &format!("SELECT COUNT(*) FROM intents WHERE key = '{}' AND dead_at = {T0}", key(5)))
                .await;
        assert_eq!(listed, 1, "{backend:?}");
        assert_eq!(
            waiting(&store).await,
            vec![
                format!("{}:suppressed:1", key(1)),
                format!("{}:shadowed:1", key(3)),
                format!("{}:dead:1", key(4)),
                format!("{}:dead:1", key(5)),
            ],
            "{backend:?}"
        );
    }

    for rendered in [true, false] {
        for backend in backends() {
            let db = TestDb::new(backend).await;
            let store = db.publishing_store().await;
            let window = two_members_in_a_window(&store).await;
            let mut digest = new_intent(&key(WINDOW), "email", Some(T0 + DAY));
            if !rendered {
                (digest.payload, digest.state, digest.reason) = (None, State::Dead, Some(Reason::TemplateError));
            }
            let close = DigestClose { shadow_members: vec![key(2)], ..closing(window, vec![key(1), key(2)], digest) };
            assert_eq!(store.digest_close(close).await.unwrap(), DigestCloseOutcome::Closed);
            // Both members were published held when they joined the window.
            let mut want = vec![format!("{}:held:1", key(1)), format!("{}:held:1", key(2))];
            if rendered {
                want.extend([format!("{}:digested:2", key(1)), format!("{}:digested:2", key(2))]);
            } else {
                // key 1 goes out on its own (queued: nothing to tell yet),
                // key 2, planned in shadow, ends there; the digest is dead.
                want.extend([format!("{}:shadowed:2", key(2)), format!("{}:dead:1", key(WINDOW))]);
            }
            want.sort();
            assert_eq!(waiting(&store).await, want, "{backend:?} rendered: {rendered}");
        }
    }
}

/// Nothing in either schema runs behind the statements' back: what a write
/// does is in the statement that makes it.
#[tokio::test]
async fn no_trigger_is_left_in_the_schema() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        db.store().await;
        let sql = match backend {
            common::Backend::Sqlite => "SELECT COUNT(*) FROM sqlite_master WHERE type = 'trigger'",
            common::Backend::Postgres => "SELECT COUNT(*) FROM pg_trigger WHERE NOT tgisinternal",
        };
        assert_eq!(common::count(&db, sql).await, 0, "{backend:?}");
    }
}
