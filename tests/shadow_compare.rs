//! The shadow comparison end to end, on every backend: Herald in shadow mode
//! takes a tenant's events (one recipient opted out of SMS, one event type
//! without a route), and `POST /v1/shadow/compare` matches an old notifier's
//! send log to its intents — sent by both, only by the old notifier (opted
//! out, no route), only by Herald, and the old notifier's duplicates — with
//! no address in clear; the log's mistakes named by line and column, and the
//! endpoint scoped as the shadow report is.

mod common;
#[path = "console/support.rs"]
mod support;

use common::{FakeSms, Spawned, TestApp, TestClock, TestDb, backends};
use serde_json::{Value, json};
use support::{tokens_toml, wait_state};

const OPS: &str = "tok-ops-acme";
const OPS_GLOBEX: &str = "tok-ops-globex";
const WRITER: &str = "tok-writer-acme";
const WRITER_GLOBEX: &str = "tok-writer-globex";
const ADMIN: &str = "tok-admin";

fn tokens() -> String {
    tokens_toml(&[
        ("ops-acme", "acme", OPS, &["ops"]),
        ("ops-globex", "globex", OPS_GLOBEX, &["ops"]),
        ("erp-acme", "acme", WRITER, &["events:write", "intents:read", "recipients:write"]),
        ("erp-globex", "globex", WRITER_GLOBEX, &["events:write", "intents:read"]),
        ("admin", "ops", ADMIN, &["admin"]),
    ])
}

/// The old notifier's log for 10:15 on 29 November: PO-1's SMS to u-1 three
/// times, its in-app card once; PO-2's SMS to u-2 (who opted out of SMS);
/// PO-3's SMS to u-3 known only by the number; an invoice Herald has no route for.
pub const LOG: &str = "\
time,channel,recipient_id,destination,entity_type,entity_id,event_type
2026-11-29T10:15:10Z,sms,u-1,,purchase_order,PO-1,purchase_order.approved
2026-11-29T10:15:40Z,sms,u-1,,purchase_order,PO-1,purchase_order.approved
2026-11-29T10:16:10Z,sms,u-1,,purchase_order,PO-1,purchase_order.approved
2026-11-29T10:15:10Z,in_app,u-1,,purchase_order,PO-1,purchase_order.approved
2026-11-29T10:15:12Z,sms,u-2,,purchase_order,PO-2,purchase_order.approved
2026-11-29T10:15:15Z,sms,,+9779800000003,purchase_order,PO-3,purchase_order.approved
2026-11-29T10:15:20Z,email,u-1,,invoice,INV-7,invoice.paid
";

fn event(po: &str, recipient: &str, phone: &str) -> Value {
    json!({
        "type": "purchase_order.approved",
        "entity": {"type": "purchase_order", "id": po, "version": 1},
        "occurred_at": "2026-11-29T10:15:00Z",
        "data": {"po": {"number": po, "total": "1,20,000"}, "approver": {"name": "Asha"}},
        "recipients": [{"id": recipient, "phone": phone}]
    })
}

async fn post(app: &Spawned, token: &str, body: &Value) -> (u16, Value) {
    let resp = app.client.post(format!("{}/v1/events", app.base)).bearer_auth(token).json(body).send().await.unwrap();
    (resp.status().as_u16(), resp.json().await.unwrap_or(Value::Null))
}

/// Acme's morning in shadow mode (the clock at the events' time, as when
/// Herald runs beside the old notifier), and one event of globex's.
async fn acme_in_shadow(db: &TestDb, sms: &FakeSms) -> Spawned {
    let clock = TestClock::at("2026-11-29T10:15:05Z");
    let app = TestApp::new(db).with_sms(sms).with_mode("shadow").with_clock(clock).with_toml(&tokens()).spawn().await;
    let prefs = json!({"phone": "+9779800000002", "preferences": {"channels": {"sms": false}}});
    let resp = app
        .client
        .put(format!("{}/v1/recipients/u-2", app.base))
        .bearer_auth(WRITER)
        .json(&prefs)
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{}", resp.text().await.unwrap());
    let mut keys = Vec::new();
    for (po, recipient, phone) in
        [("PO-1", "u-1", "+9779800000001"), ("PO-2", "u-2", "+9779800000002"), ("PO-3", "u-3", "+9779800000003")]
    {
        let (status, answer) = post(&app, WRITER, &event(po, recipient, phone)).await;
        assert_eq!(status, 202, "{answer}");
        keys.extend(answer["intents"].as_array().unwrap().iter().map(|i| i["key"].as_str().unwrap().to_string()));
    }
    let mut invoice = event("INV-7", "u-1", "+9779800000001");
    invoice["type"] = json!("invoice.paid");
    invoice["entity"] = json!({"type": "invoice", "id": "INV-7"});
    assert_eq!(post(&app, WRITER, &invoice).await.0, 422, "no route for invoices");
    let (status, theirs) = post(&app, WRITER_GLOBEX, &event("PO-1", "u-1", "+9779800000001")).await;
    assert_eq!(status, 202, "{theirs}");
    for key in &keys {
        wait_state(&app.base, WRITER, key, &["shadowed", "suppressed"]).await;
    }
    app
}

