//! Every ingest write path answers alike. The store decides a batch by one of
//! several paths — the set-wise pass guessed all-new, the set-wise pass that
//! reads first, the savepoint path request by request, a request alone — and
//! picks among them by the batch's shape. Generated sequences of requests,
//! drawn from a small space so that repeats, reused identities and conflicts
//! are common, are fed one by one, as one batch, and cut into random batches;
//! every way must give each request the same answer and leave the same rows.

use super::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// One request of a generated sequence: small numbers, so they collide.
#[derive(Debug, Clone)]
struct Drawn {
    identity: u8,
    event: u8,
    content: u8,
    recipients: Vec<u8>,
}

fn drawn() -> impl Strategy<Value = Drawn> {
    (0..4u8, 0..3u8, 0..2u8, proptest::sample::subsequence(vec![0u8, 1, 2], 0..=3))
        .prop_map(|(identity, event, content, recipients)| Drawn { identity, event, content, recipients })
}

/// A sequence of requests, and where it is cut into batches. Some requests
/// are exact repeats of an earlier one (a client's retry), which independent
/// draws from even this small space would rarely make.
fn case() -> impl Strategy<Value = (Vec<Drawn>, Vec<bool>)> {
    let step = (drawn(), proptest::option::weighted(0.25, any::<proptest::sample::Index>()));
    proptest::collection::vec(step, 1..9).prop_flat_map(|steps| {
        let mut requests: Vec<Drawn> = Vec::new();
        for (fresh, repeat) in steps {
            let again = repeat.filter(|_| !requests.is_empty()).map(|i| requests[i.index(requests.len())].clone());
            requests.push(again.unwrap_or(fresh));
        }
        let n = requests.len();
        (Just(requests), proptest::collection::vec(any::<bool>(), n))
    })
}

/// The request as the pipeline would build it, in a namespace of its own
/// (`ns`): tenant, event keys and intent keys are the namespace's, so several
/// ways of feeding one sequence share a database without meeting.
fn request_of(ns: &str, d: &Drawn) -> Ingest {
    let event_key = format!("{ns}|e|x|E{}|t", d.event);
    let content_digest = format!("c{}-{}", d.event, d.content);
    let intents = (d.recipients.iter())
        .map(|r| {
            let mut it = new_intent(&format!("{ns}-E{}-r{r}", d.event), "sms", Some(T0));
            it.recipient_id = format!("r{r}");
            it
        })
        .collect();
    Ingest {
        tenant: ns.into(),
        identity: format!("i{}", d.identity),
        // The whole request: its identity's body is its event, content and audience.
        fingerprint: format!("{ns}-f-E{}-{}-{:?}", d.event, d.content, d.recipients),
        event_body: format!("{ns}-body-E{}-{}-{:?}", d.event, d.content, d.recipients),
        event_key,
        content_digest,
        entity_id: format!("E{}", d.event),
        ..ingest("", "", intents)
    }
}

/// An answer with the namespace taken out, so two namespaces' answers compare.
fn plain(ns: &str, outcome: StoreResult<IngestOutcome>) -> String {
    format!("{:?}", outcome.expect("an answer")).replace(ns, "NS")
}

/// The rows a namespace holds, with the namespace taken out.
async fn rows(db: &TestDb, ns: &str) -> Vec<String> {
    let mut out = Vec::new();
    for sql in [
        format!(
            "SELECT identity || ' ' || fingerprint || ' ' || status FROM requests WHERE tenant = '{ns}' ORDER BY 1"
        ),
        format!("SELECT event_key || ' ' || content_digest FROM events WHERE tenant = '{ns}' ORDER BY 1"),
        format!(
            "SELECT key || ' ' || recipient_id || ' ' || state || ' ' || decision FROM intents WHERE tenant = '{ns}' ORDER BY 1"
        ),
        // Where each intent's event body is (migration 0066): in its row, in
        // a payload row, or lost.
        format!(
            "SELECT i.key || ' ' || CASE WHEN i.event_body IS NOT NULL THEN 'row ' || i.event_body
                 ELSE COALESCE('payload ' || (SELECT e.body FROM payloads e WHERE e.digest = i.event_digest), 'LOST') END
             FROM intents i WHERE i.tenant = '{ns}' ORDER BY 1"
        ),
        format!("SELECT i.key FROM jobs j JOIN intents i ON i.id = j.intent_id WHERE j.tenant = '{ns}' ORDER BY 1"),
    ] {
        out.extend(common::texts(db, &sql).await.into_iter().map(|r| r.replace(ns, "NS")));
    }
    out
}

