//! The schema: migration state, older databases carried over, indexes and plans.

use super::*;

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

/// A database an older Herald left (before migrations 0065 and 0066) kept
/// each rendered message and each event body as a payload row found by its
/// digest; its intents still show, send, list and replay that message, and
/// show that body, once new intents keep theirs in their own rows, and
/// retention's new step leaves the payload rows to the old one.
#[tokio::test]
async fn an_older_databases_messages_and_event_bodies_are_still_read_from_their_payloads() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        migrate_up_to(&db, 64).await;
        let message = r#"{"body":"hi","encoding":"GSM-7","segments":1}"#;
        let intent = |n: u32, state: &str, reason: &str| {
            format!(
                "INSERT INTO intents (key, tenant, event_type, entity_type, entity_id, occurred_at, channel,
                                      recipient_id, template_id, event_digest, payload_digest, decision, reason,
                                      state, attempts, created_at, updated_at)
                 VALUES ('{k}', 'default', 'purchase_order.approved', 'purchase_order', 'PO-{n}',
                         '2026-11-29T04:30:00Z', 'sms', 'u-1', 'po_approved', 'event-1', 'message-1', 'send', {reason},
                         '{state}', 1, {T0}, {T0})",
                k = key(n)
            )
        };
        let event = r#"{"channels":["sms"],"type":"purchase_order.approved"}"#;
        for sql in [
            format!("INSERT INTO payloads (digest, body, created_at) VALUES ('message-1', '{message}', {T0})"),
            format!("INSERT INTO payloads (digest, body, created_at) VALUES ('event-1', '{event}', {T0})"),
            intent(1, "queued", "NULL"),
            intent(2, "dead", "'rejected'"),
            intent(3, "sent", "NULL"),
            format!("INSERT INTO jobs (intent_key, tenant, run_at) VALUES ('{}', 'default', {T0})", key(1)),
        ] {
            common::execute(&db, &sql).await;
        }
        if backend == common::Backend::Postgres {
            // SQLite derives it; Herald writes it on Postgres (migration 0052)
            common::execute(&db, "UPDATE intents SET dead_at = updated_at WHERE state = 'dead'").await;
        }
        let store = db.store().await;

        let shown = store.intent_get("default", &key(3)).await.unwrap().unwrap();
        assert_eq!(shown.content.as_deref(), Some(message), "{backend:?}");
        assert_eq!(shown.event_body.as_deref(), Some(event), "{backend:?}");
        let filter = DeadLetterFilter { tenant: Some("default".into()), limit: 10, ..Default::default() };
        let dead = store.dead_letters_list(filter).await.unwrap();
        assert_eq!(dead.items[0].content.as_deref(), Some(message), "{backend:?}");
        assert_eq!(dead.items[0].event_body.as_deref(), Some(event), "{backend:?}");
        let report = store.report_rows(ReportFilter { tenant: None, since_us: T0, until_us: T0 + 1 }).await.unwrap();
        assert_eq!(report.sms.iter().map(|c| c.messages).sum::<i64>(), 1, "{backend:?}: the sent one");
        assert_eq!(store.retention_batch(PruneStep::Contents, T0 + 1, 100).await.unwrap(), 0, "{backend:?}");

        let claimed = store.jobs_claim(claim(T0 + 1, 10)).await.unwrap();
        assert_eq!(claimed[0].content.as_deref(), Some(message), "{backend:?}");
        let replayed =
            store.dead_letters_replay(replay(ReplaySelector::Ids(vec![key(2)]), "default", T0 + 2)).await.unwrap();
        assert_eq!(replayed[0].outcome, ReplayOutcome::Queued, "{backend:?}");
    }
}

/// A database an older Herald left (before migration 0067) named each job
/// and attempt by its intent's key; after it they name the intent's number.
/// Each comes out of the migration with its own intent, whatever order the
/// intents were written in, a job whose intent is gone does not come out at
/// all, and on SQLite a `VACUUM` (which may renumber unnamed rowids) keeps
/// every link.
#[tokio::test]
async fn an_older_databases_jobs_and_attempts_keep_their_intents_when_named_by_number() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        migrate_up_to(&db, 66).await;
        let intent = |n: u32, state: &str| {
            format!(
                "INSERT INTO intents (key, tenant, event_type, entity_type, entity_id, occurred_at, channel,
                                      recipient_id, template_id, event_digest, payload_digest, decision,
                                      state, attempts, created_at, updated_at, content)
                 VALUES ('{k}', 'default', 'purchase_order.approved', 'purchase_order', 'PO-{n}',
                         '2026-11-29T04:30:00Z', 'sms', 'u-1', 'po_approved', 'event-1', 'message-1', 'send',
                         '{state}', 1, {T0}, {T0}, '{{\"body\":\"hi\"}}')",
                k = key(n)
            )
        };
        let attempt = |n: u32, message: &str, outcome: &str| {
            format!(
                "INSERT INTO attempts (intent_key, n, started_at, finished_at, outcome, provider_message_id)
                 VALUES ('{}', 1, {T0}, {}, '{outcome}', '{message}')",
                key(n),
                T0 + 1
            )
        };
        // Written out of key order, so that no intent's number happens to
        // match its key's place.
        for sql in [
            intent(3, "sent"),
            intent(1, "queued"),
            intent(2, "queued"),
            attempt(3, "m-3", "accepted"),
            attempt(2, "m-2", "retryable"),
            format!("INSERT INTO jobs (intent_key, tenant, run_at) VALUES ('{}', 'default', {T0})", key(2)),
            format!("INSERT INTO jobs (intent_key, tenant, run_at) VALUES ('{}', 'default', {T0})", key(1)),
            format!("INSERT INTO jobs (intent_key, tenant, run_at) VALUES ('{}', 'default', {T0})", key(9)),
        ] {
            common::execute(&db, &sql).await;
        }
        let store = db.store().await;
        let links = |store: Arc<dyn Store>| async move {
            let mut seen = Vec::new();
            for n in 1..=3 {
                let shown = store.intent_get("default", &key(n)).await.unwrap().unwrap();
                for a in shown.attempts {
                    assert_eq!(a.intent_key, key(n), "an attempt shown under another intent");
                    seen.push((n, a.provider_message_id.unwrap_or_default()));
                }
            }
            seen
        };
        let expected = vec![(2, "m-2".to_string()), (3, "m-3".to_string())];
        assert_eq!(links(store.clone()).await, expected, "{backend:?}");
        assert_eq!(
            store.queue_stats(None, T0 + 1).await.unwrap().total,
            2,
            "{backend:?}: the jobs of 1 and 2, not the orphan's"
        );
        if backend == common::Backend::Sqlite {
            common::execute(&db, "VACUUM").await;
            assert_eq!(links(store.clone()).await, expected, "after VACUUM");
        }
        // The jobs lead to their own intents; a new attempt of 2 is its second.
        let mut claimed: Vec<(String, i64)> = store
            .jobs_claim(claim(T0 + 1, 10))
            .await
            .unwrap()
            .into_iter()
            .map(|j| (j.intent.key, j.intent.attempts))
            .collect();
        claimed.sort();
        assert_eq!(claimed, vec![(key(1), 2), (key(2), 2)], "{backend:?}");
        let second = store.intent_get("default", &key(2)).await.unwrap().unwrap().attempts;
        assert_eq!(second.iter().map(|a| a.n).collect::<Vec<_>>(), vec![1, 2], "{backend:?}");
        assert_eq!(store.intent_get("default", &key(1)).await.unwrap().unwrap().attempts.len(), 1, "{backend:?}");
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
