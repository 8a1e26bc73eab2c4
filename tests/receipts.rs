//! Delivery receipts and the suppression list: Twilio's signed status
//! callbacks (from the fake Twilio), the generic signed endpoint, the delivery
//! status that only moves forward, bounces as dead letters, and later intents
//! to a bounced address planned `suppress`.

mod common;

use common::receipts::{RECEIPT_SECRET, post_signed};
use common::smtp::FakeSmtp;
use common::twilio::{Callback, FakeTwilio};
use common::{FakeSms, TestApp, TestDb, backends, sms_event};
use serde_json::{Value, json};

const PUBLIC: &str = "https://herald.example.com";

fn id_of(body: &Value) -> String {
    body["intents"][0]["id"].as_str().unwrap().to_string()
}

async fn twilio_app(db: &TestDb, twilio: &FakeTwilio) -> common::Spawned {
    TestApp::new(db).with_public_url(PUBLIC).with_toml(&twilio.toml("from = \"+15005550006\"", "1s")).spawn().await
}

/// A receipt signed per Standard Webhooks, as an in-house gateway sends it.
async fn generic(app: &common::Spawned, id: &str, body: &Value, secret: &str, age_s: i64) -> (u16, Value) {
    post_signed(app, id, body.to_string(), secret, age_s).await
}

/// The same, its body written by hand.
async fn generic_text(app: &common::Spawned, id: &str, text: &str) -> (u16, Value) {
    post_signed(app, id, text.to_string(), RECEIPT_SECRET, 0).await
}

#[tokio::test]
async fn twilio_callbacks_move_the_delivery_status_forward_only_and_a_repeat_changes_nothing() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let twilio = FakeTwilio::start().await;
        let app = twilio_app(&db, &twilio).await;
        let number = "+9779800000011";
        let (_, b, _) = app.post_event(&sms_event("PO-RC1", number), None).await;
        let id = id_of(&b);
        app.wait_state(&id, &["sent"]).await;
        let message = twilio.sent_to(number).remove(0);
        // Out of order: delivered first, then the late sent and queued, then delivered again.
        for (status, applied) in [("delivered", true), ("sent", false), ("queued", false), ("delivered", false)] {
            let (s, body) = twilio.callback(&app.base, &message, Callback::status(status)).await;
            assert_eq!(s, 200, "{backend:?} {status}: {body}");
            assert_eq!(
                (body["delivery_status"].as_str(), body["applied"].as_bool()),
                (Some("delivered"), Some(applied))
            );
        }
        let (_, it) = app.get(&format!("/v1/intents/{id}")).await;
        assert_eq!((it["state"].as_str(), it["delivery_status"].as_str()), (Some("sent"), Some("delivered")));
        let receipts = it["receipts"].as_array().unwrap();
        assert_eq!(receipts.len(), 3, "the repeated delivered is no new row: {it}");
        assert_eq!(receipts[0]["provider_message_id"].as_str(), message.sid.as_deref());
        assert_eq!(receipts.iter().filter(|r| r["applied"] == true).count(), 1);
        let detail = db.store().await.intent_get("default", &id).await.unwrap().unwrap();
        let why = herald::why::timeline(("purchase_order", "PO-RC1"), "u-PO-RC1", &[detail]);
        assert!(why.contains("receipt from twilio: delivered"), "{why}");
        assert!(why.contains("receipt from twilio: sent [late or repeated"), "{why}");
        app.running.stop().await;
    }
}

