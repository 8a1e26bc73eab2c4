//! The store suite: every store behaviour, on every configured backend, one
//! module per role of the store. The helpers every module uses are here.

#[path = "../common/mod.rs"]
mod common;

use common::{TestDb, backends};
use herald::event::Channel;
use herald::intent::{Decision, Mode, OutcomeClass, Reason, State};
use herald::store::*;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

const T0: i64 = 1_800_000_000_000_000;

mod digests_and_inbox;
mod ingest;
mod ingest_paths;
mod operations;
mod publications;
mod queue;
mod receipts_and_suppressions;
mod schema_and_plans;
mod views;

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
        cap: None,
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

const DAY: i64 = 86_400_000_000;

/// An intent already in a final state (no job), updated at `at`.
fn settled(key: &str, channel: &str, state: &str, at: i64) -> Ingest {
    let mut it = new_intent(key, channel, None);
    it.state = State::parse(state).expect("a state");
    let mut ingest = ingest(&format!("r-{key}"), &format!("fp-{key}"), vec![it]);
    ingest.now_us = at;
    ingest
}

/// `ingest` for the event `default|e|x|1|t` with the given content.
fn ingest_content(identity: &str, fingerprint: &str, content: &str, intents: Vec<NewIntent>) -> Ingest {
    Ingest { content_digest: content.into(), ..ingest(identity, fingerprint, intents) }
}

fn lookup(tenant: &str, identity: &str, fingerprint: &str) -> RequestLookup {
    RequestLookup { tenant: tenant.into(), identity: identity.into(), fingerprint: fingerprint.into() }
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

/// A dead letter of `tenant` with `reason`, dead since `at`.
fn dead_letter(tenant: &str, n: u32, reason: &str, at: i64) -> Ingest {
    let mut dead = new_intent(&key(n), "sms", None);
    (dead.state, dead.reason) = (State::Dead, Some(Reason::parse(reason).expect("a reason")));
    Ingest { tenant: tenant.into(), now_us: at, ..ingest(&format!("r{n}"), &format!("fp{n}"), vec![dead]) }
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

const TP_A: &str = "00-0000000000000000000000000000000a-000000000000000a-01";
const TP_B: &str = "00-0000000000000000000000000000000b-000000000000000b-01";

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

/// The suppression key the store tests' receipts are recorded with.
fn test_suppression_key() -> herald::suppression::SuppressionKey {
    herald::suppression::SuppressionKey::new(vec![42; 32]).unwrap()
}
