//! Configuration (DESIGN §6): defaults, then the TOML file, then `HERALD_…`
//! environment variables (`HERALD_RETRY__ATTEMPTS=8`), validated once at load
//! with messages that name the key. Secrets are never printed.

use crate::event::Channel;
use crate::intent::Mode;
use crate::lifecycle::retry::RetryPolicy;
use serde::{Deserialize, Deserializer};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What `herald serve` runs with no config at all: SQLite in `./herald.db`,
/// email and SMS written to `./herald-outbox/`, the built-in example templates.
pub const EMBEDDED_DEFAULT: &str = r#"
listen = "127.0.0.1:8080"
database_url = "sqlite://herald.db"
dedupe_window = "24h"

[[routes]]
event = "purchase_order.approved"
template = "po_approved"
channels = ["email", "sms", "in_app"]

[channels.email]
sink = "herald-outbox"
from = "Herald <noreply@herald.local>"
message_id_domain = "herald.local"

[channels.sms]
sink = "herald-outbox"
"#;

mod bus;
mod caps;
mod console;
mod email;
mod failover;
mod load;
mod mode;
mod receipts;
mod sms;

pub use bus::{IngestConfig, NatsIngestConfig, NatsPublishConfig, PublishConfig};
pub use caps::{Applied as AppliedCap, Cap, Caps};
pub use console::ConsoleConfig;
pub use load::Origins;
pub(crate) use load::closest;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The I/O error is part of the message and deliberately not the error's
    /// `source()`: a caller printing the chain would say it twice.
    #[error("cannot read {}: {cause}", path.display())]
    Read { path: PathBuf, cause: std::io::Error },
    /// One line per problem, each naming the key and where it was set.
    #[error("{0}")]
    Invalid(String),
}

/// `msg` begins with the key it is about (`retry.attempts: …`); loading adds
/// where that key was set.
fn invalid(msg: impl Into<String>) -> ConfigError {
    ConfigError::Invalid(msg.into())
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default = "default_listen")]
    pub listen: String,
    #[serde(default = "default_database_url")]
    pub database_url: String,
    pub redis_url: Option<String>,
    /// Absent: the built-in example templates.
    pub templates_dir: Option<PathBuf>,
    /// Where providers reach this Herald from outside (`https://herald.example.com`):
    /// the base of the delivery-receipt URLs it gives them (Twilio's
    /// `StatusCallback`). Required by providers that post receipts.
    pub public_url: Option<String>,
    #[serde(default = "default_dedupe_window", deserialize_with = "duration")]
    pub dedupe_window: Duration,
    /// Largest accepted request body, in bytes.
    #[serde(default = "default_max_body")]
    pub max_body_bytes: usize,
    /// How long SIGTERM waits for in-flight attempts before exiting.
    #[serde(default = "default_shutdown_grace", deserialize_with = "duration")]
    pub shutdown_grace: Duration,
    #[serde(default)]
    pub retry: RetryConfig,
    #[serde(default)]
    pub worker: WorkerConfig,
    #[serde(default, deserialize_with = "load::list")]
    pub routes: Vec<Route>,
    #[serde(default)]
    pub channels: ChannelsConfig,
    pub ops: Option<OpsConfig>,
    #[serde(default)]
    pub auth: AuthConfig,
    #[serde(default)]
    pub log: LogConfig,
    #[serde(default)]
    pub retention: RetentionConfig,
    /// The name this deployment goes by on its metrics (`herald_build_info`),
    /// so dashboards tell a shadow deployment from the live one.
    #[serde(default = "default_deployment")]
    pub deployment: String,
    /// `live` (the default) or `shadow`: observe only, never call a provider.
    /// A route's or a channel's own `mode` overrides it (see [`Config::mode_for`]).
    #[serde(default, deserialize_with = "mode::optional")]
    pub mode: Option<Mode>,
    #[serde(default)]
    pub receipts: ReceiptsConfig,
    /// Front doors besides HTTP: `[[ingest.nats]]`.
    #[serde(default)]
    pub ingest: IngestConfig,
    /// `[tracing]`: OpenTelemetry export (see [`crate::ops::trace`]).
    #[serde(default)]
    pub tracing: TracingConfig,
    /// Where intents' transitions are published: `[publish.nats]`.
    #[serde(default)]
    pub publish: PublishConfig,
    /// The operator console at `/console`.
    #[serde(default)]
    pub console: ConsoleConfig,
    /// `[suppression]`: the key the suppression list's lookups are made with.
    #[serde(default)]
    pub suppression: SuppressionConfig,
    /// `[caps]`: how many messages one recipient may be sent on a channel in a
    /// period (see [`caps`]).
    #[serde(default)]
    pub caps: Caps,
    /// Where each key was set, for errors found after loading.
    #[serde(skip)]
    pub origins: Origins,
}

/// `[suppression]`. The list keeps each address only as an HMAC under `key`
/// (see [`crate::suppression`]). Absent, Herald draws a key once and keeps it
/// in the database; set it to keep the key out of the database's backups.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SuppressionConfig {
    /// Base64 of 32 bytes or more (`openssl rand -base64 32`); a secret.
    pub key: Option<String>,
    /// The key settled at start-up on the database ([`crate::suppression::resolve`]).
    #[serde(skip)]
    pub resolved: Option<crate::suppression::SuppressionKey>,
}

impl SuppressionConfig {
    /// The key [`crate::suppression::resolve`] settled on the database. A
    /// configuration that never went through it (a hand-built one that
    /// forgot to) is an error here rather than lookups under no key.
    pub fn settled(&self) -> Result<&crate::suppression::SuppressionKey, crate::store::StoreError> {
        (self.resolved.as_ref()).ok_or_else(|| {
            crate::store::StoreError::Schema("the suppression key was never settled on this database".into())
        })
    }
}