#[tokio::test]
async fn a_twilio_callback_that_does_not_verify_is_refused_and_changes_nothing() {
    let db = TestDb::new(common::Backend::Sqlite).await;
    let twilio = FakeTwilio::start().await;
    let app = twilio_app(&db, &twilio).await;
    let number = "+9779800000012";
    let (_, b, _) = app.post_event(&sms_event("PO-RC2", number), None).await;
    let id = id_of(&b);
    app.wait_state(&id, &["sent"]).await;
    let message = twilio.sent_to(number).remove(0);
    let wrong_token = Callback { token: "not-the-token", ..Callback::status("failed") };
    let (s, body) = twilio.callback(&app.base, &message, wrong_token).await;
    assert_eq!((s, body["error"]["code"].as_str()), (403, Some("forbidden")), "{body}");
    let other_account = Callback { account_sid: "AC0000", ..Callback::status("failed") };
    assert_eq!(twilio.callback(&app.base, &message, other_account).await.0, 403);
    // A forged status under a signature made for another.
    let url = message.param("StatusCallback").unwrap();
    let signed: Vec<(String, String)> = vec![
        ("AccountSid".into(), common::twilio::ACCOUNT_SID.into()),
        ("MessageSid".into(), message.sid.clone().unwrap()),
        ("MessageStatus".into(), "delivered".into()),
    ];
    let sig = common::twilio::twilio_signature(common::twilio::AUTH_TOKEN, url, &signed);
    let mut forged = signed.clone();
    forged[2].1 = "failed".into();
    let path = url.trim_start_matches(PUBLIC);
    // A parameter given twice is a 400 naming it, signed or not: in the
    // query (two keys naming two intents) and in the form.
    let twice_in_query = format!("{url}&key=0000");
    let sig_twice = common::twilio::twilio_signature(common::twilio::AUTH_TOKEN, &twice_in_query, &signed);
    let resp = app
        .client
        .post(format!("{}{}", app.base, twice_in_query.trim_start_matches(PUBLIC)))
        .header("x-twilio-signature", sig_twice)
        .form(&signed)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let body: Value = resp.json().await.unwrap();
    assert!(body["error"]["message"].as_str().unwrap().starts_with("key: given twice"), "{body}");
    let mut status_twice = signed.clone();
    status_twice.push(("MessageStatus".into(), "failed".into()));
    let sig_status = common::twilio::twilio_signature(common::twilio::AUTH_TOKEN, url, &status_twice);
    let resp = app
        .client
        .post(format!("{}{path}", app.base))
        .header("x-twilio-signature", sig_status)
        .form(&status_twice)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let body: Value = resp.json().await.unwrap();
    assert!(body["error"]["message"].as_str().unwrap().starts_with("MessageStatus: given twice"), "{body}");
    for (params, signature) in [(&forged, Some(sig.as_str())), (&signed, None)] {
        let mut req = app.client.post(format!("{}{path}", app.base)).form(params);
        if let Some(s) = signature {
            req = req.header("x-twilio-signature", s);
        }
        assert_eq!(req.send().await.unwrap().status(), 403);
    }
    let (_, it) = app.get(&format!("/v1/intents/{id}")).await;
    assert_eq!((it["state"].as_str(), it["receipts"].as_array().unwrap().len()), (Some("sent"), 0), "{it}");
    app.running.stop().await;
}

#[tokio::test]
async fn an_sms_to_a_dead_number_bounces_into_the_dead_letters_and_onto_the_suppression_list() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let twilio = FakeTwilio::start().await;
        let app = twilio_app(&db, &twilio).await;
        let (dead_number, off_number) = ("+9779800000013", "+9779800000014");
        let (_, b, _) = app.post_event(&sms_event("PO-RC3", dead_number), None).await;
        let id = id_of(&b);
        app.wait_state(&id, &["sent"]).await;
        let message = twilio.sent_to(dead_number).remove(0);
        let (s, body) = twilio.callback(&app.base, &message, Callback::status("undelivered").error("30005")).await;
        assert_eq!((s, body["delivery_status"].as_str()), (200, Some("bounced")), "{body}");
        let (_, it) = app.get(&format!("/v1/intents/{id}")).await;
        assert_eq!((it["state"].as_str(), it["reason"].as_str()), (Some("dead"), Some("hard_bounce")), "{it}");
        let (_, letters) = app.get("/v1/dead-letters?reason=hard_bounce").await;
        let letter = &letters["dead_letters"][0];
        assert_eq!(letter["id"], id.as_str(), "{backend:?}: {letters}");
        assert_eq!(letter["receipts"][0]["reason"], "Twilio error 30005");
        assert_eq!(letter["attempts"][0]["outcome"], "accepted", "the provider had accepted it");

        let (_, list) = app.get("/v1/suppressions").await;
        let entry = &list["suppressions"][0];
        assert_eq!(
            (entry["reason"].as_str(), entry["source_intent"].as_str()),
            (Some("address_bounced"), Some(id.as_str()))
        );
        assert_eq!(entry["address"], "+97798******13");
        assert!(!list.to_string().contains(dead_number), "{list}");

        // A later event to that number is planned suppress, naming the entry.
        let (s, b, _) = app.post_event(&sms_event("PO-RC3b", dead_number), None).await;
        assert_eq!(s, 202);
        let planned = &b["intents"][0];
        assert_eq!(
            (planned["decision"].as_str(), planned["reason"].as_str()),
            (Some("suppress"), Some("address_bounced"))
        );
        let (_, it) = app.get(&format!("/v1/intents/{}", id_of(&b))).await;
        assert!(it["detail"].as_str().unwrap().contains(entry["id"].as_str().unwrap()), "{it}");
        assert_eq!(twilio.sent_to(dead_number).len(), 1, "never sent again");

        // Undelivered for a reason that is not the number's: a dead letter, not a suppression.
        let (_, b, _) = app.post_event(&sms_event("PO-RC4", off_number), None).await;
        let off = id_of(&b);
        app.wait_state(&off, &["sent"]).await;
        let message = twilio.sent_to(off_number).remove(0);
        twilio.callback(&app.base, &message, Callback::status("undelivered").error("30003")).await;
        let (_, it) = app.get(&format!("/v1/intents/{off}")).await;
        assert_eq!((it["state"].as_str(), it["reason"].as_str()), (Some("dead"), Some("undelivered")));
        let (_, list) = app.get("/v1/suppressions").await;
        assert_eq!(list["suppressions"].as_array().unwrap().len(), 1);
        app.running.stop().await;
    }
}

