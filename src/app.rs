//! Wiring: config → store, templates, providers, HTTP server and worker; and a
//! shutdown that stops claiming, lets attempts in flight finish, and exits.

use crate::api::{AppState, router};
use crate::channel::Provider;
use crate::channel::destination::DestinationPolicy;
use crate::channel::failover::{Breaker, Breakers, Chain, Named};
use crate::channel::in_app::InApp;
use crate::channel::sink::DirectorySink;
use crate::channel::sms_http::SmsHttp;
use crate::channel::smtp::Smtp;
use crate::channel::twilio::{Sender, Twilio, TwilioSettings};
use crate::channel::webhook::Webhook;
use crate::clock::{Clock, SystemClock};
use crate::config::{Config, EmailConfig, Route, SmsConfig, SmsProvider};
use crate::deliver::digest::DigestCloser;
use crate::deliver::{Providers, Worker};
use crate::event::Channel;
use crate::ops::dlq_digest::OpsDigest;
use crate::ops::fastpath::FastPath;
use crate::ops::retention::Retention;
use crate::render::{TemplateSet, TemplateSetError, check};
use crate::store::{self, Store, StoreError};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Each inner error is part of the message and not the `source()`, so a chain
/// printed with `{:#}` says it once.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error("templates: {0}")]
    Templates(TemplateSetError),
    #[error("{0}")]
    Route(String),
    #[error("database: {0}")]
    Store(StoreError),
    #[error("{0}")]
    Provider(String),
    /// An `[[ingest.nats]]` entry that cannot be connected or checked.
    #[error("{0}")]
    Bus(String),
    #[error("cannot listen on {addr}: {cause}")]
    Listen { addr: String, cause: std::io::Error },
}

impl From<TemplateSetError> for AppError {
    fn from(e: TemplateSetError) -> Self {
        AppError::Templates(e)
    }
}

impl From<StoreError> for AppError {
    fn from(e: StoreError) -> Self {
        AppError::Store(e)
    }
}

pub fn load_templates(config: &Config) -> Result<TemplateSet, AppError> {
    let mut set = match &config.templates_dir {
        Some(dir) => TemplateSet::load_dir(dir)?,
        None => TemplateSet::built_in(),
    };
    for (i, route) in config.routes.iter().enumerate() {
        if let Some(d) = &route.digest {
            if !set.contains(&d.template) {
                return Err(unknown_template(
                    config,
                    &set,
                    &format!("routes[{i}].digest.template"),
                    route,
                    &d.template,
                ));
            }
            set.add_key(&d.key).map_err(|e| AppError::Route(format!("routes[{i}].digest.key: {e}")))?;
        }
        if !set.contains(&route.template) {
            return Err(unknown_template(config, &set, &format!("routes[{i}].template"), route, &route.template));
        }
    }
    // A file a route needs and does not have would kill each of its
    // messages `template_error`: refused here, by serve and config check.
    let needs = check::route_needs(&config.routes);
    let missing: Vec<String> = check::missing_files(&set, &needs)
        .into_iter()
        .filter(|(m, _)| needs.iter().any(|n| n.template == m.template && n.channel == m.channel))
        .map(|(_, message)| message)
        .collect();
    if !missing.is_empty() {
        return Err(AppError::Route(missing.join("\n")));
    }
    Ok(set)
}

/// `routes[0].template: no template "po_aproved" in ./templates (route
/// purchase_order.approved); did you mean "po_approved"? (from ./herald.toml)`:
/// a misspelt name is answered as a misspelt key is.
fn unknown_template(config: &Config, set: &TemplateSet, key: &str, route: &Route, name: &str) -> AppError {
    let dir = config.templates_dir.as_ref().map_or("the built-in templates".into(), |d| d.display().to_string());
    let known: Vec<&str> = set.ids().collect();
    let near = crate::config::closest(name, &known).map(|t| format!("; did you mean {t:?}?")).unwrap_or_default();
    let msg = format!("{key}: no template {name:?} in {dir} (route {}){near}", route.event);
    AppError::Route(config.origins.add_to(msg))
}

