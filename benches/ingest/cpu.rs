//! CPU time spent per event: the figure a shared machine distorts least.
//!
//! A rate measured while other work runs on the same cores says as much about
//! that work as about Herald; the CPU seconds Herald's process and the
//! database's backends spent on a run, divided by its events, hardly move with
//! the load around them. Read from `/proc/PID/stat` (`utime` + `stime`), so
//! only where the database runs on this host: elsewhere the figure is absent.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::time::Duration;

/// Linux reports `utime` and `stime` in `USER_HZ` ticks, which the kernel's
/// ABI fixes at 100 per second on every architecture Herald builds for.
const TICKS_PER_S: u64 = 100;

/// User plus system CPU time a process has used so far.
pub fn process(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name, in parentheses, may hold spaces: count from after it.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    // After the name: state is field 3 of stat(5), utime 14, stime 15.
    let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(Duration::from_millis(ticks * 1000 / TICKS_PER_S))
}

/// CPU used by each backend serving database `datname`, by process id.
#[derive(Default)]
pub struct Backends(HashMap<u32, Duration>);

impl Backends {
    /// The backends serving `database_url`'s database now (but the one this
    /// asks through), and their CPU so far; `None` when the server is not on
    /// this host (no `/proc` entry for its pids).
    pub async fn read(database_url: &str) -> Option<Backends> {
        use sqlx::Connection;
        let mut conn = sqlx::PgConnection::connect(database_url).await.ok()?;
        let pids: Vec<i32> = sqlx::query_scalar(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()",
        )
        .fetch_all(&mut conn)
        .await
        .ok()?;
        let _ = conn.close().await;
        let mut seen = HashMap::new();
        for pid in pids {
            seen.insert(pid as u32, process(pid as u32)?);
        }
        Some(Backends(seen))
    }

    /// The same, but for the backend with process id `pid` (a connection
    /// of the benchmark's own, whose polling is not the run's work). Only the bus
    /// benchmark (which shares this file) calls it.
    #[allow(dead_code)]
    pub fn without(mut self, pid: u32) -> Backends {
        self.0.remove(&pid);
        self
    }

    /// CPU used since `before`. A backend that opened in between counts whole;
    /// one that closed in between loses what it used after `before` (Herald's
    /// pools keep their connections for a run, so this is rare).
    pub fn since(&self, before: &Backends) -> Duration {
        self.0.iter().map(|(pid, now)| now.saturating_sub(before.0.get(pid).copied().unwrap_or_default())).sum()
    }
}

/// Milliseconds per event of a CPU duration.
fn ms_per_event(cpu: Duration, events: usize) -> f64 {
    cpu.as_secs_f64() * 1000.0 / events.max(1) as f64
}

/// CPU per event of one run: a process (Herald's; this one for the limit),
/// on Postgres the backends serving the run's database, and when the process
/// is Herald's, this benchmark's own (its clients and the fake provider).
#[derive(Clone, Copy, Default, Serialize, Deserialize)]
pub struct CpuFigures {
    pub process_ms: f64,
    /// `None` on SQLite (it runs inside the process) or a server on another host.
    pub database_ms: Option<f64>,
    /// This benchmark's process while it drove Herald: the HTTP clients and
    /// the fake provider, which share the cores with Herald and the database.
    /// `None` for the limit, where this process is the one measured.
    #[serde(default)]
    pub harness_ms: Option<f64>,
}

/// Started before a run, stopped after it.
pub struct Meter {
    pid: u32,
    process: Duration,
    database: Option<(String, Backends)>,
    /// This process's CPU at the start, when `pid` is another's.
    harness: Option<Duration>,
}

impl Meter {
    /// `database_url` is the run's database; a Postgres one is watched too.
    pub async fn start(pid: u32, database_url: &str) -> Meter {
        let database = match database_url.starts_with("postgres") {
            true => Backends::read(database_url).await.map(|b| (database_url.to_string(), b)),
            false => None,
        };
        let own = std::process::id();
        let harness = (pid != own).then(|| process(own).unwrap_or_default());
        Meter { pid, process: process(pid).unwrap_or_default(), database, harness }
    }

    pub async fn stop(self, events: usize) -> CpuFigures {
        let process_ms = ms_per_event(process(self.pid).unwrap_or_default().saturating_sub(self.process), events);
        let harness_ms = self
            .harness
            .map(|before| ms_per_event(process(std::process::id()).unwrap_or_default().saturating_sub(before), events));
        let database_ms = match self.database {
            Some((url, before)) => Backends::read(&url).await.map(|now| ms_per_event(now.since(&before), events)),
            None => None,
        };
        CpuFigures { process_ms, database_ms, harness_ms }
    }
}
