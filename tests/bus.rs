//! NATS JetStream as a front door, against a real `nats-server`: runs when
//! `HERALD_TEST_NATS_URL` is set (and fails loudly when it is set but
//! unreachable). Each test uses a stream of its own and deletes it.

mod common;

use common::nats::{TestPublications, TestStream};
use common::{FakeSms, TestApp, TestDb, backends, count, execute, sms_event};

async fn wait_count(db: &TestDb, sql: &str, want: i64) {
    common::eventually(&format!("{sql} to answer {want}"), || async { (count(db, sql).await == want).then_some(()) })
        .await;
}

#[tokio::test]
async fn a_message_becomes_intents_and_is_acked() {
    for backend in backends() {
        let Some(bus) = TestStream::new().await else { return };
        let db = TestDb::new(backend).await;
        let app = TestApp::new(&db).without_workers().with_toml(&bus.toml("default", 5)).spawn().await;
        let body = serde_json::to_vec(&sms_event("PO-BUS-1", "+9779800000001")).unwrap();
        let seq = bus.publish(&body, None).await;
        bus.wait_settled(seq).await;
        assert_eq!(count(&db, "SELECT COUNT(*) FROM intents WHERE tenant = 'default'").await, 1, "{backend:?}");
        let (status, list) = app.get("/v1/intents?entity=purchase_order:PO-BUS-1").await;
        assert_eq!(status, 200, "{list}");
        assert_eq!(list["intents"].as_array().map(Vec::len), Some(1), "{list}");
        app.running.stop().await;
        bus.cleanup().await;
    }
}

#[tokio::test]
async fn the_same_event_twice_on_the_bus_and_once_over_http_is_one_set_of_intents() {
    for backend in backends() {
        let Some(bus) = TestStream::new().await else { return };
        let db = TestDb::new(backend).await;
        let app = TestApp::new(&db).without_workers().with_toml(&bus.toml("default", 5)).spawn().await;
        let event = sms_event("PO-BUS-2", "+9779800000002");
        let (status, first, _) = app.post_event(&event, None).await;
        assert_eq!(status, 202, "{first}");
        let body = serde_json::to_vec(&event).unwrap();
        bus.publish(&body, None).await;
        let seq = bus.publish(&body, None).await;
        bus.wait_settled(seq).await;
        // And with a key: the key is the identity, over HTTP as on the bus.
        let keyed = sms_event("PO-BUS-3", "+9779800000003");
        let seq = bus.publish(&serde_json::to_vec(&keyed).unwrap(), Some("po-bus-3")).await;
        bus.wait_settled(seq).await;
        let (status, replay, headers) = app.post_event(&keyed, Some("po-bus-3")).await;
        assert_eq!(status, 200, "{replay}");
        assert_eq!(headers.get("idempotent-replayed").map(|v| v.to_str().unwrap()), Some("true"));
        assert_eq!(count(&db, "SELECT COUNT(*) FROM intents").await, 2, "{backend:?}");
        assert_eq!(count(&db, "SELECT COUNT(*) FROM rejected_messages").await, 0);
        app.running.stop().await;
        bus.cleanup().await;
    }
}