pub fn build_providers(
    config: &Config,
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    breakers: &Breakers,
) -> Result<Providers, AppError> {
    let mut providers: Providers = Providers::new();
    // The in-app and directory "providers" are local writes, with no key of
    // their own: bounded like a provider call, well inside the lease.
    let local = (config.worker.lease / 2).min(std::time::Duration::from_secs(10));
    providers.insert(Channel::InApp, Arc::new(InApp::new(store, local)));
    if let Some(email) = &config.channels.email {
        let p = match email.providers.is_empty() {
            true => email_provider("channels.email", email, local)?,
            false => {
                let breaker = (email.breaker_failures, email.breaker_cool_down);
                let member = |name: &str| match email.named.get(name) {
                    Some(block) => email_provider(&format!("channels.email.named.{name}"), block, local),
                    None => Err(AppError::Provider(format!("channels.email.named.{name}: missing"))),
                };
                chain(config, &email.providers, member, breaker, clock.clone(), breakers)?
            }
        };
        providers.insert(Channel::Email, p);
    }
    if let Some(sms) = &config.channels.sms {
        let p = match sms.providers.is_empty() {
            true => sms_provider(config, sms, local)?,
            false => {
                let breaker = (sms.breaker_failures, sms.breaker_cool_down);
                let member = |name: &str| match sms.named.get(name) {
                    Some(block) => sms_provider(config, block, local),
                    None => Err(AppError::Provider(format!("channels.sms.named.{name}: missing"))),
                };
                chain(config, &sms.providers, member, breaker, clock, breakers)?
            }
        };
        providers.insert(Channel::Sms, p);
    }
    if let Some(hook) = &config.channels.webhook {
        let policy = DestinationPolicy::from_config(config);
        let p = Webhook::new(&hook.secret, hook.timeout, &policy).map_err(|e| AppError::Provider(e.to_string()))?;
        providers.insert(Channel::Webhook, Arc::new(p));
    }
    Ok(providers)
}

/// One SMS provider: the channel's own, or a named block.
fn sms_provider(config: &Config, sms: &SmsConfig, local: std::time::Duration) -> Result<Arc<dyn Provider>, AppError> {
    Ok(match (sms.provider, &sms.url, &sms.sink) {
        (SmsProvider::Twilio, _, _) => Arc::new(twilio(config, sms)?),
        (SmsProvider::Http, Some(url), _) => Arc::new(
            SmsHttp::new(url.clone(), sms.auth_token.clone(), sms.timeout)
                .map_err(|e| AppError::Provider(format!("channels.sms: {e}")))?,
        ),
        (SmsProvider::Http, None, Some(dir)) => Arc::new(DirectorySink::new(dir.clone(), Channel::Sms, local)),
        (SmsProvider::Http, None, None) => return Err(AppError::Provider("channels.sms: set url or sink".into())),
    })
}

/// One email provider: the channel's own, or a named block (at `key`).
fn email_provider(key: &str, email: &EmailConfig, local: std::time::Duration) -> Result<Arc<dyn Provider>, AppError> {
    Ok(match (&email.smtp_url, &email.sink) {
        (Some(url), _) => Arc::new(
            Smtp::new(url, &email.from, &email.message_id_domain, email.timeout)
                .map_err(|e| AppError::Provider(format!("{key}: {e}")))?,
        ),
        (None, Some(dir)) => Arc::new(DirectorySink::new(dir.clone(), Channel::Email, local)),
        (None, None) => return Err(AppError::Provider(format!("{key}: set smtp_url or sink"))),
    })
}

/// A channel's `providers = [...]`: the named blocks in order, each behind
/// its breaker (`failures` in a row open it for `cool_down`).
fn chain(
    config: &Config,
    names: &[String],
    member: impl Fn(&str) -> Result<Arc<dyn Provider>, AppError>,
    (failures, cool_down): (u32, std::time::Duration),
    clock: Arc<dyn Clock>,
    breakers: &Breakers,
) -> Result<Arc<dyn Provider>, AppError> {
    let mut members = Vec::new();
    for name in names {
        let named = Arc::new(Named { name: name.clone(), inner: member(name)? });
        let breaker = Arc::new(Breaker::new(name, failures, cool_down, clock.clone()));
        breakers.add(breaker.clone());
        members.push((named, breaker));
    }
    let on_unknown = config.routes.iter().filter(|r| r.failover_on_unknown).map(|r| r.event.clone()).collect();
    Ok(Arc::new(Chain::new(members, on_unknown)))
}

