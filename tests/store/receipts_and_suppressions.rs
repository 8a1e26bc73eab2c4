//! Delivery receipts, the suppression list and its key, rejected bus messages.

use super::*;

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