#[tokio::test]
async fn an_invalid_message_is_terminated_and_recorded_with_the_apis_error() {
    for backend in backends() {
        let Some(bus) = TestStream::new().await else { return };
        let db = TestDb::new(backend).await;
        let app = TestApp::new(&db).without_workers().with_toml(&bus.toml("default", 5)).spawn().await;
        let mut no_time = sms_event("PO-BUS-4", "+9779800000004");
        no_time.as_object_mut().unwrap().remove("occurred_at");
        let bad_json = bus.publish(b"{\"type\": ", None).await;
        let missing = bus.publish(&serde_json::to_vec(&no_time).unwrap(), None).await;
        let mut unknown = sms_event("PO-BUS-5", "+9779800000005");
        unknown["type"] = "nobody.listens".into();
        let unknown_seq = bus.publish(&serde_json::to_vec(&unknown).unwrap(), None).await;
        // The same key with another body: refused as over HTTP (422), the
        // later of the two in stream order.
        let first = sms_event("PO-BUS-6", "+9779800000006");
        bus.publish(&serde_json::to_vec(&first).unwrap(), Some("po-bus-6")).await;
        let other = sms_event("PO-BUS-7", "+9779800000007");
        let mismatch = bus.publish(&serde_json::to_vec(&other).unwrap(), Some("po-bus-6")).await;
        bus.wait_settled(mismatch).await;
        assert_eq!(count(&db, "SELECT COUNT(*) FROM intents").await, 1, "{backend:?}");

        let (status, list) = app.get("/v1/rejected").await;
        assert_eq!(status, 200, "{list}");
        let rejected = list["rejected"].as_array().unwrap();
        assert_eq!(rejected.len(), 4, "{list}");
        let by_seq = |seq: u64| rejected.iter().find(|r| r["stream_seq"] == seq).unwrap_or_else(|| panic!("{list}"));
        assert_eq!(by_seq(bad_json)["error"]["code"], "malformed_json");
        assert_eq!(by_seq(missing)["error"]["code"], "invalid_field");
        assert!(by_seq(missing)["error"]["message"].as_str().unwrap().starts_with("occurred_at"), "{list}");
        assert_eq!(by_seq(unknown_seq)["error"]["code"], "unknown_event_type");
        assert_eq!(by_seq(unknown_seq)["error"]["status"], 422);
        let refused = rejected.iter().find(|r| r["error"]["code"] == "idempotency_key_mismatch").expect("a mismatch");
        assert_eq!(refused["stream_seq"], mismatch, "the first in stream order wins: {list}");
        assert_eq!(by_seq(missing)["subject"], bus.subject.as_str());
        assert!(by_seq(missing).get("body").is_none(), "the list leaves bodies out");

        let id = by_seq(bad_json)["id"].as_str().unwrap();
        let (status, one) = app.get(&format!("/v1/rejected/{id}")).await;
        assert_eq!(status, 200, "{one}");
        assert_eq!(one["body"], "{\"type\": ", "a body that is not JSON is shown scrubbed as text: {one}");
        assert_eq!(one["body_format"], "text", "{one}");
        assert_eq!(one["deliveries"], 1);
        let id = by_seq(missing)["id"].as_str().unwrap();
        let (_, one) = app.get(&format!("/v1/rejected/{id}")).await;
        assert_eq!(one["body_format"], "json", "{one}");
        assert_eq!(one["body"]["entity"]["id"], "PO-BUS-4", "a JSON body is shown as JSON, as an event is: {one}");
        let body = one["body"].to_string();
        assert!(!body.contains("9800000004"), "inline addresses masked: {body}");
        let (status, _) = app.get("/v1/rejected/00000000000000000000000000000000").await;
        assert_eq!(status, 404);
        let metrics = app.client.get(format!("{}/metrics", app.base)).send().await.unwrap().text().await.unwrap();
        assert!(metrics.contains("herald_rejected_messages_total"), "{metrics}");
        app.running.stop().await;
        bus.cleanup().await;
    }
}

/// An event for `recipients` recipients with phones: the more there are,
/// the longer it takes to plan and render.
fn event_for(entity_id: &str, recipients: usize, total: &str) -> serde_json::Value {
    let mut event = sms_event(entity_id, "+9779800000100");
    event["data"]["po"]["total"] = total.into();
    event["recipients"] = (0..recipients)
        .map(|n| serde_json::json!({"id": format!("u-{entity_id}-{n}"), "phone": format!("+97798{n:08}")}))
        .collect();
    event
}

