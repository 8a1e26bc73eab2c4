//! OpenTelemetry traces across the queue.
//!
//! In process, with an in-memory exporter: the spans of one notification,
//! their attributes (and that no destination, body or event data is among
//! them), and error status where a collector's tail sampling needs it. Out
//! of process: two `herald serve` processes (an API without workers, and a
//! worker) export over OTLP/HTTP to a receiver in this test that decodes the
//! protobuf, and the worker's attempt continues the ingest's trace.

mod common;

use common::{FakeSms, Reply, Spawned, TestApp, TestDb, backends, sms_event};
use herald::ops::trace::TraceParent;
use opentelemetry::trace::Status;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use serde_json::{Value, json};
use std::sync::OnceLock;
use std::time::Duration;
use tracing_subscriber::layer::SubscriberExt;

/// One provider for the tests of this binary: the layer makes it the global
/// provider too, so each test reads only the spans of its own traces.
fn exporter() -> &'static (SdkTracerProvider, InMemorySpanExporter) {
    static ONCE: OnceLock<(SdkTracerProvider, InMemorySpanExporter)> = OnceLock::new();
    ONCE.get_or_init(|| {
        let exporter = InMemorySpanExporter::default();
        let provider = herald::ops::trace::provider_builder(1.0, "test").with_simple_exporter(exporter.clone()).build();
        (provider, exporter)
    })
}

/// The process's subscriber, as `herald serve` has it: Herald's spans into
/// the in-memory exporter. The global default, not one for the test's thread:
/// a span's last handle may be dropped on another thread (SQLite's driver
/// thread), and its parent is then closed through that thread's default
/// subscriber — with none there, the parent would never close (see
/// `every_ingest_span_is_exported_whichever_thread_closes_its_children`).
fn traced() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let (provider, _) = exporter();
        let subscriber = tracing_subscriber::registry().with(herald::ops::trace::layer(provider));
        tracing::subscriber::set_global_default(subscriber).expect("the only global subscriber of this test binary");
    });
}

fn hex(trace_id: opentelemetry::trace::TraceId) -> String {
    format!("{trace_id:032x}")
}

/// The finished spans of one trace, once `until` holds for them. Wait for
/// every span a test reads, not only for the last one it expects: once, in
/// CI on a loaded machine, a trace's attempt was exported and its `ingest`
/// span not yet (a span is exported when its last handle closes; which
/// handle outlived the answer was not pinned down).
async fn spans_of(trace_id: &str, until: impl Fn(&[SpanData]) -> bool) -> Vec<SpanData> {
    let (_, exporter) = exporter();
    let mut last = Vec::new();
    for _ in 0..200 {
        last = (exporter.get_finished_spans().unwrap().into_iter())
            .filter(|s| hex(s.span_context.trace_id()) == trace_id)
            .collect();
        if until(&last) {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let names: Vec<&str> = last.iter().map(|s| s.name.as_ref()).collect();
    panic!("trace {trace_id} never complete; spans so far: {names:?}");
}

fn attr(span: &SpanData, key: &str) -> Option<String> {
    span.attributes.iter().find(|kv| kv.key.as_str() == key).map(|kv| kv.value.as_str().into_owned())
}

fn named<'a>(spans: &'a [SpanData], name: &str) -> Vec<&'a SpanData> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn has(spans: &[SpanData], name: &str, n: usize) -> bool {
    named(spans, name).len() >= n
}

