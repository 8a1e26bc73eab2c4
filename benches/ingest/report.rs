//! The figures of a run — printed as a table per backend with the issue's
//! targets, and written as JSON with `--json FILE` (the same figures, so a run
//! after a change can be read against a run before it with `--baseline FILE`).

use crate::cpu::CpuFigures;
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
pub struct Report {
    pub command: String,
    pub smoke: bool,
    pub cores: usize,
    /// Whether this benchmark itself was built with optimisation (`cargo
    /// bench`): built by `cargo test --bench`, its clients and fake provider
    /// take several times the CPU, and every rate is lower for it.
    #[serde(default)]
    pub optimised: bool,
    /// How Herald ran: its own process, reached over loopback HTTP.
    pub herald: String,
    pub events: usize,
    pub connections: Vec<usize>,
    pub fail_rate: f64,
    pub backends: Vec<BackendReport>,
}

#[derive(Serialize, Deserialize)]
pub struct BackendReport {
    pub backend: String,
    pub limit: Vec<LimitFigures>,
    pub herald: Vec<HeraldFigures>,
    /// Ingest without delivery, at the largest connection count (absent in
    /// reports written before it was measured).
    #[serde(default)]
    pub alone: Option<AloneFigures>,
    pub storm: StormFigures,
    pub failures: FailFigures,
    pub targets: Vec<TargetCheck>,
    /// Broken promises seen during the run (lost or doubled notifications,
    /// requests that failed): the benchmark exits non-zero on any.
    pub problems: Vec<String>,
}

#[derive(Serialize, Deserialize)]
pub struct LimitFigures {
    pub connections: usize,
    pub events_per_tx: usize,
    pub events: usize,
    pub events_per_s: f64,
    /// Per transaction.
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Per event: this process (the client and, on SQLite, the database) and Postgres's backends.
    #[serde(default)]
    pub cpu: Option<CpuFigures>,
}

#[derive(Serialize, Deserialize)]
pub struct HeraldFigures {
    pub connections: usize,
    pub events: usize,
    /// Posts answered per second, first POST to last answer.
    pub ingest_per_s: f64,
    /// Per request.
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Notifications per second, first POST to the provider's last acceptance.
    pub end_to_end_per_s: f64,
    /// Herald's ingest rate over the limit's at the same connections, one event per transaction.
    pub vs_limit: f64,
    /// … and over the batched ceiling.
    pub vs_batched: f64,
    pub peak_rss_mib: f64,
    pub delivered: usize,
    pub duplicates: usize,
    /// Per notification, first POST to the last acceptance: Herald's process and Postgres's backends.
    #[serde(default)]
    pub cpu: Option<CpuFigures>,
}

/// Ingest alone: a Herald that runs no workers, so that nothing is delivered
/// while it ingests (the "ingest alone", the limit's own shape).
#[derive(Serialize, Deserialize)]
pub struct AloneFigures {
    pub connections: usize,
    pub events: usize,
    pub ingest_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Over the limit's rate at the same connections, 1 and `BATCH` events per transaction.
    pub vs_limit: f64,
    pub vs_batched: f64,
    pub peak_rss_mib: f64,
    /// Jobs in the queue afterwards: one per event.
    pub queued: i64,
    /// Per event: Herald's process and Postgres's backends.
    pub cpu: Option<CpuFigures>,
}

#[derive(Serialize, Deserialize)]
pub struct StormFigures {
    pub connections: usize,
    pub posts: usize,
    pub posts_per_s: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Answers 202 (created) and 200 (replayed).
    pub created: usize,
    pub replayed: usize,
    pub provider_calls: u64,
    pub peak_rss_mib: f64,
    /// Per post.
    #[serde(default)]
    pub cpu: Option<CpuFigures>,
}

#[derive(Serialize, Deserialize)]
pub struct FailFigures {
    pub connections: usize,
    pub events: usize,
    pub fail_rate: f64,
    /// First tries the provider answered 503.
    pub refused: u64,
    pub end_to_end_per_s: f64,
    pub delivered: usize,
    pub duplicates: usize,
    pub peak_rss_mib: f64,
}

#[derive(Serialize, Deserialize)]
pub struct TargetCheck {
    pub target: String,
    pub measured: String,
    /// None when it cannot be judged from this run (no baseline).
    pub met: Option<bool>,
}