/// Feeds one sequence three ways and compares them; the answers one by one.
async fn check(db: &TestDb, store: &Arc<dyn Store>, n: usize, requests: &[Drawn], cuts: &[bool]) -> Vec<String> {
    let [alone, whole, cut] = ["alone", "whole", "cut"].map(|way| format!("p{n}{way}"));
    let mut answers: Vec<Vec<String>> = Vec::new();

    let mut one_by_one = Vec::new();
    for d in requests {
        one_by_one.push(plain(&alone, store.events_ingest(request_of(&alone, d)).await));
    }
    answers.push(one_by_one);

    let batch = requests.iter().map(|d| request_of(&whole, d)).collect();
    answers.push(store.events_ingest_batch(batch).await.into_iter().map(|o| plain(&whole, o)).collect());

    let mut in_pieces = Vec::new();
    let mut piece = Vec::new();
    for (d, cut_after) in requests.iter().zip(cuts) {
        piece.push(request_of(&cut, d));
        if *cut_after {
            in_pieces.extend(
                store.events_ingest_batch(std::mem::take(&mut piece)).await.into_iter().map(|o| plain(&cut, o)),
            );
        }
    }
    if !piece.is_empty() {
        in_pieces.extend(store.events_ingest_batch(piece).await.into_iter().map(|o| plain(&cut, o)));
    }
    answers.push(in_pieces);

    assert_eq!(answers[0], answers[1], "one by one, then as one batch: {requests:?}");
    assert_eq!(answers[0], answers[2], "one by one, then in batches cut at {cuts:?}: {requests:?}");
    let expected = rows(db, &alone).await;
    assert!(!expected.iter().any(|r| r.ends_with("LOST")), "every intent finds its event body: {expected:?}");
    assert_eq!(expected, rows(db, &whole).await, "rows of one batch: {requests:?}");
    assert_eq!(expected, rows(db, &cut).await, "rows of cut batches {cuts:?}: {requests:?}");
    answers.swap_remove(0)
}

#[test]
fn every_write_path_gives_each_request_the_same_answer_and_rows() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    for backend in backends() {
        let (db, store) = runtime.block_on(async {
            let db = TestDb::new(backend).await;
            let store = db.store().await;
            (db, store)
        });
        eprintln!("ingest paths on {backend:?}");
        let mut runner = TestRunner::new(Config { cases: 48, failure_persistence: None, ..Config::default() });
        let n = std::sync::atomic::AtomicUsize::new(0);
        let seen = std::sync::Mutex::new(HashSet::new());
        runner
            .run(&case(), |(requests, cuts)| {
                let n = n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let answers = runtime.block_on(check(&db, &store, n, &requests, &cuts));
                let kinds = answers.iter().map(|a| a.split([' ', '{']).next().unwrap_or_default().to_string());
                seen.lock().unwrap().extend(kinds);
                Ok(())
            })
            .unwrap();
        // The space is small enough that every answer comes up: the paths
        // were compared on each, not only on new requests.
        let seen = seen.into_inner().unwrap();
        for kind in ["Accepted", "Replayed", "Mismatch", "Conflict"] {
            assert!(seen.contains(kind), "no {kind} among {seen:?}");
        }
    }
}
