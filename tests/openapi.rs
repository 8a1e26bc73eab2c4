//! The OpenAPI document (`GET /v1/openapi.json`): it is valid, it describes
//! every route the router serves and no other, and what the server answers
//! conforms to it — every status documented, every body valid against its
//! schema — along a walk through the whole API with real data.

mod common;

use common::{FakeSms, Reply, TestApp, TestDb, backends, sms_event};
use reqwest::Method;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;

const TOKEN: &str = "tok-openapi-all";
const READER: &str = "tok-openapi-reader";

fn auth_toml() -> String {
    let sha = |t: &str| hex::encode(Sha256::digest(t.as_bytes()));
    format!(
        "[[auth.tokens]]\nname = \"all\"\ntenant = \"acme\"\ntoken_sha256 = \"{}\"\n\
         scopes = [\"events:write\", \"intents:read\", \"recipients:write\", \"ops\", \"admin\"]\n\
         [[auth.tokens]]\nname = \"reader\"\ntenant = \"acme\"\ntoken_sha256 = \"{}\"\nscopes = [\"intents:read\"]\n",
        sha(TOKEN),
        sha(READER)
    )
}

fn doc() -> &'static Value {
    herald::api::openapi_document()
}

const METHODS: [&str; 5] = ["get", "put", "post", "delete", "patch"];

/// Every (method, path template) the document describes.
fn operations() -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for (path, item) in doc()["paths"].as_object().expect("paths") {
        for m in METHODS {
            if item.get(m).is_some() {
                out.insert((m.to_string(), path.clone()));
            }
        }
    }
    out
}

/// Resolves a local `$ref` (`#/components/...`).
fn resolve(v: &Value) -> &Value {
    match v.get("$ref").and_then(Value::as_str) {
        Some(r) => {
            let pointer = r.strip_prefix('#').expect("a local $ref");
            resolve(doc().pointer(pointer).unwrap_or_else(|| panic!("$ref {r} does not resolve")))
        }
        None => v,
    }
}

fn every_ref(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(r)) = m.get("$ref") {
                out.push(r.clone());
            }
            m.values().for_each(|x| every_ref(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| every_ref(x, out)),
        _ => {}
    }
}

#[test]
fn the_document_is_valid_openapi_3_1() {
    let d = doc();
    assert!(d["openapi"].as_str().unwrap().starts_with("3.1"), "{}", d["openapi"]);
    assert_eq!(d["info"]["title"], "Herald");
    assert!(d["info"]["version"].is_string());
    assert_eq!(d["components"]["securitySchemes"]["bearer"]["scheme"], "bearer");

    let mut refs = Vec::new();
    every_ref(d, &mut refs);
    assert!(!refs.is_empty());
    for r in &refs {
        let pointer = r.strip_prefix('#').unwrap_or_else(|| panic!("non-local $ref {r}"));
        assert!(d.pointer(pointer).is_some(), "$ref {r} does not resolve");
    }
    // Every component schema is itself a valid JSON Schema (2020-12, which
    // OpenAPI 3.1 uses), checked with the components beside it.
    for (name, schema) in d["components"]["schemas"].as_object().unwrap() {
        let root = json!({"$defs": {"it": schema}, "$ref": "#/$defs/it", "components": d["components"]});
        jsonschema::draft202012::new(&root).unwrap_or_else(|e| panic!("schema {name} is not valid: {e}"));
    }

    let mut ids = BTreeSet::new();
    for (method, path) in operations() {
        let op = &d["paths"][&path][&method];
        let where_ = format!("{} {path}", method.to_uppercase());
        if let Some(id) = op["operationId"].as_str() {
            assert!(ids.insert(id.to_string()), "{where_}: operationId {id} is used twice");
        }
        // Each {name} in the path is a required path parameter, and no other is.
        let in_path: BTreeSet<String> =
            path.split('/').filter_map(|s| s.strip_prefix('{')?.strip_suffix('}').map(String::from)).collect();
        let declared: BTreeSet<String> = op["parameters"]
            .as_array()
            .into_iter()
            .flatten()
            .map(resolve)
            .filter(|p| p["in"] == "path")
            .map(|p| {
                assert_eq!(p["required"], true, "{where_}: path parameter {} must be required", p["name"]);
                p["name"].as_str().unwrap().to_string()
            })
            .collect();
        assert_eq!(in_path, declared, "{where_}: path parameters");
        // A success and, where auth applies, its failures.
        let responses = op["responses"].as_object().unwrap_or_else(|| panic!("{where_}: no responses"));
        assert!(responses.keys().any(|s| s.starts_with('2')), "{where_}: no 2xx response");
        let secured = op["security"].as_array().is_some_and(|s| s.iter().any(|r| r.get("bearer").is_some()));
        if secured {
            for status in ["401", "403"] {
                assert!(responses.contains_key(status), "{where_}: a secured operation documents {status}");
            }
        }
        // Error responses carry the error body, with its codes.
        for (status, r) in responses {
            if status.starts_with('4') || status.starts_with('5') && status != "503" {
                let schema = resolve(&resolve(r)["content"]["application/json"]["schema"]);
                let codes = &schema["properties"]["error"]["properties"]["code"]["enum"];
                assert!(codes.as_array().is_some_and(|c| !c.is_empty()), "{where_} {status}: no error codes");
            }
        }
    }
}

