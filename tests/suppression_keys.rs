//! The suppression list's keyed lookups (issue 30). An unkeyed hash of a
//! number shown beside its mask (`+97798******01`) was reversed by trying a
//! million candidates; now the list keeps an HMAC under the deployment's key,
//! shows no hash of any kind anywhere, names an entry by an id derived from
//! its source intent, and answers alike for a listed address and an unlisted
//! one, so nothing the API says confirms a guess.

mod common;

use common::receipts::RECEIPT_SECRET;

use common::{FakeSms, TestApp, TestDb, backends, count, execute, sms_event};
use herald::recipient::Kind;
use herald::suppression::{SuppressionKey, entry_id, legacy_hash};
use serde_json::{Value, json};

/// base64 of 32 bytes: the `suppression.key` some tests configure.
const KEY: &str = "c3VwcHJlc3Npb24ta2V5LWZvci10aGUtdGVzdHMtMzI=";

async fn receipt(app: &common::Spawned, id: &str, body: &Value) -> u16 {
    common::receipts::post(app, id, body).await.0
}

/// Every run of 16 or more hex digits in `text`: no hash of an address may
/// be among them (intent keys are 32, entry ids 24).
fn hex_runs(text: &str) -> Vec<String> {
    let mut runs = Vec::new();
    let mut run = String::new();
    for c in text.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_hexdigit() {
            run.push(c);
        } else {
            if run.len() >= 16 {
                runs.push(std::mem::take(&mut run));
            }
            run.clear();
        }
    }
    runs
}

#[tokio::test]
async fn nothing_the_api_answers_confirms_a_guess_at_a_masked_number() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let toml = format!("[receipts.generic]\nsecret = \"{RECEIPT_SECRET}\"\n");
        let app = TestApp::new(&db).with_sms(&sms).with_toml(&toml).spawn().await;
        let number = "+9779800000001";
        let (_, b, _) = app.post_event(&sms_event("PO-K1", number), None).await;
        let source = b["intents"][0]["id"].as_str().unwrap().to_string();
        app.wait_state(&source, &["sent"]).await;
        let bounce = json!({"key": source, "status": "bounced", "reason": "550 no such number"});
        assert_eq!(receipt(&app, "k1", &bounce).await, 200);

        // What the store keeps for the number: neither the old unkeyed hash
        // nor anything computable without the key.
        let hashes = common::texts(&db, "SELECT address_hash FROM suppressions").await;
        assert_eq!(hashes.len(), 1);
        let unkeyed = legacy_hash("default", Kind::Phone, number);
        assert_ne!(hashes[0], unkeyed, "{backend:?}: the lookup is keyed");

        // Everything the API says about the entry or the number.
        let (_, list) = app.get("/v1/suppressions").await;
        let entry = &list["suppressions"][0];
        assert_eq!(entry["address"], "+97798******01");
        assert_eq!(entry["id"], json!(entry_id("default", &source)), "named by its source intent, not its address");
        let (_, later, _) = app.post_event(&sms_event("PO-K2", number), None).await;
        assert_eq!(later["intents"][0]["reason"], "address_bounced", "{later}");
        let (_, detail) = app.get(&format!("/v1/intents/{}", later["intents"][0]["id"].as_str().unwrap())).await;
        let dry = app
            .client
            .post(format!("{}/v1/events?dry_run=true", app.base))
            .json(&sms_event("PO-K3", number))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        // The dry run plans a send, so it shows the rendered content and its
        // digest: a hash of the message text, nothing of the address.
        let digest = serde_json::from_str::<Value>(&dry).unwrap()["intents"][0]["payload_digest"].clone();
        let answers = [list.to_string(), later.to_string(), detail.to_string(), dry.clone()];
        for answer in &answers {
            for run in hex_runs(answer) {
                assert!(
                    !hashes[0].contains(&run) && !unkeyed.contains(&run),
                    "{backend:?}: a hash of the address is shown: {run} in {answer}"
                );
                if digest.as_str() != Some(run.as_str()) {
                    assert!(run.len() <= 32, "{backend:?}: nothing longer than an intent key: {run} in {answer}");
                }
            }
        }
        // A dry run does not consult the list: it plans the number as if no
        // entry matched, and says the list was not checked — so guessing a
        // masked number there costs nothing and confirms nothing.
        let dry: Value = serde_json::from_str(&dry).unwrap();
        assert!(!dry.to_string().contains("address_bounced"), "{backend:?}: {dry}");
        assert_eq!(dry["intents"][0]["decision"], "send", "{dry}");
        assert_eq!(dry["not_checked"], json!(["suppression_list"]), "{dry}");
        assert!(dry["note"].as_str().is_some_and(|n| n.contains("suppression list")), "{dry}");
        let unlisted = app
            .client
            .post(format!("{}/v1/events?dry_run=true", app.base))
            .json(&sms_event("PO-K4", "+9779800000002"))
            .send()
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap();
        assert_eq!(
            (&unlisted["intents"][0]["decision"], &unlisted["intents"][0]["reason"]),
            (&dry["intents"][0]["decision"], &dry["intents"][0]["reason"]),
            "a listed and an unlisted number answer alike: {unlisted}"
        );

        // Removing by a guessed address answers as for any address: there
        // is no such route, and the entry stays.
        for guess in [number, "+9779800000002"] {
            let path = format!("{}/v1/suppressions/{}", app.base, guess.replace('+', "%2B"));
            let resp = app.client.delete(path).send().await.unwrap();
            assert_eq!(resp.status(), 404, "{guess}");
        }
        assert_eq!(count(&db, "SELECT COUNT(*) FROM suppressions").await, 1);
        app.running.stop().await;
    }
}

