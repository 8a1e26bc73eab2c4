//! What the benchmarks share: their flags, the route they plan through, and a
//! scratch Postgres database created for one run and dropped after it.

#![allow(dead_code)] // each bench uses its own part of this

use herald::config::{DigestRoute, Route};
use sqlx::Connection;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The value after `--name` on the command line.
pub fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned())
}

/// An SMS route for `event` through the built-in `po_approved` template;
/// with `digest_key`, batched into hourly digests by that key.
pub fn sms_route(event: &str, digest_key: Option<&str>) -> Route {
    Route {
        event: event.into(),
        template: "po_approved".into(),
        channels: vec![herald::event::Channel::Sms],
        critical: false,
        skip_superseded: false,
        failover_on_unknown: false,
        digest: digest_key.map(|key| DigestRoute {
            window: Duration::from_secs(3600),
            key: key.into(),
            template: "po_approved".into(),
            channels: None,
        }),
        mode: None,
        caps: None,
        uncapped: false,
    }
}

pub struct Scratch {
    admin: sqlx::PgConnection,
    name: String,
    pub url: String,
}

static SCRATCH_COUNT: AtomicU64 = AtomicU64::new(0);

impl Scratch {
    /// A new database on the server of `--database-url` (else
    /// `HERALD_TEST_DATABASE_URL`, else the local Postgres).
    pub async fn create(prefix: &str) -> anyhow::Result<Scratch> {
        let admin_url = arg("--database-url")
            .or_else(|| std::env::var("HERALD_TEST_DATABASE_URL").ok())
            .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/postgres".into());
        Scratch::create_on(&admin_url, prefix).await
    }

    /// A new database on the server of `admin_url`, named
    /// `{prefix}_{pid}_{n}`, so [`sweep`] can find what this process made.
    pub async fn create_on(admin_url: &str, prefix: &str) -> anyhow::Result<Scratch> {
        let name = format!("{prefix}_{}_{}", std::process::id(), SCRATCH_COUNT.fetch_add(1, Ordering::Relaxed));
        let mut admin = sqlx::PgConnection::connect(admin_url).await?;
        sqlx::query(&format!("CREATE DATABASE {name}")).execute(&mut admin).await?;
        for (setting, value) in pg_settings()? {
            sqlx::query(&format!("ALTER DATABASE {name} SET {setting} = '{value}'")).execute(&mut admin).await?;
            eprintln!("scratch database {name}: {setting} = {value}");
        }
        let url = format!("{}/{name}", admin_url.rsplit_once('/').map_or(admin_url, |(b, _)| b));
        Ok(Scratch { admin, name, url })
    }

    pub async fn drop(mut self) {
        if let Err(e) = sqlx::query(&format!("DROP DATABASE {} WITH (FORCE)", self.name)).execute(&mut self.admin).await
        {
            eprintln!("could not drop {}: {e}", self.name);
        }
    }
}

/// `HERALD_BENCH_PG_SETTINGS=name=value,…`: settings for every scratch
/// database (`ALTER DATABASE … SET`), such as `log_min_duration_statement=0`
/// to log every statement a run makes for `scripts/pg-statements` to count.
fn pg_settings() -> anyhow::Result<Vec<(String, String)>> {
    let Ok(all) = std::env::var("HERALD_BENCH_PG_SETTINGS") else { return Ok(Vec::new()) };
    let plain = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
    (all.split(',').filter(|s| !s.trim().is_empty()))
        .map(|pair| match pair.trim().split_once('=') {
            Some((name, value)) if plain(name) && plain(value) => Ok((name.to_string(), value.to_string())),
            _ => anyhow::bail!("HERALD_BENCH_PG_SETTINGS: {pair:?} is not name=value (letters, digits, _ . -)"),
        })
        .collect()
}

/// Drops every database this process created with `prefix` and did not drop:
/// what a run that failed or was interrupted half-way left behind.
pub async fn sweep(admin_url: &str, prefix: &str) -> anyhow::Result<()> {
    let mut admin = sqlx::PgConnection::connect(admin_url).await?;
    let pattern = format!("{}\\_{}\\_%", prefix.replace('_', "\\_"), std::process::id());
    let names: Vec<String> = sqlx::query_scalar("SELECT datname FROM pg_database WHERE datname LIKE $1")
        .bind(pattern)
        .fetch_all(&mut admin)
        .await?;
    for name in names {
        sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).execute(&mut admin).await?;
    }
    Ok(())
}