/// The contract's endpoints (DESIGN §4) and this document's own.
#[test]
fn every_endpoint_of_the_contract_is_described() {
    let want = [
        ("post", "/v1/events"),
        ("get", "/v1/intents/{id}"),
        ("get", "/v1/intents"),
        ("put", "/v1/recipients/{id}"),
        ("get", "/v1/recipients/{id}"),
        ("get", "/v1/recipients/{id}/preferences/{version}"),
        ("get", "/v1/recipients/{id}/inbox"),
        ("post", "/v1/recipients/{id}/inbox/{card}/read"),
        ("get", "/v1/dead-letters"),
        ("get", "/v1/dead-letters/summary"),
        ("post", "/v1/dead-letters/replay"),
        ("post", "/v1/ops/dlq-digest"),
        ("get", "/healthz"),
        ("get", "/readyz"),
        ("get", "/metrics"),
        ("get", "/v1/openapi.json"),
        ("post", "/v1/receipts/twilio"),
        ("post", "/v1/receipts/generic"),
        ("post", "/v1/receipts/ses"),
        ("get", "/v1/suppressions"),
        ("delete", "/v1/suppressions/{id}"),
        ("get", "/v1/rejected"),
        ("get", "/v1/rejected/{id}"),
        ("get", "/v1/shadow/report"),
        ("post", "/v1/shadow/compare"),
    ];
    let want: BTreeSet<(String, String)> = want.iter().map(|(m, p)| (m.to_string(), p.to_string())).collect();
    assert_eq!(operations(), want);
}

fn concrete(path: &str) -> String {
    path.replace("{version}", "1").replace('{', "x").replace('}', "")
}

/// The router is built from the described routes: every described operation
/// is served (never the fallback's 404, never 405), and a described path
/// answers 405 to every method it does not describe.
#[tokio::test]
async fn the_router_serves_exactly_what_the_document_describes() {
    let db = TestDb::new(common::Backend::Sqlite).await;
    let app = TestApp::new(&db).without_workers().with_toml(&auth_toml()).spawn().await;
    let ops = operations();
    let paths: BTreeSet<&String> = ops.iter().map(|(_, p)| p).collect();
    for path in paths {
        for m in METHODS {
            let method = Method::from_bytes(m.to_uppercase().as_bytes()).unwrap();
            let resp = app.client.request(method, format!("{}{}", app.base, concrete(path))).send().await.unwrap();
            let status = resp.status().as_u16();
            let body: Value = resp.json().await.unwrap_or(Value::Null);
            if ops.contains(&(m.to_string(), path.clone())) {
                assert_ne!(status, 405, "{m} {path} is described but not served");
                assert!(
                    !(status == 404 && body["error"]["message"] == "no such endpoint"),
                    "{m} {path} is described but falls through to the fallback"
                );
            } else {
                assert_eq!(status, 405, "{m} {path} is served but not described");
            }
        }
    }
}

