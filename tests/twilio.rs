//! SMS through a Twilio-compatible API, against a fake that speaks Twilio's
//! wire protocol: the form it reads, the login it checks, the errors it
//! answers; and what a retry after `unknown` means on a provider that takes
//! no idempotency key.

mod common;

use common::twilio::{ACCOUNT_SID, FakeTwilio, TwilioReply};
use common::{FakeSms, Reply, TestApp, TestDb, backends, sms_event};
use serde_json::Value;
use std::time::Duration;

const PUBLIC: &str = "https://herald.example.com";

fn id_of(body: &Value) -> String {
    body["intents"][0]["id"].as_str().unwrap().to_string()
}

fn app(db: &TestDb, twilio: &FakeTwilio, sender: &str, timeout: &str) -> TestApp {
    TestApp::new(db).with_public_url(PUBLIC).with_toml(&twilio.toml(sender, timeout))
}

#[tokio::test]
async fn a_message_goes_to_twilio_as_a_form_with_basic_auth_and_its_sid_is_recorded() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let twilio = FakeTwilio::start().await;
        let app = app(&db, &twilio, "from = \"+15005550006\"", "1s").spawn().await;
        let (s, b, _) = app.post_event(&sms_event("PO-TW1", "+9779800000001"), None).await;
        assert_eq!(s, 202, "{b}");
        let it = app.wait_state(&id_of(&b), &["sent"]).await;
        let sent = twilio.sent_to("+9779800000001");
        assert_eq!(sent.len(), 1, "{backend:?}");
        let req = &sent[0];
        assert_eq!(req.account_sid, ACCOUNT_SID);
        assert_eq!(req.content_type.as_deref(), Some("application/x-www-form-urlencoded"));
        assert_eq!(req.param("From"), Some("+15005550006"));
        assert_eq!(req.param("MessagingServiceSid"), None);
        assert_eq!(req.param("Body"), it["content"]["body"].as_str());
        let key = it["key"].as_str().unwrap();
        assert_eq!(req.param("StatusCallback"), Some(format!("{PUBLIC}/v1/receipts/twilio?key={key}").as_str()));
        assert!(!req.header_names.contains(&"idempotency-key".to_string()), "Twilio takes no such header");
        let attempt = &it["attempts"][0];
        assert_eq!(attempt["provider"], "twilio");
        assert_eq!(attempt["provider_status"], 201);
        assert_eq!(attempt["provider_message_id"].as_str(), req.sid.as_deref());
        assert_eq!(attempt["possible_duplicate"], false);
        let metrics = app.client.get(format!("{}/metrics", app.base)).send().await.unwrap().text().await.unwrap();
        assert!(
            metrics.lines().any(|l| l.starts_with("herald_attempts_total")
                && l.contains("provider=\"twilio\"")
                && l.contains("outcome=\"accepted\"")),
            "{metrics}"
        );
        app.running.stop().await;
    }
}

#[tokio::test]
async fn a_messaging_service_sends_in_place_of_a_number() {
    let db = TestDb::new(common::Backend::Sqlite).await;
    let twilio = FakeTwilio::start().await;
    let app = app(&db, &twilio, "messaging_service_sid = \"MG0123456789abcdef\"", "1s").spawn().await;
    let (_, b, _) = app.post_event(&sms_event("PO-TW2", "+9779800000002"), None).await;
    app.wait_state(&id_of(&b), &["sent"]).await;
    let req = &twilio.sent_to("+9779800000002")[0];
    assert_eq!((req.param("MessagingServiceSid"), req.param("From")), (Some("MG0123456789abcdef"), None));
    app.running.stop().await;
}

#[tokio::test]
async fn an_invalid_number_is_a_permanent_invalid_destination_and_the_error_keeps_it_masked() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let twilio = FakeTwilio::start().await;
        for (number, code) in [("+15005550001", 21211), ("+15005550009", 21614)] {
            let message = format!("The 'To' number {number} is not a valid mobile number.");
            twilio.script(number, vec![TwilioReply::error(400, code, &message)]);
        }
        let app = app(&db, &twilio, "from = \"Herald\"", "1s").spawn().await;
        for (entity, number, code) in [("PO-TW3", "+15005550001", "21211"), ("PO-TW4", "+15005550009", "21614")] {
            let (_, b, _) = app.post_event(&sms_event(entity, number), None).await;
            let it = app.wait_state(&id_of(&b), &["dead"]).await;
            assert_eq!(it["reason"], "invalid_destination", "{backend:?}: {it}");
            let attempts = it["attempts"].as_array().unwrap();
            assert_eq!(attempts.len(), 1, "never retried: {it}");
            let error = attempts[0]["error"].as_str().unwrap();
            assert!(error.contains(code) && !error.contains(number), "{error}");
            assert_eq!(twilio.sent_to(number).len(), 1);
        }
        app.running.stop().await;
    }
}

