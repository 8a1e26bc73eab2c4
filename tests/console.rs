//! The operator console over HTTP, on every backend: sign-in and its refusals,
//! CSRF on every form that changes something, search and the timeline, dead
//! letters grouped and replayed, one tenant never seeing another's (and an
//! admin seeing every tenant's), the templates page and the health page.
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
        ("erp-acme", "acme", WRITER, &["events:write", "intents:read", "recipients:write"]),
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

/// Issue 33: times a person can read — to the second, in UTC or the
/// recipient's zone as the operator chooses, with their age beside them —
/// and a search result row that is one link, not only its timestamp.
#[tokio::test]
async fn times_read_in_the_chosen_zone_with_their_age_and_a_whole_row_is_a_link() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let app = TestApp::new(&db).with_sms(&sms).with_toml(&tokens()).spawn().await;
        let mut event = sms_event("PO-ZONE", "+9779800000077");
        event["recipients"][0]["timezone"] = json!("Asia/Kathmandu");
        let posted = post_event(&app.base, WRITER, &event).await;
        let key = posted["intents"][0]["key"].as_str().unwrap().to_string();
        let sent = wait_state(&app.base, WRITER, &key, &["sent"]).await;
        let created: jiff::Timestamp = sent["created_at"].as_str().unwrap().parse().unwrap();

        let mut user = User::new(&app.base);
        user.sign_in(OPS_A).await;
        let found = user.get("/console/search?q=purchase_order%3APO-ZONE").await;
        let href = format!("href=\"/console/intents/{key}\"");
        assert_eq!(found.body.matches(&href).count(), 9, "{backend:?}: every cell of the row links: {}", found.body);
        let row_links = format!("{href} tabindex=\"-1\"");
        assert_eq!(found.body.matches(&row_links).count(), 8, "one keyboard stop a row: {}", found.body);
        let utc = created.strftime("%Y-%m-%d %H:%M:%S UTC").to_string();
        assert!(
            found.body.contains(&format!("{utc}</time> <span class=\"ago\">(")),
            "{utc} with its age: {}",
            found.body
        );

        let timeline = user.get(&format!("/console/intents/{key}")).await;
        assert!(timeline.body.contains(&format!(">{utc}</time>")), "UTC by default: {}", timeline.body);
        assert!(
            timeline.body.contains("href=\"?zone=recipient\">Asia&#x2f;Kathmandu</a> (the recipient's)"),
            "{}",
            timeline.body
        );
        let local = created.to_zoned(jiff::tz::TimeZone::get("Asia/Kathmandu").unwrap());
        let local = format!(">{} Asia/Kathmandu</time>", local.strftime("%Y-%m-%d %H:%M:%S +05:45"));
        let theirs = user.get(&format!("/console/intents/{key}?zone=recipient")).await;
        assert!(theirs.body.contains(&local), "{backend:?}: {local} in {}", theirs.body);
        assert!(
            theirs.body.contains("<strong>Asia&#x2f;Kathmandu</strong>"),
            "the chosen zone is marked: {}",
            theirs.body
        );
        let bogus = user.get(&format!("/console/intents/{key}?zone=mars")).await;
        assert_eq!(bogus.status, 400, "{}", bogus.body);
        assert!(bogus.body.contains("zone"), "{}", bogus.body);

        // The search page: UTC, or each row in its recipient's zone where the
        // directory has one.
        let put = reqwest::Client::new()
            .put(format!("{}/v1/recipients/u-PO-ZONE", app.base))
            .bearer_auth(WRITER)
            .json(&json!({"timezone": "Asia/Kathmandu"}))
            .send()
            .await
            .unwrap();
        assert!(put.status().is_success(), "{}", put.status());
        let theirs = user.get("/console/search?q=purchase_order%3APO-ZONE&zone=recipient").await;
        assert!(theirs.body.contains(&local), "{backend:?}: {local} in {}", theirs.body);
        assert!(theirs.body.contains("<option value=\"recipient\" selected>"), "{}", theirs.body);
        let bogus = user.get("/console/search?q=purchase_order%3APO-ZONE&zone=mars").await;
        assert_eq!(bogus.status, 400, "{}", bogus.body);
        app.running.stop().await;
    }
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
        // The replay is an entry of the timeline everywhere — the API, `herald
        // why`, the console — between the attempt before it and the one after.
        let detail = wait_state(&app.base, WRITER, &keys[0], &["sent"]).await;
        let replays = detail["replays"].as_array().unwrap_or_else(|| panic!("{backend:?}: no replays in {detail}"));
        assert_eq!(replays.len(), 1, "{detail}");
        assert_eq!(replays[0]["previous_reason"], "rejected", "{detail}");
        assert_eq!(replays[0]["requested_by"], "console:ops-acme", "{detail}");
        let stored = db.store().await.intent_get("acme", &keys[0]).await.unwrap().unwrap();
        let why = herald::why::timeline(("purchase_order", "PO-11"), "u-PO-11", &[stored]);
        let order =
            ["attempt 1 permanent", "replayed by console:ops-acme (dead letter: rejected)", "attempt 2 started"];
        let at: Vec<Option<usize>> = order.iter().map(|line| why.find(line)).collect();
        assert!(at.iter().all(Option::is_some) && at.is_sorted(), "{backend:?}: {order:?} in order in {why}");
        let timeline = user.get(&format!("/console/intents/{}", keys[0])).await;
        let order =
            ["Attempt 1: permanent", "Replayed from the dead letters by console:ops-acme", "Attempt 2: accepted"];
        let at: Vec<Option<usize>> = order.iter().map(|line| timeline.body.find(line)).collect();
        assert!(
            at.iter().all(Option::is_some) && at.is_sorted(),
            "{backend:?}: {order:?} in order in {}",
            timeline.body
        );
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
    let form = user.get("/console/sign-in").await;
    let pre = form.set_cookies().into_iter().find(|c| c.contains("herald_console_pre=")).unwrap();
    assert!(pre.starts_with("__Host-herald_console_pre="), "{pre}");
    let signed_in = user.post("/console/sign-in", &[("token", OPS_A), ("csrf", &form.csrf())]).await;
    assert_eq!(signed_in.status, 303, "{}", signed_in.body);
    // `__Host-`: a browser takes it only when Secure, for Path=/ and without
    // a Domain, so no other host (a sibling subdomain) can set or shadow it.
    let cookie = signed_in.set_cookies().into_iter().find(|c| c.contains("herald_console=")).unwrap();
    assert!(cookie.starts_with("__Host-herald_console="), "{cookie}");
    assert!(cookie.ends_with("; Secure") && cookie.contains("; Path=/;"), "{cookie}");
    assert!(!cookie.to_ascii_lowercase().contains("domain="), "{cookie}");
    // The prefixed cookie is the session, and signing out clears it.
    let home = user.get("/console/search").await;
    assert_eq!(home.status, 200, "{}", home.body);
    let out = user.post("/console/sign-out", &[("csrf", &home.csrf())]).await;
    let cleared = out.set_cookies().into_iter().find(|c| c.contains("herald_console=")).unwrap();
    assert!(cleared.starts_with("__Host-herald_console=;") && cleared.contains("Max-Age=0"), "{cleared}");
    assert_eq!(user.get("/console/search").await.status, 303, "signed out");
    // An unprefixed cookie of the same value is not the session.
    let mut forger = User::new(&app.base);
    let signed_in = forger.sign_in(OPS_A).await;
    assert_eq!(signed_in.status, 303);
    let value = forger.cookies.remove("__Host-herald_console").unwrap();
    forger.cookies.insert("herald_console".into(), value);
    assert_eq!(forger.get("/console/search").await.status, 303, "only the __Host- cookie is read");
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

