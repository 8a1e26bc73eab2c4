//! Wiring: config → store, templates, providers, HTTP server and worker; and a
//! shutdown that stops claiming, lets attempts in flight finish, and exits.

use crate::api::{AppState, router};
use crate::channel::Provider;
use crate::channel::in_app::InApp;
use crate::channel::sink::DirectorySink;
use crate::channel::sms_http::SmsHttp;
use crate::channel::smtp::Smtp;
use crate::channel::webhook::Webhook;
use crate::clock::{Clock, SystemClock};
use crate::config::Config;
use crate::config::Route;
use crate::deliver::digest::DigestCloser;
use crate::deliver::{Providers, Worker};
use crate::event::Channel;
use crate::render::{TemplateSet, TemplateSetError};
use crate::store::{self, Store, StoreError};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error("templates: {0}")]
    Templates(#[from] TemplateSetError),
    #[error("{0}")]
    Route(String),
    #[error("database: {0}")]
    Store(#[from] StoreError),
    #[error("{0}")]
    Provider(String),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
}

pub fn load_templates(config: &Config) -> Result<TemplateSet, AppError> {
    let set = match &config.templates_dir {
        Some(dir) => TemplateSet::load_dir(dir)?,
        None => TemplateSet::built_in(),
    };
    for (i, route) in config.routes.iter().enumerate() {
        if let Some(d) = route.digest.as_ref().filter(|d| !set.contains(&d.template)) {
            return Err(AppError::Route(format!(
                "routes[{i}].digest.template: no template {:?}",
                d.template
            )));
        }
        if !set.contains(&route.template) {
            return Err(AppError::Route(format!(
                "routes[{i}].template: no template {:?} in {}",
                route.template,
                config
                    .templates_dir
                    .as_ref()
                    .map_or("the built-in templates".into(), |d| d.display().to_string())
            )));
        }
    }
    Ok(set)
}

pub fn build_providers(config: &Config, store: Arc<dyn Store>) -> Result<Providers, AppError> {
    let mut providers: Providers = Providers::new();
    providers.insert(Channel::InApp, Arc::new(InApp::new(store)));
    if let Some(email) = &config.channels.email {
        let p: Arc<dyn Provider> = match (&email.smtp_url, &email.sink) {
            (Some(url), _) => Arc::new(
                Smtp::new(url, &email.from, &email.message_id_domain, email.timeout)
                    .map_err(|e| AppError::Provider(e.to_string()))?,
            ),
            (None, Some(dir)) => Arc::new(DirectorySink::new(dir.clone(), Channel::Email)),
            (None, None) => {
                return Err(AppError::Provider(
                    "channels.email: set smtp_url or sink".into(),
                ));
            }
        };
        providers.insert(Channel::Email, p);
    }
    if let Some(sms) = &config.channels.sms {
        let p: Arc<dyn Provider> = match (&sms.url, &sms.sink) {
            (Some(url), _) => Arc::new(
                SmsHttp::new(url.clone(), sms.auth_token.clone(), sms.timeout)
                    .map_err(|e| AppError::Provider(format!("channels.sms: {e}")))?,
            ),
            (None, Some(dir)) => Arc::new(DirectorySink::new(dir.clone(), Channel::Sms)),
            (None, None) => return Err(AppError::Provider("channels.sms: set url or sink".into())),
        };
        providers.insert(Channel::Sms, p);
    }
    if let Some(hook) = &config.channels.webhook {
        let p = Webhook::new(&hook.secret, hook.timeout)
            .map_err(|e| AppError::Provider(e.to_string()))?;
        providers.insert(Channel::Webhook, Arc::new(p));
    }
    Ok(providers)
}

/// A started Herald: its address, and the handle to stop it.
pub struct Running {
    pub addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    server: JoinHandle<()>,
    worker: Option<JoinHandle<()>>,
}

impl Running {
    /// Stops accepting requests and claiming jobs, waits for what is in flight.
    pub async fn stop(self) {
        let _ = self.shutdown.send(true);
        let _ = self.server.await;
        if let Some(w) = self.worker {
            let _ = w.await;
        }
    }

    /// A handle that triggers shutdown (signal handlers hold one).
    pub fn shutdown_handle(&self) -> watch::Sender<bool> {
        self.shutdown.clone()
    }

    /// Waits until the server has stopped (after a shutdown was triggered).
    pub async fn wait(self) {
        let _ = self.server.await;
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
    config: Config,
    clock: Arc<dyn Clock>,
    listener: Option<TcpListener>,
) -> Result<Running, AppError> {
    config.validate_dedupe_window()?;
    let templates = Arc::new(load_templates(&config)?);
    let store = store::connect(&config.database_url).await?;
    store.migrate().await?;
    let providers = Arc::new(build_providers(&config, store.clone())?);
    let listener = match listener {
        Some(l) => l,
        None => {
            let addr = config.listen_addr()?;
            TcpListener::bind(addr)
                .await
                .map_err(|source| AppError::Listen {
                    addr: config.listen.clone(),
                    source,
                })?
        }
    };
    let addr = listener.local_addr().map_err(|source| AppError::Listen {
        addr: config.listen.clone(),
        source,
    })?;
    let config = Arc::new(config);
    let (shutdown, rx) = watch::channel(false);

    let worker = (!config.worker.disabled).then(|| {
        let worker = Worker {
            store: store.clone(),
            providers,
            policy: config.retry_policy(),
            concurrency: config.worker.concurrency,
            poll_interval: config.worker.poll_interval,
            lease: config.worker.lease,
            clock: clock.clone(),
            supersede_types: config
                .routes
                .iter()
                .filter(|r| r.skip_superseded)
                .map(|r| r.event.clone())
                .collect(),
        };
        tokio::spawn(worker.run(rx.clone(), config.shutdown_grace))
    });
    let routes: Arc<HashMap<String, Route>> = Arc::new(
        config
            .routes
            .iter()
            .map(|r| (r.event.clone(), r.clone()))
            .collect(),
    );
    if !config.worker.disabled && config.routes.iter().any(|r| r.digest.is_some()) {
        let closer = DigestCloser {
            store: store.clone(),
            templates: templates.clone(),
            routes: routes.clone(),
            clock: clock.clone(),
        };
        tokio::spawn(closer.run(rx.clone(), config.worker.poll_interval));
    }

    let app = router(AppState::new(store, config.clone(), templates, clock));
    let mut server_rx = rx;
    let server = tokio::spawn(async move {
        let stopped = async move {
            while !*server_rx.borrow() {
                if server_rx.changed().await.is_err() {
                    break;
                }
            }
        };
        if let Err(e) = axum::serve(listener, app)
            .with_graceful_shutdown(stopped)
            .await
        {
            tracing::error!(error = %e, "HTTP server failed");
        }
    });
    tracing::info!(%addr, database = %redact_url(&config.database_url), "herald is listening");
    Ok(Running {
        addr,
        shutdown,
        server,
        worker,
    })
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