#[tokio::test]
async fn throttling_and_server_errors_are_retried_and_a_bad_login_is_not() {
    let db = TestDb::new(common::Backend::Sqlite).await;
    let twilio = FakeTwilio::start().await;
    twilio.script(
        "+9779800000005",
        vec![
            TwilioReply::error(429, 20429, "Too Many Requests").retry_after("1"),
            TwilioReply::error(503, 20500, "Service unavailable"),
            TwilioReply::created(),
        ],
    );
    let app = app(&db, &twilio, "from = \"+15005550006\"", "1s").spawn().await;
    let (_, b, _) = app.post_event(&sms_event("PO-TW5", "+9779800000005"), None).await;
    let it = app.wait_state(&id_of(&b), &["sent"]).await;
    let classes: Vec<(&str, &str)> = it["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["outcome"].as_str().unwrap(), a["error_class"].as_str().unwrap_or("-")))
        .collect();
    assert_eq!(classes, [("retryable", "throttled"), ("retryable", "provider_5xx"), ("accepted", "-")]);
    assert_eq!(it["attempts"][0]["retry_after_seconds"], 1.0, "Retry-After honoured in full, above retry.max");
    app.running.stop().await;

    // The same account with a wrong token: every message is refused as it is.
    let db = TestDb::new(common::Backend::Sqlite).await;
    let wrong = twilio.toml("from = \"+15005550006\"", "1s").replace(common::twilio::AUTH_TOKEN, "wrong-token");
    let app = TestApp::new(&db).with_public_url(PUBLIC).with_toml(&wrong).spawn().await;
    let (_, b, _) = app.post_event(&sms_event("PO-TW6", "+9779800000006"), None).await;
    let it = app.wait_state(&id_of(&b), &["dead"]).await;
    assert_eq!(it["reason"], "rejected");
    assert!(it["attempts"][0]["error"].as_str().unwrap().contains("20003"), "{it}");
    assert!(!it.to_string().contains("wrong-token"), "{it}");
    app.running.stop().await;
}

#[tokio::test]
async fn a_refused_connection_is_retried_as_nothing_sent() {
    let db = TestDb::new(common::Backend::Sqlite).await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let twilio = FakeTwilio::start().await;
    let toml = twilio.toml("from = \"+15005550006\"", "1s").replace(&twilio.base_url, &base);
    let app = TestApp::new(&db).with_public_url(PUBLIC).with_toml(&toml).with_retry(2, "10ms", "20ms").spawn().await;
    let (_, b, _) = app.post_event(&sms_event("PO-TW7", "+9779800000007"), None).await;
    let it = app.wait_state(&id_of(&b), &["dead"]).await;
    assert_eq!(it["reason"], "retries_exhausted");
    for a in it["attempts"].as_array().unwrap() {
        assert_eq!((a["outcome"].as_str(), a["error_class"].as_str()), (Some("retryable"), Some("unreachable")));
        assert_eq!(a["possible_duplicate"], false);
    }
    app.running.stop().await;
}

/// Twilio created the first message but answered too late: the retry creates
/// a second one, and the attempt says so. The JSON provider's retry carries
/// the same `Idempotency-Key` and is not marked.
#[tokio::test]
async fn a_retry_after_unknown_is_recorded_as_a_possible_duplicate_where_no_key_can_dedupe_it() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let twilio = FakeTwilio::start().await;
        let number = "+9779800000008";
        twilio.script(number, vec![TwilioReply::created().slow(Duration::from_millis(900)), TwilioReply::created()]);
        let app = app(&db, &twilio, "from = \"+15005550006\"", "300ms").spawn().await;
        let (_, b, _) = app.post_event(&sms_event("PO-TW8", number), None).await;
        let it = app.wait_state(&id_of(&b), &["sent"]).await;
        let attempts = it["attempts"].as_array().unwrap();
        assert_eq!(attempts.len(), 2, "{it}");
        assert_eq!(
            (attempts[0]["outcome"].as_str(), attempts[0]["error_class"].as_str()),
            (Some("unknown"), Some("timeout"))
        );
        assert_eq!(attempts[0]["possible_duplicate"], false);
        assert_eq!(attempts[1]["outcome"], "accepted");
        assert_eq!(attempts[1]["possible_duplicate"], true, "{backend:?}: {it}");
        assert_eq!(twilio.sent_to(number).len(), 2, "Twilio did create two messages");
        let why = herald::why::timeline(
            ("purchase_order", "PO-TW8"),
            "u-PO-TW8",
            &[detail(&db, it["key"].as_str().unwrap()).await],
        );
        assert!(why.contains("attempt 2 accepted via twilio") && why.contains("POSSIBLE DUPLICATE"), "{why}");
        app.running.stop().await;

        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        sms.script(number, vec![Reply::ok("m-1").slow(Duration::from_millis(900)), Reply::ok("m-1")]);
        let app = TestApp::new(&db).with_sms(&sms).with_lease("3s", "300ms").spawn().await;
        let (_, b, _) = app.post_event(&sms_event("PO-TW9", number), None).await;
        let it = app.wait_state(&id_of(&b), &["sent"]).await;
        let attempts = it["attempts"].as_array().unwrap();
        assert_eq!(
            (attempts[0]["outcome"].as_str(), attempts[1]["outcome"].as_str()),
            (Some("unknown"), Some("accepted"))
        );
        assert_eq!(attempts[1]["provider"], "http");
        assert_eq!(attempts[1]["possible_duplicate"], false, "the Idempotency-Key lets the provider dedupe");
        let keys: Vec<_> = sms.sent_to(number).iter().map(|r| r.idempotency_key.clone()).collect();
        assert_eq!(keys.len(), 2);
        assert_eq!(keys[0], keys[1]);
        app.running.stop().await;
    }
}