const ADMIN: &str = "tok-admin";
const ADMIN_ONLY: &str = "tok-admin-only";

/// The tokens above, and a deployment operator's: `admin` (with `ops` in its
/// own tenant, acme) and one with `admin` alone.
fn tokens_with_admin() -> String {
    format!(
        "{}{}",
        tokens(),
        tokens_toml(&[
            ("admin", "acme", ADMIN, &["admin", "ops", "intents:read"]),
            ("admin-only", "hq", ADMIN_ONLY, &["admin"]),
        ])
    )
}

/// Polls an intent until it has `n` finished attempts.
async fn wait_attempts(base: &str, token: &str, key: &str, n: usize) -> serde_json::Value {
    for _ in 0..300 {
        let it = wait_state(base, token, key, &["queued", "sending", "sent", "dead", "unknown"]).await;
        let finished = it["attempts"].as_array().map_or(0, |a| a.iter().filter(|a| !a["outcome"].is_null()).count());
        if finished >= n && it["state"] != "sending" {
            return it;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("intent {key} never had {n} finished attempts");
}

#[tokio::test]
async fn the_templates_page_renders_every_template_with_its_verdict_and_marks_what_forced_ucs2() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let app = TestApp::new(&db).with_toml(&tokens()).spawn().await;
        let mut user = User::new(&app.base);
        user.sign_in(OPS_A).await;
        let page = user.get("/console/templates").await;
        assert_eq!(page.status, 200, "{backend:?}: {}", page.body);
        // The rows `herald templates check` prints for the built-in set.
        let rows = herald::render::check::check(&herald::render::TemplateSet::built_in());
        assert!(rows.len() >= 6, "{rows:?}");
        for r in &rows {
            assert!(page.body.contains(&format!("id=\"{}-{}-{}\"", r.template, r.locale, r.channel)), "{r:?}");
        }
        assert!(page.body.contains("All ") && page.body.contains("render within budget"), "{}", page.body);
        // Nepali SMS: UCS-2, each Devanagari letter marked with its code point.
        let ne = &page.body[page.body.find("id=\"po_approved-ne-sms\"").unwrap()..];
        let ne = &ne[..ne.find("</tr>").unwrap()];
        let marked = "<mark title=\"U+0938 U+094D U+0935 U+0940 U+0915 U+0943 U+0924 forced UCS-2\">स्वीकृत<span";
        assert!(ne.contains("UCS-2") && ne.contains(marked), "{ne}");
        assert!(ne.contains("Forced into UCS-2 by: U+0938 &#x27;स&#x27; at 8"), "the command's own list: {ne}");
        let en = &page.body[page.body.find("id=\"po_approved-en-sms\"").unwrap()..];
        let en = &en[..en.find("</tr>").unwrap()];
        assert!(en.contains("GSM-7") && !en.contains("<mark") && en.contains("PO-4482 approved by Asha"), "{en}");
        app.running.stop().await;
    }
}