/// A list written under the old unkeyed hash is rekeyed at start-up from the
/// destination of each entry's source intent; an entry whose intent is gone
/// stays under the old hash and is still matched; none is lost.
#[tokio::test]
async fn entries_of_the_old_unkeyed_hash_are_rekeyed_at_start_up_and_none_is_lost() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let toml = format!("[suppression]\nkey = \"{KEY}\"\n");
        let app = TestApp::new(&db).with_sms(&sms).with_toml(&toml).spawn().await;
        let (kept, pruned) = ("+9779800000011", "+9779800000012");
        let (_, b, _) = app.post_event(&sms_event("PO-M1", kept), None).await;
        let source = b["intents"][0]["id"].as_str().unwrap().to_string();
        app.wait_state(&source, &["sent"]).await;
        app.running.stop().await;
        // As an older Herald left them: unkeyed, unnamed.
        for (number, intent) in [(kept, source.as_str()), (pruned, "0123456789abcdef0123456789abcdef")] {
            execute(
                &db,
                &format!(
                    "INSERT INTO suppressions (tenant, address_hash, channel, masked, domain, reason, source_intent,
                                               detail, created_at, keyed, id)
                     VALUES ('default', '{}', 'sms', 'masked', NULL, 'address_bounced', '{intent}', NULL, 1, FALSE, NULL)",
                    legacy_hash("default", Kind::Phone, number)
                ),
            )
            .await;
        }

        let app = TestApp::new(&db).with_sms(&sms).with_toml(&toml).spawn().await;
        let key = SuppressionKey::from_base64(KEY).unwrap();
        let keyed = format!(
            "SELECT COUNT(*) FROM suppressions WHERE keyed AND address_hash = '{}'",
            key.lookup("default", Kind::Phone, kept)
        );
        assert_eq!(count(&db, &keyed).await, 1, "{backend:?}: rekeyed from its intent's destination");
        assert_eq!(count(&db, "SELECT COUNT(*) FROM suppressions WHERE NOT keyed").await, 1, "the pruned one stays");
        assert_eq!(count(&db, "SELECT COUNT(*) FROM suppressions WHERE id IS NULL").await, 0, "every entry named");
        for (n, number) in [kept, pruned].iter().enumerate() {
            let (_, b, _) = app.post_event(&sms_event(&format!("PO-M2{n}"), number), None).await;
            assert_eq!(b["intents"][0]["reason"], "address_bounced", "{backend:?}: {number} still suppressed: {b}");
        }
        app.running.stop().await;

        // Another key on the same database is refused, naming the key.
        let other = format!("[suppression]\nkey = \"{}\"\n", "b3RoZXIta2V5LW9mLXRoaXJ0eS10d28tYnl0ZXMtISE=");
        let config = TestApp::new(&db).with_sms(&sms).with_toml(&other).config();
        let err = herald::app::start_with(config, std::sync::Arc::new(herald::clock::SystemClock), None)
            .await
            .err()
            .expect("a second key is refused");
        assert!(err.to_string().contains("suppression.key"), "{err}");
    }
}