/// `[tracing]`: where spans go and what share of notifications is traced.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TracingConfig {
    /// The collector's OTLP/HTTP base URL (`http://127.0.0.1:4318`; the
    /// `/v1/traces` path is added). Without it (and without the standard
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` variables) nothing is traced.
    pub otlp_endpoint: Option<String>,
    /// The share (0 to 1) of notifications traced, chosen by trace id, so a
    /// notification's spans are kept or dropped together in every process.
    #[serde(default = "default_sample_ratio")]
    pub sample_ratio: f64,
}
fn default_sample_ratio() -> f64 {
    1.0
}
impl Default for TracingConfig {
    fn default() -> Self {
        TracingConfig { otlp_endpoint: None, sample_ratio: default_sample_ratio() }
    }
}

/// `[receipts.generic]`: the signed receipt endpoint for in-house gateways;
/// `[receipts.ses]`: Amazon SES's notifications through SNS.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReceiptsConfig {
    pub generic: Option<GenericReceiptsConfig>,
    pub ses: Option<SesReceiptsConfig>,
}

/// `[receipts.ses]`: `POST /v1/receipts/ses`, subscribed to SNS topics that
/// SES publishes bounces, complaints and deliveries to.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SesReceiptsConfig {
    /// The topics whose messages are accepted; any other is refused (403).
    pub topic_arns: Vec<String>,
    /// A PEM certificate that signatures are checked with instead of the one
    /// at `SigningCertURL` (air-gapped deployments, tests). The URL must
    /// still be an SNS one.
    pub certificate_file: Option<PathBuf>,
    /// Answer a `SubscriptionConfirmation` by requesting its `SubscribeURL`.
    /// Off: it is logged (with the URL) for an operator to confirm.
    #[serde(default)]
    pub confirm_subscriptions: bool,
    /// Replaces `https://sns.<region>.amazonaws.com` as the only origin a
    /// `SigningCertURL` or `SubscribeURL` may name (a test's fake SNS).
    pub sns_base_url: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenericReceiptsConfig {
    /// `whsec_…`: receipts are signed with it per Standard Webhooks.
    pub secret: String,
}

/// `[retention]`: ages after which data is pruned, oldest detail first.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetentionConfig {
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Attempts' error text.
    #[serde(default = "default_diag_age", deserialize_with = "duration")]
    pub attempt_diagnostics: Duration,
    /// Rendered content and event bodies (intents keep the digests). A dead
    /// letter older than this can still be read, but not replayed.
    #[serde(default = "default_payload_age", deserialize_with = "duration")]
    pub payloads: Duration,
    /// Whole intents in a final state, with their attempts.
    #[serde(default = "default_intent_age", deserialize_with = "duration")]
    pub intents: Duration,
    /// Closed digest windows, counted from their close (and only once their
    /// digest intent is gone).
    #[serde(default = "default_digest_age", deserialize_with = "duration")]
    pub digests: Duration,
    /// Inbox cards, counted from their last change (and only once no intent
    /// of theirs is left).
    #[serde(default = "default_intent_age", deserialize_with = "duration")]
    pub inbox_cards: Duration,
    /// Records of who replayed a dead letter (sooner if the intent goes).
    #[serde(default = "default_intent_age", deserialize_with = "duration")]
    pub dead_letter_replays: Duration,
    /// Preference versions, counted from when a newer one replaced them (never
    /// the current one, nor one an intent names).
    #[serde(default = "default_intent_age", deserialize_with = "duration")]
    pub preference_versions: Duration,
    /// Status publications, counted from when the bus acknowledged them
    /// (an unpublished one is never pruned).
    #[serde(default = "default_publication_age", deserialize_with = "duration")]
    pub publications: Duration,
    #[serde(default = "default_retention_interval", deserialize_with = "duration")]
    pub interval: Duration,
    /// Rows per pruning transaction.
    #[serde(default = "default_batch")]
    pub batch: i64,
}
fn yes() -> bool {
    true
}
fn default_diag_age() -> Duration {
    Duration::from_secs(14 * 86_400)
}
fn default_payload_age() -> Duration {
    Duration::from_secs(30 * 86_400)
}
fn default_intent_age() -> Duration {
    Duration::from_secs(90 * 86_400)
}
fn default_publication_age() -> Duration {
    Duration::from_secs(86_400)
}
fn default_digest_age() -> Duration {
    Duration::from_secs(7 * 86_400)
}
fn default_retention_interval() -> Duration {
    Duration::from_secs(600)
}
fn default_batch() -> i64 {
    1000
}
impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            enabled: true,
            attempt_diagnostics: default_diag_age(),
            payloads: default_payload_age(),
            intents: default_intent_age(),
            digests: default_digest_age(),
            inbox_cards: default_intent_age(),
            dead_letter_replays: default_intent_age(),
            preference_versions: default_intent_age(),
            publications: default_publication_age(),
            interval: default_retention_interval(),
            batch: default_batch(),
        }
    }
}

fn default_deployment() -> String {
    "default".into()
}
fn default_listen() -> String {
    "127.0.0.1:8080".into()
}
fn default_database_url() -> String {
    "sqlite://herald.db".into()
}
fn default_dedupe_window() -> Duration {
    Duration::from_secs(24 * 3600)
}
fn default_max_body() -> usize {
    256 * 1024
}
fn default_shutdown_grace() -> Duration {
    Duration::from_secs(10)
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryConfig {
    #[serde(default = "default_attempts")]
    pub attempts: u32,
    #[serde(default = "default_base", deserialize_with = "duration")]
    pub base: Duration,
    #[serde(default = "default_max", deserialize_with = "duration")]
    pub max: Duration,
    /// The most a provider's `Retry-After` is honoured (it is a floor under
    /// the next delay, never cut by `max`).
    #[serde(default = "default_max_retry_after", deserialize_with = "duration")]
    pub max_retry_after: Duration,
}
fn default_attempts() -> u32 {
    6
}
fn default_base() -> Duration {
    Duration::from_secs(30)
}
fn default_max() -> Duration {
    Duration::from_secs(3600)
}
fn default_max_retry_after() -> Duration {
    crate::lifecycle::retry::DEFAULT_MAX_RETRY_AFTER
}
impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            attempts: default_attempts(),
            base: default_base(),
            max: default_max(),
            max_retry_after: default_max_retry_after(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerConfig {
    /// Provider calls in flight at once, per process.
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    #[serde(default = "default_poll", deserialize_with = "duration")]
    pub poll_interval: Duration,
    #[serde(default = "default_lease", deserialize_with = "duration")]
    pub lease: Duration,
    /// Run no workers in this process (an API-only instance).
    #[serde(default)]
    pub disabled: bool,
}
fn default_concurrency() -> usize {
    32
}
fn default_poll() -> Duration {
    Duration::from_millis(200)
}
fn default_lease() -> Duration {
    Duration::from_secs(30)
}
impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            concurrency: default_concurrency(),
            poll_interval: default_poll(),
            lease: default_lease(),
            disabled: false,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    pub event: String,
    pub template: String,
    #[serde(deserialize_with = "channels")]
    pub channels: Vec<Channel>,
    /// Bypasses quiet hours and digests (never an explicit opt-out).
    #[serde(default)]
    pub critical: bool,
    /// Skip a pending intent once a newer version of its entity has gone (or is
    /// queued) to the same recipient on the same channel.
    #[serde(default)]
    pub skip_superseded: bool,
    /// With failover providers: after an `unknown` outcome, retry on the next
    /// provider instead of the same one (a possible duplicate beats silence).
    #[serde(default)]
    pub failover_on_unknown: bool,
    pub digest: Option<DigestRoute>,
    /// `live` or `shadow` for this route; unset: the deployment's.
    #[serde(default, deserialize_with = "mode::optional")]
    pub mode: Option<Mode>,
    /// This route's own caps, in place of `[caps]`'s for the channels it names.
    pub caps: Option<Caps>,
    /// Never capped (one-time codes); its messages still count toward the
    /// caps of the recipient's other messages.
    #[serde(default)]
    pub uncapped: bool,
}

/// `digest = { window = "1h", key = "{{ entity.id }}", template = "…", channels = ["email"] }`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DigestRoute {
    #[serde(deserialize_with = "duration")]
    pub window: Duration,
    /// A template expression: events with the same rendered key share a digest.
    #[serde(default = "default_digest_key")]
    pub key: String,
    /// The template the digest is rendered from; its context has `members`.
    pub template: String,
    /// The channels batched; default: the route's channels except in-app.
    #[serde(default, deserialize_with = "optional_channels")]
    pub channels: Option<Vec<Channel>>,
}