#[tokio::test]
async fn a_template_over_its_budget_fails_on_the_page_naming_the_culprit() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("po_approved");
    std::fs::create_dir_all(t.join("en")).unwrap();
    std::fs::write(t.join("template.toml"), "revision = \"2\"\ndefault_locale = \"en\"\nsms_max_segments = 1\n")
        .unwrap();
    std::fs::write(t.join("fixtures.json"), r#"{"data": {"po": {"number": "PO-1"}}}"#).unwrap();
    // A curly apostrophe turns 80 GSM-7 characters into two UCS-2 segments.
    let long = format!("{{{{ po.number }}}} it’s approved {}", "x".repeat(60));
    std::fs::write(t.join("en/sms.j2"), &long).unwrap();
    std::fs::write(t.join("en/in_app.j2"), "{{ po.number }}").unwrap();
    for name in ["email.subject.j2", "email.txt.j2"] {
        std::fs::write(t.join("en").join(name), "{{ po.number }}").unwrap();
    }
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let app = TestApp::new(&db).with_templates_dir(dir.path()).with_toml(&tokens()).spawn().await;
        let mut user = User::new(&app.base);
        user.sign_in(OPS_A).await;
        let page = user.get("/console/templates").await;
        assert_eq!(page.status, 200, "{backend:?}: {}", page.body);
        assert!(page.body.contains("1 message would fail"), "{}", page.body);
        let sms = &page.body[page.body.find("id=\"po_approved-en-sms\"").unwrap()..];
        let sms = &sms[..sms.find("</tr>").unwrap()];
        assert!(sms.contains("FAIL") && sms.contains("2 segments over a budget of 1"), "{sms}");
        assert!(sms.contains("it<mark title=\"U+2019 forced UCS-2\">’<span class=\"visually-hidden\">"), "{sms}");
        assert!(sms.contains("U+2019 &#x27;’&#x27; at 7"), "{sms}");
        app.running.stop().await;
    }
}

