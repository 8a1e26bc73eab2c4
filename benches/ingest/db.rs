//! A fresh database for every run, and its removal afterwards.

use crate::common::Scratch;
use anyhow::Context;

/// Scratch databases are named `{PREFIX}_{pid}_{n}`; what an interrupted
/// run leaves is swept by that name at exit.
pub const PREFIX: &str = "herald_bench_ingest";

#[derive(Clone, Debug, PartialEq)]
pub enum Backend {
    /// A server; the admin URL names a database to connect to for CREATE / DROP.
    Postgres {
        admin_url: String,
    },
    Sqlite,
}

impl Backend {
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Postgres { .. } => "Postgres",
            Backend::Sqlite => "SQLite",
        }
    }

    pub async fn fresh(&self) -> anyhow::Result<FreshDb> {
        match self {
            Backend::Postgres { admin_url } => {
                let scratch = Scratch::create_on(admin_url, PREFIX).await.with_context(|| {
                    format!(
                        "a scratch database on {} (--pg, HERALD_BENCH_DATABASE_URL)",
                        herald::app::redact_url(admin_url)
                    )
                })?;
                Ok(FreshDb { url: scratch.url.clone(), scratch: Some(scratch), _dir: None })
            }
            Backend::Sqlite => {
                let dir = tempfile::tempdir()?;
                let url = format!("sqlite://{}", dir.path().join("herald.db").display());
                Ok(FreshDb { url, scratch: None, _dir: Some(dir) })
            }
        }
    }

    /// A fresh database with Herald's schema on it, for the limit.
    pub async fn fresh_migrated(&self) -> anyhow::Result<FreshDb> {
        let db = self.fresh().await?;
        let migrated = async {
            let store = herald::store::connect(&db.url).await?;
            store.migrate().await
        };
        match migrated.await {
            Ok(()) => Ok(db),
            Err(e) => {
                db.dispose().await;
                Err(e.into())
            }
        }
    }
}

pub struct FreshDb {
    pub url: String,
    scratch: Option<Scratch>,
    _dir: Option<tempfile::TempDir>,
}

impl FreshDb {
    pub async fn dispose(self) {
        if let Some(s) = self.scratch {
            s.drop().await;
        }
    }
}
