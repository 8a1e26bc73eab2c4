//! The query plans of the hot paths — ingest, replay, claim and record — on
//! tables that hold enough rows for the planner to choose. Every statement
//! Herald runs while it takes new events, replays repeats, refuses a conflict
//! and a mismatch, and delivers (a retry included) is caught as sqlx logs it,
//! then explained on the same database: none may scan `intents`, `jobs`,
//! `attempts`, `events` or `requests`, whole or by tenant alone. A scan by
//! tenant grows with the tenant: on SQLite the replay answer once read every
//! intent of the tenant, and a duplicate storm fell from 12,004 posts/s on a
//! fresh database to 463/s after 20,000 events.
//!
//! SQLite is explained as Herald leaves it (Herald never runs ANALYZE, so
//! the planner has no statistics) and again after ANALYZE; Postgres after
//! ANALYZE (autovacuum's steady state), with values of the kinds Herald
//! binds (the present for a time, a page of 32 for a limit).

mod common;

use common::{Backend, FakeSms, Reply, TestApp, TestDb, backends, execute, sms_event};
use serde_json::{Value, json};
use sqlx::{Connection, Row};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, OnceLock};
use tracing::field::{Field, Visit};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};

const HOT_TABLES: [&str; 5] = ["intents", "jobs", "attempts", "events", "requests"];
/// Each seeded row is copied this many times, spread over ten tenants.
const COPIES: i64 = 1000;

/// Every statement sqlx ran, as it logs them at DEBUG under `sqlx::query`.
#[derive(Clone, Default)]
struct Statements(Arc<Mutex<Vec<String>>>);

struct StatementVisitor {
    summary: String,
    statement: String,
}

impl Visit for StatementVisitor {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "summary" => self.summary = value.to_string(),
            "db.statement" => self.statement = value.to_string(),
            _ => {}
        }
    }
    fn record_debug(&mut self, _: &Field, _: &dyn std::fmt::Debug) {}
}

impl<S: tracing::Subscriber> Layer<S> for Statements {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        // SQLite's hot transactions run their statements directly, not through sqlx.
        if !matches!(event.metadata().target(), "sqlx::query" | "herald::sqlite::direct") {
            return;
        }
        let mut v = StatementVisitor { summary: String::new(), statement: String::new() };
        event.record(&mut v);
        // A statement shorter than its summary is logged as the summary alone.
        let sql = if v.statement.trim().is_empty() { v.summary } else { v.statement };
        self.0.lock().unwrap().push(sql.trim().to_string());
    }
}

impl Statements {
    /// Installed once for the whole process: SQLite runs its statements on a
    /// thread of its own, which a thread's default subscriber never sees.
    fn global() -> Statements {
        static ONE: OnceLock<Statements> = OnceLock::new();
        ONE.get_or_init(|| {
            let statements = Statements::default();
            let filter = tracing_subscriber::filter::Targets::new()
                .with_target("sqlx::query", tracing::Level::DEBUG)
                .with_target("herald::sqlite::direct", tracing::Level::DEBUG);
            let subscriber = tracing_subscriber::registry().with(statements.clone().with_filter(filter));
            tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
            statements
        })
        .clone()
    }

    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

/// The columns of a table, in order.
async fn columns(db: &TestDb, table: &str) -> Vec<String> {
    match db.backend {
        Backend::Sqlite => {
            let mut conn = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
            // Generated columns (intents.dead_at) are left out: they cannot be written.
            sqlx::query_scalar("SELECT name FROM pragma_table_xinfo(?) WHERE hidden = 0 ORDER BY cid")
                .bind(table)
                .fetch_all(&mut conn)
                .await
                .unwrap()
        }
        Backend::Postgres => {
            let mut conn = sqlx::PgConnection::connect(&db.url).await.unwrap();
            sqlx::query_scalar(
                "SELECT column_name::text FROM information_schema.columns
                 WHERE table_name = $1 AND is_generated = 'NEVER' ORDER BY ordinal_position",
            )
            .bind(table)
            .fetch_all(&mut conn)
            .await
            .unwrap()
        }
    }
}

/// Copies each row of `table` COPIES times: `unique` columns get a suffix,
/// `tenant` is spread over ten tenants (one of them the original), and
/// `shift` columns move a century on (jobs that no worker will claim now).
async fn multiply(db: &TestDb, table: &str, unique: &[&str], shift: &[&str]) {
    // An intent's number is the database's to give; a copied attempt or job
    // belongs to the copy of its intent.
    let cols: Vec<String> = columns(db, table).await.into_iter().filter(|c| c != "id").collect();
    let select: Vec<String> = cols
        .iter()
        .map(|c| match c.as_str() {
            "intent_id" => "(SELECT c.id FROM intents o JOIN intents c ON c.key = o.key || '-' || s.n
                             WHERE o.id = t.intent_id)"
                .to_string(),
            c if unique.contains(&c) => format!("t.{c} || '-' || s.n"),
            "tenant" => "CASE WHEN s.n % 10 = 0 THEN t.tenant ELSE t.tenant || '-' || (s.n % 10) END".to_string(),
            c if shift.contains(&c) => format!("t.{c} + 3155760000000000"),
            c => format!("t.{c}"),
        })
        .collect();
    execute(
        db,
        &format!(
            "WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < {COPIES})
             INSERT INTO {table} ({}) SELECT {} FROM {table} t, s",
            cols.join(", "),
            select.join(", ")
        ),
    )
    .await;
}

