//! The services the suite breaks, owned by the suite: its own Postgres cluster
//! (initdb in a temporary directory, a free port) and its own `redis-server`.
//! The shared Postgres on 5432 and Redis on 6379 are never touched.

use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use tokio::process::{Child, Command};

/// A port nobody uses right now, below the kernel's ephemeral range, for a
/// service the suite stops and starts again (Postgres, Redis, Herald).
///
/// A port the OS picks (`bind` to port 0) comes from the ephemeral range, the
/// one outgoing connections take their local ports from; while a service is
/// down for a restart, one of the run's many outgoing connections can take
/// its port, and the restart then fails to bind — a fault of the harness, not
/// of Herald (seen once in CI as "pg_ctl: could not start server" after a
/// restart). Below the range no outgoing connection is ever given the port.
pub fn free_port() -> anyhow::Result<u16> {
    let ephemeral_from = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let (low, high) = (ephemeral_from.saturating_sub(12_000).max(1024), ephemeral_from);
    let span = u32::from(high - low);
    // Each call walks on from where the last stopped, so ports handed out
    // before their services bind them differ; the walk starts where the
    // process id says, so runs side by side start apart.
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let _ = NEXT.compare_exchange(u32::MAX, std::process::id() % span, Ordering::Relaxed, Ordering::Relaxed);
    for _ in 0..span {
        let port = low + (NEXT.fetch_add(1, Ordering::Relaxed) % span) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    bail!("no free port from {low} to {high}")
}

/// Sends a signal by name (`KILL`, `TERM`, `STOP`, `CONT`) to one process.
pub async fn signal(pid: u32, name: &str) -> anyhow::Result<()> {
    let status = Command::new("kill").arg(format!("-{name}")).arg(pid.to_string()).status().await?;
    if !status.success() {
        bail!("kill -{name} {pid} failed");
    }
    Ok(())
}

fn running_as_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// The Postgres binaries: `HERALD_CHAOS_PG_BIN`, else the newest
/// `/usr/lib/postgresql/N/bin`.
fn pg_bin_dir() -> anyhow::Result<PathBuf> {
    if let Ok(dir) = std::env::var("HERALD_CHAOS_PG_BIN") {
        return Ok(PathBuf::from(dir));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .context("no /usr/lib/postgresql: set HERALD_CHAOS_PG_BIN to the directory of initdb and pg_ctl")?
        .filter_map(|e| e.ok())
        .filter_map(|e| Some((e.file_name().to_string_lossy().parse().ok()?, e.path().join("bin"))))
        .filter(|(_, p)| p.join("pg_ctl").exists())
        .collect();
    versions.sort();
    versions.pop().map(|(_, p)| p).context("no Postgres under /usr/lib/postgresql/*/bin")
}

/// A Postgres cluster of the suite's own, removed when dropped.
pub struct Postgres {
    dir: tempfile::TempDir,
    bin: PathBuf,
    as_postgres_user: bool,
    pub port: u16,
    /// Held by a restart and by a termination of backends: a termination
    /// scheduled while a restart is under way waits for the server to be
    /// back (it found it refusing connections, and failed, once in a run),
    /// then cuts the connections Herald has made since.
    admin: tokio::sync::Mutex<()>,
}

impl Postgres {
    pub async fn start() -> anyhow::Result<Postgres> {
        let bin = pg_bin_dir()?;
        let dir = tempfile::Builder::new().prefix("herald-chaos-pg").tempdir()?;
        let as_postgres_user = running_as_root();
        let data = dir.path().join("data");
        std::fs::create_dir(&data)?;
        if as_postgres_user {
            // initdb refuses to run as root; the cluster belongs to `postgres`.
            set_mode(dir.path(), 0o755)?;
            let status = Command::new("chown").arg("postgres:postgres").arg(&data).status().await?;
            if !status.success() {
                bail!("chown postgres {} failed", data.display());
            }
        }
        let pg = Postgres { dir, bin, as_postgres_user, port: free_port()?, admin: Default::default() };
        pg.run("initdb", &["-D", &pg.data(), "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8"]).await?;
        // fsync off: the suite kills processes, never the machine, and a
        // process crash loses nothing the kernel already has.
        let conf = format!(
            "port = {}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\nfsync = off\nmax_connections = 200\n",
            pg.port,
            pg.data()
        );
        let conf_path = data.join("postgresql.conf");
        let mut text = std::fs::read_to_string(&conf_path)?;
        text.push_str(&conf);
        std::fs::write(&conf_path, text)?;
        pg.pg_ctl(&["start", "-w", "-t", "60", "-l", &pg.log()]).await?;
        Ok(pg)
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    fn log(&self) -> String {
        self.dir.path().join("data").join("server.log").display().to_string()
    }

    async fn run(&self, tool: &str, args: &[&str]) -> anyhow::Result<()> {
        let program = self.bin.join(tool);
        let mut command = if self.as_postgres_user {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&program);
            c
        } else {
            Command::new(&program)
        };
        let out = command.args(args).stdin(Stdio::null()).output().await.with_context(|| format!("running {tool}"))?;
        if !out.status.success() {
            bail!(
                "{tool} {} failed: {}{}",
                args.join(" "),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }

    async fn pg_ctl(&self, args: &[&str]) -> anyhow::Result<()> {
        let data = self.data();
        let mut all = vec!["-D", data.as_str()];
        all.extend_from_slice(args);
        self.run("pg_ctl", &all).await
    }

    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    pub async fn create_database(&self, name: &str) -> anyhow::Result<()> {
        use sqlx::Connection;
        let mut admin = sqlx::PgConnection::connect(&self.url("postgres")).await?;
        sqlx::query(&format!("CREATE DATABASE {name}")).execute(&mut admin).await?;
        Ok(())
    }

    /// `pg_ctl restart` in fast mode: every connection is cut, in-flight
    /// transactions roll back, and the server is back a moment later.
    pub async fn restart(&self) -> anyhow::Result<()> {
        let _admin = self.admin.lock().await;
        let restarted = self.pg_ctl(&["restart", "-m", "fast", "-w", "-t", "60", "-l", &self.log()]).await;
        // pg_ctl only says the server did not start; why is in its log, and
        // the cluster's directory is gone when the run ends.
        restarted.map_err(|e| {
            let log = std::fs::read_to_string(self.log()).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            e.context(format!("the server's log ends:\n{}", lines[lines.len().saturating_sub(15)..].join("\n")))
        })
    }

    /// Terminates every backend connected to `database` (Herald's pools).
    pub async fn terminate_backends(&self, database: &str) -> anyhow::Result<u64> {
        use sqlx::Connection;
        let _admin = self.admin.lock().await;
        let mut admin = sqlx::PgConnection::connect(&self.url("postgres")).await?;
        let killed: Vec<bool> = sqlx::query_scalar(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
        )
        .bind(database)
        .fetch_all(&mut admin)
        .await?;
        Ok(killed.into_iter().filter(|k| *k).count() as u64)
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let program = self.bin.join("pg_ctl");
        let mut command = if self.as_postgres_user {
            let mut c = std::process::Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&program);
            c
        } else {
            std::process::Command::new(&program)
        };
        let _ = command
            .args(["-D", &self.data(), "stop", "-m", "immediate", "-w"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

fn set_mode(path: &Path, mode: u32) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    Ok(())
}

/// A `redis-server` of the suite's own on a free port, without persistence.
pub struct Redis {
    child: Option<Child>,
    pub port: u16,
    paused: bool,
}

impl Redis {
    pub async fn start() -> anyhow::Result<Redis> {
        let mut redis = Redis { child: None, port: free_port()?, paused: false };
        redis.launch().await?;
        Ok(redis)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    async fn launch(&mut self) -> anyhow::Result<()> {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("starting redis-server")?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if self.cli(&["PING"]).await.is_ok() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        bail!("redis-server on port {} did not answer PING", self.port)
    }

    async fn cli(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = tokio::time::timeout(
            Duration::from_secs(5),
            Command::new("redis-cli").args(["-p", &self.port.to_string()]).args(args).output(),
        )
        .await
        .context("redis-cli timed out")??;
        let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if !out.status.success() || text.starts_with("Could not connect") || text.is_empty() {
            bail!("redis-cli {}: {text}", args.join(" "));
        }
        Ok(text)
    }

    pub async fn flushall(&self) -> anyhow::Result<()> {
        self.cli(&["FLUSHALL"]).await.map(|_| ())
    }

    /// Stopped: connections refused until [`Redis::restart`].
    pub async fn stop(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill().await?;
        }
        Ok(())
    }

    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.resume().await?;
        if self.child.is_none() {
            self.launch().await?;
        }
        Ok(())
    }

    /// Accepts connections (the kernel does) but never answers: SIGSTOP.
    pub async fn pause(&mut self) -> anyhow::Result<()> {
        if let Some(pid) = self.child.as_ref().and_then(|c| c.id()) {
            signal(pid, "STOP").await?;
            self.paused = true;
        }
        Ok(())
    }

    pub async fn resume(&mut self) -> anyhow::Result<()> {
        if self.paused
            && let Some(pid) = self.child.as_ref().and_then(|c| c.id())
        {
            signal(pid, "CONT").await?;
        }
        self.paused = false;
        Ok(())
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        if self.paused
            && let Some(pid) = self.child.as_ref().and_then(|c| c.id())
        {
            let _ = std::process::Command::new("kill").args(["-CONT", &pid.to_string()]).status();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::free_port;

    #[test]
    fn a_services_port_is_never_one_an_outgoing_connection_could_take() {
        let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap();
        let ephemeral_from: u16 = range.split_whitespace().next().unwrap().parse().unwrap();
        for _ in 0..20 {
            let port = free_port().unwrap();
            assert!((1024..ephemeral_from).contains(&port), "{port} is in or above the ephemeral range");
            // Free: it can be listened on now.
            std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
        }
        // Ports handed out before anything binds them differ.
        let ports: std::collections::HashSet<u16> = (0..100).map(|_| free_port().unwrap()).collect();
        assert_eq!(ports.len(), 100);
        // A port in use is never given.
        let held = std::net::TcpListener::bind(("127.0.0.1", free_port().unwrap())).unwrap();
        let taken = held.local_addr().unwrap().port();
        assert!((0..50).all(|_| free_port().unwrap() != taken));
    }
}