async fn compare(
    app: &Spawned,
    token: &str,
    query: &str,
    content_type: &str,
    body: impl Into<reqwest::Body>,
) -> (u16, Value) {
    let resp = app
        .client
        .post(format!("{}/v1/shadow/compare{query}", app.base))
        .bearer_auth(token)
        .header("content-type", content_type)
        .body(body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    assert!(!text.contains("9800000003"), "an address in clear: {text}");
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// The comparison's verdicts, without the lists' times and keys.
fn verdicts(c: &Value) -> Value {
    let notification = |n: &Value| {
        json!([n["channel"], n["entity"]["id"], n["recipient"], n["sends"], n["reason"], n["herald"]["state"]])
    };
    let list = |v: &Value| v.as_array().unwrap().iter().map(notification).collect::<Vec<_>>();
    let mut only_herald: Vec<Value> = (c["only_herald"]["listed"].as_array().unwrap().iter())
        .map(|i| json!([i["channel"], i["entity"]["id"], i["recipient"]["id"], i["state"]]))
        .collect();
    // Planned at the same instant (the test's clock stands still): in key order.
    only_herald.sort_by_key(|i| i.to_string());
    json!({
        "sends": c["sends"], "both": c["both"], "only_old": list(&c["only_old"]["listed"]),
        "by_reason": c["only_old"]["by_reason"], "only_herald": only_herald,
        "duplicates": list(&c["duplicates"]["listed"]), "by_recipient": c["duplicates"]["by_recipient"],
    })
}

#[tokio::test]
async fn a_send_log_is_matched_to_herald_s_intents_category_by_category() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let app = acme_in_shadow(&db, &sms).await;

        let (status, c) = compare(&app, OPS, "", "text/csv", LOG).await;
        assert_eq!(status, 200, "{backend:?}: {c}");
        assert_eq!(c["tenant"], "acme");
        assert_eq!(
            (c["since"].as_str(), c["until"].as_str()),
            (Some("2026-11-29T10:05:10Z"), Some("2026-11-29T10:16:10.000001Z"))
        );
        let want = json!({
            "sends": {"read": 7, "in_range": 7, "outside_range": 0},
            "both": {"notifications": 3, "by_channel": {"in_app": 1, "sms": 2}, "held_first": 0, "in_digest": 0},
            "only_old": [
                ["sms", "PO-2", {"id": "u-2"}, 1, "opted_out", "suppressed"],
                ["email", "INV-7", {"id": "u-1"}, 1, "no_route", null],
            ],
            "by_reason": [{"reason": "no_route", "notifications": 1}, {"reason": "opted_out", "notifications": 1}],
            "only_herald": [["in_app", "PO-2", "u-2", "shadowed"], ["in_app", "PO-3", "u-3", "shadowed"]],
            "duplicates": [["sms", "PO-1", {"id": "u-1"}, 3, null, "shadowed"]],
            "by_recipient": [{"recipient": {"id": "u-1"}, "channel": "sms", "notifications": 1, "sends": 3, "extra_sends": 2, "most": 3}],
        });
        assert_eq!(verdicts(&c), want, "{backend:?}: {c:#}");
        let opted_out = &c["only_old"]["listed"][0];
        assert_eq!(opted_out["detail"], "\"channels\": {\"sms\": false} in preferences v1", "{opted_out}");
        let unrouted = &c["only_old"]["listed"][1]["detail"];
        assert!(unrouted.as_str().unwrap().starts_with("Herald planned nothing for this event"), "{unrouted}");
        let po1 = &c["duplicates"]["listed"][0];
        assert_eq!(
            (po1["first_at"].as_str(), po1["last_at"].as_str()),
            (Some("2026-11-29T10:15:10Z"), Some("2026-11-29T10:16:10Z"))
        );
        let key = po1["herald"]["key"].as_str().unwrap();
        let resp = app.client.get(format!("{}/v1/intents/{key}", app.base)).bearer_auth(WRITER).send().await.unwrap();
        let intent: Value = resp.json().await.unwrap();
        assert_eq!((intent["entity"]["id"].as_str(), intent["channel"].as_str()), (Some("PO-1"), Some("sms")));

        // The same log as JSON Lines, and as a JSON body, compares alike.
        let lines = common::send_log::csv_to_jsonl(LOG);
        let (status, jsonl) = compare(&app, OPS, "", "application/x-ndjson", lines.clone()).await;
        assert_eq!((status, verdicts(&jsonl)), (200, want.clone()), "{backend:?}");
        let rows: Vec<Value> = lines.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let body = json!({"sends": rows}).to_string();
        let (status, json_body) = compare(&app, OPS, "", "application/json", body).await;
        assert_eq!((status, verdicts(&json_body)), (200, want), "{backend:?}");

        // A narrower range leaves PO-1's last SMS outside.
        let (status, narrow) =
            compare(&app, OPS, "?since=2026-11-29T10:15:00Z&until=2026-11-29T10:16:00Z", "text/csv", LOG).await;
        assert_eq!(status, 200, "{narrow}");
        assert_eq!(narrow["sends"], json!({"read": 7, "in_range": 6, "outside_range": 1}));
        assert_eq!(narrow["duplicates"]["extra_sends"], 1);

        // The deployment operator compares acme's when naming it.
        let (status, by_admin) = compare(&app, ADMIN, "?tenant=acme", "text/csv", LOG).await;
        assert_eq!((status, by_admin["both"]["notifications"].as_i64()), (200, Some(3)), "{by_admin}");
        app.running.stop().await;
    }
}