fn event(n: usize, total: &str) -> Value {
    let mut e = sms_event(&format!("PO-PLAN-{n}"), &format!("+1555000{n:04}"));
    e["data"]["po"]["total"] = json!(total);
    e
}

/// Whether a statement reads or writes one of the hot tables (not DDL, not
/// the migrations' own bookkeeping, not a transaction's edges).
fn touches_hot_table(sql: &str) -> bool {
    let lower = sql.to_lowercase();
    let verb = lower.split_whitespace().next().unwrap_or_default();
    matches!(verb, "select" | "insert" | "update" | "delete" | "with")
        && !lower.contains("_sqlx_migrations")
        && HOT_TABLES.iter().any(|t| lower.split(|c: char| !(c.is_alphanumeric() || c == '_')).any(|word| word == *t))
}

/// The scans of hot tables SQLite's plan for `sql` does, if any.
async fn sqlite_scans(conn: &mut sqlx::SqliteConnection, sql: &str) -> Result<Vec<String>, String> {
    let rows = sqlx::query(&format!("EXPLAIN QUERY PLAN {sql}"))
        .fetch_all(&mut *conn)
        .await
        .map_err(|e| format!("cannot explain: {e}"))?;
    let mut bad = Vec::new();
    for row in rows {
        let detail: String = row.get("detail");
        for table in HOT_TABLES {
            let scan = detail.starts_with(&format!("SCAN {table}"));
            // "SEARCH intents USING INDEX intents_by_recipient (tenant=?)":
            // an index searched by its tenant alone reads the whole tenant.
            let by_tenant = detail.starts_with(&format!("SEARCH {table} "))
                && detail.rsplit_once('(').is_some_and(|(_, cond)| {
                    cond.trim_end_matches(')').split(" AND ").all(|c| c.starts_with("tenant"))
                });
            if scan || by_tenant {
                bad.push(detail.clone());
            }
        }
    }
    Ok(bad)
}

/// A value for each parameter of the prepared statement `hot`, of its type:
/// a page of 32 where it is a LIMIT, the present for a time, one element for
/// an array (the set-wise statements take a batch).
async fn postgres_values(conn: &mut sqlx::PgConnection, sql: &str, now_us: i64) -> Vec<String> {
    let types: Vec<String> =
        sqlx::query_scalar("SELECT unnest(parameter_types)::text FROM pg_prepared_statements WHERE name = 'hot'")
            .fetch_all(&mut *conn)
            .await
            .unwrap();
    let compact = sql.split_whitespace().collect::<Vec<_>>().join(" ");
    types
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let limit = compact.contains(&format!("LIMIT ${}", i + 1));
            let one = |t: &str| match t {
                "bigint" | "integer" if limit => "32".to_string(),
                "bigint" | "integer" => now_us.to_string(),
                "boolean" => "false".to_string(),
                "jsonb" | "json" => "'{}'".to_string(),
                // The tenant Herald's tests post as, and no key or identity that exists.
                _ => "'default'".to_string(),
            };
            match t.strip_suffix("[]") {
                Some(element) => format!("ARRAY[{}]::{t}", one(element)),
                None => one(t),
            }
        })
        .collect()
}