fn default_digest_key() -> String {
    "{{ event.type }}".into()
}

impl DigestRoute {
    pub fn batches(&self, route: &Route, channel: Channel) -> bool {
        match &self.channels {
            Some(list) => list.contains(&channel),
            None => channel != Channel::InApp && route.channels.contains(&channel),
        }
    }
}

/// A channel named in a route, read as it is loaded; loading prefixes the
/// error with the key (`routes[0].channels[1]`) and where it was set.
struct ConfigChannel(Channel);

impl<'de> Deserialize<'de> for ConfigChannel {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Channel::parse(&text).map(ConfigChannel).ok_or_else(|| {
            serde::de::Error::custom(format!("unknown channel {text:?}; expected email, sms, in_app or webhook"))
        })
    }
}

fn channels<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Channel>, D::Error> {
    Ok(Vec::<ConfigChannel>::deserialize(d)?.into_iter().map(|c| c.0).collect())
}

fn optional_channels<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<Channel>>, D::Error> {
    Ok(Option::<Vec<ConfigChannel>>::deserialize(d)?.map(|list| list.into_iter().map(|c| c.0).collect()))
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChannelsConfig {
    pub email: Option<EmailConfig>,
    pub sms: Option<SmsConfig>,
    pub webhook: Option<WebhookConfig>,
    /// In-app is Herald's own and always on; this block only sets its mode.
    pub in_app: Option<InAppConfig>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InAppConfig {
    #[serde(default, deserialize_with = "mode::optional")]
    pub mode: Option<Mode>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmailConfig {
    pub smtp_url: Option<String>,
    /// Write messages as files into this directory instead of sending them.
    pub sink: Option<PathBuf>,
    #[serde(default = "default_from")]
    pub from: String,
    #[serde(default = "default_message_id_domain")]
    pub message_id_domain: String,
    #[serde(default = "default_provider_timeout", deserialize_with = "duration")]
    pub timeout: Duration,
    #[serde(default, deserialize_with = "mode::optional")]
    pub mode: Option<Mode>,
    /// Failover: the names of `named` provider blocks, in order of preference
    /// (the same rules as SMS's). Set, the channel's own smtp_url and sink are unused.
    #[serde(default)]
    pub providers: Vec<String>,
    /// `[channels.email.named.NAME]`: one SMTP server (or sink) each, with the keys above.
    #[serde(default)]
    pub named: std::collections::BTreeMap<String, EmailConfig>,
    /// A provider that fails this many times in a row is skipped…
    #[serde(default = "default_breaker_failures")]
    pub breaker_failures: u32,
    /// …for this long, then tried again.
    #[serde(default = "default_breaker_cool_down", deserialize_with = "duration")]
    pub breaker_cool_down: Duration,
}
fn default_from() -> String {
    "Herald <noreply@herald.local>".into()
}
fn default_message_id_domain() -> String {
    "herald.local".into()
}
fn default_provider_timeout() -> Duration {
    Duration::from_secs(10)
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SmsConfig {
    /// Which protocol `url` or the Twilio keys speak; the sink needs none.
    #[serde(default)]
    pub provider: SmsProvider,
    pub url: Option<String>,
    pub sink: Option<PathBuf>,
    /// `http`: sent as `Authorization: Bearer …` when set. `twilio`: the
    /// account's auth token (HTTP Basic auth, and the key that signs its
    /// status callbacks).
    pub auth_token: Option<String>,
    #[serde(default = "default_provider_timeout", deserialize_with = "duration")]
    pub timeout: Duration,
    /// `twilio`: the account the messages are created under.
    pub account_sid: Option<String>,
    /// `twilio`: the sender, a number in E.164, a short code or an
    /// alphanumeric sender id; or else `messaging_service_sid`.
    pub from: Option<String>,
    pub messaging_service_sid: Option<String>,
    /// `twilio`: the API's base (a compatible gateway, a test's fake).
    #[serde(default = "default_twilio_base_url")]
    pub base_url: String,
    /// Failover: the names of `named` provider blocks, in order of preference.
    /// Set, the channel's own url, sink and Twilio keys are unused.
    #[serde(default)]
    pub providers: Vec<String>,
    /// `[channels.sms.named.NAME]`: one provider each, with the keys above.
    #[serde(default)]
    pub named: std::collections::BTreeMap<String, SmsConfig>,
    /// A provider that fails this many times in a row is skipped…
    #[serde(default = "default_breaker_failures")]
    pub breaker_failures: u32,
    /// …for this long, then tried again.
    #[serde(default = "default_breaker_cool_down", deserialize_with = "duration")]
    pub breaker_cool_down: Duration,
    /// `live` or `shadow` for the channel (not for one of its `named` providers).
    #[serde(default, deserialize_with = "mode::optional")]
    pub mode: Option<Mode>,
}

fn default_breaker_failures() -> u32 {
    5
}
fn default_breaker_cool_down() -> Duration {
    Duration::from_secs(30)
}

/// The SMS provider's protocol.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SmsProvider {
    /// The JSON provider of DESIGN §5, with `Idempotency-Key`.
    #[default]
    Http,
    /// Twilio's Messages API (and gateways compatible with it).
    Twilio,
}

fn default_twilio_base_url() -> String {
    "https://api.twilio.com".into()
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    pub secret: String,
    #[serde(default = "default_provider_timeout", deserialize_with = "duration")]
    pub timeout: Duration,
    /// Deliver to loopback, private and link-local addresses too (tests,
    /// on-premise receivers). Off: a tenant's `webhook_url` cannot reach inside.
    #[serde(default)]
    pub allow_private_destinations: bool,
    #[serde(default, deserialize_with = "mode::optional")]
    pub mode: Option<Mode>,
}

/// `[ops]`: the daily dead-letter digest to the operators.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpsConfig {
    pub digest_webhook: Option<String>,
    /// The local time of day it goes, written `HH:MM`.
    #[serde(default = "default_digest_at", deserialize_with = "time_of_day")]
    pub digest_at: jiff::civil::Time,
    /// The IANA time zone `digest_at` is read in.
    #[serde(default = "default_digest_tz", deserialize_with = "time_zone")]
    pub digest_timezone: jiff::tz::TimeZone,
}
fn default_digest_at() -> jiff::civil::Time {
    jiff::civil::time(8, 30, 0, 0)
}
fn default_digest_tz() -> jiff::tz::TimeZone {
    jiff::tz::TimeZone::UTC
}
impl Default for OpsConfig {
    fn default() -> Self {
        OpsConfig { digest_webhook: None, digest_at: default_digest_at(), digest_timezone: default_digest_tz() }
    }
}

/// `08:30`: hours and minutes, nothing more (jiff would also take seconds).
fn time_of_day<'de, D: Deserializer<'de>>(d: D) -> Result<jiff::civil::Time, D::Error> {
    let text = String::deserialize(d)?;
    let bad = || serde::de::Error::custom(format!("{text:?} is not a time like 08:30"));
    if text.len() != 5 {
        return Err(bad());
    }
    text.parse().map_err(|_| bad())
}

fn time_zone<'de, D: Deserializer<'de>>(d: D) -> Result<jiff::tz::TimeZone, D::Error> {
    let text = String::deserialize(d)?;
    jiff::tz::TimeZone::get(&text).map_err(|_| serde::de::Error::custom(format!("{text:?} is not an IANA time zone")))
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    #[serde(default, deserialize_with = "load::list")]
    pub tokens: Vec<TokenConfig>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    pub name: String,
    pub tenant: String,
    pub token_sha256: String,
    pub scopes: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// `text` or `json`.
    #[serde(default = "default_log_format")]
    pub format: String,
    /// A tracing filter, e.g. `info` or `herald=debug,sqlx=warn`.
    #[serde(default = "default_log_level")]
    pub level: String,
    /// `HERALD_LOG`, which replaces `level` when set (not a key of the file).
    #[serde(skip)]
    pub from_env: Option<String>,
    /// The share (0 to 1) of routine lines kept: intents created to be sent
    /// and attempts accepted, chosen by intent key. The rare paths are
    /// always logged (see [`crate::ops::log`]).
    #[serde(default = "default_sample_accepted")]
    pub sample_accepted: f64,
}
fn default_sample_accepted() -> f64 {
    1.0
}
fn default_log_format() -> String {
    "text".into()
}
fn default_log_level() -> String {
    "info".into()
}
impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            format: default_log_format(),
            level: default_log_level(),
            from_env: None,
            sample_accepted: default_sample_accepted(),
        }
    }
}