#[tokio::test]
async fn a_generic_receipt_bounces_an_email_and_removing_the_entry_lets_mail_through_again() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let smtp = FakeSmtp::start().await;
        let toml = common::receipts::email_with_receipts(&smtp.url);
        let app = TestApp::new(&db).with_toml(&toml).spawn().await;
        let email_event = |entity: &str, email: &str| {
            let mut ev = sms_event(entity, "+15550000100");
            ev["recipients"] = json!([{"id": format!("u-{entity}"), "email": email}]);
            ev["channels"] = json!(["email"]);
            ev
        };
        let (_, b, _) = app.post_event(&email_event("PO-RC5", "asha@example.com"), None).await;
        let id = id_of(&b);
        app.wait_state(&id, &["sent"]).await;
        let receipt = json!({"key": id, "status": "bounced", "reason": "550 5.1.1 <asha@example.com>: no such user"});
        let (s, body) = generic(&app, "msg_1", &receipt, RECEIPT_SECRET, 0).await;
        assert_eq!(s, 200, "{backend:?}: {body}");
        let (s, again) = generic(&app, "msg_1", &receipt, RECEIPT_SECRET, 0).await;
        assert_eq!((s, again["duplicate"].as_bool()), (200, Some(true)), "a repeat answers 200 and changes nothing");
        let (_, it) = app.get(&format!("/v1/intents/{id}")).await;
        assert_eq!((it["state"].as_str(), it["reason"].as_str()), (Some("dead"), Some("hard_bounce")));
        assert_eq!(it["delivery_status"], "bounced");
        let reason = it["receipts"][0]["reason"].as_str().unwrap();
        assert!(reason.contains("a***@example.com") && !reason.contains("asha@"), "{reason}");

        // The same address in another case is the same entry.
        let (_, b, _) = app.post_event(&email_event("PO-RC6", "Asha@Example.COM"), None).await;
        assert_eq!(b["intents"][0]["reason"], "address_bounced", "{b}");
        // And an address only the directory gives (read after the inline ones).
        let (s, _) = app.put("/v1/recipients/u-dir", &json!({"email": "asha@example.com"})).await;
        assert_eq!(s, 200);
        let mut from_directory = email_event("PO-RC8", "unused@example.com");
        from_directory["recipients"] = json!([{"id": "u-dir"}]);
        let (_, b, _) = app.post_event(&from_directory, None).await;
        assert_eq!(b["intents"][0]["reason"], "address_bounced", "{b}");
        assert_eq!(smtp.to("asha@example.com").len(), 1);

        let (_, list) = app.get("/v1/suppressions").await;
        let entry = list["suppressions"][0]["id"].as_str().unwrap().to_string();
        let del = app.client.delete(format!("{}/v1/suppressions/{entry}", app.base)).send().await.unwrap();
        assert_eq!(del.status(), 200);
        let del = app.client.delete(format!("{}/v1/suppressions/{entry}", app.base)).send().await.unwrap();
        assert_eq!(del.status(), 404, "already gone");
        let (_, b, _) = app.post_event(&email_event("PO-RC7", "asha@example.com"), None).await;
        app.wait_state(&id_of(&b), &["sent"]).await;
        app.running.stop().await;
    }
}