async fn post(app: &Spawned, event: &Value, key: Option<&str>, traceparent: Option<&str>) -> (u16, Value) {
    let mut req = app.client.post(format!("{}/v1/events", app.base)).json(event);
    if let Some(k) = key {
        req = req.header("idempotency-key", k);
    }
    if let Some(tp) = traceparent {
        req = req.header("traceparent", tp);
    }
    let resp = req.send().await.expect("POST /v1/events");
    (resp.status().as_u16(), resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn one_notification_is_one_trace_from_ingest_to_the_recorded_outcome() {
    traced();
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let app = TestApp::new(&db).with_sms(&sms).spawn().await;
        let phone = "+15550001001";
        let entity = format!("PO-TRACE-{backend:?}");
        let trace_id = if backend == common::Backend::Sqlite {
            "4bf92f3577b34da6a3ce929d0e0e4736"
        } else {
            "4bf92f3577b34da6a3ce929d0e0e4737"
        };
        let caller = format!("00-{trace_id}-00f067aa0ba902b7-01");
        let (status, body) = post(&app, &sms_event(&entity, phone), None, Some(&caller)).await;
        assert_eq!(status, 202, "{body}");
        let key = body["intents"][0]["key"].as_str().unwrap().to_string();
        app.wait_state(&key, &["sent"]).await;

        let spans = spans_of(trace_id, |s| has(s, "record", 1) && has(s, "ingest", 1)).await;
        let one = |name: &str| {
            let found = named(&spans, name);
            assert_eq!(
                found.len(),
                1,
                "{backend:?}: one {name} span in {:?}",
                spans.iter().map(|s| &s.name).collect::<Vec<_>>()
            );
            found[0]
        };
        let ingest = one("ingest");
        // The caller's span is the ingest's remote parent.
        assert_eq!(format!("{:016x}", ingest.parent_span_id), "00f067aa0ba902b7");
        assert!(ingest.parent_span_is_remote);
        assert_eq!(attr(ingest, "herald.outcome").as_deref(), Some("created"));
        assert_eq!(attr(ingest, "herald.intents").as_deref(), Some("1"));
        let plan = one("plan");
        assert_eq!(plan.parent_span_id, ingest.span_context.span_id());
        let intent = one("intent");
        assert_eq!(intent.parent_span_id, plan.span_context.span_id());
        assert_eq!(attr(intent, "herald.intent_key").as_deref(), Some(key.as_str()));
        assert_eq!(attr(intent, "herald.channel").as_deref(), Some("sms"));
        assert_eq!(attr(intent, "herald.template").as_deref(), Some("po_approved"));
        assert!(attr(intent, "herald.template_revision").is_some_and(|r| !r.is_empty()));
        assert_eq!(attr(intent, "herald.decision").as_deref(), Some("send"));
        assert_eq!(one("render").parent_span_id, intent.span_context.span_id());
        assert_eq!(one("store").parent_span_id, ingest.span_context.span_id());

        // The worker's spans continue the trace under the ingest span.
        let attempt = one("attempt");
        assert_eq!(attempt.parent_span_id, ingest.span_context.span_id());
        assert!(attempt.parent_span_is_remote, "the attempt continues a trace stored with the job");
        for (k, v) in [
            ("herald.intent_key", key.as_str()),
            ("herald.attempt", "1"),
            ("herald.channel", "sms"),
            ("herald.template", "po_approved"),
            ("herald.outcome", "accepted"),
            ("herald.provider_status", "200"),
            ("herald.next", "sent"),
        ] {
            assert_eq!(attr(attempt, k).as_deref(), Some(v), "{k}");
        }
        assert_eq!(one("claim").parent_span_id, ingest.span_context.span_id());
        assert_eq!(one("record").parent_span_id, attempt.span_context.span_id());
        for s in &spans {
            assert_eq!(s.status, Status::Unset, "{}", s.name);
        }

        // Never a destination, a body or event data.
        let sent = &sms.sent_to(phone)[0].body;
        let body_text = sent["body"].as_str().unwrap().to_string();
        for s in &spans {
            for kv in &s.attributes {
                let v = kv.value.as_str();
                for secret in [phone, "1555", body_text.as_str(), "Asha", "1,20,000", entity.as_str()] {
                    assert!(!v.contains(secret), "{}: {}={v} carries {secret:?}", s.name, kv.key);
                }
            }
        }
        app.running.stop().await;
    }
}

#[tokio::test]
async fn unknown_outcomes_terminal_failures_and_mismatches_are_errors_and_retries_stay_in_the_trace() {
    traced();
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let (slow, refused) = ("+15550002001", "+15550002002");
        sms.script(slow, vec![Reply::ok("late").slow(Duration::from_millis(800)), Reply::ok("m-2")]);
        sms.script(refused, vec![Reply::status(400, json!({"error": "invalid_destination"}))]);
        let app =
            TestApp::new(&db).with_sms(&sms).with_retry(3, "10ms", "20ms").with_lease("2s", "300ms").spawn().await;
        let tag = format!("{backend:?}");

        // No traceparent: the trace is derived from the request identity.
        let k = format!("{tag}-slow");
        let (status, body) = post(&app, &sms_event(&format!("PO-ERR-{tag}-1"), slow), Some(&k), None).await;
        assert_eq!(status, 202, "{body}");
        let key = body["intents"][0]["key"].as_str().unwrap().to_string();
        app.wait_state(&key, &["sent"]).await;
        let trace_id = TraceParent::derived(&format!("default|key:{k}")).trace_id_hex();
        let spans = spans_of(&trace_id, |s| has(s, "record", 2) && has(s, "ingest", 1)).await;
        let ingest = named(&spans, "ingest")[0];
        let mut attempts = named(&spans, "attempt");
        attempts.sort_by_key(|s| attr(s, "herald.attempt"));
        assert_eq!(attempts.len(), 2);
        let (first, second) = (attempts[0], attempts[1]);
        assert_eq!(attr(first, "herald.outcome").as_deref(), Some("unknown"));
        assert_eq!(attr(first, "herald.next").as_deref(), Some("retry"));
        assert!(matches!(first.status, Status::Error { .. }), "{:?}", first.status);
        assert_eq!(attr(second, "herald.attempt").as_deref(), Some("2"));
        assert_eq!(attr(second, "herald.outcome").as_deref(), Some("accepted"));
        assert_eq!(second.status, Status::Unset);
        // Every retry continues the ingest's trace, under the ingest span.
        for a in [first, second] {
            assert_eq!(a.parent_span_id, ingest.span_context.span_id());
        }

        // A terminal failure.
        let k = format!("{tag}-refused");
        let (_, body) = post(&app, &sms_event(&format!("PO-ERR-{tag}-2"), refused), Some(&k), None).await;
        let dead = body["intents"][0]["key"].as_str().unwrap().to_string();
        app.wait_state(&dead, &["dead"]).await;
        let trace_id = TraceParent::derived(&format!("default|key:{k}")).trace_id_hex();
        let spans = spans_of(&trace_id, |s| has(s, "record", 1)).await;
        let attempt = named(&spans, "attempt")[0];
        assert_eq!(attr(attempt, "herald.reason").as_deref(), Some("invalid_destination"));
        assert_eq!(attr(attempt, "herald.provider_status").as_deref(), Some("400"));
        assert_eq!(attr(attempt, "herald.next").as_deref(), Some("dead"));
        assert!(matches!(attempt.status, Status::Error { .. }), "{:?}", attempt.status);

        // An idempotency mismatch: the same key with another body.
        let mut other = sms_event(&format!("PO-ERR-{tag}-2"), refused);
        other["data"]["po"]["total"] = json!("9");
        assert_eq!(post(&app, &other, Some(&k), None).await.0, 422);
        let spans = spans_of(&trace_id, |s| has(s, "ingest", 2)).await;
        let refusal = (named(&spans, "ingest").into_iter())
            .find(|s| attr(s, "herald.outcome").as_deref() == Some("mismatch"))
            .expect("the refused request's ingest span");
        assert!(matches!(refusal.status, Status::Error { .. }), "{:?}", refusal.status);
        app.running.stop().await;
    }
}