#[tokio::test]
async fn the_document_is_served_without_a_token_and_is_the_same_for_every_deployment() {
    let db = TestDb::new(common::Backend::Sqlite).await;
    let private_route = "[[routes]]\nevent = \"zz_private.event\"\ntemplate = \"po_approved\"\nchannels = [\"sms\"]\n";
    let app = TestApp::new(&db).without_workers().with_toml(&auth_toml()).with_toml(private_route).spawn().await;
    let resp = app.client.get(format!("{}/v1/openapi.json", app.base)).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.headers()["content-type"].to_str().unwrap().starts_with("application/json"));
    let served: Value = resp.json().await.unwrap();
    assert_eq!(&served, doc());
    let text = served.to_string();
    for secret in ["acme", TOKEN, READER, "zz_private"] {
        assert!(!text.contains(secret), "the document names {secret:?}, which belongs to this deployment");
    }
    // Like every endpoint without parameters, it refuses unknown ones.
    let (status, body) = app.get("/v1/openapi.json?x=1").await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], "invalid_field");
}

/// Polls an intent (with the token) until it is in `state`.
async fn wait_state(app: &common::Spawned, id: &str, state: &str) {
    let mut last = Value::Null;
    for _ in 0..300 {
        let resp = app.client.get(format!("{}/v1/intents/{id}", app.base)).bearer_auth(TOKEN).send().await.unwrap();
        last = resp.json().await.unwrap_or(Value::Null);
        if last["state"] == state {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("intent {id} never reached {state}; last: {last}");
}

/// One HTTP exchange checked against the document.
struct Checker<'a> {
    app: &'a common::Spawned,
    checked: BTreeSet<(String, String, u16)>,
}

impl Checker<'_> {
    async fn call(
        &mut self,
        method: &str,
        template: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> (u16, Value, reqwest::header::HeaderMap) {
        let m = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        let mut req = self.app.client.request(m, format!("{}{path}", self.app.base));
        if let Some(b) = body {
            req = req.json(b);
        }
        self.check(method, template, path, token, req).await
    }

    /// The same with a body of another type (a send log as CSV).
    async fn call_text(
        &mut self,
        template: &str,
        path: &str,
        token: Option<&str>,
        content_type: &str,
        body: &str,
    ) -> (u16, Value, reqwest::header::HeaderMap) {
        let req = (self.app.client.post(format!("{}{path}", self.app.base)))
            .header("content-type", content_type)
            .body(body.to_string());
        self.check("post", template, path, token, req).await
    }

    async fn check(
        &mut self,
        method: &str,
        template: &str,
        path: &str,
        token: Option<&str>,
        mut req: reqwest::RequestBuilder,
    ) -> (u16, Value, reqwest::header::HeaderMap) {
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let text = resp.text().await.unwrap();
        let op = &doc()["paths"][template][method];
        assert!(op.is_object(), "{method} {template} is not described");
        let documented = resolve(
            op["responses"].get(status.to_string()).unwrap_or_else(|| panic!("{method} {path}: {status} undocumented")),
        );
        let (ct, media) = documented["content"].as_object().and_then(|c| c.iter().next()).expect("content");
        let got_ct = headers.get("content-type").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
        assert!(got_ct.starts_with(ct.as_str()), "{method} {path} {status}: content-type {got_ct}, documented {ct}");
        let value = if ct == "application/json" {
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{method} {path} {status}: not JSON ({e}): {text}"))
        } else {
            Value::String(text)
        };
        let root = json!({"$defs": {"it": media["schema"]}, "$ref": "#/$defs/it", "components": doc()["components"]});
        let validator = jsonschema::draft202012::new(&root).unwrap();
        let errors: Vec<String> =
            validator.iter_errors(&value).map(|e| format!("{e} at {}", e.instance_path)).collect();
        assert!(
            errors.is_empty(),
            "{method} {path} {status}: the body contradicts the document: {errors:?}\n{value:#}"
        );
        for (name, h) in documented["headers"].as_object().into_iter().flatten() {
            let required = h["required"] == true;
            assert!(
                !required || headers.contains_key(name.as_str()),
                "{method} {path} {status}: header {name} missing"
            );
        }
        self.checked.insert((method.to_string(), template.to_string(), status));
        (status, value, headers)
    }
}

#[tokio::test]
async fn every_answer_along_a_walk_through_the_api_conforms_to_the_document() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        sms.script("+15550000999", vec![Reply::status(400, json!({"error": "invalid_destination"}))]);
        let app = TestApp::new(&db).with_sms(&sms).with_toml(&auth_toml()).spawn().await;
        let mut c = Checker { app: &app, checked: BTreeSet::new() };
        let t = Some(TOKEN);

        c.call("get", "/healthz", "/healthz", None, None).await;
        c.call("get", "/readyz", "/readyz", None, None).await;
        c.call("get", "/v1/openapi.json", "/v1/openapi.json", None, None).await;
        c.call("get", "/metrics", "/metrics", t, None).await;
        c.call("get", "/metrics", "/metrics", Some(READER), None).await;
        c.call("get", "/metrics", "/metrics", None, None).await;
        c.call("get", "/metrics", "/metrics?x=1", t, None).await;

        // Quiet hours that begin two hours from now in the recipient's zone, so
        // the walk's SMS is sent whatever the time of day the test runs (a fixed
        // 21:00–07:00 held it from 15:15 to 01:15 UTC).
        let kathmandu = jiff::tz::TimeZone::get("Asia/Kathmandu").unwrap();
        let local = jiff::Timestamp::now().to_zoned(kathmandu);
        let hour =
            |h: i64| local.checked_add(jiff::SignedDuration::from_hours(h)).unwrap().strftime("%H:00").to_string();
        let prefs = json!({"phone": "+15550000100", "locale": "en", "timezone": "Asia/Kathmandu", "email": "u@example.com",
            "preferences": {"channels": {"email": false}, "quiet_hours": {"start": hour(2), "end": hour(3)}, "digest": false}});
        let rec = "/v1/recipients/{id}";
        let (s, _, _) = c.call("put", rec, "/v1/recipients/u-1", t, Some(&prefs)).await;
        assert_eq!(s, 200);
        c.call("put", rec, "/v1/recipients/u-1", t, Some(&json!({"phone": "12"}))).await;
        c.call("get", rec, "/v1/recipients/u-1", t, None).await;
        c.call("get", rec, "/v1/recipients/nobody", t, None).await;
        c.call("get", rec, "/v1/recipients/u-1", Some(READER), None).await;
        let pv = "/v1/recipients/{id}/preferences/{version}";
        c.call("get", pv, "/v1/recipients/u-1/preferences/1", t, None).await;
        c.call("get", pv, "/v1/recipients/u-1/preferences/x", t, None).await;
        c.call("get", pv, "/v1/recipients/u-1/preferences/9", t, None).await;

        let mut ev = sms_event("PO-OPENAPI-1", "+15550000100");
        ev["recipients"] = json!([{"id": "u-1"}]);
        ev["channels"] = json!(["sms", "in_app"]);
        let events = "/v1/events";
        let (s, accepted, _) = c.call("post", events, events, t, Some(&ev)).await;
        assert_eq!(s, 202, "{accepted}");
        let (s, _, headers) = c.call("post", events, events, t, Some(&ev)).await;
        assert_eq!((s, headers["idempotent-replayed"].to_str().unwrap()), (200, "true"));
        let (s, dry, _) = c.call("post", events, "/v1/events?dry_run=true", t, Some(&ev)).await;
        assert_eq!((s, &dry["dry_run"]), (200, &json!(true)), "{dry}");
        let mut changed = ev.clone();
        changed["data"]["po"]["number"] = json!("PO-OTHER");
        assert_eq!(c.call("post", events, events, t, Some(&changed)).await.0, 409);
        let mut unknown = ev.clone();
        unknown["type"] = json!("nobody.routes.this");
        assert_eq!(c.call("post", events, events, t, Some(&unknown)).await.0, 422);
        assert_eq!(c.call("post", events, events, t, Some(&json!({"type": 1}))).await.0, 400);
        assert_eq!(c.call("post", events, events, Some(READER), Some(&ev)).await.0, 403);
        assert_eq!(c.call("post", events, events, None, Some(&ev)).await.0, 401);
        let big = json!({"type": "x", "data": {"pad": "a".repeat(300 * 1024)}});
        assert_eq!(c.call("post", events, events, t, Some(&big)).await.0, 413);

        let sms_id = accepted["intents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["channel"] == "sms")
            .map(|i| i["id"].as_str().unwrap().to_string())
            .unwrap();
        wait_state(&app, &sms_id, "sent").await;
        let one = "/v1/intents/{id}";
        c.call("get", one, &format!("/v1/intents/{sms_id}"), t, None).await;
        c.call("get", one, "/v1/intents/00000000000000000000000000000000", t, None).await;
        let list = "/v1/intents";
        c.call("get", list, "/v1/intents?entity=purchase_order:PO-OPENAPI-1&limit=1", t, None).await;
        c.call("get", list, "/v1/intents?state=nonsense", t, None).await;

        let inbox = "/v1/recipients/{id}/inbox";
        let (_, cards, _) = c.call("get", inbox, "/v1/recipients/u-1/inbox", t, None).await;
        let card = cards["cards"][0]["id"].as_str().expect("an in-app card").to_string();
        let read = "/v1/recipients/{id}/inbox/{card}/read";
        c.call("post", read, &format!("/v1/recipients/u-1/inbox/{card}/read"), t, None).await;
        c.call("post", read, "/v1/recipients/u-1/inbox/nope/read", t, None).await;

        // A dead letter: the provider refuses the number for good.
        let mut dead = sms_event("PO-OPENAPI-2", "+15550000999");
        dead["channels"] = json!(["sms"]);
        let (_, body, _) = c.call("post", events, events, t, Some(&dead)).await;
        let dead_id = body["intents"][0]["id"].as_str().unwrap().to_string();
        wait_state(&app, &dead_id, "dead").await;
        let dl = "/v1/dead-letters";
        let (_, letters, _) = c.call("get", dl, "/v1/dead-letters?reason=invalid_destination", t, None).await;
        assert_eq!(letters["dead_letters"].as_array().unwrap().len(), 1);
        c.call("get", dl, "/v1/dead-letters?all_tenants=true", t, None).await;
        c.call("get", dl, "/v1/dead-letters?since=yesterday", t, None).await;
        c.call("get", dl, "/v1/dead-letters", Some(READER), None).await;
        let summary = "/v1/dead-letters/summary";
        c.call("get", summary, summary, t, None).await;
        let replay = "/v1/dead-letters/replay";
        let (_, replayed, _) = c.call("post", replay, replay, t, Some(&json!({"ids": [dead_id, "missing"]}))).await;
        assert_eq!(replayed["skipped"][0]["reason"], "not_found");
        c.call("post", replay, replay, t, Some(&json!({"nothing": 1}))).await;
        c.call("post", "/v1/ops/dlq-digest", "/v1/ops/dlq-digest", t, None).await;
        c.call("post", "/v1/ops/dlq-digest", "/v1/ops/dlq-digest", Some(READER), None).await;

        // Receipts (not configured here: the endpoints say so) and the suppression list.
        let generic = "/v1/receipts/generic";
        c.call("post", generic, generic, None, Some(&json!({"key": dead_id, "status": "bounced"}))).await;
        let twilio = "/v1/receipts/twilio";
        c.call("post", twilio, &format!("{twilio}?key={dead_id}"), None, None).await;
        let ses = "/v1/receipts/ses";
        c.call("post", ses, ses, None, Some(&json!({"Type": "Notification"}))).await;
        let (_, list, _) = c.call("get", "/v1/suppressions", "/v1/suppressions?limit=10", t, None).await;
        assert_eq!(list["suppressions"], json!([]));
        c.call("get", "/v1/suppressions", "/v1/suppressions", Some(READER), None).await;
        let one = "/v1/suppressions/{id}";
        c.call("delete", one, "/v1/suppressions/0123456789abcdef01234567", t, None).await;
        c.call("delete", one, "/v1/suppressions/0123456789abcdef01234567", Some(READER), None).await;

        // Rejected bus messages: one recorded as the bus consumer would.
        let store = db.store().await;
        let row = herald::store::RejectedMessage {
            id: herald::store::RejectedMessage::id_of("orders", 7),
            tenant: "acme".into(),
            stream: "orders".into(),
            consumer: "herald".into(),
            subject: "orders.events".into(),
            stream_seq: 7,
            deliveries: 1,
            status: 400,
            code: "malformed_json".into(),
            message: "body is not valid JSON".into(),
            body: Some(r#"{"type":"x","recipients":[{"id":"u1","phone":"+9779800000042"}]}"#.into()),
            created_at: 1_700_000_000_000_000,
        };
        store.rejected_record(row.clone()).await.unwrap();
        c.call("get", "/v1/rejected", "/v1/rejected?limit=10", t, None).await;
        c.call("get", "/v1/rejected", "/v1/rejected", Some(READER), None).await;
        let rejected = "/v1/rejected/{id}";
        let (_, one, _) = c.call("get", rejected, &format!("/v1/rejected/{}", row.id), t, None).await;
        assert_eq!(one["body_format"], "json", "{one}");
        assert_eq!(one["body"]["recipients"][0]["id"], "u1", "{one}");
        assert!(!one["body"].to_string().contains("9800000042"), "{one}");
        c.call("get", rejected, "/v1/rejected/00000000000000000000000000000000", t, None).await;

        // The shadow report: the tenant's, every tenant's, refused params and scopes.
        let report = "/v1/shadow/report";
        c.call("get", report, report, t, None).await;
        c.call("get", report, "/v1/shadow/report?all_tenants=true&since=2026-11-29T00:00:00Z", t, None).await;
        c.call("get", report, "/v1/shadow/report?until=tomorrow", t, None).await;
        c.call("get", report, report, Some(READER), None).await;
        c.call("get", report, report, None, None).await;

        // The shadow comparison: a log as CSV and as JSON, and its refusals.
        let compare = "/v1/shadow/compare";
        let log = "time,channel,recipient_id,entity_type,entity_id,event_type\n\
                   2026-11-29T10:15:10Z,sms,u-1,purchase_order,PO-1,purchase_order.approved\n";
        let (s, _, _) = c.call_text(compare, compare, t, "text/csv", log).await;
        assert_eq!(s, 200);
        let rows = json!({"sends": [{"time": "2026-11-29T10:15:10Z", "channel": "sms", "destination": "+15550000100",
            "entity_type": "purchase_order", "entity_id": "PO-1"}]});
        let (s, _, _) = c.call("post", compare, compare, t, Some(&rows)).await;
        assert_eq!(s, 200);
        c.call_text(compare, compare, t, "text/csv", "time,channel\nyesterday,sms\n").await;
        c.call_text(compare, compare, t, "text/plain", log).await;
        c.call_text(compare, compare, Some(READER), "text/csv", log).await;
        c.call_text(compare, compare, None, "text/csv", log).await;
        c.call_text(compare, compare, t, "text/csv", &"x".repeat(17 * 1024 * 1024)).await;

        // The walk reached every operation.
        let reached: BTreeSet<(String, String)> = c.checked.iter().map(|(m, p, _)| (m.clone(), p.clone())).collect();
        assert_eq!(reached, operations(), "{backend:?}");
    }
}

/// The checks above are not vacuous: a body that contradicts the document is
/// caught, by type, by a missing field and by an enumeration.
#[test]
fn a_body_that_contradicts_the_document_is_caught() {
    let schema = |name: &str| json!({"$ref": format!("#/components/schemas/{name}")});
    let fails = |name: &str, v: Value| {
        let root = json!({"$defs": {"it": schema(name)}, "$ref": "#/$defs/it", "components": doc()["components"]});
        !jsonschema::draft202012::new(&root).unwrap().is_valid(&v)
    };
    let intent = json!({"id": "k", "key": "k", "channel": "sms", "recipient_id": "u", "decision": "send",
        "reason": null, "state": "queued", "created": true});
    assert!(!fails("EventAccepted", json!({"event_key": "e", "replayed": false, "intents": [intent]})));
    assert!(fails("EventAccepted", json!({"event_key": 1, "replayed": false, "intents": []})));
    assert!(fails("EventAccepted", json!({"replayed": false, "intents": []})));
    let mut bad = intent.clone();
    bad["state"] = json!("teleported");
    assert!(fails("EventAccepted", json!({"event_key": "e", "replayed": false, "intents": [bad]})));
}

#[test]
#[ignore]
fn print_the_document() {
    println!("{}", serde_json::to_string_pretty(doc()).unwrap());
}

/// Rejections axum makes by itself (found probing what the fuzzer reaches): a path
/// segment that is not UTF-8, a body over the limit on endpoints that read
/// plain bytes, a method a route does not take. Each is Herald's error body,
/// as documented, never axum's plain text.
#[tokio::test]
async fn what_axum_refuses_by_itself_still_answers_with_the_error_body() {
    let db = TestDb::new(common::Backend::Sqlite).await;
    let app = TestApp::new(&db).without_workers().with_toml(&auth_toml()).spawn().await;
    let mut c = Checker { app: &app, checked: BTreeSet::new() };
    let t = Some(TOKEN);
    for (method, template, path) in [
        ("get", "/v1/intents/{id}", "/v1/intents/%FF"),
        ("get", "/v1/recipients/{id}", "/v1/recipients/%FF"),
        ("put", "/v1/recipients/{id}", "/v1/recipients/%C3"),
        ("get", "/v1/recipients/{id}/preferences/{version}", "/v1/recipients/a/preferences/%FF"),
        ("get", "/v1/recipients/{id}/inbox", "/v1/recipients/%FF/inbox"),
        ("post", "/v1/recipients/{id}/inbox/{card}/read", "/v1/recipients/a/inbox/%FF/read"),
    ] {
        let (status, body, _) = c.call(method, template, path, t, Some(&json!({}))).await;
        assert_eq!(status, 400, "{method} {path}");
        assert_eq!(body["error"]["code"], "invalid_request", "{method} {path}");
        assert!(body["error"]["message"].as_str().unwrap().contains("UTF-8"), "{body}");
    }
    let big = json!({"email": "a".repeat(300 * 1024)});
    for (method, path) in [("put", "/v1/recipients/u-big"), ("post", "/v1/dead-letters/replay")] {
        let (status, body, _) = c.call(method, path.replace("u-big", "{id}").as_str(), path, t, Some(&big)).await;
        assert_eq!(status, 413, "{method} {path}");
        assert_eq!(body["error"]["code"], "payload_too_large");
        assert_eq!(body["error"]["message"], "request body is larger than 262144 bytes");
    }
    let resp = app.client.delete(format!("{}/v1/events", app.base)).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(resp.status(), 405);
    assert_eq!(resp.headers()["allow"], "POST");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "method_not_allowed");
}