/// Two messages with the same `Idempotency-Key` and different bodies, or the
/// same event with different data, published in order (each stored by the
/// stream before the next) and taken in one batch: the first is frozen and
/// the second refused, as over HTTP (422 / 409) — in stream order, however
/// long the first takes to plan. Handled concurrently, the second (quicker
/// to plan) often won.
#[tokio::test]
async fn within_a_batch_the_first_of_two_messages_with_one_identity_wins() {
    for backend in backends() {
        let Some(bus) = TestStream::new().await else { return };
        let db = TestDb::new(backend).await;
        let toml = bus.toml("default", 5);
        // The stream and the consumer exist; the messages wait for one pull.
        let first = TestApp::new(&db).without_workers().with_toml(&toml).spawn().await;
        first.running.stop().await;
        let mut pairs = Vec::new();
        for n in 0..4 {
            let key = format!("bus-order-{n}");
            let slow = bus
                .publish(&serde_json::to_vec(&event_for(&format!("PO-ORD-{n}"), 60, "1")).unwrap(), Some(&key))
                .await;
            let quick = bus
                .publish(&serde_json::to_vec(&event_for(&format!("PO-ORD-{n}-B"), 1, "2")).unwrap(), Some(&key))
                .await;
            pairs.push((format!("PO-ORD-{n}"), slow, quick, "idempotency_key_mismatch"));
            // The same event (no key), its data changed: an event conflict.
            let entity = format!("PO-ORD-EV-{n}");
            let slow = bus.publish(&serde_json::to_vec(&event_for(&entity, 60, "1")).unwrap(), None).await;
            // Its one recipient is the first of the sixty.
            let quick = bus.publish(&serde_json::to_vec(&event_for(&entity, 1, "2")).unwrap(), None).await;
            pairs.push((entity, slow, quick, "event_conflict"));
        }
        let last = pairs.iter().map(|p| p.2).max().unwrap();
        let app = TestApp::new(&db).without_workers().with_toml(&toml).spawn().await;
        bus.wait_settled(last).await;
        let (_, list) = app.get("/v1/rejected").await;
        let rejected = list["rejected"].as_array().unwrap_or_else(|| panic!("{list}"));
        for (entity, first_seq, second_seq, code) in &pairs {
            let frozen = count(&db, &format!("SELECT COUNT(*) FROM intents WHERE entity_id = '{entity}'")).await;
            assert_eq!(frozen, 60, "{backend:?} {entity}: the first body is frozen");
            let refused: Vec<_> =
                rejected.iter().filter(|r| r["stream_seq"] == *first_seq || r["stream_seq"] == *second_seq).collect();
            assert_eq!(refused.len(), 1, "{backend:?} {entity}: one refused: {list}");
            assert_eq!(refused[0]["stream_seq"], *second_seq, "{backend:?} {entity}: the later one: {list}");
            assert_eq!(refused[0]["error"]["code"], *code, "{backend:?} {entity}: {list}");
        }
        let b_intents = count(&db, "SELECT COUNT(*) FROM intents WHERE entity_id LIKE 'PO-ORD-%-B'").await;
        assert_eq!(b_intents, 0, "{backend:?}: no second body was frozen");
        app.running.stop().await;
        bus.cleanup().await;
    }
}

#[tokio::test]
async fn a_message_redelivered_past_max_deliver_without_a_verdict_is_recorded() {
    for backend in backends() {
        let Some(bus) = TestStream::new().await else { return };
        let db = TestDb::new(backend).await;
        let toml = bus.toml("default", 1);
        // A first process takes the message and dies without a verdict: the
        // consumer is created as Herald would, and the message left unacked.
        let first = TestApp::new(&db).without_workers().with_toml(&toml).spawn().await;
        first.running.stop().await;
        let body = serde_json::to_vec(&sms_event("PO-BUS-8", "+9779800000008")).unwrap();
        let seq = bus.publish(&body, None).await;
        let taken = bus.durable().await.fetch().max_messages(1).messages().await.unwrap();
        let taken: Vec<_> = futures_util::StreamExt::collect::<Vec<_>>(taken).await;
        assert_eq!(taken.len(), 1);
        // After ack_wait the bus delivers it a second time, past max_deliver = 1.
        let app = TestApp::new(&db).without_workers().with_toml(&toml).spawn().await;
        bus.wait_settled(seq).await;
        wait_count(&db, "SELECT COUNT(*) FROM rejected_messages WHERE code = 'max_deliver_exceeded'", 1).await;
        assert_eq!(count(&db, "SELECT COUNT(*) FROM intents").await, 0, "{backend:?}");
        let (_, list) = app.get("/v1/rejected").await;
        assert_eq!(list["rejected"][0]["deliveries"], 2, "{list}");
        assert_eq!(list["rejected"][0]["error"]["status"], 503, "{list}");
        app.running.stop().await;
        bus.cleanup().await;
    }
}

#[tokio::test]
async fn an_existing_stream_that_does_not_capture_the_subjects_is_refused_at_start() {
    let Some(bus) = TestStream::new().await else { return };
    bus.js
        .create_stream(async_nats::jetstream::stream::Config {
            name: bus.stream.clone(),
            subjects: vec![format!("{}.elsewhere", bus.stream)],
            ..Default::default()
        })
        .await
        .unwrap();
    let db = TestDb::new(common::Backend::Sqlite).await;
    let config = TestApp::new(&db).with_toml(&bus.toml("default", 5)).config();
    let err = herald::app::start(config).await.err().expect("refused").to_string();
    assert!(err.starts_with("ingest.nats[0]: subjects:"), "{err}");
    assert!(err.contains(&bus.subject), "{err}");
    bus.cleanup().await;
}

