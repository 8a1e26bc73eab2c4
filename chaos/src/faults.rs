//! Faults on a schedule derived from the seed: each is injected when the
//! driver has dispatched a given number of posts, lasts a drawn while, and is
//! healed by the suite itself. The schedule is printed before the run.

use crate::herald::Node;
use crate::provider::{Mode, Provider};
use crate::rng::Rng;
use crate::services::{Postgres, Redis};
use crate::smtp::{SmtpMode, SmtpPeer};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// `kill -9` of a Herald process while sends are in flight; restarted after `down`.
    Kill {
        node: usize,
        down: Duration,
    },
    /// SIGTERM with attempts in flight; restarted after `down`.
    Terminate {
        node: usize,
        down: Duration,
    },
    Provider {
        channel: &'static str,
        mode: Mode,
        lasts: Duration,
    },
    /// The SMTP peer stalls (or answers 451) at a point of the dialogue.
    Smtp {
        mode: SmtpMode,
        lasts: Duration,
    },
    RedisFlush,
    RedisStop {
        lasts: Duration,
    },
    /// Redis accepts connections but never answers (SIGSTOP).
    RedisHang {
        lasts: Duration,
    },
    /// `pg_ctl restart -m fast` of the suite's own cluster.
    PostgresRestart,
    /// `pg_terminate_backend` of every connection Herald holds.
    PostgresTerminate,
    /// A saboteur transaction holding locks on the queue and the intents.
    PostgresLocks {
        lasts: Duration,
    },
}

impl Fault {
    pub fn kind(&self) -> String {
        match self {
            Fault::Kill { .. } => "kill -9".into(),
            Fault::Terminate { .. } => "SIGTERM".into(),
            Fault::Provider { channel, mode, .. } => format!("{channel} {}", mode_name(mode)),
            Fault::Smtp { mode, .. } => match mode {
                SmtpMode::Healthy => "smtp healthy",
                SmtpMode::StallGreeting => "smtp stalls before its greeting",
                SmtpMode::StallAtData => "smtp stalls at DATA",
                SmtpMode::StallAfterMessage => "smtp stalls after the message",
                SmtpMode::Busy => "smtp 451",
            }
            .into(),
            Fault::RedisFlush => "redis FLUSHALL".into(),
            Fault::RedisStop { .. } => "redis stopped".into(),
            Fault::RedisHang { .. } => "redis hangs".into(),
            Fault::PostgresRestart => "postgres restart".into(),
            Fault::PostgresTerminate => "postgres terminate backends".into(),
            Fault::PostgresLocks { .. } => "postgres locks held".into(),
        }
    }
}

fn mode_name(mode: &Mode) -> &'static str {
    match mode {
        Mode::Healthy => "healthy",
        Mode::Latency(_) => "latency",
        Mode::Unavailable => "5xx",
        Mode::Throttled(_) => "429 Retry-After",
        Mode::DropAfterAccept => "accept-then-drop",
        Mode::NeverReturn => "never returns",
    }
}

/// What a leg has to break.
pub struct Targets {
    pub nodes: usize,
    pub channels: Vec<&'static str>,
    pub redis: bool,
    pub postgres: bool,
    pub smtp: bool,
}

