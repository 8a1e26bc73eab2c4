//! Herald as it is deployed: the `herald serve` binary in its own process,
//! configured by a TOML file, reached over HTTP on loopback. Its own process,
//! so that its peak RSS is Herald's alone — not the load generator's, the fake
//! provider's or the limit runs' — and so that the benchmark sees only
//! Herald's public surface (the command, the config, the API).

use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Herald {
    child: Child,
    pub base: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

/// The config: Herald's defaults (32 workers, info logs) except an SMS
/// provider on loopback and retries quick enough that a refused first try is
/// retried within the run (the default base of 30s would only measure the wait).
fn config(listen: &str, database_url: &str, sms_url: &str) -> String {
    format!(
        r#"listen = "{listen}"
database_url = "{database_url}"
dedupe_window = "24h"
[retry]
attempts = 6
base = "100ms"
max = "2s"
[[routes]]
event = "purchase_order.approved"
template = "po_approved"
channels = ["sms"]
[channels.sms]
url = "{sms_url}"
"#
    )
}

impl Herald {
    /// `herald serve` with [`config`] and `extra` TOML appended to it (the
    /// bus benchmark's `[[ingest.nats]]`, a process without workers).
    pub async fn start_with(database_url: &str, sms_url: &str, extra: &str) -> anyhow::Result<Herald> {
        let dir = tempfile::tempdir()?;
        // A free port: the OS picks it, Herald binds it a moment later.
        let listen = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.to_string();
        let config_path = dir.path().join("herald.toml");
        std::fs::write(&config_path, config(&listen, database_url, sms_url) + extra)?;
        let log = dir.path().join("herald.log");
        // Another build of Herald (an earlier commit's, for a before/after
        // comparison in one sitting) can be named; by default it is this one.
        let bin = std::env::var_os("HERALD_BENCH_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_herald").into());
        let mut command = Command::new(bin);
        command.arg("serve").arg("--config").arg(&config_path);
        // The file is the whole config: no HERALD_… variable of this shell overrides it.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("HERALD_") {
                command.env_remove(name);
            }
        }
        let logfile = std::fs::File::create(&log)?;
        command.stdin(Stdio::null()).stdout(logfile.try_clone()?).stderr(logfile);
        let child = command.spawn()?;
        let mut herald = Herald { child, base: format!("http://{listen}"), log, _dir: dir };
        herald.wait_ready().await?;
        Ok(herald)
    }

    async fn wait_ready(&mut self) -> anyhow::Result<()> {
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait()? {
                anyhow::bail!("herald serve exited ({status}) before it was ready:\n{}", self.log_tail());
            }
            if let Ok(r) = client.get(format!("{}/readyz", self.base)).send().await
                && r.status().is_success()
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                anyhow::bail!("herald serve was not ready after 60s:\n{}", self.log_tail());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The last lines Herald logged, for an error message.
    fn log_tail(&self) -> String {
        let mut text = String::new();
        let _ = std::fs::File::open(&self.log).and_then(|mut f| f.read_to_string(&mut text));
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The process's peak resident set since it started (`VmHWM`).
    pub fn peak_rss_bytes(&self) -> anyhow::Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))?;
        let kib = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .ok_or_else(|| anyhow::anyhow!("no VmHWM in /proc/{}/status", self.child.id()))?;
        Ok(kib * 1024)
    }
}

impl Drop for Herald {
    /// The figures are taken by now, and the database is thrown away next:
    /// nothing a graceful shutdown would save.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