#[tokio::test]
async fn an_unreachable_nats_is_refused_at_start_naming_the_entry() {
    let db = TestDb::new(common::Backend::Sqlite).await;
    let toml = "[[ingest.nats]]\nurl = \"nats://127.0.0.1:1\"\nstream = \"s\"\nsubjects = [\"a.b\"]\n\
                consumer = \"c\"\ntenant = \"default\"\n";
    let config = TestApp::new(&db).with_toml(toml).config();
    let err = herald::app::start(config).await.err().expect("refused").to_string();
    assert!(err.starts_with("ingest.nats[0]: cannot"), "{err}");
    assert!(err.contains("nats://127.0.0.1:1"), "{err}");
}

#[test]
fn a_bad_bus_entry_is_refused_at_load_naming_the_key() {
    let toml = "listen = \"127.0.0.1:0\"\n[[ingest.nats]]\nurl = \"http://x\"\nstream = \"s\"\nsubjects = [\"a\"]\n\
                consumer = \"c\"\ntenant = \"t\"\n";
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("h.toml");
    std::fs::write(&path, toml).unwrap();
    let err = herald::config::Config::load_with_env(Some(&path), &[]).unwrap_err().to_string();
    assert!(err.contains("ingest.nats[0].url"), "{err}");
}

/// How many outbox rows hold `state`, published or not.
async fn publication_rows(db: &TestDb, state: &str) -> i64 {
    count(db, &format!("SELECT COUNT(*) FROM publications WHERE state = '{state}'")).await
}

#[tokio::test]
async fn each_transition_is_published_once_and_survives_a_restart() {
    for backend in backends() {
        let Some(out) = TestPublications::new().await else { return };
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        // A first process commits transitions but does not get to publish
        // them: its publisher looks only once an hour, and it is stopped.
        let first = TestApp::new(&db).with_sms(&sms).with_toml(&out.toml("1h")).spawn().await;
        let (status, sent, _) = first.post_event(&sms_event("PO-PUB-1", "+9779800000011"), None).await;
        assert_eq!(status, 202, "{sent}");
        let sent_key = sent["intents"][0]["key"].as_str().unwrap().to_string();
        let mut no_phone = sms_event("PO-PUB-2", "+9779800000012");
        no_phone["recipients"][0].as_object_mut().unwrap().remove("phone");
        let (status, dead, _) = first.post_event(&no_phone, None).await;
        assert_eq!(status, 202, "{dead}");
        let dead_key = dead["intents"][0]["key"].as_str().unwrap().to_string();
        let dead_state = dead["intents"][0]["state"].as_str().unwrap().to_string();
        first.wait_state(&sent_key, &["sent"]).await;
        first.running.stop().await;
        assert_eq!(out.stored().await, 0, "nothing published before the restart");
        assert_eq!(publication_rows(&db, "sent").await, 1, "{backend:?}");

        // A second process publishes what the first committed.
        let second = TestApp::new(&db).with_sms(&sms).with_toml(&out.toml("20ms")).spawn().await;
        let published = out.wait_for(2).await;
        let sent_pub = published.iter().find(|p| p.body["key"] == sent_key.as_str()).expect("the sent intent");
        assert_eq!(sent_pub.subject, format!("{}.default.intents.sent", out.prefix));
        assert_eq!(sent_pub.msg_id, format!("{sent_key}:sent:1"));
        assert_eq!(
            sent_pub.body["entity"],
            serde_json::json!({"type": "purchase_order", "id": "PO-PUB-1", "version": 1})
        );
        assert_eq!((sent_pub.body["channel"].as_str(), sent_pub.body["attempts"].as_i64()), (Some("sms"), Some(1)));
        assert_eq!(sent_pub.body["recipient_id"], "u-PO-PUB-1");
        let text = sent_pub.body.to_string();
        assert!(!text.contains("9800000011") && !text.contains("body"), "no destination or content: {text}");
        let dead_pub = published.iter().find(|p| p.body["key"] == dead_key.as_str()).expect("the undeliverable intent");
        assert_eq!(dead_pub.subject, format!("{}.default.intents.{dead_state}", out.prefix));
        assert_eq!(dead_pub.body["reason"], "no_destination");

        // A re-publication (a crash between the ack and the mark) is
        // dropped by the stream: the Msg-Id is the same.
        wait_count(&db, "SELECT COUNT(*) FROM publications WHERE published_at IS NULL", 0).await;
        common::execute(&db, "UPDATE publications SET published_at = NULL").await;
        wait_count(&db, "SELECT COUNT(*) FROM publications WHERE published_at IS NULL", 0).await;
        assert_eq!(out.stored().await, 2, "one message per transition, however often published");
        let metrics = second.client.get(format!("{}/metrics", second.base)).send().await.unwrap().text().await.unwrap();
        assert!(metrics.contains("herald_publications_total"), "{metrics}");
        assert!(metrics.contains("herald_publications_lag_seconds"), "{metrics}");
        second.running.stop().await;
        out.cleanup().await;
    }
}