fn thousands(x: f64) -> String {
    let digits = format!("{:.0}", x.max(0.0));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl BackendReport {
    /// The table, as printed.
    pub fn render(&self, report: &Report) -> String {
        let mut out = format!(
            "{} — {} distinct single-SMS events per run, fresh database per run, {} cores shared by the clients, Herald and the database\n\n",
            self.backend,
            thousands(report.events as f64),
            report.cores
        );
        if !report.optimised && !report.smoke {
            out += "NOT OPTIMISED: this benchmark was built without optimisation (`cargo test --bench`), so its clients\n\
                    and fake provider take CPU from Herald and the database and every rate below is low; measure with\n\
                    `cargo bench --bench ingest`.\n\n";
        }
        out += &format!(
            "{:<36} {:>5} {:>10} {:>8} {:>8}   {:<16} {:>8}   {:>13}   {:>7}\n",
            "", "conns", "per s", "p50 ms", "p99 ms", "Herald ÷ limit", "peak RSS", "CPU ms/event", "harness"
        );
        let row =
            |what: &str, c: usize, rate: f64, p50: String, p99: String, ratio: String, rss: String, cpu: String| {
                let line = format!(
                    "{what:<36} {c:>5} {:>10} {p50:>8} {p99:>8}   {ratio:<16} {rss:>8}   {cpu}",
                    thousands(rate)
                );
                format!("{}\n", line.trim_end())
            };
        let ms = |x: f64| format!("{x:.1}");
        let mib = |x: f64| format!("{x:.0} MiB");
        let cpu = |c: Option<CpuFigures>| {
            let Some(CpuFigures { process_ms, database_ms, harness_ms }) = c else { return String::new() };
            let measured = match database_ms {
                Some(db) => format!("{process_ms:.3} + {db:.3}"),
                None => format!("{process_ms:.3}"),
            };
            let harness = harness_ms.map_or(String::new(), |h| format!("{h:.3}"));
            format!("{measured:>13}   {harness:>7}")
        };
        let mut connections: Vec<usize> = self.limit.iter().map(|l| l.connections).collect();
        connections.dedup();
        for c in connections {
            for l in self.limit.iter().filter(|l| l.connections == c) {
                let what = format!(
                    "limit: {} event{}/transaction",
                    l.events_per_tx,
                    if l.events_per_tx == 1 { "" } else { "s" }
                );
                out += &row(
                    &what,
                    c,
                    l.events_per_s,
                    ms(l.p50_ms),
                    ms(l.p99_ms),
                    String::new(),
                    String::new(),
                    cpu(l.cpu),
                );
            }
            if let Some(h) = self.herald.iter().find(|h| h.connections == c) {
                let ratio = format!("{:.2}× / {:.2}×", h.vs_limit, h.vs_batched);
                out += &row(
                    "Herald: ingest over HTTP",
                    c,
                    h.ingest_per_s,
                    ms(h.p50_ms),
                    ms(h.p99_ms),
                    ratio,
                    mib(h.peak_rss_mib),
                    String::new(),
                );
                out += &row(
                    "Herald: end to end (notifications)",
                    c,
                    h.end_to_end_per_s,
                    "".into(),
                    "".into(),
                    "".into(),
                    "".into(),
                    cpu(h.cpu),
                );
            }
            if let Some(a) = self.alone.as_ref().filter(|a| a.connections == c) {
                out += &row(
                    "Herald: ingest alone (no workers)",
                    c,
                    a.ingest_per_s,
                    ms(a.p50_ms),
                    ms(a.p99_ms),
                    format!("{:.2}× / {:.2}×", a.vs_limit, a.vs_batched),
                    mib(a.peak_rss_mib),
                    cpu(a.cpu),
                );
            }
        }
        let s = &self.storm;
        out += &row(
            "Herald: duplicate storm (posts)",
            s.connections,
            s.posts_per_s,
            ms(s.p50_ms),
            ms(s.p99_ms),
            String::new(),
            mib(s.peak_rss_mib),
            cpu(s.cpu),
        );
        let f = &self.failures;
        out += &row(
            &format!("Herald: end to end, {:.0} % 503s", f.fail_rate * 100.0),
            f.connections,
            f.end_to_end_per_s,
            "".into(),
            "".into(),
            "".into(),
            mib(f.peak_rss_mib),
            String::new(),
        );
        out += &format!(
            "\nHerald ÷ limit: Herald's ingest rate over the limit's at the same connections, 1 / {} events per transaction.\n",
            super::limit::BATCH
        );
        out += "ingest over HTTP: while the same process delivers what it ingests; ingest alone: a process that runs\n\
                 no workers (`[worker] disabled`), as the limit does no delivery — its CPU is per event ingested.\n";
        out += "CPU ms/event: user + system CPU per event (per notification end to end, per post in the storm) of the\n\
                 process — this benchmark's for the limit, Herald's otherwise — + the Postgres backends serving the run's\n\
                 database (on SQLite the database runs inside the process). Far less disturbed by a busy machine than a rate.\n\
                 harness: this benchmark's own CPU per event while it drove Herald (its HTTP clients and the fake provider),\n\
                 which shares the cores with Herald and the database.\n";
        out += &format!(
            "Storm: {} posts of one event → {} created, {} replayed, {} provider call(s).\n",
            thousands(s.posts as f64),
            thousands(s.created as f64),
            thousands(s.replayed as f64),
            s.provider_calls
        );
        out += &format!(
            "503s: {} of {} first tries refused → {} delivered, {} delivered twice.\n",
            thousands(f.refused as f64),
            thousands(f.events as f64),
            thousands(f.delivered as f64),
            f.duplicates
        );
        out += "\nTargets";
        if report.smoke {
            out += " (smoke size: only the promises are judged, the figures mean nothing)";
        }
        out += "\n";
        for t in &self.targets {
            let verdict = match t.met {
                Some(true) => "met",
                Some(false) => "NOT met",
                None => "—",
            };
            out += &format!("  {:<52} {:>24}   {verdict}\n", t.target, t.measured);
        }
        for p in &self.problems {
            out += &format!("PROBLEM: {p}\n");
        }
        out
    }

    /// The targets, judged at the largest connection count. At smoke
    /// size only the promises are judged (one provider call, exactly once),
    /// not the figures.
    pub fn judge(&mut self, baseline: Option<&Report>, smoke: bool) {
        let Some(top) = self.herald.iter().max_by_key(|h| h.connections) else { return };
        let e2e_goal = if self.backend == "Postgres" { 9_000.0 } else { 3_000.0 };
        let c = top.connections;
        let mut targets = vec![TargetCheck {
            target: format!("end to end ≥ {}/s ({c} connections)", thousands(e2e_goal)),
            measured: format!("{}/s", thousands(top.end_to_end_per_s)),
            met: (!smoke).then_some(top.end_to_end_per_s >= e2e_goal),
        }];
        if let Some(a) = &self.alone {
            targets.push(TargetCheck {
                target: "ingest alone ≥ 2× the limit at 1 event/transaction".into(),
                measured: format!("{:.2}×", a.vs_limit),
                met: (!smoke).then_some(a.vs_limit >= 2.0),
            });
        }
        // Stricter than the issue asks, kept because it is what a process
        // that also delivers sees.
        targets.push(TargetCheck {
            target: "ingest while delivering ≥ 2× the limit".into(),
            measured: format!("{:.2}×", top.vs_limit),
            met: (!smoke).then_some(top.vs_limit >= 2.0),
        });
        let alone_p99 = self.alone.as_ref().map_or(0.0, |a| a.p99_ms);
        targets.push(TargetCheck {
            target: "ingest p99 ≤ 25 ms (alone, and while delivering)".into(),
            measured: match &self.alone {
                Some(a) => format!("{:.1} ms, {:.1} ms", a.p99_ms, top.p99_ms),
                None => format!("{:.1} ms", top.p99_ms),
            },
            met: (!smoke).then_some(alone_p99 <= 25.0 && top.p99_ms <= 25.0),
        });
        let one = self.herald.iter().find(|h| h.connections == 1);
        let before = baseline
            .and_then(|b| b.backends.iter().find(|r| r.backend == self.backend))
            .and_then(|r| r.herald.iter().find(|h| h.connections == 1));
        if let Some(one) = one {
            targets.push(TargetCheck {
                target: match before {
                    Some(b) => format!("1 client: p50 no worse than the baseline's {:.2} ms", b.p50_ms),
                    None => "1 client: p50 no worse than before (--baseline FILE)".into(),
                },
                measured: format!("{:.2} ms", one.p50_ms),
                met: before.filter(|_| !smoke).map(|b| one.p50_ms <= b.p50_ms),
            });
        }
        let s = &self.storm;
        targets.push(TargetCheck {
            target: "duplicate storm ≥ 15,000 posts/s".into(),
            measured: format!("{}/s", thousands(s.posts_per_s)),
            met: (!smoke).then_some(s.posts_per_s >= 15_000.0),
        });
        targets.push(TargetCheck {
            target: "duplicate storm: exactly one provider call".into(),
            measured: s.provider_calls.to_string(),
            met: Some(s.provider_calls == 1),
        });
        let peak = (self.herald.iter().map(|h| h.peak_rss_mib))
            .chain(self.alone.as_ref().map(|a| a.peak_rss_mib))
            .chain([s.peak_rss_mib, self.failures.peak_rss_mib]);
        let peak = peak.fold(0.0, f64::max);
        targets.push(TargetCheck {
            target: "peak RSS ≤ 64 MiB (Herald's process, any run)".into(),
            measured: format!("{peak:.0} MiB"),
            met: (!smoke).then_some(peak <= 64.0),
        });
        let f = &self.failures;
        let once = f.delivered == f.events && f.duplicates == 0;
        targets.push(TargetCheck {
            target: format!("{:.0} % 503s: every event delivered exactly once", f.fail_rate * 100.0),
            measured: format!(
                "{} of {}, {} twice",
                thousands(f.delivered as f64),
                thousands(f.events as f64),
                f.duplicates
            ),
            met: Some(once),
        });
        self.targets = targets;
    }
}