/// A tracing filter as Herald takes it: comma-separated directives, each a
/// level (`trace`, `debug`, `info`, `warn`, `error`, `off`) or `target=level`
/// (`herald=debug`, `herald::deliver[attempt]=trace`). tracing would read a
/// bare word that is not a level as a target to trace (`verbose` would turn
/// every other log off and trace a target that does not exist), and a target
/// without a level likewise; Herald refuses both instead.
pub fn check_log_filter(filter: &str) -> Result<(), String> {
    const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];
    for directive in filter.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let level = directive.rsplit('=').next().unwrap_or_default().to_ascii_lowercase();
        if !LEVELS.contains(&level.as_str()) {
            return Err(format!(
                "{filter:?}: {directive:?} names no level; write one of {} or target=level, like herald=debug",
                LEVELS.join(", ")
            ));
        }
    }
    tracing_subscriber::EnvFilter::builder()
        .parse(filter)
        .map(|_| ())
        .map_err(|e| format!("{filter:?} is not a log filter like info or herald=debug,sqlx=warn: {e}"))
}

/// `"30s"`, `"15m"`, `"1h 30m"`, `"200ms"`, `"14d"` (jiff's friendly format; a
/// day is 24 hours here) or ISO 8601 (`PT30S`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let digits = s.trim().trim_start_matches('-');
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Err(bare_number(s.trim()));
    }
    let bad = || {
        format!(
            "{s:?} is not a duration: write a number and a unit (ms, s, m, h or d, or their names: seconds, \
             minutes…), like \"30s\", \"5m\", \"1h 30m\" or \"14d\""
        )
    };
    let d: jiff::SignedDuration = match s.trim().parse() {
        Ok(d) => d,
        // Days are calendar units to jiff; here a day is 24 hours.
        Err(_) => {
            let span: jiff::Span = s.trim().parse().map_err(|_| bad())?;
            span.to_duration(jiff::SpanRelativeTo::days_are_24_hours()).map_err(|_| bad())?
        }
    };
    Duration::try_from(d).map_err(|_| format!("{s:?} must not be negative"))
}

/// `lease = 30` in the file, or `HERALD_WORKER__LEASE=30`: a number with no unit,
/// which Herald will not guess at (seconds? milliseconds?).
fn bare_number(n: &str) -> String {
    format!(
        "{n} has no unit: a duration is a string with a unit, like \"30s\", \"5m\" or \"24h\" (for {n} seconds write \"{n}s\")"
    )
}

/// A duration key: a string [`parse_duration`] reads. A number in the file
/// reaches here as one, and is refused with the unit it lacks.
fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    struct DurationVisitor;

    impl serde::de::Visitor<'_> for DurationVisitor {
        type Value = Duration;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a duration, a string with a unit like \"30s\", \"5m\" or \"24h\"")
        }

        fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Duration, E> {
            parse_duration(s).map_err(E::custom)
        }

        fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<Duration, E> {
            Err(E::custom(bare_number(&n.to_string())))
        }

        fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Duration, E> {
            Err(E::custom(bare_number(&n.to_string())))
        }

        fn visit_f64<E: serde::de::Error>(self, n: f64) -> Result<Duration, E> {
            Err(E::custom(bare_number(&n.to_string())))
        }
    }

    d.deserialize_str(DurationVisitor)
}

/// `15m30s`, `1h`, `200ms`: the compact form the CLI prints.
pub fn format_duration(d: Duration) -> String {
    if d.is_zero() {
        return "0s".into();
    }
    let ms = d.as_millis();
    let (h, m, s, rest) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000);
    let mut out = String::new();
    for (n, unit) in [(h, "h"), (m, "m"), (s, "s"), (rest, "ms")] {
        if n > 0 {
            out.push_str(&format!("{n}{unit}"));
        }
    }
    out
}

/// Where a command's configuration comes from, found the same way by every
/// command (`serve` and the ones that only read alike): `--config FILE`, else
/// `HERALD_CONFIG`, else `./herald.toml` when there is one, else the
/// embedded default. `HERALD_…` variables then override whichever it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    Flag(PathBuf),
    Env(PathBuf),
    Local(PathBuf),
    Embedded,
}