/// `faults` faults spread over the first nine tenths of `posts` dispatched posts.
pub fn schedule(rng: &mut Rng, faults: usize, posts: usize, t: &Targets) -> Vec<(usize, Fault)> {
    let ms = |rng: &mut Rng, lo: u64, hi: u64| Duration::from_millis(lo + rng.below(hi - lo));
    let mut out: Vec<(usize, Fault)> = (0..faults)
        .map(|_| {
            let at = rng.below((posts * 9 / 10).max(1) as u64) as usize;
            let fault = loop {
                let f = match rng.below(11) {
                    0 => Fault::Kill { node: rng.below(t.nodes as u64) as usize, down: ms(rng, 200, 2000) },
                    1 => Fault::Terminate { node: rng.below(t.nodes as u64) as usize, down: ms(rng, 200, 2000) },
                    2..=4 => {
                        let channel = *rng.pick(&t.channels);
                        let mode = match rng.below(5) {
                            0 => Mode::Latency(ms(rng, 200, 2500)),
                            1 => Mode::Unavailable,
                            2 => Mode::Throttled(1 + rng.below(2)),
                            3 => Mode::DropAfterAccept,
                            _ => Mode::NeverReturn,
                        };
                        Fault::Provider { channel, mode, lasts: ms(rng, 300, 3000) }
                    }
                    5 if t.redis => Fault::RedisFlush,
                    6 if t.redis => match rng.below(2) {
                        0 => Fault::RedisStop { lasts: ms(rng, 500, 3000) },
                        _ => Fault::RedisHang { lasts: ms(rng, 500, 3000) },
                    },
                    7 if t.postgres => Fault::PostgresRestart,
                    8 if t.postgres => Fault::PostgresTerminate,
                    9 if t.postgres => Fault::PostgresLocks { lasts: ms(rng, 300, 3000) },
                    10 if t.smtp => {
                        let mode = match rng.below(4) {
                            0 => SmtpMode::StallGreeting,
                            1 => SmtpMode::StallAtData,
                            2 => SmtpMode::StallAfterMessage,
                            _ => SmtpMode::Busy,
                        };
                        Fault::Smtp { mode, lasts: ms(rng, 300, 3000) }
                    }
                    _ => continue,
                };
                break f;
            };
            (at, fault)
        })
        .collect();
    out.sort_by_key(|(at, _)| *at);
    out
}

/// Everything a fault can reach.
pub struct World {
    pub nodes: Vec<tokio::sync::Mutex<Node>>,
    pub redis: Option<tokio::sync::Mutex<Redis>>,
    pub postgres: Option<(Arc<Postgres>, String)>,
    pub providers: Vec<(&'static str, Provider)>,
    pub smtp: Option<SmtpPeer>,
    /// Kills that landed while a provider was handling a call.
    pub kills_mid_send: AtomicUsize,
    pub shutdown_grace: Duration,
    pub injected: Mutex<BTreeMap<String, u64>>,
    /// Processes that did not exit 0 within the grace after SIGTERM.
    pub unclean_stops: Mutex<Vec<String>>,
    pub errors: Mutex<Vec<String>>,
}

impl World {
    fn provider(&self, channel: &str) -> Option<&Provider> {
        self.providers.iter().find(|(c, _)| *c == channel).map(|(_, p)| p)
    }