/// The scans of hot tables Postgres's plan for `sql` does, if any: the plan
/// it makes for values like the ones Herald binds (a custom plan, which is
/// what a prepared statement keeps while the generic one costs more).
async fn postgres_scans(conn: &mut sqlx::PgConnection, sql: &str, now_us: i64) -> Result<Vec<String>, String> {
    // The simple protocol: these must not become sqlx's own prepared statements.
    sqlx::raw_sql(&format!("PREPARE hot AS {sql}"))
        .execute(&mut *conn)
        .await
        .map_err(|e| format!("cannot prepare: {e}"))?;
    let values = postgres_values(conn, sql, now_us).await;
    let execute = match values.is_empty() {
        true => "EXECUTE hot".to_string(),
        false => format!("EXECUTE hot({})", values.join(", ")),
    };
    let explained = sqlx::raw_sql(&format!("EXPLAIN (FORMAT JSON) {execute}")).fetch_one(&mut *conn).await;
    sqlx::raw_sql("DEALLOCATE hot").execute(&mut *conn).await.unwrap();
    let plan: Value = explained.map_err(|e| format!("cannot explain: {e}"))?.get::<sqlx::types::Json<Value>, _>(0).0;
    let indexes: Vec<(String, String)> =
        sqlx::query_as("SELECT indexname::text, tablename::text FROM pg_indexes WHERE schemaname = 'public'")
            .fetch_all(&mut *conn)
            .await
            .unwrap();
    let table_of = |node: &Value| -> Option<String> {
        node["Relation Name"].as_str().map(str::to_string).or_else(|| {
            let index = node["Index Name"].as_str()?;
            indexes.iter().find(|(i, _)| i == index).map(|(_, t)| t.clone())
        })
    };
    let mut bad = Vec::new();
    let mut stack = vec![plan[0]["Plan"].clone()];
    while let Some(node) = stack.pop() {
        if let Some(children) = node["Plans"].as_array() {
            stack.extend(children.iter().cloned());
        }
        let kind = node["Node Type"].as_str().unwrap_or_default();
        let Some(table) = table_of(&node).filter(|t| HOT_TABLES.contains(&t.as_str())) else { continue };
        let cond = node["Index Cond"].as_str().unwrap_or_default();
        let whole = kind == "Seq Scan" || (kind.contains("Index") && cond.is_empty() && kind != "Bitmap Heap Scan");
        // "(tenant = $2)" and nothing else: the whole tenant.
        let by_tenant = !cond.is_empty()
            && cond.trim_matches(|c| c == '(' || c == ')').split(" AND ").all(|c| {
                c.trim_start_matches('(').starts_with("tenant ")
                    || c.trim_start_matches('(').starts_with(&format!("{table}.tenant "))
            });
        if whole || by_tenant {
            bad.push(format!("{kind} on {table} {}", node["Index Name"].as_str().unwrap_or_default()) + " " + cond);
        }
    }
    Ok(bad)
}