/// The file a command reads when neither `--config` nor `HERALD_CONFIG` names one.
pub const LOCAL_CONFIG: &str = "herald.toml";

impl ConfigSource {
    /// The source for `--config` (when given), this process's environment and
    /// working directory.
    pub fn locate(flag: Option<&Path>) -> ConfigSource {
        let env = std::env::var_os("HERALD_CONFIG").map(PathBuf::from);
        ConfigSource::locate_with(flag, env, Path::new(LOCAL_CONFIG).is_file())
    }

    /// As [`ConfigSource::locate`], with `HERALD_CONFIG` and the presence of
    /// `./herald.toml` given. An empty `HERALD_CONFIG` is as good as none.
    pub fn locate_with(flag: Option<&Path>, env: Option<PathBuf>, local_exists: bool) -> ConfigSource {
        match (flag, env.filter(|p| !p.as_os_str().is_empty())) {
            (Some(path), _) => ConfigSource::Flag(path.to_path_buf()),
            (None, Some(path)) => ConfigSource::Env(path),
            (None, None) if local_exists => ConfigSource::Local(PathBuf::from(LOCAL_CONFIG)),
            (None, None) => ConfigSource::Embedded,
        }
    }

    /// The file to read; `None` for the embedded default.
    pub fn path(&self) -> Option<&Path> {
        match self {
            ConfigSource::Flag(p) | ConfigSource::Env(p) | ConfigSource::Local(p) => Some(p),
            ConfigSource::Embedded => None,
        }
    }

    /// Whether a person named the file (`--config` or `HERALD_CONFIG`),
    /// rather than it being found in the working directory or built in.
    pub fn is_explicit(&self) -> bool {
        matches!(self, ConfigSource::Flag(_) | ConfigSource::Env(_))
    }

    pub fn load(&self) -> Result<Config, ConfigError> {
        Config::load(self.path())
    }
}

impl std::fmt::Display for ConfigSource {
    /// As a person would say where the configuration came from:
    /// `./herald.toml`, `HERALD_CONFIG=/etc/herald.toml`, `the embedded default`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigSource::Flag(p) => write!(f, "{}", p.display()),
            ConfigSource::Env(p) => write!(f, "HERALD_CONFIG={}", p.display()),
            ConfigSource::Local(p) => write!(f, "./{}", p.display()),
            ConfigSource::Embedded => f.write_str("the embedded default"),
        }
    }
}

