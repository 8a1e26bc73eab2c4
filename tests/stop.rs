//! `herald serve` stopped by SIGTERM, as an orchestrator stops it, at the
//! moments of its life an orchestrator may pick: each a clean exit (status 0),
//! never the signal's default action. The fault suite once sent one right
//! after the readiness probe passed, before the process listened for it.

mod common;

use common::serve::Serve;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn config(dir: &Path) -> PathBuf {
    let path = dir.join("herald.toml");
    let text = format!(
        "listen = \"127.0.0.1:0\"\ndatabase_url = \"sqlite://{}\"\n[log]\nformat = \"json\"\n",
        dir.join("herald.db").display()
    );
    std::fs::write(&path, text).expect("config written");
    path
}

/// Waits until its log has a line whose message is `message`.
async fn logged(herald: &mut Serve, message: &str) {
    let said = |log: String| {
        log.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .any(|v| v["fields"]["message"] == message)
    };
    for _ in 0..1200 {
        if said(herald.log()) {
            return;
        }
        herald.assert_running(&format!("logging {message:?}"));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("herald serve never logged {message:?}: {}", herald.log());
}

#[tokio::test]
async fn a_stop_while_it_starts_is_a_clean_exit() {
    let dir = tempfile::tempdir().unwrap();
    let mut herald = Serve::start(&config(dir.path()), &dir.path().join("herald.log"), &[]);
    // Logged before the database is opened and its migrations run.
    logged(&mut herald, "configuration read").await;
    herald.stop().await;
}

#[tokio::test]
async fn a_stop_as_soon_as_it_listens_is_a_clean_exit() {
    let dir = tempfile::tempdir().unwrap();
    let mut herald = Serve::start(&config(dir.path()), &dir.path().join("herald.log"), &[]);
    herald.addr().await;
    herald.stop().await;
}