/// The Twilio provider of a validated `[channels.sms]`.
fn twilio(config: &Config, sms: &SmsConfig) -> Result<Twilio, AppError> {
    let missing = |key: &str| AppError::Provider(format!("channels.sms.{key}: required by provider = \"twilio\""));
    let sender = match (&sms.from, &sms.messaging_service_sid) {
        (Some(from), _) => Sender::From(from.clone()),
        (None, Some(sid)) => Sender::MessagingService(sid.clone()),
        (None, None) => return Err(missing("from")),
    };
    Twilio::new(TwilioSettings {
        base_url: sms.base_url.clone(),
        account_sid: sms.account_sid.clone().ok_or_else(|| missing("account_sid"))?,
        auth_token: sms.auth_token.clone().ok_or_else(|| missing("auth_token"))?,
        sender,
        public_base: config
            .public_base()
            .ok_or_else(|| AppError::Provider("public_url: required by twilio".into()))?
            .into(),
        timeout: sms.timeout,
    })
    .map_err(|e| AppError::Provider(format!("channels.sms: {e}")))
}

/// How often each process checks whether the daily digest is due.
const OPS_DIGEST_TICK: std::time::Duration = std::time::Duration::from_secs(20);

fn build_ops_digest(config: &Config, store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> Result<OpsDigest, AppError> {
    let ops = config.ops.clone().unwrap_or_default();
    Ok(OpsDigest {
        store,
        clock,
        webhook: ops.digest_webhook,
        at: ops.digest_at,
        tz: ops.digest_timezone,
        client: reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(10))
            .build()
            .map_err(|e| AppError::Provider(format!("ops webhook client: {e}")))?,
    })
}

/// A started Herald: its address, and the handle to stop it.
pub struct Running {
    pub addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    server: JoinHandle<()>,
    worker: Option<JoinHandle<()>>,
    /// The bus consumers: each finishes the messages it holds before stopping.
    bus: Vec<JoinHandle<()>>,
}

impl Running {
    /// Stops accepting requests and claiming jobs, waits for what is in flight.
    pub async fn stop(self) {
        let _ = self.shutdown.send(true);
        self.wait().await;
    }

    /// A handle that triggers shutdown (signal handlers hold one).
    pub fn shutdown_handle(&self) -> watch::Sender<bool> {
        self.shutdown.clone()
    }

    /// Waits until the server has stopped (after a shutdown was triggered).
    pub async fn wait(self) {
        let _ = self.server.await;
        for b in self.bus {
            let _ = b.await;
        }
        if let Some(w) = self.worker {
            let _ = w.await;
        }
    }
}

/// Opens the store and migrates it, then starts on `listener`.
pub async fn start(config: Config) -> Result<Running, AppError> {
    start_with(config, Arc::new(SystemClock), None).await
}

