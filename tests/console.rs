//! The operator console over HTTP, on every backend: sign-in and its refusals,
//! CSRF on every form that changes something, search and the timeline, dead
//! letters grouped and replayed, and one tenant never seeing another's.
//! (tests/browser.rs drives the same pages in a real Chromium.)

mod common;
#[path = "console/support.rs"]
mod support;

use common::{FakeSms, Reply, TestApp, TestDb, backends, sms_event};
use serde_json::json;
use support::{User, post_event, tokens_toml, wait_state};

const OPS_A: &str = "tok-ops-acme";
const OPS_B: &str = "tok-ops-globex";
const WRITER: &str = "tok-writer-acme";
const WRITER_B: &str = "tok-writer-globex";
const READER: &str = "tok-reader-acme";

fn tokens() -> String {
    tokens_toml(&[
        ("ops-acme", "acme", OPS_A, &["ops", "intents:read"]),
        ("ops-globex", "globex", OPS_B, &["ops", "intents:read"]),
        ("erp-acme", "acme", WRITER, &["events:write", "intents:read"]),
        ("erp-globex", "globex", WRITER_B, &["events:write", "intents:read"]),
        ("reader-acme", "acme", READER, &["intents:read"]),
    ])
}

#[tokio::test]
async fn an_ops_token_signs_in_for_a_session_cookie_and_signs_out() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let app = TestApp::new(&db).with_toml(&tokens()).spawn().await;
        let mut user = User::new(&app.base);

        let before = user.get("/console/search").await;
        assert_eq!((before.status, before.location()), (303, Some("/console/sign-in")), "{backend:?}");

        let signed_in = user.sign_in(OPS_A).await;
        assert_eq!((signed_in.status, signed_in.location()), (303, Some("/console/search")), "{}", signed_in.body);
        let cookie = signed_in.set_cookies().into_iter().find(|c| c.starts_with("herald_console=")).unwrap();
        for attribute in ["HttpOnly", "SameSite=Strict", "Path=/console"] {
            assert!(cookie.contains(attribute), "{attribute} missing from {cookie}");
        }
        assert!(!cookie.contains("Secure"), "served over plain HTTP");
        assert!(!cookie.contains(OPS_A), "the token never goes into the cookie");

        let home = user.get("/console/search").await;
        assert_eq!(home.status, 200);
        assert!(home.body.contains("ops-acme") && home.body.contains(">acme<"), "{}", home.body);
        assert!(home.headers["content-security-policy"].to_str().unwrap().contains("default-src 'none'"));

        let out = user.post("/console/sign-out", &[("csrf", &home.csrf())]).await;
        assert_eq!((out.status, out.location()), (303, Some("/console/sign-in")));
        assert!(!user.cookies.contains_key("herald_console"));
        assert_eq!(user.get("/console/search").await.status, 303, "signed out");
        app.running.stop().await;
    }
}

#[tokio::test]
async fn a_token_without_ops_or_an_unknown_one_is_refused() {
    let db = TestDb::new(backends()[0]).await;
    let app = TestApp::new(&db).with_toml(&tokens()).spawn().await;
    let mut user = User::new(&app.base);

    let refused = user.sign_in(READER).await;
    assert_eq!(refused.status, 403);
    assert!(refused.body.contains("lacks the ops scope"), "{}", refused.body);
    assert!(!user.cookies.contains_key("herald_console"));

    let unknown = user.sign_in("no-such-token").await;
    assert_eq!(unknown.status, 401);
    assert!(unknown.body.contains("token:"), "the message names the field: {}", unknown.body);

    let empty = user.sign_in("").await;
    assert_eq!(empty.status, 400);

    // A forged cookie is no session.
    user.cookies.insert("herald_console".into(), "b3BzLWFjbWU.0011.9999999999.ab.cd".into());
    assert_eq!(user.get("/console/search").await.status, 303);
    app.running.stop().await;
}