#[tokio::test]
async fn a_process_without_publish_nats_writes_no_publications() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let app = TestApp::new(&db).with_sms(&sms).spawn().await;
        let (_, sent, _) = app.post_event(&sms_event("PO-PUB-3", "+9779800000013"), None).await;
        app.wait_state(sent["intents"][0]["key"].as_str().unwrap(), &["sent"]).await;
        assert_eq!(count(&db, "SELECT COUNT(*) FROM publications").await, 0, "{backend:?}");
        app.running.stop().await;
    }
}

/// A refused webhook URL's path is its secret: the error of a rejected
/// message names the field and the problem, never the URL, and is stored
/// and shown with every `scheme://` URL cut to its scheme and host.
#[tokio::test]
async fn a_refused_webhook_urls_secret_is_not_in_a_rejected_messages_error() {
    const SECRET: &str = "T0SECRET/B0SECRET/XXSECRETXX";
    for backend in backends() {
        let Some(bus) = TestStream::new().await else { return };
        let db = TestDb::new(backend).await;
        let app = TestApp::new(&db).without_workers().with_toml(&bus.toml("default", 5)).spawn().await;
        let with_url = |entity: &str, url: &str| {
            let mut event = sms_event(entity, "+9779800000008");
            event["recipients"][0]["webhook_url"] = url.into();
            event
        };
        let tab = with_url("PO-BUS-URL-1", &format!("https://hooks.slack.com/services/{SECRET}\t"));
        let ftp = with_url("PO-BUS-URL-2", &format!("ftp://files.example.com/{SECRET}"));
        bus.publish(&serde_json::to_vec(&tab).unwrap(), None).await;
        let last = bus.publish(&serde_json::to_vec(&ftp).unwrap(), None).await;
        bus.wait_settled(last).await;

        let stored = "SELECT COUNT(*) FROM rejected_messages WHERE message LIKE '%SECRET%'";
        assert_eq!(count(&db, stored).await, 0, "{backend:?}: the error is stored without the URL's path");
        let (status, list) = app.get("/v1/rejected").await;
        assert_eq!(status, 200, "{list}");
        let rejected = list["rejected"].as_array().unwrap();
        assert_eq!(rejected.len(), 2, "{list}");
        for r in rejected {
            assert_eq!(r["error"]["code"], "invalid_field", "{list}");
            let message = r["error"]["message"].as_str().unwrap();
            assert!(message.starts_with("recipients[0].webhook_url"), "the field is named: {message}");
            assert!(!message.contains("SECRET") && !message.contains("hooks.slack.com"), "{message}");
            let (_, one) = app.get(&format!("/v1/rejected/{}", r["id"].as_str().unwrap())).await;
            assert!(!one.to_string().contains("SECRET"), "{one}");
        }

        // A row stored before (its error quoting the URL) is masked when shown.
        execute(
            &db,
            &format!(
                "UPDATE rejected_messages SET message = 'recipients[0].webhook_url: \"ftp://files.example.com/{SECRET}\" \
                 must be an http(s) URL; see https://hooks.slack.com/services/{SECRET}\tnow'"
            ),
        )
        .await;
        let (_, list) = app.get("/v1/rejected").await;
        for r in list["rejected"].as_array().unwrap() {
            let message = r["error"]["message"].as_str().unwrap();
            assert!(!message.contains("SECRET"), "{backend:?}: {message}");
            assert!(message.contains("ftp://files.example.com/***"), "{message}");
            let (_, one) = app.get(&format!("/v1/rejected/{}", r["id"].as_str().unwrap())).await;
            assert!(!one.to_string().contains("SECRET"), "{one}");
        }

        // Over HTTP the 400 names the field and the problem; no URL either.
        for event in [&tab, &ftp] {
            let (status, refused, _) = app.post_event(event, None).await;
            assert_eq!(status, 400, "{refused}");
            let message = refused["error"]["message"].as_str().unwrap_or_else(|| panic!("{refused}"));
            assert!(message.starts_with("recipients[0].webhook_url: "), "{refused}");
            assert!(!refused.to_string().contains("SECRET"), "{refused}");
        }
        app.running.stop().await;
        bus.cleanup().await;
    }
}

