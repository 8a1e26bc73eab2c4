//! Logs sampled without losing the rare paths: with `sample_accepted = 0`
//! the routine lines (an intent created to be sent, an attempt accepted) are
//! dropped, and every line an audit needs is still there — duplicates by
//! kind, mismatches, conflicts, decisions not to send, retries, `unknown`
//! and dead letters.
//!
//! The test runs on the current-thread runtime with a scoped subscriber, so
//! the server's and the worker's tasks all log into this test's capture.

mod common;

use common::capture::Capture;
use common::{FakeSms, Reply, TestApp, TestDb, backends, sms_event};
use serde_json::{Value, json};
use std::time::Duration;

fn key_of(body: &Value) -> String {
    body["intents"][0]["key"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn with_sample_accepted_zero_the_rare_paths_are_still_logged() {
    let capture = Capture::default();
    let _guard = capture.install(0.0);

    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let p = |n: u32| format!("+1555000{n:04}");
        sms.script(&p(2), vec![Reply::status(503, json!({})), Reply::ok("m-2")]);
        sms.script(&p(3), vec![Reply::status(400, json!({"error": "invalid_destination"}))]);
        sms.script(&p(4), vec![Reply::ok("late").slow(Duration::from_millis(800)), Reply::ok("m-4")]);
        let app = TestApp::new(&db)
            .with_sms(&sms)
            .with_retry(3, "10ms", "20ms")
            .with_lease("2s", "300ms")
            .with_toml("[log]\nsample_accepted = 0.0\n")
            .spawn()
            .await;
        let tag = format!("{backend:?}");

        // Routine: created to be sent, accepted at once.
        let routine = sms_event(&format!("PO-LOG-{tag}-1"), &p(1));
        let (status, body, _) = app.post_event(&routine, Some(&format!("{tag}-k1"))).await;
        assert_eq!(status, 202);
        let routine_key = key_of(&body);
        app.wait_state(&routine_key, &["sent"]).await;

        // Duplicates by kind, then a mismatch and a conflict.
        assert_eq!(app.post_event(&routine, Some(&format!("{tag}-k1"))).await.0, 200);
        assert_eq!(app.post_event(&routine, Some(&format!("{tag}-k2"))).await.0, 200);
        assert_eq!(app.post_event(&routine, None).await.0, 200);
        let mut other = routine.clone();
        other["data"]["po"]["total"] = json!("9");
        assert_eq!(app.post_event(&other, Some(&format!("{tag}-k1"))).await.0, 422);
        assert_eq!(app.post_event(&other, Some(&format!("{tag}-k3"))).await.0, 409);

        // A decision not to send, a retry, a dead letter, an unknown.
        let mut nowhere = sms_event(&format!("PO-LOG-{tag}-0"), &p(0));
        nowhere["recipients"] = json!([{"id": "u-nowhere"}]);
        let suppressed = key_of(&app.post_event(&nowhere, None).await.1);
        let retried = key_of(&app.post_event(&sms_event(&format!("PO-LOG-{tag}-2"), &p(2)), None).await.1);
        let dead = key_of(&app.post_event(&sms_event(&format!("PO-LOG-{tag}-3"), &p(3)), None).await.1);
        let unknown = key_of(&app.post_event(&sms_event(&format!("PO-LOG-{tag}-4"), &p(4)), None).await.1);
        app.wait_state(&retried, &["sent"]).await;
        app.wait_state(&dead, &["dead"]).await;
        app.wait_state(&unknown, &["sent"]).await;

        // The routine notification's own lines were all sampled out; only
        // its duplicates (never routine) remain.
        let lines = capture.about(&routine_key);
        let kinds: Vec<&str> = lines.iter().map(|l| l["duplicate"].as_str().unwrap_or("-")).collect();
        assert_eq!(kinds, ["replay", "another_key", "reemitted"], "{tag}: {lines:#?}");
        for l in &lines {
            assert_eq!((l["outcome"].as_str(), l["channel"].as_str()), (Some("reused"), Some("sms")));
            assert_eq!(l["template"], "po_approved");
            assert!(l["template_revision"].as_str().is_some_and(|r| !r.is_empty()), "{l}");
            assert!(l["trace_id"].as_str().is_some_and(|t| t.len() == 32), "{l}");
        }
        let all = capture.lines();
        let refused: Vec<&str> = all
            .iter()
            .filter(|l| l["message"].as_str().is_some_and(|m| m.starts_with("request refused")))
            .map(|l| l["outcome"].as_str().unwrap())
            .collect();
        assert!(refused.ends_with(&["mismatch", "conflict"]), "{tag}: {refused:?}");

        let s = capture.about(&suppressed);
        assert_eq!(s.len(), 1, "{tag}: {s:#?}");
        assert_eq!((s[0]["decision"].as_str(), s[0]["reason"].as_str()), (Some("suppress"), Some("no_destination")));

        let attempts = |key: &str| -> Vec<(i64, String, String)> {
            (capture.about(key).iter())
                .filter(|l| l["message"] == "attempt")
                .map(|l| {
                    (
                        l["attempt"].as_i64().unwrap(),
                        l["outcome"].as_str().unwrap().into(),
                        l["next"].as_str().unwrap().into(),
                    )
                })
                .collect()
        };
        assert_eq!(
            attempts(&retried),
            [(1, "retryable".into(), "retry".into())],
            "{tag}: the accepted retry is routine"
        );
        assert_eq!(attempts(&dead), [(1, "permanent".into(), "dead".into())], "{tag}");
        assert_eq!(attempts(&unknown), [(1, "unknown".into(), "retry".into())], "{tag}");
        let d = capture.about(&dead);
        let line = d.iter().find(|l| l["message"] == "attempt").unwrap();
        assert_eq!(
            (line["error_class"].as_str(), line["channel"].as_str()),
            (Some("invalid_destination"), Some("sms"))
        );
        assert_eq!(line["template"], "po_approved");
        // Created to be sent: sampled away, like the routine one's.
        assert!(capture.about(&dead).iter().all(|l| l["message"] != "intent"));
    }
}

#[tokio::test]
async fn a_lease_rescue_logs_its_attempt_transition_whatever_the_sampling() {
    let capture = Capture::default();
    let _guard = capture.install(0.0);

    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let tag = format!("{backend:?}");
        let api = TestApp::new(&db).with_sms(&sms).without_workers().spawn().await;
        let (status, body, _) = api.post_event(&sms_event(&format!("PO-RESCUE-{tag}"), "+15550009999"), None).await;
        assert_eq!(status, 202);
        let key = key_of(&body);
        api.running.stop().await;

        // A worker claims it and dies: its lease (none at all) has run out at once.
        let store = db.store().await;
        let now = jiff::Timestamp::now().as_microsecond();
        let claim = herald::store::Claim {
            now_us: now,
            limit: 10,
            lease_us: 0,
            max_attempts: 3,
            dedupe_window_us: None,
            supersede_types: vec![],
            repeats_unrecognised: vec![],
        };
        assert_eq!(store.jobs_claim(claim).await.unwrap().len(), 1);

        let app = TestApp::new(&db).with_sms(&sms).with_toml("[log]\nsample_accepted = 0.0\n").spawn().await;
        let sent = app.wait_state(&key, &["sent"]).await;
        assert_eq!(sent["attempts"][0]["error_class"], "lease_expired");
        let rescue: Vec<Value> = capture.about(&key).into_iter().filter(|l| l["message"] == "attempt").collect();
        assert_eq!(rescue.len(), 1, "{tag}: the accepted retry is routine and sampled away: {rescue:#?}");
        let l = &rescue[0];
        assert_eq!(
            (l["attempt"].as_i64(), l["outcome"].as_str(), l["error_class"].as_str(), l["next"].as_str()),
            (Some(1), Some("unknown"), Some("lease_expired"), Some("retry")),
            "{tag}"
        );
        assert_eq!((l["channel"].as_str(), l["template"].as_str()), (Some("sms"), Some("po_approved")));
        assert!(l["template_revision"].as_str().is_some_and(|r| !r.is_empty()), "{l}");
        app.running.stop().await;
    }
}