impl Config {
    /// The file at `path`, or the embedded default; then the environment.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        let vars: Vec<(String, String)> = std::env::vars_os()
            .filter(|(name, _)| name.to_string_lossy().starts_with("HERALD_"))
            .map(|(name, value)| (name.to_string_lossy().into_owned(), value.to_string_lossy().into_owned()))
            .collect();
        Config::load_with_env(path, &vars)
    }

    /// As [`Config::load`], with the environment given (tests pass their own).
    pub fn load_with_env(path: Option<&Path>, env: &[(String, String)]) -> Result<Config, ConfigError> {
        load::load(path, env)
    }

    pub fn retry_policy(&self) -> RetryPolicy {
        RetryPolicy::new(self.retry.attempts, self.retry.base, self.retry.max)
            .with_max_retry_after(self.retry.max_retry_after)
            .within(self.dedupe_window)
    }

    pub fn listen_addr(&self) -> Result<SocketAddr, ConfigError> {
        self.listen
            .parse()
            .map_err(|_| invalid(format!("listen: {:?} is not an address like 127.0.0.1:8080", self.listen)))
    }

    /// The log filter in force: `HERALD_LOG` when set, else `log.level`.
    pub fn log_filter(&self) -> &str {
        self.log.from_env.as_deref().unwrap_or(&self.log.level)
    }

    /// `public_url` without a trailing `/`, ready for a path to be added.
    pub fn public_base(&self) -> Option<&str> {
        self.public_url.as_deref().map(|u| u.trim_end_matches('/'))
    }

    pub fn auth_enabled(&self) -> bool {
        !self.auth.tokens.is_empty()
    }

    /// Whether the deployment can deliver on `channel` (in-app is Herald's own).
    pub fn channel_configured(&self, channel: Channel) -> bool {
        match channel {
            Channel::InApp => true,
            Channel::Email => self.channels.email.is_some(),
            Channel::Sms => self.channels.sms.is_some(),
            Channel::Webhook => self.channels.webhook.is_some(),
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let addr = self.listen_addr()?;
        if !addr.ip().is_loopback() && !self.auth_enabled() {
            return Err(invalid(format!(
                "listen: {addr} is not a loopback address, and no [[auth.tokens]] are configured; \
                 Herald without tokens would accept events from anyone who can reach it. \
                 Configure tokens or listen on 127.0.0.1"
            )));
        }
        let scheme = self.database_url.split("://").next().unwrap_or_default();
        if !matches!(scheme, "sqlite" | "postgres" | "postgresql") {
            return Err(invalid(format!("database_url: scheme {scheme:?} is not sqlite:// or postgres://")));
        }
        self.ingest.validate()?;
        self.publish.validate()?;
        if self.max_body_bytes < 1024 {
            return Err(invalid("max_body_bytes: must be at least 1024"));
        }
        let r = &self.retry;
        if r.attempts == 0 || r.attempts > 100 {
            return Err(invalid(format!(
                "retry.attempts: {} must be between 1 and 100 (it counts the first try)",
                r.attempts
            )));
        }
        if r.base.is_zero() {
            return Err(invalid("retry.base: must be longer than zero"));
        }
        if r.max < r.base {
            return Err(invalid("retry.max: must not be shorter than retry.base"));
        }
        if r.max_retry_after.is_zero() {
            return Err(invalid(
                "retry.max_retry_after: must be longer than zero (it caps how long a provider's Retry-After is honoured)",
            ));
        }
        let w = &self.worker;
        if !(1..=4096).contains(&w.concurrency) {
            return Err(invalid("worker.concurrency: must be between 1 and 4096"));
        }
        if w.poll_interval.is_zero() {
            return Err(invalid("worker.poll_interval: must be longer than zero"));
        }
        for (key, timeout) in self.provider_timeouts() {
            if timeout.is_zero() {
                return Err(invalid(format!(
                    "{key}: must be longer than zero (every call would be abandoned at once and recorded unknown)"
                )));
            }
            let longest = w.lease * 3 / 4;
            if timeout > longest {
                let needed = Duration::from_secs((timeout * 4 / 3).as_secs_f64().ceil() as u64);
                return Err(invalid(format!(
                    "{key}: {} leaves too little of worker.lease ({}). The lease starts at the claim, before the call, \
                     and must still cover recording the outcome, so a call may take at most three quarters of it ({}); \
                     otherwise a slow call could be retaken by another worker while still in flight. \
                     Shorten the timeout or raise worker.lease to {}",
                    format_duration(timeout),
                    format_duration(w.lease),
                    format_duration(longest),
                    format_duration(needed)
                )));
            }
        }
        self.validate_dedupe_window()?;
        self.validate_routes()?;
        self.validate_channels()?;
        self.validate_modes()?;
        for (i, t) in self.auth.tokens.iter().enumerate() {
            let hex_ok = t.token_sha256.len() == 64 && t.token_sha256.bytes().all(|b| b.is_ascii_hexdigit());
            if !hex_ok {
                return Err(invalid(format!(
                    "auth.tokens[{i}].token_sha256: must be 64 hex characters (the SHA-256 of the token)"
                )));
            }
        }
        self.validate_ops()?;
        self.validate_retention()?;
        self.validate_caps()?;
        self.console.validate()?;
        if !matches!(self.log.format.as_str(), "text" | "json") {
            return Err(invalid(format!("log.format: {:?} must be \"text\" or \"json\"", self.log.format)));
        }
        check_log_filter(&self.log.level).map_err(|m| invalid(format!("log.level: {m}")))?;
        let ratio = self.log.sample_accepted;
        if !(0.0..=1.0).contains(&ratio) {
            return Err(invalid(format!("log.sample_accepted: {ratio} must be between 0 and 1 (1 keeps every line)")));
        }
        let ratio = self.tracing.sample_ratio;
        if !(0.0..=1.0).contains(&ratio) {
            return Err(invalid(format!(
                "tracing.sample_ratio: {ratio} must be between 0 and 1 (1 traces every notification)"
            )));
        }
        if let Some(url) = &self.tracing.otlp_endpoint {
            crate::ops::trace::traces_url(url).map_err(|m| invalid(format!("tracing.otlp_endpoint: {m}")))?;
        }
        if self.deployment.trim().is_empty() || self.deployment.len() > 64 {
            return Err(invalid("deployment: must be 1 to 64 characters (it labels every build_info metric)"));
        }
        Ok(())
    }

    /// Rule 2: a duplicate arriving after the record of the original has been
    /// pruned would be sent again, so the window must outlive the retry chain.
    pub fn validate_dedupe_window(&self) -> Result<(), ConfigError> {
        let horizon = self.retry_policy().horizon();
        if self.dedupe_window <= horizon {
            return Err(invalid(format!(
                "dedupe_window: {} is not longer than the retry horizon {} (retry.attempts = {}, base = {}, max = {}); \
                 a duplicate arriving late in the retry chain would be sent again. Set dedupe_window above {}",
                format_duration(self.dedupe_window),
                format_duration(horizon),
                self.retry.attempts,
                format_duration(self.retry.base),
                format_duration(self.retry.max),
                format_duration(horizon)
            )));
        }
        Ok(())
    }

    fn validate_ops(&self) -> Result<(), ConfigError> {
        let Some(ops) = &self.ops else { return Ok(()) };
        if let Some(url) = &ops.digest_webhook
            && reqwest::Url::parse(url).is_err()
        {
            return Err(invalid(format!("ops.digest_webhook: {url:?} is not a URL")));
        }
        Ok(())
    }

    /// Records must outlive the dedupe window (rule 2), and content must
    /// outlive anything still waiting for it (a digest window).
    fn validate_retention(&self) -> Result<(), ConfigError> {
        let r = &self.retention;
        let window = format_duration(self.dedupe_window);
        for (key, age) in [("retention.intents", r.intents), ("retention.payloads", r.payloads)] {
            if age < self.dedupe_window {
                return Err(invalid(format!(
                    "{key}: {} is shorter than dedupe_window ({window}); a duplicate could arrive after its record was pruned",
                    format_duration(age)
                )));
            }
        }
        let longest_digest =
            self.routes.iter().filter_map(|r| r.digest.as_ref()).map(|d| d.window).max().unwrap_or_default();
        if r.payloads <= longest_digest * 2 {
            return Err(invalid(format!(
                "retention.payloads: {} must be longer than twice the longest digest window ({})",
                format_duration(r.payloads),
                format_duration(longest_digest)
            )));
        }
        // A member planned just inside a window may arrive after it closed; the
        // closed window is what sends it on its own instead of reopening it.
        if r.digests <= longest_digest {
            return Err(invalid(format!(
                "retention.digests: {} must be longer than the longest digest window ({})",
                format_duration(r.digests),
                format_duration(longest_digest)
            )));
        }
        if r.batch < 1 {
            return Err(invalid("retention.batch: must be at least 1"));
        }
        if r.interval.is_zero() {
            return Err(invalid("retention.interval: must be longer than zero"));
        }
        Ok(())
    }

    fn provider_timeouts(&self) -> Vec<(String, Duration)> {
        let c = &self.channels;
        let mut out = Vec::new();
        if let Some(e) = &c.email {
            if e.providers.is_empty() {
                out.push(("channels.email.timeout".into(), e.timeout));
            }
            for (name, named) in &e.named {
                out.push((format!("channels.email.named.{name}.timeout"), named.timeout));
            }
        }
        if let Some(s) = &c.sms {
            // With failover each named provider has its own.
            if s.providers.is_empty() {
                out.push(("channels.sms.timeout".into(), s.timeout));
            }
            for (name, named) in &s.named {
                out.push((format!("channels.sms.named.{name}.timeout"), named.timeout));
            }
        }
        if let Some(w) = &c.webhook {
            out.push(("channels.webhook.timeout".into(), w.timeout));
        }
        out
    }

    fn validate_routes(&self) -> Result<(), ConfigError> {
        for (i, route) in self.routes.iter().enumerate() {
            if route.event.is_empty() {
                return Err(invalid(format!("routes[{i}].event: must not be empty")));
            }
            if self.routes[..i].iter().any(|r| r.event == route.event) {
                return Err(invalid(format!("routes[{i}].event: {:?} has two routes", route.event)));
            }
            if route.channels.is_empty() {
                return Err(invalid(format!("routes[{i}].channels: must name at least one channel")));
            }
            if let Some(d) = &route.digest
                && d.window < Duration::from_secs(1)
            {
                return Err(invalid(format!("routes[{i}].digest.window: must be at least 1s")));
            }
        }
        Ok(())
    }

    fn validate_channels(&self) -> Result<(), ConfigError> {
        if let Some(e) = &self.channels.email {
            e.validate()?;
            let sms = self.channels.sms.as_ref().map(|s| s.providers.as_slice()).unwrap_or_default();
            if let Some(name) = e.providers.iter().find(|n| sms.contains(n)) {
                return Err(invalid(format!(
                    "channels.email.providers: {name:?} is an SMS provider's name too; names label metrics and \
                     /readyz, so each channel's must be its own"
                )));
            }
        }
        if let Some(url) = &self.public_url {
            sms::check_base("public_url", url)?;
        }
        if let Some(key) = &self.suppression.key
            && let Err(e) = crate::suppression::SuppressionKey::from_base64(key)
        {
            return Err(invalid(format!("suppression.key: {e}")));
        }
        if let Some(g) = &self.receipts.generic
            && crate::channel::webhook::decode_secret(&g.secret).is_err()
        {
            return Err(invalid("receipts.generic.secret: must be a whsec_… secret (base64 after the prefix)"));
        }
        if let Some(s) = &self.channels.sms {
            s.validate(self.public_url.as_deref())?;
        }
        if let Some(ses) = &self.receipts.ses {
            ses.validate()?;
        }
        if let Some(w) = &self.channels.webhook
            && !w.secret.starts_with("whsec_")
        {
            return Err(invalid("channels.webhook.secret: must be a whsec_… secret (base64 after the prefix)"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("herald.toml");
        std::fs::write(&path, text).unwrap();
        let env: Vec<_> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Config::load_with_env(Some(&path), &env)
    }

    #[test]
    fn the_flag_wins_then_herald_config_then_a_local_file_then_the_default() {
        let (flag, env) = (Path::new("a.toml"), Some(PathBuf::from("/etc/herald.toml")));
        assert_eq!(ConfigSource::locate_with(Some(flag), env.clone(), true), ConfigSource::Flag(flag.into()));
        assert_eq!(ConfigSource::locate_with(None, env.clone(), true), ConfigSource::Env("/etc/herald.toml".into()));
        assert_eq!(
            ConfigSource::locate_with(None, Some(PathBuf::new()), true),
            ConfigSource::Local("herald.toml".into())
        );
        assert_eq!(ConfigSource::locate_with(None, None, false), ConfigSource::Embedded);
        assert_eq!(ConfigSource::locate_with(None, env, false).to_string(), "HERALD_CONFIG=/etc/herald.toml");
        assert_eq!(ConfigSource::Local("herald.toml".into()).to_string(), "./herald.toml");
        // HERALD_CONFIG names the file; it is not a key of it
        let c = load("", &[("HERALD_CONFIG", "/etc/herald.toml")]);
        assert!(c.is_ok(), "{:?}", c.err());
    }

    #[test]
    fn the_embedded_default_is_valid() {
        let c = Config::load_with_env(None, &[]).unwrap();
        assert_eq!(c.listen, "127.0.0.1:8080");
        assert_eq!(c.routes[0].event, "purchase_order.approved");
        assert!(c.templates_dir.is_none());
    }

    #[test]
    fn errors_name_the_key() {
        let e = load("[retry]\nbase = \"soon\"\n", &[]).unwrap_err().to_string();
        assert!(e.contains("soon") && e.contains("duration"), "{e}");
        let e = load("retyr = 1\n", &[]).unwrap_err().to_string();
        assert!(e.contains("retyr"), "{e}");
        let e =
            load("[[routes]]\nevent = \"a\"\ntemplate = \"t\"\nchannels = [\"fax\"]\n", &[]).unwrap_err().to_string();
        assert!(e.contains("routes[0].channels[0]"), "{e}");
        let e = load("listen = \"0.0.0.0:8080\"\n", &[]).unwrap_err().to_string();
        assert!(e.contains("listen") && e.contains("tokens"), "{e}");
    }

    #[test]
    fn the_retry_after_ceiling_defaults_to_an_hour_and_is_checked_at_load() {
        let c = Config::load_with_env(None, &[]).unwrap();
        assert_eq!(c.retry.max_retry_after, Duration::from_secs(3600));
        assert_eq!(c.retry_policy().max_retry_after, Duration::from_secs(3600));
        assert_eq!(c.retry_policy().dedupe_window, Some(c.dedupe_window), "chains end within the window");
        let c = load("[retry]\nmax = \"200ms\"\nbase = \"20ms\"\nmax_retry_after = \"2h\"\n", &[]).unwrap();
        assert_eq!(c.retry_policy().max_retry_after, Duration::from_secs(7200), "not cut by retry.max");
        let c = load("", &[("HERALD_RETRY__MAX_RETRY_AFTER", "90s")]).unwrap();
        assert_eq!(c.retry.max_retry_after, Duration::from_secs(90));
        for bad in ["0s", "soon"] {
            let e = load(&format!("[retry]\nmax_retry_after = {bad:?}\n"), &[]).unwrap_err().to_string();
            assert!(e.contains("retry.max_retry_after"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_dedupe_window_inside_the_retry_horizon_is_refused_naming_both() {
        let e = load("dedupe_window = \"5m\"\n[retry]\nattempts = 6\nbase = \"30s\"\nmax = \"1h\"\n", &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("5m") && e.contains("15m30s") && e.contains("horizon"), "{e}");
        assert!(load("dedupe_window = \"15m31s\"\n", &[]).is_ok());
    }

    /// Issue 33: `lease = 30` said "found signed int `30`, expected a string",
    /// and `HERALD_WORKER__LEASE=30` that "30" was not a duration.
    #[test]
    fn a_duration_written_as_a_bare_number_asks_for_a_unit() {
        let keys = [
            "dedupe_window",
            "shutdown_grace",
            "retry.base",
            "retry.max",
            "worker.lease",
            "worker.poll_interval",
            "retention.payloads",
            "console.session_ttl",
        ];
        for key in keys {
            let toml = match key.split_once('.') {
                Some((section, leaf)) => format!("[{section}]\n{leaf} = 30\n"),
                None => format!("{key} = 30\n"),
            };
            let e = load(&toml, &[]).unwrap_err().to_string();
            assert!(e.starts_with(&format!("{key}: 30 has no unit")), "{e}");
            assert!(e.contains(r#"like "30s", "5m" or "24h""#) && e.ends_with("herald.toml)"), "{e}");
        }
        let e = load("[worker]\nlease = 30\n", &[]).unwrap_err().to_string();
        assert!(e.starts_with("worker.lease: 30 has no unit: a duration is a string with a unit"), "{e}");
        assert!(e.contains(r#"(for 30 seconds write "30s")"#) && e.ends_with("herald.toml)"), "{e}");
        let e = load("[worker]\nlease = 1.5\n", &[]).unwrap_err().to_string();
        assert!(e.starts_with("worker.lease: 1.5 has no unit"), "{e}");
        let route = "[[routes]]\nevent = \"a\"\ntemplate = \"t\"\nchannels = [\"email\"]\n";
        let e = load(&format!("{route}digest = {{ window = 3600, template = \"d\" }}\n"), &[]).unwrap_err().to_string();
        assert!(e.starts_with("routes[0].digest.window: 3600 has no unit"), "{e}");
        // the environment's text says the same, naming the variable
        let e = load("", &[("HERALD_WORKER__LEASE", "30")]).unwrap_err().to_string();
        assert!(e.starts_with("worker.lease: 30 has no unit"), "{e}");
        assert!(e.ends_with("(from environment variable HERALD_WORKER__LEASE)"), "{e}");
    }

    #[test]
    fn a_string_that_is_not_a_duration_lists_the_units() {
        let e = load("[retry]\nbase = \"thirty seconds\"\n", &[]).unwrap_err().to_string();
        assert!(e.starts_with("retry.base: \"thirty seconds\" is not a duration: write a number and a unit"), "{e}");
        assert!(e.contains("ms, s, m, h or d") && e.ends_with("herald.toml)"), "{e}");
        let e = load("", &[("HERALD_RETRY__MAX", "1 fortnight")]).unwrap_err().to_string();
        assert!(e.contains("retry.max") && e.contains("ms, s, m, h or d"), "{e}");
        assert!(e.ends_with("(from environment variable HERALD_RETRY__MAX)"), "{e}");
        // jiff's long unit names are durations too
        assert_eq!(parse_duration("30 secs").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("2 hours 5 minutes").unwrap(), Duration::from_secs(7500));
    }

    #[test]
    fn durations_parse_and_print_compactly() {
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("200ms").unwrap(), Duration::from_millis(200));
        assert_eq!(parse_duration("1h 30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("14d").unwrap(), Duration::from_secs(14 * 86_400));
        assert!(parse_duration("-5s").is_err());
        assert_eq!(format_duration(Duration::from_secs(930)), "15m30s");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1s500ms");
    }

    #[test]
    fn retention_never_prunes_inside_the_dedupe_window() {
        let e = load("dedupe_window = \"48h\"\n[retention]\nintents = \"1d\"\n", &[]).unwrap_err().to_string();
        assert!(e.contains("retention.intents") && e.contains("dedupe_window"), "{e}");
    }

    #[test]
    fn the_ops_digest_time_and_zone_are_read_at_load_naming_the_key() {
        let c = load("[ops]\ndigest_at = \"17:05\"\ndigest_timezone = \"Asia/Kathmandu\"\n", &[]).unwrap();
        let ops = c.ops.unwrap();
        assert_eq!(ops.digest_at, jiff::civil::time(17, 5, 0, 0));
        assert_eq!(ops.digest_timezone.iana_name(), Some("Asia/Kathmandu"));
        let ops = load("[ops]\n", &[]).unwrap().ops.unwrap();
        assert_eq!((ops.digest_at, ops.digest_timezone.iana_name()), (jiff::civil::time(8, 30, 0, 0), Some("UTC")));
        for bad in ["8.30", "8:30", "08:30:00", "25:00"] {
            let e = load(&format!("[ops]\ndigest_at = {bad:?}\n"), &[]).unwrap_err().to_string();
            assert!(e.starts_with(&format!("ops.digest_at: {bad:?} is not a time like 08:30")), "{e}");
            assert!(e.contains("herald.toml"), "{e}");
        }
        let e = load("", &[("HERALD_OPS__DIGEST_TIMEZONE", "Mars/Olympus")]).unwrap_err().to_string();
        assert!(e.starts_with("ops.digest_timezone: \"Mars/Olympus\" is not an IANA time zone"), "{e}");
        assert!(e.contains("environment variable HERALD_OPS__DIGEST_TIMEZONE"), "{e}");
    }

    #[test]
    fn a_routes_channels_are_read_at_load_naming_the_key() {
        let route = "[[routes]]\nevent = \"a\"\ntemplate = \"t\"\n";
        let c = load(&format!("{route}channels = [\"sms\", \"in_app\"]\ndigest = {{ window = \"1h\", template = \"d\", channels = [\"sms\"] }}\n"), &[])
            .unwrap();
        assert_eq!(c.routes[0].channels, vec![Channel::Sms, Channel::InApp]);
        assert_eq!(c.routes[0].digest.as_ref().unwrap().channels, Some(vec![Channel::Sms]));
        let e = load(&format!("{route}channels = [\"sms\", \"SMS\"]\n"), &[]).unwrap_err().to_string();
        assert!(e.starts_with("routes[0].channels[1]: unknown channel \"SMS\"; expected email, sms"), "{e}");
        let digest = "digest = { window = \"1h\", template = \"d\", channels = [\"fax\"] }";
        let e = load(&format!("{route}channels = [\"sms\"]\n{digest}\n"), &[]).unwrap_err().to_string();
        assert!(e.starts_with("routes[0].digest.channels[0]: unknown channel \"fax\""), "{e}");
    }

    #[test]
    fn a_closed_digest_window_is_kept_longer_than_any_window() {
        let route = "[[routes]]\nevent = \"c\"\ntemplate = \"t\"\nchannels = [\"email\"]\n\
                     digest = { window = \"2d\", template = \"d\" }\n";
        let e = load(&format!("[retention]\ndigests = \"1d\"\n{route}"), &[]).unwrap_err().to_string();
        assert!(e.contains("retention.digests") && e.contains("48h"), "{e}");
        let c = load(route, &[]).unwrap();
        assert_eq!(c.retention.digests, Duration::from_secs(7 * 86_400));
        assert_eq!(c.retention.preference_versions, Duration::from_secs(90 * 86_400));
    }

    #[test]
    fn a_provider_timeout_must_fit_inside_the_lease() {
        let e =
            load("[worker]\nlease = \"5s\"\n[channels.sms]\nurl = \"http://x/sms\"\n", &[]).unwrap_err().to_string();
        assert!(e.contains("channels.sms.timeout") && e.contains("worker.lease"), "{e}");
    }

    #[test]
    fn a_provider_timeout_of_zero_is_refused() {
        for channel in ["[channels.sms]\nurl = \"http://x/sms\"", "[channels.webhook]\nsecret = \"whsec_x\""] {
            let e = load(&format!("{channel}\ntimeout = \"0s\"\n"), &[]).unwrap_err().to_string();
            assert!(e.contains(".timeout") && e.contains("zero"), "{e}");
        }
    }

    #[test]
    fn a_provider_timeout_leaves_a_quarter_of_the_lease_for_recording() {
        let sms = |timeout: &str| {
            format!("[worker]\nlease = \"30s\"\n[channels.sms]\nurl = \"http://x/sms\"\ntimeout = \"{timeout}\"\n")
        };
        let e = load(&sms("29s"), &[]).unwrap_err().to_string();
        assert!(e.contains("channels.sms.timeout") && e.contains("22s500ms") && e.contains("39s"), "{e}");
        assert!(load(&sms("23s"), &[]).is_err());
        assert!(load(&sms("22s500ms"), &[]).is_ok());
    }
}
