//! Failed authentication is seen: every wrong bearer token and every wrong
//! console sign-in is counted in `herald_auth_failures_total{surface}` and
//! logged at warn with a fingerprint of what was presented (never the token
//! itself), and console sign-in is throttled per client address — for a
//! window, never for good.
//!
//! The tests run on the current-thread runtime with a scoped subscriber, so
//! the server's tasks log into the test's capture.

mod common;
#[path = "console/support.rs"]
mod support;

use common::capture::Capture;
use common::{TestApp, TestClock, TestDb, backends};
use sha2::{Digest, Sha256};
use support::{User, tokens_toml};

const OPS: &str = "tok-ops-acme-correct";
const ADMIN: &str = "tok-admin-scrape";
const WRITER: &str = "tok-writer-events-only";

fn tokens() -> String {
    tokens_toml(&[
        ("ops-acme", "acme", OPS, &["ops", "intents:read"]),
        ("admin", "acme", ADMIN, &["admin"]),
        ("writer", "acme", WRITER, &["events:write"]),
    ])
}

/// The first eight hex digits of the SHA-256 of what was presented.
fn fingerprint(presented: &str) -> String {
    hex::encode(Sha256::digest(presented.as_bytes()))[..8].to_string()
}

/// `herald_auth_failures_total{surface}` as `/metrics` shows it now (the
/// recorder is the process's, so other tests' failures count too: compare
/// before and after).
async fn failures(app: &common::Spawned, surface: &str) -> u64 {
    let text =
        app.client.get(format!("{}/metrics", app.base)).bearer_auth(ADMIN).send().await.unwrap().text().await.unwrap();
    let series = format!("herald_auth_failures_total{{surface=\"{surface}\"}} ");
    text.lines().find_map(|l| l.strip_prefix(&series)).map_or(0, |v| v.trim().parse::<f64>().unwrap() as u64)
}