/// Every hot-path statement, explained; a list of what scans.
async fn explain_all(db: &TestDb, statements: &BTreeSet<String>) -> Vec<String> {
    let mut failures = Vec::new();
    match db.backend {
        Backend::Sqlite => {
            let mut conn = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
            for sql in statements {
                match sqlite_scans(&mut conn, sql).await {
                    Ok(bad) if bad.is_empty() => {}
                    Ok(bad) => failures.push(format!("{bad:?}\n    in: {sql}")),
                    Err(e) => failures.push(format!("{e}\n    in: {sql}")),
                }
            }
        }
        Backend::Postgres => {
            let mut conn = sqlx::PgConnection::connect(&db.url).await.unwrap();
            sqlx::query("SET plan_cache_mode = force_custom_plan").execute(&mut conn).await.unwrap();
            let now_us = jiff::Timestamp::now().as_microsecond();
            for sql in statements {
                match postgres_scans(&mut conn, sql, now_us).await {
                    Ok(bad) if bad.is_empty() => {}
                    Ok(bad) => failures.push(format!("{bad:?}\n    in: {sql}")),
                    Err(e) => failures.push(format!("{e}\n    in: {sql}")),
                }
            }
        }
    }
    failures
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_hot_path_query_scans_a_table_or_a_whole_tenant() {
    let statements = Statements::global();
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let sms = FakeSms::start().await;
        let app = TestApp::new(&db).with_sms(&sms).spawn().await;

        // Rows of every kind, made by Herald itself, then copied a thousand
        // times over ten tenants.
        for n in 0..20 {
            let (status, body, _) = app.post_event(&event(n, "1,20,000"), Some(&format!("seed-{n}"))).await;
            assert_eq!(status, 202, "{body}");
            app.wait_state(body["intents"][0]["id"].as_str().unwrap(), &["sent"]).await;
        }
        multiply(&db, "intents", &["key"], &[]).await;
        multiply(&db, "attempts", &[], &[]).await;
        multiply(&db, "events", &["event_key"], &[]).await;
        multiply(&db, "requests", &["identity"], &[]).await;
        execute(
            &db,
            "INSERT INTO jobs (intent_id, tenant, run_at) SELECT id, tenant, updated_at + 3155760000000000
             FROM intents WHERE key LIKE '%-%'",
        )
        .await;
        if backend == Backend::Postgres {
            execute(&db, "ANALYZE").await;
        }
        statements.take();

        // The hot paths: new events, a retry after a 503, exact repeats under
        // both identities, a changed body (409) and a reused key (422).
        sms.script("+15550000100", vec![Reply::status(503, json!({})), Reply::ok("m-100")]);
        let mut ids = Vec::new();
        for n in 100..104 {
            let (status, body, _) = app.post_event(&event(n, "1,20,000"), Some(&format!("hot-{n}"))).await;
            assert_eq!(status, 202, "{body}");
            ids.push(body["intents"][0]["id"].as_str().unwrap().to_string());
            let (status, body, _) = app.post_event(&event(n, "1,20,000"), Some(&format!("hot-{n}"))).await;
            assert_eq!(status, 200, "a replay: {body}");
            let (status, body, _) = app.post_event(&event(n, "1,20,000"), None).await;
            assert_eq!(status, 200, "an exact repeat under the event key: {body}");
            let (status, body, _) = app.post_event(&event(n, "9"), None).await;
            assert_eq!(status, 409, "a changed body: {body}");
            let (status, body, _) = app.post_event(&event(n, "9"), Some(&format!("hot-{n}"))).await;
            assert_eq!(status, 422, "a reused key: {body}");
        }
        for id in &ids {
            app.wait_state(id, &["sent"]).await;
        }
        app.running.stop().await;

        let caught: BTreeSet<String> = statements.take().into_iter().filter(|s| touches_hot_table(s)).collect();
        assert!(caught.len() >= 5, "{backend:?}: the hot paths' statements were caught: {caught:#?}");
        let mut failures = explain_all(&db, &caught).await;
        if backend == Backend::Sqlite {
            execute(&db, "ANALYZE").await;
            failures.extend(explain_all(&db, &caught).await.into_iter().map(|f| format!("after ANALYZE: {f}")));
        }
        assert!(
            failures.is_empty(),
            "{backend:?}: {} of {} hot-path statements scan a hot table or a whole tenant:\n{}",
            failures.len(),
            caught.len(),
            failures.join("\n")
        );
        eprintln!("{backend:?}: {} hot-path statements explained, none scans:", caught.len());
        for sql in &caught {
            eprintln!("  {}", sql.split_whitespace().collect::<Vec<_>>().join(" "));
        }
    }
}