pub async fn start_with(
    mut config: Config,
    clock: Arc<dyn Clock>,
    listener: Option<TcpListener>,
) -> Result<Running, AppError> {
    config.validate_dedupe_window()?;
    crate::ops::metrics::install();
    crate::ops::metrics::build_info(&config.deployment);
    if config.any_shadow() {
        tracing::warn!(
            deployment_mode = config.mode.unwrap_or(crate::intent::Mode::Live).as_str(),
            "shadow mode is configured: intents planned in shadow end `shadowed` and no provider is called for them"
        );
    }
    let templates = Arc::new(load_templates(&config)?);
    let store = store::connect(&config.database_url).await?;
    store.migrate().await?;
    if config.publish.nats.is_some() {
        // From now on every process on this database writes publications,
        // this one's bus or not (see `store::publications`).
        store::publications_enable(store.as_ref()).await?;
    }
    let suppression_key = crate::suppression::resolve(&mut config, store.as_ref()).await?;
    let breakers = Arc::new(Breakers::default());
    let providers = Arc::new(build_providers(&config, store.clone(), clock.clone(), &breakers)?);
    let listener = match listener {
        Some(l) => l,
        None => {
            let addr = config.listen_addr()?;
            TcpListener::bind(addr).await.map_err(|cause| AppError::Listen { addr: config.listen.clone(), cause })?
        }
    };
    let addr = listener.local_addr().map_err(|cause| AppError::Listen { addr: config.listen.clone(), cause })?;
    let config = Arc::new(config);
    let (shutdown, rx) = watch::channel(false);

    let routes = crate::api::routes_by_event(&config);
    if !config.worker.disabled && config.routes.iter().any(|r| r.digest.is_some()) {
        let closer = DigestCloser {
            store: store.clone(),
            templates: templates.clone(),
            routes: routes.clone(),
            clock: clock.clone(),
        };
        tokio::spawn(closer.run(rx.clone(), config.worker.poll_interval));
    }

    let ops_digest = Arc::new(build_ops_digest(&config, store.clone(), clock.clone())?);
    if !config.worker.disabled {
        if config.ops.as_ref().and_then(|o| o.digest_webhook.as_ref()).is_some() {
            let scheduled = build_ops_digest(&config, store.clone(), clock.clone())?;
            tokio::spawn(scheduled.run(rx.clone(), OPS_DIGEST_TICK));
        }
        let rekeyer = crate::suppression::Rekeyer {
            store: store.clone(),
            key: suppression_key.clone(),
            every: std::time::Duration::from_secs(600),
        };
        tokio::spawn(rekeyer.run(rx.clone()));
        if config.retention.enabled {
            let retention = Retention {
                store: store.clone(),
                clock: clock.clone(),
                config: config.retention.clone(),
                dedupe_window: config.dedupe_window,
            };
            tokio::spawn(retention.run(rx.clone()));
        }
    }
    let fastpath = match &config.redis_url {
        Some(url) => Some(Arc::new(
            FastPath::new(url, config.dedupe_window).map_err(|e| AppError::Provider(format!("redis_url: {e}")))?,
        )),
        None => None,
    };
    let state = AppState::new(store.clone(), config.clone(), templates, clock.clone(), fastpath, ops_digest, routes)
        .with_breakers(breakers);
    let worker = (!config.worker.disabled).then(|| {
        let worker = Worker {
            store: store.clone(),
            providers,
            policy: config.retry_policy(),
            concurrency: config.worker.concurrency,
            poll_interval: config.worker.poll_interval,
            lease: config.worker.lease,
            clock: clock.clone(),
            supersede_types: config.routes.iter().filter(|r| r.skip_superseded).map(|r| r.event.clone()).collect(),
            // On Postgres only. SQLite has one writer: a claim made larger by
            // the wait holds it longer, and ingest's tail grew while end to end
            // gained nothing (docs/performance.md); a load never entered is
            // never busy.
            ingest_load: match crate::store::is_postgres(&config.database_url) {
                true => state.ingest.load(),
                false => Arc::default(),
            },
        };
        tokio::spawn(worker.run(rx.clone(), config.shutdown_grace))
    });
    let mut bus = Vec::new();
    for (i, entry) in config.ingest.nats.iter().enumerate() {
        let wiring = crate::ingest::nats::Wiring {
            ingest: state.ingest.clone(),
            store: store.clone(),
            clock: clock.clone(),
            max_body_bytes: config.max_body_bytes,
        };
        let consumer = crate::ingest::nats::NatsIngest::connect(i, entry, wiring).await.map_err(AppError::Bus)?;
        bus.push(tokio::spawn(consumer.run(rx.clone())));
    }
    if let Some(p) = &config.publish.nats {
        let publisher =
            crate::publish::NatsPublisher::connect(p, store.clone(), clock.clone()).await.map_err(AppError::Bus)?;
        bus.push(tokio::spawn(publisher.run(rx.clone())));
    }
    let app = router(state);
    let mut server_rx = rx;
    let server = tokio::spawn(async move {
        let stopped = async move {
            while !*server_rx.borrow() {
                if server_rx.changed().await.is_err() {
                    break;
                }
            }
        };
        // With the peer's address, which the console's sign-in throttle counts by.
        let app = app.into_make_service_with_connect_info::<SocketAddr>();
        if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(stopped).await {
            tracing::error!(error = %e, "HTTP server failed");
        }
    });
    tracing::info!(%addr, database = %redact_url(&config.database_url), "herald is listening");
    Ok(Running { addr, shutdown, server, worker, bus })
}

/// A database URL without its password, for logs.
pub fn redact_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        _ => url.to_string(),
    }
}