#[tokio::test]
async fn the_health_page_shows_the_queue_attempts_by_outcome_and_the_daily_digest() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        sms.script("+9779800000031", vec![Reply::status(400, json!({"error": "rejected"}))]);
        // Retry-After is a floor (up to retry.max_retry_after): the retry waits 50
        // minutes, so it stays in the queue while the test looks.
        let mut busy = Reply::status(503, json!({}));
        busy.retry_after = Some("3000".into());
        sms.script("+9779800000032", vec![busy]);
        let digest = "[ops]\ndigest_webhook = \"http://127.0.0.1:9/ops\"\ndigest_at = \"08:30\"\ndigest_timezone = \"Asia/Kathmandu\"\n";
        let app = TestApp::new(&db)
            .with_sms(&sms)
            .with_retry(2, "50m", "50m")
            .with_toml(&format!("{}{digest}", tokens_with_admin()))
            .spawn()
            .await;
        let mut keys = Vec::new();
        for (po, phone, token) in [
            ("PO-30", "+9779800000030", WRITER),
            ("PO-31", "+9779800000031", WRITER),
            ("PO-32", "+9779800000032", WRITER),
            ("PO-33", "+9779800000033", WRITER_B),
        ] {
            let posted = post_event(&app.base, token, &sms_event(po, phone)).await;
            let key = posted["intents"][0]["key"].as_str().unwrap().to_string();
            wait_attempts(&app.base, token, &key, 1).await;
            keys.push(key);
        }
        // A daily digest posted yesterday, as the scheduler records it.
        let store = db.store().await;
        let now = jiff::Timestamp::now().as_microsecond();
        let claim = herald::store::OpsDigestClaim {
            slot: "2026-11-29".into(),
            since_us: now - 48 * 3_600_000_000,
            until_us: now - 24 * 3_600_000_000,
            now_us: now,
            lease_us: 60_000_000,
        };
        store.ops_digest_claim(claim).await.unwrap();
        store.ops_digest_posted("2026-11-29", now - 3_600_000_000, 7).await.unwrap();

        let mut acme = User::new(&app.base);
        acme.sign_in(OPS_A).await;
        let page = acme.get("/console/health").await;
        assert_eq!(page.status, 200, "{backend:?}: {}", page.body);
        assert!(page.body.contains("<dd id=\"queue-due\">0</dd>"), "{}", page.body);
        assert!(page.body.contains("<dd id=\"queue-total\">1</dd>"), "the retry waits: {}", page.body);
        assert!(page.body.contains("3 attempts finished"), "acme's three, not globex's: {}", page.body);
        for outcome in ["accepted", "permanent", "retryable"] {
            let row = format!("<tr id=\"outcome-{outcome}\"><th scope=\"row\">{outcome}</th><td>1</td></tr>");
            assert!(page.body.contains(&row), "{row} missing: {}", page.body);
        }
        assert!(page.body.contains("every day at 08:30 Asia&#x2f;Kathmandu"), "{}", page.body);
        assert!(page.body.contains("(1h 0m ago)"), "the last digest: {}", page.body);
        assert!(!page.body.contains("7 dead letters"), "the deployment's total is the admin's to see");
        let next = page.body.split("<dd id=\"digest-next\"><time>").nth(1).unwrap().split('<').next().unwrap();
        let next: jiff::Timestamp = next.parse().unwrap_or_else(|e| panic!("{next}: {e}"));
        assert!(
            next > jiff::Timestamp::now() && next.to_string().ends_with("T02:45:00Z"),
            "08:30 in Kathmandu: {next}"
        );
        assert!(page.body.contains("No failover providers are configured"));
        assert!(!page.body.contains("Shadow report") && !page.body.contains("Rejected bus messages"), "not configured");

        let mut admin = User::new(&app.base);
        admin.sign_in(ADMIN).await;
        let all = admin.get("/console/health").await;
        assert!(all.body.contains("Every tenant's figures"), "{}", all.body);
        assert!(all.body.contains("4 attempts finished"), "every tenant's: {}", all.body);
        assert!(all.body.contains(": 7 dead letters"), "{}", all.body);
        app.running.stop().await;
    }
}