/// During a rolling upgrade a process of the previous release still writes
/// entries under the old unkeyed hash, after this one started: they are
/// matched all the same, and a new bounce of that address rekeys the entry
/// in place rather than adding a second one.
#[tokio::test]
async fn an_old_scheme_entry_written_after_start_up_is_matched_and_rekeyed_by_the_next_bounce() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let toml = format!("[receipts.generic]\nsecret = \"{RECEIPT_SECRET}\"\n[suppression]\nkey = \"{KEY}\"\n");
        let app = TestApp::new(&db).with_sms(&sms).with_toml(&toml).spawn().await;
        let number = "+9779800000021";
        let (_, b, _) = app.post_event(&sms_event("PO-R1", number), None).await;
        let source = b["intents"][0]["id"].as_str().unwrap().to_string();
        app.wait_state(&source, &["sent"]).await;
        // As the previous release writes a bounce: unkeyed, unnamed.
        execute(
            &db,
            &format!(
                "INSERT INTO suppressions (tenant, address_hash, channel, masked, reason, source_intent, created_at)
                 VALUES ('default', '{}', 'sms', '+97798******21', 'address_bounced', '{source}', 1)",
                legacy_hash("default", Kind::Phone, number)
            ),
        )
        .await;
        let (_, later, _) = app.post_event(&sms_event("PO-R2", number), None).await;
        assert_eq!(later["intents"][0]["reason"], "address_bounced", "{backend:?}: matched: {later}");
        // A bounce of the same address now: one entry, keyed and named.
        let bounce = json!({"key": source, "status": "bounced"});
        assert_eq!(receipt(&app, "r1", &bounce).await, 200);
        assert_eq!(count(&db, "SELECT COUNT(*) FROM suppressions").await, 1, "{backend:?}: one address, one entry");
        let key = SuppressionKey::from_base64(KEY).unwrap();
        let keyed = format!(
            "SELECT COUNT(*) FROM suppressions WHERE keyed AND id IS NOT NULL AND address_hash = '{}'",
            key.lookup("default", Kind::Phone, number)
        );
        assert_eq!(count(&db, &keyed).await, 1, "{backend:?}: rekeyed in place");
        app.running.stop().await;
    }
}

/// Intents the planner suppressed before the keyed list named the entry by
/// its unkeyed hash in `detail`. After the upgrade no answer shows that hash:
/// the stored text is rewritten once, naming the entry by its id.
#[tokio::test]
async fn an_old_intents_detail_loses_the_unkeyed_hash_after_the_upgrade() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let toml = format!("[receipts.generic]\nsecret = \"{RECEIPT_SECRET}\"\n");
        let app = TestApp::new(&db).with_sms(&sms).with_toml(&toml).spawn().await;
        let number = "+9779800000022";
        let (_, b, _) = app.post_event(&sms_event("PO-D1", number), None).await;
        let source = b["intents"][0]["id"].as_str().unwrap().to_string();
        app.wait_state(&source, &["sent"]).await;
        assert_eq!(receipt(&app, "d1", &json!({"key": source, "status": "bounced"})).await, 200);
        let (_, later, _) = app.post_event(&sms_event("PO-D2", number), None).await;
        let later = later["intents"][0]["id"].as_str().unwrap().to_string();
        app.running.stop().await;
        // As the previous release wrote it.
        let unkeyed = legacy_hash("default", Kind::Phone, number);
        let old = format!("on the suppression list since 2026-11-30T10:00:00Z (entry {unkeyed}, from intent {source})");
        execute(&db, &format!("UPDATE intents SET detail = '{old}' WHERE key = '{later}'")).await;
        execute(&db, "DELETE FROM settings WHERE name = 'suppression.details_named'").await;

        let app = TestApp::new(&db).with_sms(&sms).with_toml(&toml).spawn().await;
        let (_, it) = app.get(&format!("/v1/intents/{later}")).await;
        let detail = it["detail"].as_str().unwrap();
        assert!(!detail.contains(&unkeyed), "{backend:?}: {detail}");
        assert!(detail.contains(&entry_id("default", &source)), "{backend:?}: named by its id: {detail}");
        let still = format!("SELECT COUNT(*) FROM intents WHERE detail LIKE '%{unkeyed}%'");
        assert_eq!(count(&db, &still).await, 0, "{backend:?}: the stored text is rewritten");
        app.running.stop().await;
    }
}