#[tokio::test]
async fn an_invalid_traceparent_starts_a_trace_of_its_own() {
    traced();
    let db = TestDb::new(common::Backend::Sqlite).await;
    let sms = FakeSms::start().await;
    let app = TestApp::new(&db).with_sms(&sms).spawn().await;
    let bad = "00-00000000000000000000000000000000-00f067aa0ba902b7-01";
    let (status, body) = post(&app, &sms_event("PO-BAD-TP", "+15550003001"), Some("bad-tp"), Some(bad)).await;
    assert_eq!(status, 202, "{body}");
    let trace_id = TraceParent::derived("default|key:bad-tp").trace_id_hex();
    let spans = spans_of(&trace_id, |s| has(s, "attempt", 1) && has(s, "ingest", 1)).await;
    let ingest = named(&spans, "ingest")[0];
    assert!(!ingest.parent_span_is_remote);
    assert_eq!(ingest.parent_span_id, opentelemetry::trace::SpanId::INVALID);
    app.running.stop().await;
}

/// The span ids a span links to, by trace id.
fn links(span: &SpanData) -> Vec<(String, String)> {
    (span.links.links.iter())
        .map(|l| (hex(l.span_context.trace_id()), format!("{:016x}", l.span_context.span_id())))
        .collect()
}