async fn detail(db: &TestDb, key: &str) -> herald::store::IntentDetail {
    db.store().await.intent_get("default", key).await.unwrap().unwrap()
}

/// A claim by a worker that dies at once: its lease (none at all) has run
/// out when the next claim comes, which takes the attempt back as `unknown`.
fn lapsing_claim() -> herald::store::Claim {
    herald::store::Claim {
        now_us: jiff::Timestamp::now().as_microsecond(),
        limit: 10,
        lease_us: 0,
        max_attempts: 4,
        dedupe_window_us: None,
        supersede_types: vec![],
        repeats_unrecognised: vec![],
    }
}

/// Attempt 1 ends `unknown`, attempt 2 dies in flight (its worker killed, the
/// attempt taken back as `unknown` / `lease_expired`), attempt 3 is accepted.
/// On a provider that cannot recognise a retry each of the three may have
/// reached the person: attempts 2 and 3 are both possible duplicates (the
/// dead one was not flagged, so the ledger showed one duplicate for three
/// messages), the counter counts both, and `herald why` says up to three
/// messages may have reached the person.
#[tokio::test]
async fn a_retry_that_died_in_flight_after_an_unknown_is_a_possible_duplicate_too() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let twilio = FakeTwilio::start().await;
        let number = "+9779800000012";
        let api = app(&db, &twilio, "from = \"+15005550006\"", "1s").without_workers().spawn().await;
        let (_, b, _) = api.post_event(&sms_event("PO-TW12", number), None).await;
        let key = b["intents"][0]["key"].as_str().unwrap().to_string();
        let before = possible_duplicates_counted(&api).await;
        api.running.stop().await;
        // Two workers take it in turn and die: the second claim takes the
        // first one's attempt back as `unknown` and starts attempt 2.
        let store = db.store().await;
        assert_eq!(store.jobs_claim(lapsing_claim()).await.unwrap().len(), 1);
        assert_eq!(store.jobs_claim(lapsing_claim()).await.unwrap().len(), 1);
        // A Herald on Twilio takes attempt 2 back and makes attempt 3.
        let app = app(&db, &twilio, "from = \"+15005550006\"", "1s").spawn().await;
        let it = app.wait_state(&key, &["sent"]).await;
        let attempts: Vec<_> = it["attempts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| (a["outcome"].as_str().unwrap(), a["error_class"].as_str(), a["possible_duplicate"].as_bool()))
            .collect();
        assert_eq!(
            attempts,
            [
                ("unknown", Some("lease_expired"), Some(false)),
                ("unknown", Some("lease_expired"), Some(true)),
                ("accepted", None, Some(true))
            ],
            "{backend:?}: every attempt after the first unknown: {it}"
        );
        assert_eq!(it["messages_may_have_reached"], 3, "{backend:?}: {it}");
        let why = herald::why::timeline(("purchase_order", "PO-TW12"), "u-PO-TW12", &[detail(&db, &key).await]);
        assert!(why.contains("up to 3 messages may have reached the person"), "{backend:?}: {why}");
        // The recorder is the process's: other tests may count too, never less.
        let counted = possible_duplicates_counted(&app).await - before;
        assert!(counted >= 2.0, "{backend:?}: both counted, not {counted}");
        app.running.stop().await;
    }
}

/// `herald_possible_duplicates_total`, every provider summed.
async fn possible_duplicates_counted(app: &common::Spawned) -> f64 {
    let metrics = app.client.get(format!("{}/metrics", app.base)).send().await.unwrap().text().await.unwrap();
    metrics
        .lines()
        .filter(|l| l.starts_with("herald_possible_duplicates_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
