//! What the API and the console read: preferences versions, intents by tenant, dead letters, health figures.

use super::*;

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

#[tokio::test]
async fn the_intents_planned_in_a_range_come_oldest_first_a_page_at_a_time_without_a_digests_own() {
    const MIN: i64 = 60_000_000;
    each_backend(|store| async move {
        // Five events planned a minute apart, another tenant's, and a digest
        // window whose own intent (the digest's message) is planned too.
        for n in 1..=5u32 {
            let mut one = request(
                &format!("r{n}"),
                &format!("fp{n}"),
                &format!("PO-{n}"),
                "c",
                vec![new_intent(&key(n), "sms", None)],
            );
            one.now_us = T0 + i64::from(n) * MIN;
            store.events_ingest(one).await.unwrap();
        }
        let mut theirs = request("t1", "tfp1", "PO-9", "c", vec![new_intent(&key(9), "sms", None)]);
        (theirs.tenant, theirs.now_us) = ("other".into(), T0 + 3 * MIN);
        store.events_ingest(theirs).await.unwrap();
        let mut member = ingest("m1", "mfp1", vec![window_member(20)]);
        member.now_us = T0 + 3 * MIN;
        store.events_ingest(member).await.unwrap();
        let mut digest = request("d1", "dfp1", "digest-1", "c", vec![new_intent(&key(WINDOW), "email", None)]);
        digest.now_us = T0 + 3 * MIN;
        store.events_ingest(digest).await.unwrap();

        let page = |after: Option<Cursor>| PlannedFilter {
            tenant: "default".into(),
            since_us: T0 + 2 * MIN,
            until_us: T0 + 5 * MIN,
            after,
            limit: 2,
        };
        let first = store.intents_planned(page(None)).await.unwrap();
        let keys: Vec<&str> = first.iter().map(|i| i.key.as_str()).collect();
        assert_eq!(keys, [key(2), key(3)]);
        let last = first.last().unwrap();
        let rest = store.intents_planned(page(Some(Cursor::new(last.created_at, &last.key)))).await.unwrap();
        let keys: Vec<&str> = rest.iter().map(|i| i.key.as_str()).collect();
        assert_eq!(keys, [key(20), key(4)], "the digest's member, not the digest's own; until is exclusive");
        let i = &first[0];
        assert_eq!(
            (i.entity_id.as_str(), i.channel, i.recipient_id.as_str(), i.destination.as_deref()),
            ("PO-2", Channel::Sms, "u-1", Some("+15550000001"))
        );
        assert_eq!(
            (i.decision, i.state, i.mode, i.created_at),
            (Decision::Send, State::Queued, Mode::Live, T0 + 2 * MIN)
        );
        assert_eq!(i.occurred_at, "2026-11-29T04:30:00.000000000Z");
        assert_eq!(rest[0].decision, Decision::Digest);
    })
    .await;
}