fn span_id(span: &SpanData) -> String {
    format!("{:016x}", span.span_context.span_id())
}

#[tokio::test]
async fn a_replayed_dead_letter_is_attempted_in_the_replay_requests_trace_linked_to_the_original() {
    traced();
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let phone = "+15550005001";
        sms.script(phone, vec![Reply::status(503, json!({"error": "busy"})), Reply::ok("m-replayed")]);
        let app = TestApp::new(&db).with_sms(&sms).with_retry(1, "10ms", "20ms").spawn().await;
        let n = backend as u128;
        let (original, replaying) = (format!("{:032x}", 0x0a11_u128 + n), format!("{:032x}", 0x0b22_u128 + n));
        let (status, body) = post(
            &app,
            &sms_event(&format!("PO-REPLAY-{backend:?}"), phone),
            None,
            Some(&format!("00-{original}-00000000000000a1-01")),
        )
        .await;
        assert_eq!(status, 202, "{body}");
        let key = body["intents"][0]["key"].as_str().unwrap().to_string();
        app.wait_state(&key, &["dead"]).await;
        let first = spans_of(&original, |s| has(s, "record", 1) && has(s, "ingest", 1)).await;
        let ingest = named(&first, "ingest")[0];

        // The operator's replay, in a trace of the operator's own.
        let resp = (app.client.post(format!("{}/v1/dead-letters/replay", app.base)))
            .header("traceparent", format!("00-{replaying}-00000000000000b2-01"))
            .json(&json!({"ids": [key]}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        app.wait_state(&key, &["sent"]).await;
        let spans = spans_of(&replaying, |s| has(s, "record", 1) && has(s, "replay", 1)).await;
        let replay = named(&spans, "replay")[0];
        assert_eq!(format!("{:016x}", replay.parent_span_id), "00000000000000b2", "the caller's span");
        assert!(replay.parent_span_is_remote);
        assert_eq!(attr(replay, "herald.replayed").as_deref(), Some("1"));
        let attempt = named(&spans, "attempt")[0];
        assert_eq!(attempt.parent_span_id, replay.span_context.span_id(), "{backend:?}: under the replay");
        assert_eq!(attr(attempt, "herald.attempt").as_deref(), Some("2"));
        assert_eq!(attr(attempt, "herald.outcome").as_deref(), Some("accepted"));
        assert_eq!(links(attempt), vec![(original.clone(), span_id(ingest))], "linked to the request that planned it");
        // Nothing of the replay landed in the original trace.
        let first = spans_of(&original, |s| has(s, "attempt", 1)).await;
        assert_eq!(named(&first, "attempt").len(), 1, "{backend:?}");
        app.running.stop().await;
    }
}

#[tokio::test]
async fn a_digest_is_sent_in_a_trace_of_its_own_linked_to_its_members_requests() {
    use common::digest::{DIGEST_ROUTE, templates_with_digest};
    traced();
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let templates = templates_with_digest();
        let clock = common::TestClock::at("2026-06-01T10:05:00Z");
        let app = TestApp::new(&db)
            .with_sms(&sms)
            .with_templates_dir(templates.path())
            .with_clock(clock.clone())
            .with_toml(DIGEST_ROUTE)
            .spawn()
            .await;
        let phone = "+15550005002";
        let mut members = Vec::new();
        for (m, entity) in ["PO-DT1", "PO-DT2"].iter().enumerate() {
            clock.set(&format!("2026-06-01T10:0{}:00Z", 5 + m));
            let trace_id = format!("{:032x}", 0x0d00_u128 + 16 * m as u128 + backend as u128);
            let mut ev = sms_event(entity, phone);
            ev["type"] = json!("purchase_order.batched");
            // A window per backend: the digest's trace is derived from its key.
            ev["recipients"] = json!([{"id": format!("u-digest-{backend:?}"), "phone": phone}]);
            let (status, body) = post(&app, &ev, None, Some(&format!("00-{trace_id}-00000000000000c3-01"))).await;
            assert_eq!((status, body["intents"][0]["decision"].as_str()), (202, Some("digest")), "{body}");
            let ingest = spans_of(&trace_id, |s| has(s, "ingest", 1)).await;
            members.push((trace_id, span_id(named(&ingest, "ingest")[0]), body["intents"][0]["key"].clone()));
        }
        clock.set("2026-06-01T11:00:00Z");
        let member = app.wait_state(members[0].2.as_str().unwrap(), &["digested"]).await;
        let digest_key = member["digest_id"].as_str().unwrap().to_string();
        app.wait_state(&digest_key, &["sent"]).await;

        let trace_id = TraceParent::derived(&format!("digest|{digest_key}")).trace_id_hex();
        let spans = spans_of(&trace_id, |s| has(s, "record", 1) && has(s, "digest", 1)).await;
        let digest = named(&spans, "digest")[0];
        assert_eq!(digest.parent_span_id, opentelemetry::trace::SpanId::INVALID, "a root");
        assert_eq!(attr(digest, "herald.outcome").as_deref(), Some("closed"));
        assert_eq!(attr(digest, "herald.members").as_deref(), Some("2"));
        let expected: Vec<(String, String)> = members.iter().map(|(t, s, _)| (t.clone(), s.clone())).collect();
        assert_eq!(links(digest), expected, "{backend:?}: the closing links to its members' requests");
        let attempt = named(&spans, "attempt")[0];
        assert_eq!(attempt.parent_span_id, digest.span_context.span_id(), "the send continues the closing");
        assert_eq!(attr(attempt, "herald.intent_key").as_deref(), Some(digest_key.as_str()));
        assert_eq!(links(attempt), expected, "{backend:?}: the send links to its members' requests");
        app.running.stop().await;
    }
}