#[tokio::test]
async fn a_generic_receipt_must_be_signed_fresh_and_well_formed_and_name_an_intent() {
    let db = TestDb::new(common::Backend::Sqlite).await;
    let sms = FakeSms::start().await;
    let toml = format!("[receipts.generic]\nsecret = \"{RECEIPT_SECRET}\"\n");
    let app = TestApp::new(&db).with_sms(&sms).with_toml(&toml).spawn().await;
    let number = "+9779800000015";
    let (_, b, _) = app.post_event(&sms_event("PO-RC8", number), None).await;
    let id = id_of(&b);
    let it = app.wait_state(&id, &["sent"]).await;
    let pmid = it["attempts"][0]["provider_message_id"].as_str().unwrap().to_string();
    let other_secret = "whsec_b3RoZXItc2VjcmV0LW9mLXNpeHRlZW4=";
    let delivered = json!({"provider_message_id": pmid, "status": "delivered"});
    assert_eq!(generic(&app, "m1", &delivered, other_secret, 0).await.0, 403);
    assert_eq!(generic(&app, "m1", &delivered, RECEIPT_SECRET, 600).await.0, 403, "too old to trust");
    let unsigned = app.client.post(format!("{}/v1/receipts/generic", app.base)).json(&delivered).send().await.unwrap();
    assert_eq!(unsigned.status(), 403);
    let (s, body) = generic(&app, "m2", &json!({"key": id, "status": "arrived"}), RECEIPT_SECRET, 0).await;
    assert_eq!(s, 400);
    assert!(body["error"]["message"].as_str().unwrap().starts_with("status:"), "{body}");
    let (s, _) = generic(&app, "m3", &json!({"key": "0".repeat(32), "status": "delivered"}), RECEIPT_SECRET, 0).await;
    assert_eq!(s, 404);
    // A key given twice could be read either way: refused, as in an event.
    let (s, body) =
        generic_text(&app, "m5", &format!(r#"{{"key": "{id}", "status": "bounced", "status": "delivered"}}"#)).await;
    assert_eq!(s, 400, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("status: the key appears twice"), "{body}");
    let (s, body) = generic(&app, "m4", &delivered, RECEIPT_SECRET, 0).await;
    assert_eq!((s, body["intent_id"].as_str()), (200, Some(id.as_str())), "found by the provider's message id");
    let (_, it) = app.get(&format!("/v1/intents/{id}")).await;
    assert_eq!(it["delivery_status"], "delivered");
    app.running.stop().await;
}

#[tokio::test]
async fn suppressions_belong_to_the_tenant_of_the_intent_and_need_the_ops_scope() {
    use sha2::Digest;
    let db = TestDb::new(common::Backend::Sqlite).await;
    let sms = FakeSms::start().await;
    let sha = |t: &str| hex::encode(sha2::Sha256::digest(t.as_bytes()));
    let tokens = format!(
        "[receipts.generic]\nsecret = \"{RECEIPT_SECRET}\"\n\
         [[auth.tokens]]\nname = \"a\"\ntenant = \"acme\"\ntoken_sha256 = \"{}\"\nscopes = [\"events:write\", \"intents:read\", \"ops\"]\n\
         [[auth.tokens]]\nname = \"b\"\ntenant = \"globex\"\ntoken_sha256 = \"{}\"\nscopes = [\"events:write\", \"intents:read\", \"ops\"]\n\
         [[auth.tokens]]\nname = \"reader\"\ntenant = \"acme\"\ntoken_sha256 = \"{}\"\nscopes = [\"intents:read\"]\n",
        sha("tok-a"),
        sha("tok-b"),
        sha("tok-r"),
    );
    let app = TestApp::new(&db).with_sms(&sms).with_toml(&tokens).spawn().await;
    let call = |method: reqwest::Method, path: String, token: &str, body: Option<Value>| {
        let mut req = app.client.request(method, format!("{}{path}", app.base)).bearer_auth(token);
        if let Some(b) = body {
            req = req.json(&b);
        }
        req.send()
    };
    let number = "+9779800000016";
    let resp = call(reqwest::Method::POST, "/v1/events".into(), "tok-a", Some(sms_event("PO-RC9", number))).await;
    let id = id_of(&resp.unwrap().json().await.unwrap());
    // A receipt for an intent no provider has taken yet is refused: wait for
    // the send, however long a loaded machine takes, rather than give up
    // after a fixed number of polls and post the receipt anyway.
    common::eventually("the intent to be sent", || async {
        let it = call(reqwest::Method::GET, format!("/v1/intents/{id}"), "tok-a", None).await.unwrap();
        (it.json::<Value>().await.unwrap()["state"] == "sent").then_some(())
    })
    .await;
    let (s, _) = generic(&app, "c1", &json!({"key": id, "status": "complained"}), RECEIPT_SECRET, 0).await;
    assert_eq!(s, 200);
    let list = |token: &'static str| call(reqwest::Method::GET, "/v1/suppressions".into(), token, None);
    let ours: Value = list("tok-a").await.unwrap().json().await.unwrap();
    assert_eq!(ours["suppressions"][0]["reason"], "address_complained", "{ours}");
    let theirs: Value = list("tok-b").await.unwrap().json().await.unwrap();
    assert_eq!(theirs["suppressions"], json!([]));
    assert_eq!(list("tok-r").await.unwrap().status(), 403, "the list needs the ops scope");
    // The same number at globex is not suppressed; at acme it is.
    let theirs = call(reqwest::Method::POST, "/v1/events".into(), "tok-b", Some(sms_event("PO-RC10", number))).await;
    let theirs: Value = theirs.unwrap().json().await.unwrap();
    assert_eq!(theirs["intents"][0]["decision"], "send", "{theirs}");
    let ours = call(reqwest::Method::POST, "/v1/events".into(), "tok-a", Some(sms_event("PO-RC11", number))).await;
    let ours: Value = ours.unwrap().json().await.unwrap();
    assert_eq!(ours["intents"][0]["reason"], "address_complained", "{ours}");
    let entry: Value = list("tok-a").await.unwrap().json().await.unwrap();
    let path = format!("/v1/suppressions/{}", entry["suppressions"][0]["id"].as_str().unwrap());
    assert_eq!(call(reqwest::Method::DELETE, path.clone(), "tok-b", None).await.unwrap().status(), 404);
    assert_eq!(call(reqwest::Method::DELETE, path.clone(), "tok-r", None).await.unwrap().status(), 403);
    assert_eq!(call(reqwest::Method::DELETE, path, "tok-a", None).await.unwrap().status(), 200);
    app.running.stop().await;
}

/// "Fourteen hard bounces at one domain since yesterday" reads as one line.
#[tokio::test]
async fn the_daily_digest_groups_new_bounces_by_recipient_domain() {
    let db = TestDb::new(common::Backend::Sqlite).await;
    let smtp = FakeSmtp::start().await;
    let hook = common::webhook::FakeReceiver::start("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").await;
    let toml = format!(
        "[channels.email]\nsmtp_url = \"{}\"\nfrom = \"Herald <noreply@herald.test>\"\ntimeout = \"1s\"\n\
         [receipts.generic]\nsecret = \"{RECEIPT_SECRET}\"\n[ops]\ndigest_webhook = \"{}/hook/ops\"\n",
        smtp.url, hook.base
    );
    let app = TestApp::new(&db).with_toml(&toml).spawn().await;
    let addresses = ["a@sales.example.com", "b@sales.example.com", "c@sales.example.com", "d@other.org"];
    for (n, email) in addresses.iter().enumerate() {
        let mut ev = sms_event(&format!("PO-DOM{n}"), "+15550000100");
        ev["recipients"] = json!([{"id": format!("u-{n}"), "email": email}]);
        ev["channels"] = json!(["email"]);
        let (_, b, _) = app.post_event(&ev, None).await;
        let id = id_of(&b);
        app.wait_state(&id, &["sent"]).await;
        let (s, _) = generic(&app, &format!("b{n}"), &json!({"key": id, "status": "bounced"}), RECEIPT_SECRET, 0).await;
        assert_eq!(s, 200);
    }
    let resp = app.client.post(format!("{}/v1/ops/dlq-digest", app.base)).json(&json!({})).send().await.unwrap();
    let digest: Value = resp.json().await.unwrap();
    assert_eq!(digest["bounces_by_domain"], json!({"sales.example.com": 3, "other.org": 1}), "{digest}");
    assert_eq!(digest["by_reason"]["hard_bounce"], 4);
    let text = digest["text"].as_str().unwrap();
    assert!(text.contains("sales.example.com: 3 new hard bounces"), "{text}");
    assert!(
        text.contains("other.org: 1 new hard bounce\n") || text.ends_with("other.org: 1 new hard bounce"),
        "{text}"
    );
    assert!(!text.contains("a@sales"), "{text}");
    app.running.stop().await;
}

#[tokio::test]
async fn herald_suppressions_lists_and_removes_entries() {
    let db = TestDb::new(common::Backend::Sqlite).await;
    let sms = FakeSms::start().await;
    let toml = format!("[receipts.generic]\nsecret = \"{RECEIPT_SECRET}\"\n");
    let app = TestApp::new(&db).with_sms(&sms).with_toml(&toml).spawn().await;
    let number = "+9779800000017";
    let (_, b, _) = app.post_event(&sms_event("PO-CLI", number), None).await;
    let id = id_of(&b);
    app.wait_state(&id, &["sent"]).await;
    assert_eq!(generic(&app, "x1", &json!({"key": id, "status": "bounced"}), RECEIPT_SECRET, 0).await.0, 200);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("herald.toml");
    std::fs::write(&config, format!("database_url = \"{}\"\n", db.url)).unwrap();
    // The CLI runs off the runtime's thread: this Herald's tasks run on that
    // thread too, and a blocking wait there froze whichever of them was
    // inside a transaction on the SQLite writer, so the CLI waited for a
    // lock nothing could release and failed after the 10 s busy timeout.
    let herald = async |args: &[&str]| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_herald"));
        command.args(args).arg("--config").arg(&config);
        let out = tokio::task::spawn_blocking(move || command.output()).await.unwrap().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (code, out, err) = herald(&["suppressions", "list"]).await;
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("+97798******17") && out.contains("address_bounced") && out.contains(&id), "{out}");
    assert!(!out.contains(number), "{out}");
    let (code, out, _) = herald(&["suppressions", "remove", number]).await;
    assert_eq!(code, Some(0));
    assert!(out.starts_with("removed "), "{out}");
    let (code, _, err) = herald(&["suppressions", "remove", number]).await;
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("no such address") && !err.contains(number), "{err}");
    app.running.stop().await;
}

