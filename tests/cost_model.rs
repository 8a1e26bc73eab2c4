//! The cost model, measured: bytes per structured log line by kind, and per
//! intent and attempt row on Postgres, from a real run — the figures the
//! observability budget in docs/observability.md (*The cost model,
//! measured*) is computed from. Ignored by default (it prints figures
//! rather than checking behaviour); run it with
//!
//! ```text
//! HERALD_TEST_DATABASE_URL=postgres://… cargo test --test cost_model -- --ignored --nocapture
//! ```

mod common;

use common::capture::Capture;
use common::{Backend, FakeSms, Reply, TestApp, TestDb, backends, sms_event};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// The kind of one `intent` or `attempt` line, as the budget counts it.
fn kind(line: &Value) -> Option<String> {
    let f = &line["fields"];
    match f["message"].as_str()? {
        "intent" if f["outcome"] == "created" => Some(format!("intent created ({})", f["decision"].as_str()?)),
        "intent" => Some(format!("intent reused ({})", f["duplicate"].as_str()?)),
        "attempt" => Some(format!("attempt {} → {}", f["outcome"].as_str()?, f["next"].as_str()?)),
        _ => None,
    }
}

const N: usize = 200;

#[tokio::test]
#[ignore = "prints the cost model's figures; run with --ignored --nocapture"]
async fn measure_the_cost_model() {
    let capture = Capture::default();
    let _guard = capture.install(1.0);

    let backend = if backends().contains(&Backend::Postgres) { Backend::Postgres } else { Backend::Sqlite };
    let db = TestDb::new(backend).await;
    let sms = FakeSms::start().await;
    let app = TestApp::new(&db).with_sms(&sms).with_retry(3, "10ms", "20ms").spawn().await;
    let mut keys = Vec::new();
    for n in 0..N {
        let phone = format!("+1555{n:07}");
        // One in seven fails once first: retries are part of the mix.
        if n % 7 == 0 {
            sms.script(&phone, vec![Reply::status(503, json!({})), Reply::ok(&format!("m-{n}"))]);
        }
        let mut event = sms_event(&format!("PO-COST-{n}"), &phone);
        event["channels"] = json!(["sms", "in_app"]);
        let (status, body, _) = app.post_event(&event, Some(&format!("cost-{n}"))).await;
        assert_eq!(status, 202);
        keys.extend(body["intents"].as_array().unwrap().iter().map(|i| i["key"].as_str().unwrap().to_string()));
        if n % 10 == 0 {
            assert_eq!(app.post_event(&event, Some(&format!("cost-{n}"))).await.0, 200);
        }
    }
    for key in &keys {
        app.wait_state(key, &["sent"]).await;
    }
    app.running.stop().await;

    // Bytes per line (the JSON line and its newline), by kind.
    let text = capture.text();
    let mut lines: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for raw in text.lines() {
        let Ok(v) = serde_json::from_str::<Value>(raw) else { continue };
        if let Some(k) = kind(&v) {
            let e = lines.entry(k).or_default();
            e.0 += 1;
            e.1 += raw.len() + 1;
        }
    }
    println!("\nlog line bytes by kind ({backend:?}, {N} events, {} intents)", keys.len());
    for (k, (count, bytes)) in &lines {
        println!("  {k:<40} {count:>6} lines  {:>6} B/line", bytes / count);
    }

    if backend == Backend::Postgres {
        use sqlx::Connection;
        let mut conn = sqlx::PgConnection::connect(&db.url).await.unwrap();
        for table in ["intents", "attempts"] {
            let (rows, avg_row, total): (i64, f64, i64) = sqlx::query_as(&format!(
                "SELECT count(*), avg(pg_column_size(t.*))::float8, pg_total_relation_size('{table}') FROM {table} t"
            ))
            .fetch_one(&mut conn)
            .await
            .unwrap();
            println!(
                "  {table:<10} {rows:>6} rows  {avg_row:>6.0} B/row (tuple)  {:>6} B/row (table + indexes, shared out)",
                total / rows.max(1)
            );
        }
    }
}