mod otlp {
    //! Two `herald serve` processes export to a receiver in this test.

    use super::common::serve::Serve;
    use super::common::{FakeSms, TestDb, backends};
    use axum::body::Bytes;
    use axum::extract::State;
    use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
    use opentelemetry_proto::tonic::common::v1::KeyValue;
    use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
    use opentelemetry_proto::tonic::trace::v1::Span;
    use prost::Message;
    use serde_json::Value;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    /// Every export request: its size on the wire and its spans with their
    /// resource's `service.name`.
    #[derive(Clone, Default)]
    struct Received(Arc<Mutex<Vec<(usize, ExportTraceServiceRequest)>>>);

    async fn receive(State(r): State<Received>, body: Bytes) -> impl axum::response::IntoResponse {
        let request = ExportTraceServiceRequest::decode(body.as_ref()).expect("an OTLP protobuf export request");
        r.0.lock().unwrap().push((body.len(), request));
        ([("content-type", "application/x-protobuf")], ExportTraceServiceResponse::default().encode_to_vec())
    }

    impl Received {
        async fn start() -> (Received, String) {
            let received = Received::default();
            let app =
                axum::Router::new().route("/v1/traces", axum::routing::post(receive)).with_state(received.clone());
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let base = format!("http://{}", listener.local_addr().unwrap());
            tokio::spawn(async move {
                let _ = axum::serve(listener, app).await;
            });
            (received, base)
        }