#[tokio::test]
async fn rejected_bus_messages_are_counted_in_the_daily_digest() {
    for backend in backends() {
        let Some(bus) = TestStream::new().await else { return };
        let db = TestDb::new(backend).await;
        let hook = common::webhook::FakeReceiver::start("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").await;
        let toml = format!("{}[ops]\ndigest_webhook = \"{}/hook/ops\"\n", bus.toml("default", 5), hook.base);
        let app = TestApp::new(&db).without_workers().with_toml(&toml).spawn().await;
        bus.publish(b"not json", None).await;
        bus.publish(b"{\"type\": ", None).await;
        let mut unknown = sms_event("PO-BUS-DIG", "+9779800000031");
        unknown["type"] = "nobody.listens".into();
        let seq = bus.publish(&serde_json::to_vec(&unknown).unwrap(), None).await;
        bus.wait_settled(seq).await;
        let resp = app.client.post(format!("{}/v1/ops/dlq-digest", app.base)).send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        let digest: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(
            digest["rejected_messages"],
            serde_json::json!({"total": 3, "by_code": {"malformed_json": 2, "unknown_event_type": 1}}),
            "{backend:?}: {digest}"
        );
        let text = digest["text"].as_str().unwrap();
        assert!(text.contains("Rejected bus messages: 3 (malformed_json 2, unknown_event_type 1)"), "{text}");
        assert!(text.contains("herald rejected list"), "{text}");
        assert!(!text.contains("PO-BUS-DIG"), "counts and codes, not bodies: {text}");
        app.running.stop().await;
        bus.cleanup().await;
    }
}

#[tokio::test]
async fn a_shadowed_intent_is_published_as_shadowed() {
    for backend in backends() {
        let Some(out) = TestPublications::new().await else { return };
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let app = TestApp::new(&db).with_sms(&sms).with_mode("shadow").with_toml(&out.toml("20ms")).spawn().await;
        let (_, posted, _) = app.post_event(&sms_event("PO-PUB-SH", "+9779800000014"), None).await;
        let key = posted["intents"][0]["key"].as_str().unwrap().to_string();
        app.wait_state(&key, &["shadowed"]).await;
        let published = out.wait_for(1).await;
        assert_eq!(published.len(), 1, "{backend:?}: {published:?}");
        assert_eq!(published[0].subject, format!("{}.default.intents.shadowed", out.prefix));
        assert!(published[0].msg_id.starts_with(&format!("{key}:shadowed:")), "{:?}", published[0]);
        assert!(sms.sent_to("+9779800000014").is_empty(), "shadow calls no provider");
        app.running.stop().await;
        out.cleanup().await;
    }
}

