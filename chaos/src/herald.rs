//! Herald as it is deployed: `herald serve` in its own process, configured by
//! a TOML file, reached over HTTP. The suite starts, kills (-9), stops
//! (SIGTERM) and restarts these processes; it sees only their public surface.

use crate::services::signal;
use anyhow::{Context, bail};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::process::{Child, Command};

pub struct Node {
    pub name: String,
    pub port: u16,
    bin: PathBuf,
    config: PathBuf,
    log: PathBuf,
    /// `faketime` offset (e.g. `+90s`) this process runs under, if any.
    pub skew: Option<String>,
    child: Option<Child>,
    pub starts: u32,
    /// Starts that exited before the process was ready, tried again.
    pub failed_starts: u32,
}

impl Node {
    pub fn new(
        name: &str,
        bin: PathBuf,
        dir: &std::path::Path,
        config: String,
        port: u16,
        skew: Option<String>,
    ) -> anyhow::Result<Node> {
        let path = dir.join(format!("{name}.toml"));
        std::fs::write(&path, config)?;
        Ok(Node {
            name: name.into(),
            port,
            bin,
            config: path,
            log: dir.join(format!("{name}.log")),
            skew,
            child: None,
            starts: 0,
            failed_starts: 0,
        })
    }

    pub fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn is_up(&self) -> bool {
        self.child.is_some()
    }

    /// Starts the process as a supervisor would (`Restart=on-failure`):
    /// Herald refuses to start while its database is unreachable — during a
    /// Postgres restart, say — so a start that exits is tried again, up to
    /// five times a second apart. Each retry is counted in `failed_starts`.
    pub async fn start(&mut self) -> anyhow::Result<()> {
        let mut tries = 0;
        loop {
            match self.start_once().await {
                Ok(()) => return Ok(()),
                Err(_) if tries < 5 && self.child.is_none() => {
                    tries += 1;
                    self.failed_starts += 1;
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn start_once(&mut self) -> anyhow::Result<()> {
        let mut command = Command::new(&self.bin);
        if let Some(offset) = &self.skew {
            // libfaketime preloaded into Herald itself (not the `faketime`
            // wrapper, which forks: a kill -9 would reach the wrapper only).
            // Wall clock only: tokio's timers read the monotonic clock.
            command.env("LD_PRELOAD", libfaketime()?).env("FAKETIME", offset).env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
        }
        command.arg("serve").arg("--config").arg(&self.config);
        // The file is the whole config: no HERALD_… variable of this shell overrides it.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("HERALD_") {
                command.env_remove(name);
            }
        }
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log)?;
        command.stdin(Stdio::null()).stdout(log.try_clone()?).stderr(log).kill_on_drop(true);
        let child = command.spawn().with_context(|| format!("starting {}", self.bin.display()))?;
        self.child = Some(child);
        self.starts += 1;
        self.wait_ready().await
    }

    async fn wait_ready(&mut self) -> anyhow::Result<()> {
        let client = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(child) = self.child.as_mut()
                && let Some(status) = child.try_wait()?
            {
                self.child = None;
                bail!("{} exited ({status}) before it was ready:\n{}", self.name, self.log_tail());
            }
            if let Ok(r) = client.get(format!("{}/readyz", self.base())).timeout(Duration::from_secs(2)).send().await
                && r.status().is_success()
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("{} was not ready after 60s:\n{}", self.name, self.log_tail());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `kill -9`: no chance to finish or record anything.
    pub async fn kill9(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill().await?;
        }
        Ok(())
    }

    /// SIGTERM, then waits for the exit; returns what went wrong if it did
    /// not exit 0 within `within` (a process that does not is killed).
    pub async fn terminate(&mut self, within: Duration) -> anyhow::Result<Option<String>> {
        let Some(mut child) = self.child.take() else { return Ok(None) };
        if let Some(pid) = child.id() {
            signal(pid, "TERM").await?;
        }
        match tokio::time::timeout(within, child.wait()).await {
            Ok(status) => {
                let status = status?;
                Ok((!status.success())
                    .then(|| format!("{} exited {status} after SIGTERM:\n{}", self.name, self.log_tail())))
            }
            Err(_) => {
                child.kill().await?;
                Ok(Some(format!("{} was still running {within:?} after SIGTERM:\n{}", self.name, self.log_tail())))
            }
        }
    }

    /// The last lines the process logged, for an error message.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

/// Debian's libfaketime (package `faketime`), or `HERALD_CHAOS_LIBFAKETIME`.
pub fn libfaketime() -> anyhow::Result<PathBuf> {
    if let Ok(path) = std::env::var("HERALD_CHAOS_LIBFAKETIME") {
        return Ok(PathBuf::from(path));
    }
    [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
        "/usr/lib/faketime/libfaketime.so.1",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
    .context("no libfaketime: apt-get install faketime (or set HERALD_CHAOS_LIBFAKETIME), or pass --skew none")
}