#[tokio::test]
async fn the_health_page_shows_open_circuits_and_in_shadow_mode_the_shadow_report() {
    for backend in backends() {
        health_with_breakers_and_shadow(backend).await;
    }
}

async fn health_with_breakers_and_shadow(backend: common::Backend) {
    let db = TestDb::new(backend).await;
    let backup = FakeSms::start().await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let primary = format!("http://{}/sms", closed.local_addr().unwrap());
    drop(closed);
    let failover = format!(
        "[channels.sms]\nproviders = [\"primary\", \"backup\"]\nbreaker_failures = 1\nbreaker_cool_down = \"10m\"\n\
         [channels.sms.named.primary]\nurl = \"{primary}\"\ntimeout = \"300ms\"\n\
         [channels.sms.named.backup]\nurl = \"{}\"\ntimeout = \"300ms\"\n",
        backup.url
    );
    let app = TestApp::new(&db).with_toml(&format!("{}{failover}", tokens())).spawn().await;
    let posted = post_event(&app.base, WRITER, &sms_event("PO-40", "+9779800000040")).await;
    let key = posted["intents"][0]["key"].as_str().unwrap().to_string();
    wait_state(&app.base, WRITER, &key, &["sent"]).await;
    let mut user = User::new(&app.base);
    user.sign_in(OPS_A).await;
    let page = user.get("/console/health").await;
    assert!(page.body.contains("<strong class=\"bad\">1 open</strong>"), "{}", page.body);
    assert!(page.body.contains("<th scope=\"row\">primary</th><td class=\"bad\">open</td>"), "{}", page.body);
    assert!(page.body.contains("<th scope=\"row\">backup</th><td class=\"\">closed</td>"), "{}", page.body);
    app.running.stop().await;

    let db = TestDb::new(backend).await;
    let sms = FakeSms::start().await;
    let app = TestApp::new(&db).with_sms(&sms).with_mode("shadow").with_toml(&tokens()).spawn().await;
    let posted = post_event(&app.base, WRITER, &sms_event("PO-41", "+9779800000041")).await;
    let key = posted["intents"][0]["key"].as_str().unwrap().to_string();
    wait_state(&app.base, WRITER, &key, &["shadowed"]).await;
    let mut user = User::new(&app.base);
    user.sign_in(OPS_A).await;
    let page = user.get("/console/health").await;
    assert!(page.body.contains("Shadow report, the last hour"), "{}", page.body);
    let report = page.body.split("<pre class=\"data\" id=\"shadow-report\">").nth(1).unwrap();
    assert!(report.starts_with("shadow report, tenant acme,"), "the command's table: {report}");
    let would_send = report.lines().find(|l| l.trim_start().starts_with("sms ") && l.contains("would send")).unwrap();
    assert!(would_send.contains("would send          1"), "{would_send}");
    assert_eq!(sms.calls(), 0);
    app.running.stop().await;
}