/// A deployment that ran on a drawn key and then configures one: a fresh key
/// is refused, saying where the key in use is kept; the key in use, once
/// configured, takes over and the database's copy is removed.
#[tokio::test]
async fn configuring_the_drawn_key_moves_it_out_of_the_database() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let app = TestApp::new(&db).spawn().await;
        app.running.stop().await;
        let stored = common::texts(&db, "SELECT value FROM settings WHERE name = 'suppression.key'").await.remove(0);
        let start = |key: &str| {
            let config = TestApp::new(&db).with_toml(&format!("[suppression]\nkey = \"{key}\"\n")).config();
            herald::app::start_with(config, std::sync::Arc::new(herald::clock::SystemClock), None)
        };
        let err = start(KEY).await.err().expect("a fresh key is refused");
        assert!(err.to_string().contains("SELECT value FROM settings"), "{backend:?}: {err}");
        assert_eq!(count(&db, "SELECT COUNT(*) FROM settings WHERE name = 'suppression.key'").await, 1);
        let running = start(&stored).await.expect("the key in use, configured");
        running.stop().await;
        assert_eq!(
            count(&db, "SELECT COUNT(*) FROM settings WHERE name = 'suppression.key'").await,
            0,
            "{backend:?}: the database no longer holds the key"
        );
        // And now a process without the key is refused rather than drawing another.
        let config = TestApp::new(&db).config();
        let err = herald::app::start_with(config, std::sync::Arc::new(herald::clock::SystemClock), None).await.err();
        assert!(err.expect("no key").to_string().contains("suppression.key"), "{backend:?}");
    }
}

/// A command that only reads (`herald shadow compare`) finds the key `serve`
/// settled without writing: the database's own, the configured one when the
/// database agrees, and a refusal naming the key when it does not.
#[tokio::test]
async fn a_reading_command_finds_the_key_serve_settled_and_writes_nothing() {
    use herald::suppression::key_for_reading;
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let store = db.store().await;
        let bare = TestApp::new(&db).config();
        // No Herald has started here: a key for this command alone, none written.
        key_for_reading(&bare, store.as_ref()).await.expect("a drawn key");
        assert_eq!(count(&db, "SELECT COUNT(*) FROM settings").await, 0, "{backend:?}");
        let app = TestApp::new(&db).spawn().await;
        app.running.stop().await;
        let settings = common::texts(&db, "SELECT name || '=' || value FROM settings ORDER BY name").await;
        let stored = common::texts(&db, "SELECT value FROM settings WHERE name = 'suppression.key'").await.remove(0);
        let found = key_for_reading(&bare, store.as_ref()).await.unwrap();
        assert_eq!(found.fingerprint(), SuppressionKey::from_base64(&stored).unwrap().fingerprint());
        let same = TestApp::new(&db).with_toml(&format!("[suppression]\nkey = \"{stored}\"\n")).config();
        assert_eq!(key_for_reading(&same, store.as_ref()).await.unwrap().fingerprint(), found.fingerprint());
        let other = TestApp::new(&db).with_toml(&format!("[suppression]\nkey = \"{KEY}\"\n")).config();
        let err = key_for_reading(&other, store.as_ref()).await.unwrap_err().to_string();
        assert!(err.starts_with("suppression.key: this database is keyed with the key of fingerprint"), "{err}");
        let after = common::texts(&db, "SELECT name || '=' || value FROM settings ORDER BY name").await;
        assert_eq!(after, settings, "{backend:?}: the settings as serve left them");
    }
}