#[tokio::test]
async fn every_form_that_changes_something_needs_its_csrf_token() {
    let db = TestDb::new(backends()[0]).await;
    let sms = FakeSms::start().await;
    sms.script("+9779800000001", vec![Reply::status(400, json!({"error": "rejected"}))]);
    let app = TestApp::new(&db).with_sms(&sms).with_toml(&tokens()).spawn().await;
    let posted = post_event(&app.base, WRITER, &sms_event("PO-1", "+9779800000001")).await;
    let key = posted["intents"][0]["key"].as_str().unwrap().to_string();
    wait_state(&app.base, WRITER, &key, &["dead"]).await;

    let mut user = User::new(&app.base);
    // Sign-in without the form's token (a login CSRF).
    user.get("/console/sign-in").await;
    let no_csrf = user.post("/console/sign-in", &[("token", OPS_A)]).await;
    assert_eq!(no_csrf.status, 403, "{}", no_csrf.body);
    assert!(no_csrf.body.contains("Form refused"));
    assert_eq!(user.sign_in(OPS_A).await.status, 303);

    let replay = user.post("/console/dead-letters/replay", &[("reason", "rejected")]).await;
    assert_eq!(replay.status, 403, "{}", replay.body);
    let forged = user.post("/console/dead-letters/replay", &[("reason", "rejected"), ("csrf", "AAAA")]).await;
    assert_eq!(forged.status, 403);
    let detail = wait_state(&app.base, WRITER, &key, &["dead", "queued", "sending", "sent"]).await;
    assert_eq!(detail["state"], "dead", "nothing was replayed");

    assert_eq!(user.post("/console/sign-out", &[]).await.status, 403);
    assert_eq!(user.get("/console/search").await.status, 200, "still signed in");

    // Another session's token is not this one's.
    let mut other = User::new(&app.base);
    other.sign_in(OPS_A).await;
    let their_csrf = other.get("/console/search").await.csrf();
    assert_eq!(user.post("/console/sign-out", &[("csrf", &their_csrf)]).await.status, 403);
    app.running.stop().await;
}

#[tokio::test]
async fn a_search_by_entity_lists_intents_and_each_opens_its_timeline() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let app = TestApp::new(&db).with_sms(&sms).with_toml(&tokens()).spawn().await;
        let posted = post_event(&app.base, WRITER, &sms_event("PO-4482", "+9779800000000")).await;
        let key = posted["intents"][0]["key"].as_str().unwrap().to_string();
        wait_state(&app.base, WRITER, &key, &["sent"]).await;

        let mut user = User::new(&app.base);
        user.sign_in(OPS_A).await;
        let found = user.get("/console/search?q=purchase_order%3APO-4482").await;
        assert_eq!(found.status, 200, "{backend:?}");
        assert!(found.body.contains(&format!("/console/intents/{key}")), "{}", found.body);
        assert!(found.body.contains("sent") && found.body.contains("u-PO-4482"));

        let by_recipient = user.get("/console/search?q=u-PO-4482&by=recipient").await;
        assert!(by_recipient.body.contains(&key));
        let by_key = user.get(&format!("/console/search?q={key}")).await;
        assert_eq!(by_key.location(), Some(format!("/console/intents/{key}").as_str()));

        let timeline = user.get(&format!("/console/intents/{key}")).await;
        assert_eq!(timeline.status, 200);
        for expected in ["Event received", "Decided: send", "GSM-7", "Attempt 1: accepted", "Now sent", "Asha"] {
            assert!(timeline.body.contains(expected), "{expected:?} missing from the timeline: {}", timeline.body);
        }
        assert!(!timeline.body.contains("+9779800000000"), "the destination is masked");
        assert!(timeline.body.contains("+97798******00"));

        let bad = user.get("/console/search?q=PO-4482&by=entity").await;
        assert_eq!(bad.status, 400);
        assert!(bad.body.contains("q: an entity is TYPE:ID"), "{}", bad.body);
        assert_eq!(user.get("/console/search?q=x&by=colour").await.status, 400);
        assert_eq!(user.get("/console/intents/not-a-key").await.status, 404);
        app.running.stop().await;
    }
}

#[tokio::test]
async fn one_tenant_never_sees_another_tenants_intents() {
    let db = TestDb::new(backends()[0]).await;
    let sms = FakeSms::start().await;
    let app = TestApp::new(&db).with_sms(&sms).with_toml(&tokens()).spawn().await;
    let posted = post_event(&app.base, WRITER_B, &sms_event("PO-9", "+9779800000009")).await;
    let key = posted["intents"][0]["key"].as_str().unwrap().to_string();

    let mut acme = User::new(&app.base);
    acme.sign_in(OPS_A).await;
    let by_url = acme.get(&format!("/console/intents/{key}")).await;
    assert_eq!(by_url.status, 404, "{}", by_url.body);
    assert!(!by_url.body.contains("PO-9"));
    let search = acme.get("/console/search?q=purchase_order%3APO-9").await;
    assert!(!search.body.contains(&key) && search.body.contains("No notification in tenant acme"));
    assert!(!acme.get(&format!("/console/search?q={key}")).await.body.contains("/console/intents/"));
    let replay = acme.get(&format!("/console/dead-letters/replay?id={key}")).await;
    assert_eq!(replay.status, 404);

    let mut globex = User::new(&app.base);
    globex.sign_in(OPS_B).await;
    assert_eq!(globex.get(&format!("/console/intents/{key}")).await.status, 200);
    app.running.stop().await;
}