#[tokio::test]
async fn with_bus_ingest_the_health_page_lists_rejected_messages_of_the_tenant() {
    for backend in backends() {
        let Some(bus) = common::nats::TestStream::new().await else { return };
        let db = TestDb::new(backend).await;
        let app = TestApp::new(&db).with_toml(&format!("{}{}", tokens_with_admin(), bus.toml("acme", 5))).spawn().await;
        let store = db.store().await;
        for (tenant, seq) in [("acme", 1), ("globex", 2)] {
            let row = herald::store::RejectedMessage {
                id: herald::store::RejectedMessage::id_of(&bus.stream, seq),
                tenant: tenant.into(),
                stream: bus.stream.clone(),
                consumer: bus.consumer.clone(),
                subject: bus.subject.clone(),
                stream_seq: seq,
                deliveries: 1,
                status: 400,
                code: "malformed_json".into(),
                message: format!("body is not JSON ({tenant})"),
                body: Some("{not json".into()),
                created_at: jiff::Timestamp::now().as_microsecond(),
            };
            store.rejected_record(row).await.unwrap();
        }
        let mut user = User::new(&app.base);
        user.sign_in(OPS_A).await;
        let page = user.get("/console/health").await;
        assert!(page.body.contains("Rejected bus messages"), "{backend:?}: {}", page.body);
        assert!(page.body.contains("400 malformed_json: body is not JSON (acme)"), "{}", page.body);
        assert!(!page.body.contains("(globex)"), "another tenant's: {}", page.body);
        assert!(!page.body.contains("{not json"), "bodies are left out");
        let mut admin = User::new(&app.base);
        admin.sign_in(ADMIN).await;
        let all = admin.get("/console/health").await;
        assert!(all.body.contains("(acme)") && all.body.contains("(globex)"), "{}", all.body);
        assert!(all.body.contains("<td>globex</td>"), "the tenant is shown: {}", all.body);
        app.running.stop().await;
        bus.cleanup().await;
    }
}

