//! What the benchmarks share: their flags, and a scratch Postgres database
//! created for one run and dropped after it.

use sqlx::Connection;

/// The value after `--name` on the command line.
pub fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned())
}

pub struct Scratch {
    admin: sqlx::PgConnection,
    name: String,
    pub url: String,
}

impl Scratch {
    /// A new database on the server of `--database-url` (else
    /// `HERALD_TEST_DATABASE_URL`, else the local Postgres).
    pub async fn create(prefix: &str) -> anyhow::Result<Scratch> {
        let admin_url = arg("--database-url")
            .or_else(|| std::env::var("HERALD_TEST_DATABASE_URL").ok())
            .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/postgres".into());
        let name = format!("{prefix}_{}", std::process::id());
        let mut admin = sqlx::PgConnection::connect(&admin_url).await?;
        sqlx::query(&format!("CREATE DATABASE {name}")).execute(&mut admin).await?;
        let url = format!("{}/{name}", admin_url.rsplit_once('/').map_or(admin_url.as_str(), |(b, _)| b));
        Ok(Scratch { admin, name, url })
    }

    pub async fn drop(mut self) {
        if let Err(e) = sqlx::query(&format!("DROP DATABASE {} WITH (FORCE)", self.name)).execute(&mut self.admin).await
        {
            eprintln!("could not drop {}: {e}", self.name);
        }
    }
}