/// A receipt can only describe a message a provider may have taken. Signed
/// receipts naming an email suppressed before any attempt, an email held by
/// quiet hours, and an in-app card are each refused (404), counted as
/// `refused`, and change nothing: no delivery invented, no address put on
/// the suppression list, no card killed.
#[tokio::test]
async fn a_receipt_for_a_message_no_provider_took_is_refused_and_changes_nothing() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let smtp = FakeSmtp::start().await;
        let toml = common::receipts::email_with_receipts(&smtp.url);
        let app = TestApp::new(&db).with_toml(&toml).spawn().await;
        let event = |entity: &str, recipient: Value, channel: &str| {
            let mut ev = sms_event(entity, "+15550000100");
            ev["recipients"] = json!([recipient]);
            ev["channels"] = json!([channel]);
            ev
        };
        // No destination: suppressed before any attempt.
        let (_, b, _) = app.post_event(&event("PO-RF1", json!({"id": "u-rf1"}), "email"), None).await;
        let suppressed = id_of(&b);
        assert_eq!(b["intents"][0]["reason"], "no_destination", "{b}");
        // Held by quiet hours that cover the present hour.
        let hour = jiff::Timestamp::now().to_zoned(jiff::tz::TimeZone::UTC).hour();
        let quiet =
            json!({"start": format!("{:02}:00", (hour + 23) % 24), "end": format!("{:02}:00", (hour + 2) % 24)});
        let (s, _) = app
            .put(
                "/v1/recipients/u-rf2",
                &json!({"email": "held@example.com", "timezone": "UTC", "preferences": {"quiet_hours": quiet}}),
            )
            .await;
        assert_eq!(s, 200);
        let (_, b, _) = app.post_event(&event("PO-RF2", json!({"id": "u-rf2"}), "email"), None).await;
        let held = id_of(&b);
        assert_eq!(b["intents"][0]["state"], "held", "{b}");
        // An in-app card, delivered by Herald itself.
        let (_, b, _) = app.post_event(&event("PO-RF3", json!({"id": "u-rf3"}), "in_app"), None).await;
        let card = id_of(&b);
        app.wait_state(&card, &["sent"]).await;

        for (n, (id, status)) in
            [(&suppressed, "delivered"), (&held, "complained"), (&card, "bounced")].iter().enumerate()
        {
            let (s, body) =
                generic(&app, &format!("rf{n}"), &json!({"key": id, "status": status}), RECEIPT_SECRET, 0).await;
            assert_eq!(s, 404, "{backend:?}: a {status} receipt for {id}: {body}");
            assert!(body["error"]["message"].as_str().unwrap().contains("refused"), "{body}");
        }
        let (_, it) = app.get(&format!("/v1/intents/{suppressed}")).await;
        assert_eq!((it["state"].as_str(), &it["delivery_status"]), (Some("suppressed"), &Value::Null), "{it}");
        assert_eq!(it["receipts"], json!([]), "nothing recorded: {it}");
        let (_, it) = app.get(&format!("/v1/intents/{held}")).await;
        assert_eq!(it["state"], "held", "{it}");
        let (_, list) = app.get("/v1/suppressions").await;
        assert_eq!(list["suppressions"], json!([]), "no address put on the list: {list}");
        let (_, it) = app.get(&format!("/v1/intents/{card}")).await;
        assert_eq!((it["state"].as_str(), &it["delivery_status"]), (Some("sent"), &Value::Null), "{it}");
        let metrics = app.client.get(format!("{}/metrics", app.base)).send().await.unwrap().text().await.unwrap();
        let refused = metrics
            .lines()
            .filter(|l| l.starts_with("herald_receipts_total{") && l.contains("result=\"refused\""))
            .count();
        assert!(refused >= 3, "counted as refused: {metrics}");
        app.running.stop().await;
    }
}