#[tokio::test]
async fn an_admin_sees_every_tenant_with_the_tenant_shown_and_an_ops_token_only_its_own() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        for phone in ["+9779800000051", "+9779800000052"] {
            sms.script(phone, vec![Reply::status(400, json!({"error": "rejected"}))]);
        }
        let app = TestApp::new(&db).with_sms(&sms).with_toml(&tokens_with_admin()).spawn().await;
        let a = post_event(&app.base, WRITER, &sms_event("PO-51", "+9779800000051")).await;
        let b = post_event(&app.base, WRITER_B, &sms_event("PO-52", "+9779800000052")).await;
        let (key_a, key_b) = (a["intents"][0]["key"].as_str().unwrap(), b["intents"][0]["key"].as_str().unwrap());
        wait_state(&app.base, WRITER, key_a, &["dead"]).await;
        wait_state(&app.base, WRITER_B, key_b, &["dead"]).await;

        let mut admin = User::new(&app.base);
        admin.sign_in(ADMIN).await;
        let found = admin.get("/console/search?q=purchase_order%3APO-52").await;
        assert!(
            found.body.contains(key_b) && found.body.contains("tabindex=\"-1\">globex</a></td>"),
            "{backend:?}: {}",
            found.body
        );
        // By recipient too: each tenant's recipient index, tenant by tenant.
        let by_recipient = admin.get("/console/search?q=u-PO-51&by=recipient").await;
        assert!(
            by_recipient.body.contains(key_a) && !by_recipient.body.contains(key_b),
            "{backend:?}: {}",
            by_recipient.body
        );
        assert_eq!(
            admin.get(&format!("/console/search?q={key_b}")).await.location(),
            Some(format!("/console/intents/{key_b}").as_str())
        );
        let theirs = admin.get(&format!("/console/intents/{key_b}")).await;
        assert_eq!(theirs.status, 200, "{}", theirs.body);
        assert!(theirs.body.contains("tenant <strong id=\"intent-tenant\">globex</strong>"), "{}", theirs.body);
        assert!(!theirs.body.contains("Replay this dead letter"), "replays stay in the admin's own tenant");
        let groups = admin.get("/console/dead-letters").await;
        assert!(
            groups.body.contains("id=\"group-acme-rejected\"") && groups.body.contains("id=\"group-globex-rejected\""),
            "{}",
            groups.body
        );
        assert!(groups.body.contains("tenant <strong>globex</strong>") && groups.body.contains("across every tenant"));
        assert_eq!(groups.body.matches("id=\"replay-rejected\"").count(), 1, "only acme's group offers a replay");
        assert_eq!(admin.get(&format!("/console/dead-letters/replay?id={key_b}")).await.status, 404);

        let mut admin_only = User::new(&app.base);
        assert_eq!(admin_only.sign_in(ADMIN_ONLY).await.status, 303, "admin alone may read");
        let groups = admin_only.get("/console/dead-letters").await;
        assert!(groups.body.contains(key_a) && groups.body.contains(key_b), "{}", groups.body);
        assert!(!groups.body.contains("id=\"replay-"), "no ops scope, no replay: {}", groups.body);

        let mut acme = User::new(&app.base);
        acme.sign_in(OPS_A).await;
        let search = acme.get("/console/search?q=purchase_order%3APO-52").await;
        assert!(!search.body.contains(key_b) && search.body.contains("No notification in tenant acme"));
        assert!(!search.body.contains("class=\"tenant\""));
        assert_eq!(acme.get(&format!("/console/intents/{key_b}")).await.status, 404);
        let groups = acme.get("/console/dead-letters").await;
        assert!(groups.body.contains(key_a) && !groups.body.contains(key_b), "{}", groups.body);
        assert!(groups.body.contains("id=\"group-rejected\"") && !groups.body.contains("globex"));
        let health = acme.get("/console/health").await;
        assert!(health.body.contains("1 attempt finished"), "acme's only: {}", health.body);
        app.running.stop().await;
    }
}

/// The old notifier's log for the console's comparison: PO-1's SMS to u-1
/// twice, PO-2's to u-2 (who opted out of SMS), PO-3's to u-3 by number, and
/// an SMS to a number Herald never planned for.
const OLD_LOG: &str = "\
time,channel,recipient_id,destination,entity_type,entity_id,event_type
2026-11-29T10:15:10Z,sms,u-1,,purchase_order,PO-1,purchase_order.approved
2026-11-29T10:15:40Z,sms,u-1,,purchase_order,PO-1,purchase_order.approved
2026-11-29T10:15:12Z,sms,u-2,,purchase_order,PO-2,purchase_order.approved
2026-11-29T10:15:15Z,sms,,+9779800000003,purchase_order,PO-3,purchase_order.approved
2026-11-29T10:15:20Z,sms,,+9779800000009,purchase_order,PO-9,purchase_order.approved
";