        fn spans(&self) -> Vec<(String, Span)> {
            let mut out = Vec::new();
            for (_, request) in self.0.lock().unwrap().iter() {
                for rs in &request.resource_spans {
                    let service = rs.resource.as_ref().and_then(|r| text(&r.attributes, "service.name"));
                    for ss in &rs.scope_spans {
                        for s in &ss.spans {
                            out.push((service.clone().unwrap_or_default(), s.clone()));
                        }
                    }
                }
            }
            out
        }

        fn bytes(&self) -> usize {
            self.0.lock().unwrap().iter().map(|(n, _)| n).sum()
        }
    }

    fn text(attributes: &[KeyValue], key: &str) -> Option<String> {
        let v = attributes.iter().find(|kv| kv.key == key)?.value.as_ref()?.value.as_ref()?;
        Some(match v {
            AnyValue::StringValue(s) => s.clone(),
            AnyValue::IntValue(n) => n.to_string(),
            other => format!("{other:?}"),
        })
    }

    fn config(
        dir: &std::path::Path,
        name: &str,
        db: &str,
        sms: &str,
        workers: bool,
        tracing: &str,
    ) -> std::path::PathBuf {
        let path = dir.join(name);
        let toml = format!(
            r#"
listen = "127.0.0.1:0"
database_url = "{db}"
dedupe_window = "1h"
shutdown_grace = "5s"
[retry]
attempts = 3
base = "20ms"
max = "100ms"
[worker]
concurrency = 4
poll_interval = "20ms"
lease = "3s"
disabled = {disabled}
[log]
format = "json"
[[routes]]
event = "purchase_order.approved"
template = "po_approved"
channels = ["sms"]
[channels.sms]
url = "{sms}"
timeout = "1s"
{tracing}
"#,
            disabled = !workers
        );
        std::fs::write(&path, toml).unwrap();
        path
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_api_process_and_a_worker_process_export_one_trace_over_otlp_http() {
        for backend in backends() {
            let db = TestDb::new(backend).await;
            db.store().await; // migrated before either process starts
            let sms = FakeSms::start().await;
            let (received, collector) = Received::start().await;
            let dir = tempfile::tempdir().unwrap();
            // The API process is configured by file; the worker by the
            // standard variable.
            let api_config = config(
                dir.path(),
                "api.toml",
                &db.url,
                &sms.url,
                false,
                &format!("[tracing]\notlp_endpoint = \"{collector}\"\n"),
            );
            let worker_config = config(dir.path(), "worker.toml", &db.url, &sms.url, true, "");
            let mut api = Serve::start(&api_config, &dir.path().join("api.log"), &[]);
            let mut worker = Serve::start(
                &worker_config,
                &dir.path().join("worker.log"),
                &[("OTEL_EXPORTER_OTLP_ENDPOINT", collector.as_str())],
            );
            let (api_addr, worker_addr) = (api.addr().await, worker.addr().await);

            let trace_id = format!("{:032x}", 0x5ca1ab1e_u128 + backend as u128);
            let caller = format!("00-{trace_id}-1122334455667788-01");
            let client = reqwest::Client::new();
            let event = super::sms_event(&format!("PO-OTLP-{backend:?}"), "+15550004001");
            let resp = (client.post(format!("http://{api_addr}/v1/events")))
                .header("traceparent", &caller)
                .json(&event)
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status().as_u16(), 202);
            let body: Value = resp.json().await.unwrap();
            let key = body["intents"][0]["key"].as_str().unwrap().to_string();
            let mut state = String::new();
            for _ in 0..300 {
                let got: Value = client
                    .get(format!("http://{api_addr}/v1/intents/{key}"))
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                state = got["state"].as_str().unwrap_or_default().to_string();
                if state == "sent" {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert_eq!(state, "sent");

            // Stopped at once: the spans reach the receiver through the
            // flush at shutdown, not the batch processor's timer.
            api.stop().await;
            worker.stop().await;
            assert_ne!(api_addr, worker_addr);

            let spans = received.spans();
            let of_trace: Vec<&(String, Span)> =
                spans.iter().filter(|(_, s)| hex::encode(&s.trace_id) == trace_id).collect();
            let find = |name: &str| {
                of_trace.iter().find(|(_, s)| s.name == name).unwrap_or_else(|| {
                    panic!("no {name} span in {:?}", of_trace.iter().map(|(_, s)| &s.name).collect::<Vec<_>>())
                })
            };
            let (service, ingest) = find("ingest");
            assert_eq!(service, "herald");
            assert_eq!(hex::encode(&ingest.parent_span_id), "1122334455667788");
            let (service, attempt) = find("attempt");
            assert_eq!(service, "herald");
            assert_eq!(attempt.parent_span_id, ingest.span_id, "the worker's attempt continues the ingest span");
            assert_eq!(text(&attempt.attributes, "herald.intent_key").as_deref(), Some(key.as_str()));
            assert_eq!(text(&attempt.attributes, "herald.outcome").as_deref(), Some("accepted"));
            for name in ["plan", "intent", "render", "store", "claim", "record"] {
                find(name);
            }

            // What a span costs on the wire (uncompressed OTLP/HTTP protobuf).
            let per_span = received.bytes() / spans.len().max(1);
            println!(
                "OTLP/HTTP protobuf: {} spans in {} bytes, {per_span} bytes per span",
                spans.len(),
                received.bytes()
            );
            for name in ["ingest", "plan", "intent", "render", "store", "claim", "attempt", "record"] {
                println!("  {name:<8} {:>4} bytes encoded", find(name).1.encoded_len());
            }
        }
    }
}

/// Every ingest span is exported, whichever thread drops the last handle of
/// one of its children. SQLite's driver runs each statement on a thread of
/// its own and takes a clone of the current span along (sqlx-sqlite sends
/// `Span::current()` with every command): for the directory read, the
/// `plan` span, a child of `ingest`. When the driver drops that clone after
/// the caller has moved on, `plan` closes on the driver's thread, after the
/// answer; tracing-subscriber then closes its parent through that thread's
/// default subscriber (tokio-rs/tracing#1656). Herald's subscriber is the
/// process's global default, so `ingest` closes a moment late and is
/// exported; a subscriber set for one thread only (as these tests had) left
/// it open for good, never exported.
#[tokio::test]
async fn every_ingest_span_is_exported_whichever_thread_closes_its_children() {
    traced();
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let app = TestApp::new(&db).with_sms(&sms).spawn().await;
        let mut traces = Vec::new();
        for n in 0..60u128 {
            let trace_id = format!("{:032x}", 0xe000_0000_u128 + n * 4 + backend as u128);
            let event = sms_event(&format!("PO-EVERY-{backend:?}-{n}"), &format!("+1555000{:04}", 7000 + n));
            let (status, body) = post(&app, &event, None, Some(&format!("00-{trace_id}-00000000000000e1-01"))).await;
            assert_eq!(status, 202, "{body}");
            traces.push(trace_id);
        }
        for trace_id in &traces {
            spans_of(trace_id, |s| has(s, "ingest", 1) && has(s, "plan", 1)).await;
        }
        app.running.stop().await;
    }
}