#[tokio::test]
async fn thirty_wrong_bearer_tokens_are_counted_and_logged_by_fingerprint_only() {
    let capture = Capture::default();
    let _guard = capture.install(1.0);
    let db = TestDb::new(backends()[0]).await;
    let app = TestApp::new(&db).with_toml(&tokens()).spawn().await;
    let before = failures(&app, "api").await;
    for i in 0..30 {
        let resp = app
            .client
            .get(format!("{}/v1/intents?entity=purchase_order:PO-1", app.base))
            .bearer_auth(format!("wrong-token-{i}"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 401);
    }
    let missing = app.client.get(format!("{}/v1/dead-letters", app.base)).send().await.unwrap();
    assert_eq!(missing.status(), 401);
    let after = failures(&app, "api").await;
    assert!(after >= before + 31, "every refusal is counted: {before} → {after}");

    let lines: Vec<_> = capture
        .lines()
        .into_iter()
        .filter(|l| l["surface"] == "api" && l["level"] == "WARN" && l["message"].as_str().is_some())
        .collect();
    assert!(lines.len() >= 31, "a warn line per refusal: {}", capture.text());
    for i in [0, 17, 29] {
        let fp = fingerprint(&format!("wrong-token-{i}"));
        assert!(lines.iter().any(|l| l["token_fingerprint"] == fp.as_str()), "no line for token {i} ({fp})");
    }
    assert!(lines.iter().all(|l| l["client"].as_str().is_some_and(|c| c.starts_with("127.0.0.1"))), "{lines:?}");
    assert!(!capture.text().contains("wrong-token-"), "a presented token is never logged");
    assert!(!capture.text().contains(OPS) && !capture.text().contains(ADMIN));

    // A right token still works at once: the API is not throttled.
    let ok = app.client.get(format!("{}/v1/dead-letters", app.base)).bearer_auth(OPS).send().await.unwrap();
    assert_eq!(ok.status(), 200);
    app.running.stop().await;
}

#[tokio::test]
async fn wrong_console_sign_ins_are_counted_logged_and_throttled_for_a_window_only() {
    let capture = Capture::default();
    let _guard = capture.install(1.0);
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let clock = TestClock::at("2026-12-01T09:00:00Z");
        let app = TestApp::new(&db).with_clock(clock.clone()).with_toml(&tokens()).spawn().await;
        let before = failures(&app, "console").await;
        let mut user = User::new(&app.base);
        // Ten wrong tokens a minute are answered as wrong…
        for i in 0..10 {
            let refused = user.sign_in(&format!("guess-{i}")).await;
            assert_eq!(refused.status, 401, "{backend:?} guess {i}: {}", refused.body);
        }
        assert!(failures(&app, "console").await >= before + 10);
        let fp = fingerprint("guess-3");
        assert!(
            capture
                .lines()
                .iter()
                .any(|l| l["surface"] == "console" && l["level"] == "WARN" && l["token_fingerprint"] == fp.as_str()),
            "{}",
            capture.text()
        );
        assert!(!capture.text().contains("guess-3"), "a presented token is never logged");

        // …then every sign-in from that address waits, the right token too
        // (checking it would let guessing go on at full speed).
        let throttled = user.sign_in("guess-10").await;
        assert_eq!(throttled.status, 429, "{}", throttled.body);
        assert_eq!(throttled.headers["retry-after"], "60");
        assert!(throttled.body.contains("Too many"), "{}", throttled.body);
        clock.set("2026-12-01T09:00:45Z");
        let right = user.sign_in(OPS).await;
        assert_eq!(right.status, 429, "the window has not passed");
        assert_eq!(right.headers["retry-after"], "15");
        assert!(!user.cookies.keys().any(|c| c.ends_with("herald_console")), "no session while throttled");
        // The bearer API takes the same token meanwhile.
        let api = app.client.get(format!("{}/v1/dead-letters", app.base)).bearer_auth(OPS).send().await.unwrap();
        assert_eq!(api.status(), 200);

        // When the window has passed, the right token signs in.
        clock.set("2026-12-01T09:01:01Z");
        let signed_in = user.sign_in(OPS).await;
        assert_eq!((signed_in.status, signed_in.location()), (303, Some("/console/search")), "{}", signed_in.body);
        assert_eq!(user.get("/console/search").await.status, 200);
        app.running.stop().await;
    }
}

#[tokio::test]
async fn a_token_refused_for_scope_does_not_reset_the_sign_in_throttle() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let clock = TestClock::at("2026-12-01T09:00:00Z");
        let app = TestApp::new(&db).with_clock(clock.clone()).with_toml(&tokens()).spawn().await;
        let mut user = User::new(&app.base);
        for i in 0..9 {
            let refused = user.sign_in(&format!("guess-{i}")).await;
            assert_eq!(refused.status, 401, "{backend:?} guess {i}: {}", refused.body);
        }
        // A valid token without the ops scope is no sign-in: it is refused,
        // and the wrong guesses before it still count.
        let writer = user.sign_in(WRITER).await;
        assert_eq!(writer.status, 403, "{}", writer.body);
        let tenth = user.sign_in("guess-9").await;
        assert_eq!(tenth.status, 401, "{}", tenth.body);
        let throttled = user.sign_in("guess-10").await;
        assert_eq!(throttled.status, 429, "{backend:?}: the count went on: {}", throttled.body);
        assert_eq!(throttled.headers["retry-after"], "60");

        // A real sign-in, once the window has passed, does clear it.
        clock.set("2026-12-01T09:01:01Z");
        for i in 0..9 {
            assert_eq!(user.sign_in(&format!("again-{i}")).await.status, 401);
        }
        let signed_in = user.sign_in(OPS).await;
        assert_eq!(signed_in.status, 303, "{}", signed_in.body);
        let mut other = User::new(&app.base);
        assert_eq!(other.sign_in("after-0").await.status, 401);
        assert_eq!(other.sign_in("after-1").await.status, 401, "a sign-in cleared the count");
        app.running.stop().await;
    }
}