#[test]
fn a_bad_publish_section_is_refused_at_load_naming_the_key() {
    let cases = [
        ("url = \"http://x\"\nstream = \"s\"\n", "publish.nats.url"),
        ("url = \"nats://x\"\nstream = \"a.b\"\n", "publish.nats.stream"),
        ("url = \"nats://x\"\nstream = \"s\"\nsubject_prefix = \"herald.*\"\n", "publish.nats.subject_prefix"),
        ("url = \"nats://x\"\nstream = \"s\"\nbatch = 0\n", "publish.nats.batch"),
        ("url = \"nats://x\"\nstream = \"s\"\nlease = \"10ms\"\n", "publish.nats.lease"),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (section, key) in cases {
        let path = dir.path().join("h.toml");
        std::fs::write(&path, format!("listen = \"127.0.0.1:0\"\n[publish.nats]\n{section}")).unwrap();
        let err = herald::config::Config::load_with_env(Some(&path), &[]).unwrap_err().to_string();
        assert!(err.contains(key), "{key}: {err}");
    }
}

#[tokio::test]
async fn an_unreachable_or_mismatched_publish_stream_is_refused_at_start() {
    let db = TestDb::new(common::Backend::Sqlite).await;
    let toml = "[publish.nats]\nurl = \"nats://127.0.0.1:1\"\nstream = \"s\"\n";
    let config = TestApp::new(&db).with_toml(toml).config();
    let err = herald::app::start(config).await.err().expect("refused").to_string();
    assert!(err.starts_with("publish.nats: cannot"), "{err}");
    assert!(err.contains("nats://127.0.0.1:1"), "{err}");

    let Some(out) = TestPublications::new().await else { return };
    out.js
        .create_stream(async_nats::jetstream::stream::Config {
            name: out.stream.clone(),
            subjects: vec![format!("{}.elsewhere", out.stream)],
            ..Default::default()
        })
        .await
        .unwrap();
    let config = TestApp::new(&db).with_toml(&out.toml("20ms")).config();
    let err = herald::app::start(config).await.err().expect("refused").to_string();
    assert!(err.starts_with("publish.nats: stream:"), "{err}");
    assert!(err.contains(&format!("{}.>", out.prefix)), "{err}");
    out.cleanup().await;
}

#[tokio::test]
async fn a_publication_the_bus_does_not_ack_stays_in_the_outbox_until_it_does() {
    for backend in backends() {
        let Some(out) = TestPublications::new().await else { return };
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let app = TestApp::new(&db).with_sms(&sms).with_toml(&out.toml("20ms")).spawn().await;
        // The stream goes away: every publish fails (no stream answers).
        out.js.delete_stream(&out.stream).await.unwrap();
        let failed_before = app.metric("herald_publications_total", &[r#"result="failed""#]).await;
        let (_, sent, _) = app.post_event(&sms_event("PO-PUB-4", "+9779800000015"), None).await;
        let key = sent["intents"][0]["key"].as_str().unwrap().to_string();
        app.wait_state(&key, &["sent"]).await;
        // A round that claimed the row and failed to publish it has ended.
        let failed = r#"result="failed""#;
        common::eventually("a failed publication round", || async {
            (app.metric("herald_publications_total", &[failed]).await > failed_before).then_some(())
        })
        .await;
        assert_eq!(
            count(&db, "SELECT COUNT(*) FROM publications WHERE published_at IS NULL").await,
            1,
            "{backend:?}: not acked, not marked"
        );
        // Back again: the row goes out once its lease (1s) has lapsed.
        out.js
            .create_stream(async_nats::jetstream::stream::Config {
                name: out.stream.clone(),
                subjects: vec![format!("{}.>", out.prefix)],
                ..Default::default()
            })
            .await
            .unwrap();
        let published = out.wait_for(1).await;
        assert_eq!(published[0].msg_id, format!("{key}:sent:1"), "{backend:?}");
        wait_count(&db, "SELECT COUNT(*) FROM publications WHERE published_at IS NULL", 0).await;
        app.running.stop().await;
        out.cleanup().await;
    }
}

/// Transitions stamped with the same time go out in the order of the
/// intent's publication number, counted as a number: 9 before 10.
#[test]
fn a_batch_with_equal_times_is_published_in_publication_number_order() {
    let row = |key: &str, state: &str, n: u32| herald::store::Publication {
        msg_id: format!("{key}:{state}:{n}"),
        tenant: "default".into(),
        intent_key: key.into(),
        entity_type: "purchase_order".into(),
        entity_id: "PO-1".into(),
        entity_version: Some(1),
        channel: "sms".into(),
        recipient_id: "u-1".into(),
        state: state.into(),
        reason: None,
        attempts: 1,
        at: 1_000,
    };
    let mut batch = vec![row("k", "delivered", 11), row("k", "sent", 10), row("k", "unknown", 9), row("j", "sent", 2)];
    herald::publish::in_order(&mut batch);
    let order: Vec<&str> = batch.iter().map(|p| p.msg_id.as_str()).collect();
    assert_eq!(order, ["j:sent:2", "k:unknown:9", "k:sent:10", "k:delivered:11"]);
}