#[tokio::test]
async fn the_comparison_page_takes_a_pasted_or_uploaded_log_and_groups_what_differs() {
    const ERP: &str = "tok-erp-all-acme";
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let toml = tokens_toml(&[
            ("ops-acme", "acme", OPS_A, &["ops"]),
            ("erp-acme", "acme", ERP, &["events:write", "intents:read", "recipients:write"]),
        ]);
        let clock = common::TestClock::at("2026-11-29T10:15:05Z");
        let app = TestApp::new(&db).with_sms(&sms).with_mode("shadow").with_clock(clock).with_toml(&toml).spawn().await;
        let client = reqwest::Client::new();
        let prefs = json!({"phone": "+9779800000002", "preferences": {"channels": {"sms": false}}});
        let put = client.put(format!("{}/v1/recipients/u-2", app.base)).bearer_auth(ERP).json(&prefs).send().await;
        assert!(put.unwrap().status().is_success());
        for (po, who, phone) in
            [("PO-1", "u-1", "+9779800000001"), ("PO-2", "u-2", "+9779800000002"), ("PO-3", "u-3", "+9779800000003")]
        {
            let mut event = sms_event(po, phone);
            event["occurred_at"] = json!("2026-11-29T10:15:00Z");
            event["recipients"][0]["id"] = json!(who);
            let posted = post_event(&app.base, ERP, &event).await;
            wait_state(&app.base, ERP, posted["intents"][0]["key"].as_str().unwrap(), &["shadowed", "suppressed"])
                .await;
        }
        let mut user = User::new(&app.base);
        user.sign_in(OPS_A).await;
        let form = user.get("/console/shadow/compare").await;
        assert_eq!(form.status, 200, "{}", form.body);
        assert!(form.body.contains("href=\"/console/shadow/compare\" aria-current=\"page\""), "in the nav");
        let csrf = form.csrf();

        let pasted = user.post_multipart("/console/shadow/compare", &[("csrf", &csrf), ("sends", OLD_LOG)], None).await;
        assert_eq!(pasted.status, 200, "{backend:?}: {}", pasted.body);
        let page = &pasted.body;
        for figure in [
            "id=\"both\">2<",
            "id=\"only-old\" class=\"bad\">2<",
            "id=\"only-herald\">0<",
            "id=\"duplicated\" class=\"bad\">1 ",
        ] {
            assert!(page.contains(figure), "{backend:?}: {figure} not in {page}");
        }
        assert!(page.contains("id=\"reason-no_route\"") && page.contains("id=\"reason-opted_out\""), "{page}");
        assert!(page.contains("(1 extra send)"), "{page}");
        assert!(page.contains("+97798******09 <span class=\"hint\""), "masked, with its hash: {page}");
        assert!(!page.contains("9800000009") && !page.contains("9800000003"), "no number in clear: {page}");
        assert!(!page.contains("2026-11-29T10:15:40Z,sms"), "the log is not shown back");
        let duplicates = &page[page.find("id=\"duplicates\"").unwrap()..];
        assert!(duplicates.contains("<td class=\"count bad\">2</td><td>sms</td><td>u-1</td>"), "{duplicates}");

        // The same log uploaded as a JSON Lines file.
        let lines = common::send_log::csv_to_jsonl(OLD_LOG);
        let uploaded = user
            .post_multipart(
                "/console/shadow/compare",
                &[("csrf", &csrf), ("sends", "")],
                Some(("file", "old.jsonl", &lines)),
            )
            .await;
        assert_eq!(uploaded.status, 200, "{}", uploaded.body);
        assert!(uploaded.body.contains("id=\"both\">2<") && uploaded.body.contains("id=\"only-old\" class=\"bad\">2<"));

        // A bad row is named on the page; a form without its CSRF token is refused.
        let bad = OLD_LOG.replacen("2026-11-29T10:15:40Z", "yesterday", 1);
        let refused = user.post_multipart("/console/shadow/compare", &[("csrf", &csrf), ("sends", &bad)], None).await;
        assert_eq!(refused.status, 400);
        assert!(refused.body.contains("sends line 3: time: must be an RFC 3339 timestamp"), "{}", refused.body);
        let empty = user.post_multipart("/console/shadow/compare", &[("csrf", &csrf), ("sends", " ")], None).await;
        assert_eq!(empty.status, 400);
        let forged = user.post_multipart("/console/shadow/compare", &[("sends", OLD_LOG)], None).await;
        assert_eq!(forged.status, 403, "{}", forged.body);
        let theirs = user
            .post_multipart(
                "/console/shadow/compare",
                &[("csrf", &csrf), ("sends", OLD_LOG), ("tenant", "globex")],
                None,
            )
            .await;
        assert_eq!(theirs.status, 403, "{}", theirs.body);
        app.running.stop().await;
    }
}