#[tokio::test]
async fn the_comparison_is_the_callers_tenants_and_bad_input_is_named() {
    let db = TestDb::new(backends()[0]).await;
    let sms = FakeSms::start().await;
    let app = acme_in_shadow(&db, &sms).await;
    let refused = [
        (OPS, "?tenant=globex", 403, "forbidden", "this token lacks the admin scope"),
        (WRITER, "", 403, "forbidden", "this token lacks the ops scope"),
        (ADMIN, "?all_tenants=true", 400, "invalid_field", "all_tenants: a send log is compared with one tenant's"),
        (OPS, "?windw=5m", 400, "invalid_field", "windw: unknown query parameter"),
        (OPS, "?window=5", 400, "invalid_field", "window: 5 has no unit"),
        (OPS, "?limit=0", 400, "invalid_field", "limit: must be 1 to 10000"),
        (OPS, "?since=yesterday", 400, "invalid_field", "since: must be an RFC 3339 timestamp"),
        (OPS, "?time_format=iso", 400, "invalid_field", "time_format: \"iso\" must be"),
        (OPS, "?channel_aliases=mail", 400, "invalid_field", "channel_aliases: \"mail\" must be NAME:CHANNEL"),
        (OPS, "?time_column=sent_at", 400, "invalid_field", "sends line 1: no column \"sent_at\" for the time"),
    ];
    for (token, query, status, code, message) in refused {
        let (got, body) = compare(&app, token, query, "text/csv", LOG).await;
        assert_eq!(got, status, "{query}: {body}");
        assert_eq!(body["error"]["code"], code, "{query}: {body}");
        let text = body["error"]["message"].as_str().unwrap();
        assert!(text.starts_with(message), "{query}: {text}");
    }
    let bad = LOG.replacen("2026-11-29T10:15:40Z", "yesterday", 1);
    let (status, body) = compare(&app, OPS, "", "text/csv", bad).await;
    assert_eq!(status, 400, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("sends line 3: time: must be an RFC 3339 timestamp"), "{message}");
    let (status, body) = compare(&app, OPS, "", "text/plain", LOG).await;
    assert_eq!((status, body["error"]["code"].as_str()), (415, Some("unsupported_media_type")), "{body}");
    let big = format!("{LOG}{}", "x".repeat(17 * 1024 * 1024));
    let (status, body) = compare(&app, OPS, "", "text/csv", big).await;
    assert_eq!((status, body["error"]["code"].as_str()), (413, Some("payload_too_large")), "{body}");
    // Mapped columns and the old notifier's channel names.
    let renamed = LOG.replace("time,channel", "sent_at,medium").replace(",sms,", ",text,");
    let (status, c) =
        compare(&app, OPS, "?time_column=sent_at&channel_column=medium&channel_aliases=text:sms", "text/csv", renamed)
            .await;
    assert_eq!((status, c["both"]["notifications"].as_i64()), (200, Some(3)), "{c}");
    // Globex's ops compares with globex's intents: its PO-1, none of acme's.
    let (status, c) = compare(&app, OPS_GLOBEX, "", "text/csv", LOG).await;
    assert_eq!(status, 200, "{c}");
    assert_eq!((c["tenant"].as_str(), c["both"]["notifications"].as_i64()), (Some("globex"), Some(2)), "{c}");
    assert_eq!(c["only_old"]["by_reason"], json!([{"reason": "no_route", "notifications": 3}]), "{c}");
    app.running.stop().await;
}