/// `herald_receipts_total{source="generic",result="stale"}` as `/metrics`
/// shows it now, summed over statuses (the recorder is the process's:
/// compare before and after).
async fn generic_stale(app: &common::Spawned) -> u64 {
    let text = app.client.get(format!("{}/metrics", app.base)).send().await.unwrap().text().await.unwrap();
    (text.lines())
        .filter(|l| l.starts_with("herald_receipts_total{") && l.contains("source=\"generic\""))
        .filter(|l| l.contains("result=\"stale\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

#[tokio::test]
async fn a_stale_generic_receipt_is_counted_and_a_query_parameter_is_refused() {
    let db = TestDb::new(common::Backend::Sqlite).await;
    let toml = format!("[receipts.generic]\nsecret = \"{RECEIPT_SECRET}\"\n");
    let app = TestApp::new(&db).with_toml(&toml).spawn().await;
    let receipt = json!({"key": "0".repeat(32), "status": "delivered"});
    let before = generic_stale(&app).await;
    // An old one nobody signed is refused as unsigned, not counted a replay.
    let other_secret = "whsec_b3RoZXItc2VjcmV0LW9mLXNpeHRlZW4=";
    assert_eq!(generic(&app, "st-0", &receipt, other_secret, 600).await.0, 403);
    assert_eq!(generic_stale(&app).await, before);
    let (s, body) = generic(&app, "st-1", &receipt, RECEIPT_SECRET, 600).await;
    assert_eq!(s, 403, "{body}");
    assert_eq!(generic_stale(&app).await, before + 1, "a stale receipt is counted as stale");

    // Signed and fresh, but with a query parameter it does not take (or one
    // given twice): refused naming it, before anything is read.
    let key = herald::channel::webhook::decode_secret(RECEIPT_SECRET).unwrap();
    for (query, named) in [("?key=0000", "key"), ("?status=bounced&status=bounced", "status")] {
        let text = receipt.to_string();
        let ts = jiff::Timestamp::now().as_second();
        let resp = app
            .client
            .post(format!("{}/v1/receipts/generic{query}", app.base))
            .header("content-type", "application/json")
            .header("webhook-id", "q-1")
            .header("webhook-timestamp", ts.to_string())
            .header("webhook-signature", herald::channel::webhook::sign(&key, "q-1", ts, &text))
            .body(text)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 400, "{query}");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["error"]["code"], "invalid_field", "{body}");
        assert!(body["error"]["message"].as_str().unwrap().starts_with(&format!("{named}: ")), "{body}");
    }
    // Without the query the same receipt is read (and names no intent).
    assert_eq!(generic(&app, "q-2", &receipt, RECEIPT_SECRET, 0).await.0, 404);
    app.running.stop().await;
}