    /// Runs the schedule against the driver's progress; returns when every
    /// fault has been injected and healed.
    pub async fn inject(self: &Arc<Self>, schedule: Vec<(usize, Fault)>, progress: Arc<AtomicUsize>) {
        let mut tasks = tokio::task::JoinSet::new();
        for (at, fault) in schedule {
            while progress.load(Ordering::SeqCst) < at {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let me = self.clone();
            tasks.spawn(async move {
                let kind = fault.kind();
                match me.apply(&fault).await {
                    // The saboteur's own connection is cut by a Postgres
                    // restart or termination running at the same time: its
                    // fault ends early, nothing of Herald's is at stake.
                    Err(_) if matches!(fault, Fault::PostgresLocks { .. }) => {
                        *me.injected.lock().unwrap().entry("postgres locks cut short".into()).or_default() += 1;
                    }
                    Err(e) => me.errors.lock().unwrap().push(format!("{kind}: {e:#}")),
                    Ok(()) => {}
                }
                *me.injected.lock().unwrap().entry(kind).or_default() += 1;
            });
        }
        while tasks.join_next().await.is_some() {}
    }

    async fn apply(&self, fault: &Fault) -> anyhow::Result<()> {
        match fault {
            Fault::Kill { node, down } => {
                let mut n = self.nodes[*node].lock().await;
                // Mid-send: wait (a little) for a provider to be handling a call.
                let until = tokio::time::Instant::now() + Duration::from_secs(2);
                while !self.providers.iter().any(|(_, p)| p.busy()) && tokio::time::Instant::now() < until {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                if self.providers.iter().any(|(_, p)| p.busy()) {
                    self.kills_mid_send.fetch_add(1, Ordering::SeqCst);
                }
                n.kill9().await?;
                tokio::time::sleep(*down).await;
                n.start().await?;
            }
            Fault::Terminate { node, down } => {
                let mut n = self.nodes[*node].lock().await;
                if let Some(problem) = n.terminate(self.shutdown_grace + Duration::from_secs(5)).await? {
                    self.unclean_stops.lock().unwrap().push(problem);
                }
                tokio::time::sleep(*down).await;
                n.start().await?;
            }
            Fault::Provider { channel, mode, lasts } => {
                if let Some(p) = self.provider(channel) {
                    p.set_mode(*mode);
                    tokio::time::sleep(*lasts).await;
                    p.set_mode(Mode::Healthy);
                }
            }
            Fault::Smtp { mode, lasts } => {
                if let Some(p) = &self.smtp {
                    p.set_mode(*mode);
                    tokio::time::sleep(*lasts).await;
                    p.set_mode(SmtpMode::Healthy);
                }
            }
            Fault::RedisFlush => {
                if let Some(r) = &self.redis {
                    r.lock().await.flushall().await?;
                }
            }
            Fault::RedisStop { lasts } => {
                if let Some(r) = &self.redis {
                    let mut r = r.lock().await;
                    r.stop().await?;
                    tokio::time::sleep(*lasts).await;
                    r.restart().await?;
                }
            }
            Fault::RedisHang { lasts } => {
                if let Some(r) = &self.redis {
                    let mut r = r.lock().await;
                    r.pause().await?;
                    tokio::time::sleep(*lasts).await;
                    r.resume().await?;
                }
            }
            Fault::PostgresRestart => {
                if let Some((pg, _)) = &self.postgres {
                    pg.restart().await?;
                }
            }
            Fault::PostgresTerminate => {
                if let Some((pg, db)) = &self.postgres {
                    pg.terminate_backends(db).await?;
                }
            }
            Fault::PostgresLocks { lasts } => {
                if let Some((pg, db)) = &self.postgres {
                    use sqlx::Connection;
                    let mut c = sqlx::PgConnection::connect(&pg.url(db)).await?;
                    let mut tx = c.begin().await?;
                    // NOWAIT, again and again: a saboteur that waited for its
                    // locks while holding some could deadlock with Herald and
                    // be the one Postgres aborts.
                    let until = tokio::time::Instant::now() + Duration::from_secs(10);
                    loop {
                        sqlx::query("SAVEPOINT saboteur").execute(&mut *tx).await?;
                        let locked =
                            sqlx::query("LOCK TABLE jobs, intents, attempts IN SHARE ROW EXCLUSIVE MODE NOWAIT")
                                .execute(&mut *tx)
                                .await;
                        if locked.is_ok() {
                            break;
                        }
                        sqlx::query("ROLLBACK TO SAVEPOINT saboteur").execute(&mut *tx).await?;
                        if tokio::time::Instant::now() > until {
                            anyhow::bail!("could not take the locks in 10s");
                        }
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    tokio::time::sleep(*lasts).await;
                    tx.commit().await?;
                }
            }
        }
        Ok(())
    }

    /// After the schedule: every process up, Redis answering, providers healthy.
    pub async fn heal(&self) -> anyhow::Result<()> {
        for (_, p) in &self.providers {
            p.set_mode(Mode::Healthy);
        }
        if let Some(p) = &self.smtp {
            p.set_mode(SmtpMode::Healthy);
        }
        if let Some(r) = &self.redis {
            r.lock().await.restart().await?;
        }
        for n in &self.nodes {
            let mut n = n.lock().await;
            if !n.is_up() {
                n.start().await?;
            }
        }
        Ok(())
    }
}
