//! `herald serve` as a child process, for what only another process shows:
//! a crash between a commit and an ack, spans flushed at shutdown, two
//! processes sharing one trace. Killed when dropped, however the test ends.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

pub struct Serve {
    child: Child,
    log: PathBuf,
}

impl Serve {
    /// `herald serve --config CONFIG`, its stderr written to `log`, with
    /// `env` set and the test's own `OTEL_*` exporter and `HERALD_LOG`
    /// variables removed (the config says what the process does).
    pub fn start(config: &Path, log: &Path, env: &[(&str, &str)]) -> Serve {
        let file = std::fs::File::create(log).expect("log file");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_herald"));
        cmd.arg("serve").arg("--config").arg(config).stdout(Stdio::null()).stderr(file);
        for name in
            ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED", "HERALD_LOG"]
        {
            cmd.env_remove(name);
        }
        cmd.envs(env.iter().copied());
        Serve { child: cmd.spawn().expect("herald serve starts"), log: log.to_path_buf() }
    }

    /// What it has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The address it listens on, once its log says so (`[log] format = "json"`).
    pub async fn addr(&mut self) -> String {
        for _ in 0..1200 {
            let listening = self.log().lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).find_map(|v| {
                (v["fields"]["message"] == "herald is listening")
                    .then(|| v["fields"]["addr"].as_str().map(String::from))
            });
            if let Some(addr) = listening.flatten() {
                return addr;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("herald serve exited before listening ({status}): {}", self.log());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("herald serve never said where it listens: {}", self.log());
    }

    /// Its exit status, if it exits within `limit`.
    pub async fn exited(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = std::time::Instant::now() + limit;
        while std::time::Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return Some(status);
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        None
    }

    /// Whether it is still running; a panic with its log if it exited.
    pub fn assert_running(&mut self, doing: &str) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("herald exited before {doing} ({status}): {}", self.log());
        }
    }

    /// SIGTERM, as an orchestrator stops it, and a clean exit within 15 s.
    pub async fn stop(mut self) {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        match self.exited(Duration::from_secs(15)).await {
            Some(status) => assert!(status.success(), "herald serve exited with {status}: {}", self.log()),
            None => panic!("herald serve did not stop on SIGTERM: {}", self.log()),
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