#[tokio::test]
async fn dead_letters_are_grouped_by_reason_and_a_group_replays_after_confirmation() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        for phone in ["+9779800000011", "+9779800000012"] {
            // Refused once; accepted when replayed.
            sms.script(phone, vec![Reply::status(400, json!({"error": "rejected"})), Reply::ok("m-replayed")]);
        }
        let app = TestApp::new(&db).with_sms(&sms).with_toml(&tokens()).spawn().await;
        let mut keys = Vec::new();
        for (po, phone) in [("PO-11", "+9779800000011"), ("PO-12", "+9779800000012")] {
            let posted = post_event(&app.base, WRITER, &sms_event(po, phone)).await;
            let key = posted["intents"][0]["key"].as_str().unwrap().to_string();
            wait_state(&app.base, WRITER, &key, &["dead"]).await;
            keys.push(key);
        }

        let mut user = User::new(&app.base);
        user.sign_in(OPS_A).await;
        let groups = user.get("/console/dead-letters").await;
        assert_eq!(groups.status, 200, "{backend:?}: {}", groups.body);
        assert!(groups.body.contains("id=\"group-rejected\""), "{}", groups.body);
        assert!(groups.body.contains("<span class=\"count\">2</span>"), "{}", groups.body);
        assert!(groups.body.contains("oldest ") && keys.iter().all(|k| groups.body.contains(k.as_str())));

        let confirm = user.get("/console/dead-letters/replay?reason=rejected").await;
        assert_eq!(confirm.status, 200);
        assert!(confirm.body.contains("2 dead letters with reason"), "{}", confirm.body);
        assert_eq!(user.get("/console/dead-letters/replay?reason=bogus").await.status, 400);

        let result =
            user.post("/console/dead-letters/replay", &[("reason", "rejected"), ("csrf", &confirm.csrf())]).await;
        assert_eq!(result.status, 200, "{}", result.body);
        assert!(result.body.contains("<strong>2</strong> queued again"), "{}", result.body);
        for key in &keys {
            wait_state(&app.base, WRITER, key, &["sent"]).await;
        }
        let after = user.get("/console/dead-letters").await;
        assert!(!after.body.contains("group-rejected") && after.body.contains("No dead letters"), "{}", after.body);

        // Replaying one that is no longer dead says why not.
        let confirm = user.get(&format!("/console/dead-letters/replay?id={}", keys[0])).await;
        let again = user.post("/console/dead-letters/replay", &[("id", &keys[0]), ("csrf", &confirm.csrf())]).await;
        assert!(
            again.body.contains("<strong>0</strong> queued again") && again.body.contains("not_dead"),
            "{}",
            again.body
        );
        app.running.stop().await;
    }
}

#[tokio::test]
async fn without_tokens_the_console_signs_in_the_local_operator() {
    let db = TestDb::new(backends()[0]).await;
    let app = TestApp::new(&db).spawn().await;
    let mut user = User::new(&app.base);
    let form = user.get("/console/sign-in").await;
    assert!(form.body.contains("no API tokens configured"));
    let signed_in = user.post("/console/sign-in", &[("csrf", &form.csrf())]).await;
    assert_eq!(signed_in.status, 303);
    let home = user.get("/console/search").await;
    assert!(home.body.contains(">default<"), "{}", home.body);
    app.running.stop().await;
}

#[tokio::test]
async fn the_cookie_is_secure_when_herald_is_served_over_https() {
    let db = TestDb::new(backends()[0]).await;
    let app = TestApp::new(&db).with_public_url("https://herald.example.com").with_toml(&tokens()).spawn().await;
    let mut user = User::new(&app.base);
    let signed_in = user.sign_in(OPS_A).await;
    let cookie = signed_in.set_cookies().into_iter().find(|c| c.starts_with("herald_console=")).unwrap();
    assert!(cookie.ends_with("; Secure"), "{cookie}");
    app.running.stop().await;
}

#[tokio::test]
async fn an_unknown_console_page_is_a_page_and_the_api_still_answers_json() {
    let db = TestDb::new(backends()[0]).await;
    let app = TestApp::new(&db).with_toml(&tokens()).spawn().await;
    let mut user = User::new(&app.base);
    user.sign_in(OPS_A).await;
    let missing = user.get("/console/nowhere").await;
    assert_eq!(missing.status, 404);
    assert!(missing.headers["content-type"].to_str().unwrap().starts_with("text/html"));
    let api = user.get("/v1/nowhere").await;
    assert!(api.headers["content-type"].to_str().unwrap().starts_with("application/json"));
    let css = user.get("/console/console.css").await;
    assert!(css.status == 200 && css.headers["content-type"].to_str().unwrap().starts_with("text/css"));
    app.running.stop().await;
}
