//! The `herald` command line (DESIGN §7).

use anyhow::Context;
use clap::{Parser, Subcommand};
use herald::app;
use herald::config::{Config, ConfigSource, format_duration};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// mimalloc: glibc's malloc and free were an eighth of the server's CPU
/// under load (docs/performance.md). Built without transparent huge pages
/// (`no_thp`): with them, a host whose THP is `madvise` gave each arena huge
/// pages, and the peak RSS under load went from 33 to 55-61 MiB.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (its place in `mi_option_e`, in v3's
/// mimalloc.h, the version the crate builds; it names no constant for it):
/// how long freed memory waits before it goes back to the system, a second
/// by default. At 0 the peak RSS under load was 34 MiB against 36.5, for no
/// CPU that could be measured.
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

#[derive(Parser)]
#[command(name = "herald", version, about = "Domain events in; each person told once; every decision recorded.")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the HTTP API and the delivery workers.
    Serve(ConfigArg),
    /// Apply the database migrations and exit.
    Migrate(ConfigArg),
    /// Configuration commands.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Why was (or wasn't) someone told? The decision and attempt history
    /// of every notification for one entity and recipient.
    Why {
        /// TYPE:ID, e.g. purchase_order:PO-4482
        #[arg(long)]
        entity: String,
        #[arg(long)]
        recipient: String,
        /// Default: `default` without tokens; with tokens, the one tenant they name.
        #[arg(long)]
        tenant: Option<String>,
        /// The TOML config file (default: $HERALD_CONFIG, else ./herald.toml when there is one).
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Dead letters: list, show, replay.
    Dlq {
        #[command(subcommand)]
        command: DlqCommand,
    },
    /// The suppression list: addresses that bounced or complained.
    Suppressions {
        #[command(subcommand)]
        command: SuppressionsCommand,
    },
    /// Bus messages that could not become an event: list, show.
    Rejected {
        #[command(subcommand)]
        command: RejectedCommand,
    },
    /// Shadow mode: what Herald would have done.
    Shadow {
        #[command(subcommand)]
        command: ShadowCommand,
    },
    /// Template commands.
    Templates {
        #[command(subcommand)]
        command: TemplatesCommand,
    },
}

#[derive(clap::Args)]
struct DlqScope {
    /// Default: `default` without tokens; with tokens, the one tenant they name.
    #[arg(long)]
    tenant: Option<String>,
    /// The TOML config file (default: $HERALD_CONFIG, else ./herald.toml when there is one).
    #[arg(long)]
    config: Option<PathBuf>,
}

#[derive(Subcommand)]
enum DlqCommand {
    /// Dead letters, newest first.
    List {
        #[arg(long)]
        reason: Option<String>,
        /// RFC 3339, e.g. 2026-11-29T08:30:00Z
        #[arg(long)]
        since: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: u32,
        #[command(flatten)]
        scope: DlqScope,
    },
    /// One dead letter with its event, content and attempts (JSON).
    Show {
        id: String,
        #[command(flatten)]
        scope: DlqScope,
    },
    /// Put dead letters back on the queue: the same intents, key and content.
    Replay {
        /// Comma-separated intent ids.
        #[arg(long, value_delimiter = ',', conflicts_with = "reason", required_unless_present = "reason")]
        ids: Vec<String>,
        #[arg(long)]
        reason: Option<String>,
        #[arg(long, requires = "reason")]
        since: Option<String>,
        #[command(flatten)]
        scope: DlqScope,
    },
}

#[derive(Subcommand)]
enum RejectedCommand {
    /// The tenant's rejected messages, newest first.
    List {
        #[arg(long, default_value_t = 50)]
        limit: u32,
        #[command(flatten)]
        scope: DlqScope,
    },
    /// One rejected message with its error and body (JSON), addresses and numbers masked.
    Show {
        id: String,
        #[command(flatten)]
        scope: DlqScope,
    },
}

#[derive(Subcommand)]
enum ShadowCommand {
    /// Posts by how they were answered, intents by channel, decision and
    /// reason, what would have been sent, SMS segments, template errors.
    Report {
        /// RFC 3339, e.g. 2026-11-29T00:00:00Z (default: a day before --until)
        #[arg(long)]
        since: Option<String>,
        /// RFC 3339 (default: now)
        #[arg(long)]
        until: Option<String>,
        #[command(flatten)]
        scope: DlqScope,
    },
    /// The old notifier's send log beside Herald's intents: sent by both, sent
    /// only by the old notifier (and why Herald would not have), would be sent
    /// only by Herald, and the old notifier's duplicates, worst first.
    Compare(Box<CompareArgs>),
}

#[derive(clap::Args)]
struct CompareArgs {
    /// The old notifier's send log: CSV with a header row, or JSON Lines; `-`
    /// reads standard input. Read, matched and forgotten: nothing of it is stored.
    #[arg(long)]
    sends: PathBuf,
    /// csv or jsonl (default: by the file's extension, .csv, .jsonl or .ndjson)
    #[arg(long)]
    format: Option<String>,
    /// A mapping file (TOML): [columns] (time = "sent_at", …), time_format,
    /// [channels] (the old notifier's names: mail = "email"). Flags override it.
    #[arg(long)]
    map: Option<PathBuf>,
    /// The column of the send's time (default: time)
    #[arg(long)]
    time_column: Option<String>,
    /// The column of the channel (default: channel)
    #[arg(long)]
    channel_column: Option<String>,
    /// The column of the recipient id (default: recipient_id)
    #[arg(long)]
    recipient_column: Option<String>,
    /// The column of the address or number, matched by its keyed hash where a
    /// row has no recipient id (default: destination)
    #[arg(long)]
    destination_column: Option<String>,
    /// The column of the entity type (default: entity_type)
    #[arg(long)]
    entity_type_column: Option<String>,
    /// The column of the entity id (default: entity_id)
    #[arg(long)]
    entity_id_column: Option<String>,
    /// The column of the event type (default: event_type; without one a send
    /// matches any of its entity's events)
    #[arg(long)]
    event_type_column: Option<String>,
    /// rfc3339 (default), unix (seconds) or unix_ms
    #[arg(long)]
    time_format: Option<String>,
    /// How far a send may be from Herald's event (its time, or when Herald
    /// planned it) and still be the same notification
    #[arg(long, default_value = "10m")]
    window: String,
    /// RFC 3339 (default: a window before the log's first send)
    #[arg(long)]
    since: Option<String>,
    /// RFC 3339 (default: just after the log's last send)
    #[arg(long)]
    until: Option<String>,
    /// The most notifications listed in each part; the counts are complete
    #[arg(long, default_value_t = 20)]
    limit: usize,
    /// Print JSON, as POST /v1/shadow/compare answers
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    scope: DlqScope,
}

#[derive(Subcommand)]
enum SuppressionsCommand {
    /// The tenant's entries, newest first.
    List {
        #[arg(long, default_value_t = 50)]
        limit: u32,
        #[command(flatten)]
        scope: DlqScope,
    },
    /// Take an address off the list: the address itself (an email or an E.164
    /// number; only here, on the host, never over the API) or the entry's id
    /// as `list` shows it.
    Remove {
        address: String,
        #[command(flatten)]
        scope: DlqScope,
    },
}

#[derive(Subcommand)]
enum TemplatesCommand {
    /// Render every template × locale × channel against its fixtures; fail on a
    /// render error or an SMS over its segment budget, naming the culprit characters.
    Check {
        /// The template directory (default: the config's templates_dir, else the built-in templates).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// The TOML config file (default: $HERALD_CONFIG, else ./herald.toml when there is one,
        /// unless --dir is given).
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Validate the configuration; print the retry horizon and the dedupe window.
    Check(ConfigArg),
}

#[derive(clap::Args)]
struct ConfigArg {
    /// The TOML config file (default: $HERALD_CONFIG, else ./herald.toml when there is
    /// one, else the embedded default); `HERALD_…` variables override it.
    #[arg(long)]
    config: Option<PathBuf>,
}

/// Standard output and error as the writer of a pipe sees them. Rust ignores
/// SIGPIPE, so once the reader has gone (`herald … | head`) a write fails with
/// EPIPE, and `println!` would panic. Here the rest of the output is dropped and
/// the command finishes with its own exit code. (Restoring SIGPIPE's default
/// disposition would end the process quietly too, but it would also let a
/// closed log pipe kill `herald serve` in the middle of a delivery.)
mod output {
    use std::io::{self, Write};
    use std::sync::atomic::{AtomicBool, Ordering};

    static STDOUT_GONE: AtomicBool = AtomicBool::new(false);

    /// Writes to stdout; an error only for a failure other than a reader gone.
    pub fn out(args: std::fmt::Arguments) -> io::Result<()> {
        if STDOUT_GONE.load(Ordering::Relaxed) {
            return Ok(());
        }
        let mut stdout = io::stdout().lock();
        match stdout.write_fmt(args).and_then(|()| stdout.flush()) {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                STDOUT_GONE.store(true, Ordering::Relaxed);
                Ok(())
            }
            other => other,
        }
    }

    /// Writes to stderr; there is nowhere left to report a failure of that.
    pub fn err(args: std::fmt::Arguments) {
        let _ = io::stderr().lock().write_fmt(args);
    }
}

macro_rules! outln {
    ($($arg:tt)*) => { output::out(format_args!("{}\n", format_args!($($arg)*))) };
}

macro_rules! errln {
    ($($arg:tt)*) => { output::err(format_args!("{}\n", format_args!($($arg)*))) };
}

fn main() -> ExitCode {
    // SAFETY: sets one of the allocator's options, which it reads at each purge.
    unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, 0) };
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            errln!("herald: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            errln!("herald: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Serve(a) => serve(a.config).await,
        Command::Migrate(a) => {
            let (config, source) = load_config(a.config.as_deref())?;
            let store = herald::store::connect(&config.database_url).await?;
            store.migrate().await?;
            outln!("migrations applied to {} (from {source})", app::redact_url(&config.database_url))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Config { command: ConfigCommand::Check(a) } => config_check(a.config),
        Command::Templates { command: TemplatesCommand::Check { dir, config } } => templates_check(dir, config),
        Command::Dlq { command } => dlq(command).await,
        Command::Why { entity, recipient, tenant, config } => why(&entity, &recipient, tenant, config).await,
        Command::Suppressions { command } => suppressions(command).await,
        Command::Rejected { command } => rejected(command).await,
        Command::Shadow { command: ShadowCommand::Report { since, until, scope } } => {
            shadow_report(since, until, scope).await
        }
        Command::Shadow { command: ShadowCommand::Compare(args) } => shadow_compare(*args).await,
    }
}

/// The configuration as every command finds it (see [`ConfigSource`]), and
/// where it came from.
fn load_config(flag: Option<&Path>) -> anyhow::Result<(Config, ConfigSource)> {
    let source = ConfigSource::locate(flag);
    let config = source.load()?;
    Ok((config, source))
}

/// Log lines on stderr, and spans to the collector when one is configured
/// (the span layer then is the only one that sees spans: the lines read as
/// they do without it). Returns the provider to flush at shutdown.
fn init_logging(config: &Config) -> anyhow::Result<Option<herald::ops::trace::Tracing>> {
    use herald::ops::trace;
    use tracing_subscriber::Layer;
    use tracing_subscriber::filter::{FilterExt, filter_fn};
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    // Checked when the config was loaded (HERALD_LOG included), so nothing
    // falls back here without a word.
    let filter = tracing_subscriber::EnvFilter::new(herald::ops::log::quiet_notices(config.log_filter()));
    let lines_only = filter_fn(|m| m.is_event()).and(filter);
    let sample = herald::ops::log::SampleRoutine::new(config.log.sample_accepted);
    let export = trace::Export::of(&config.tracing).map_err(anyhow::Error::msg)?;
    let provider =
        trace::provider(export, config.tracing.sample_ratio, &config.deployment).map_err(anyhow::Error::msg)?;
    let spans = provider.as_ref().map(trace::layer);
    // Colours only for a person at a terminal: a file, a pipe or a log
    // collector gets the plain line, without escape codes around each field.
    let lines = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let registry = tracing_subscriber::registry().with(spans).with(sample);
    if config.log.format == "json" {
        registry.with(lines.json().with_filter(lines_only)).init();
    } else {
        registry.with(lines.with_filter(lines_only)).init();
    }
    Ok(provider.map(trace::Tracing::new))
}

async fn serve(path: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let (config, source) = load_config(path.as_deref())?;
    let tracing = init_logging(&config)?;
    tracing::info!(from = %source, "configuration read");
    // Listening for the stop signals before anything starts: a SIGTERM that
    // came before the listener would end the process with the signal's
    // default action, not with a clean stop (an orchestrator's stop right
    // after the readiness probe passed did, in the fault suite).
    let mut stop = StopSignals::listen().context("cannot listen for stop signals")?;
    let running = tokio::select! {
        running = app::start(config) => running.context("cannot start")?,
        () = stop.received() => {
            // What was started is dropped with the process: every write
            // of the start (the migrations) is a transaction of its own.
            tracing::info!("stopped while starting");
            if let Some(t) = tracing {
                t.shutdown().await;
            }
            return Ok(ExitCode::SUCCESS);
        }
    };
    let shutdown = running.shutdown_handle();
    tokio::spawn(async move {
        stop.received().await;
        tracing::info!("shutting down: no new claims; waiting for attempts in flight");
        let _ = shutdown.send(true);
    });
    running.wait().await;
    if let Some(t) = tracing {
        t.shutdown().await;
    }
    tracing::info!("stopped");
    Ok(ExitCode::SUCCESS)
}

/// SIGTERM (an orchestrator's stop) and SIGINT (Ctrl-C), listened for from
/// the moment this is made.
struct StopSignals {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn listen() -> std::io::Result<StopSignals> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(StopSignals { term: signal(SignalKind::terminate())?, interrupt: signal(SignalKind::interrupt())? })
        }
        #[cfg(not(unix))]
        Ok(StopSignals {})
    }

    /// Once either has come (at once if one came already).
    async fn received(&mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.term.recv() => {},
            _ = self.interrupt.recv() => {},
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
    }
}

fn config_check(path: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let source = ConfigSource::locate(path.as_deref());
    let config = match source.load() {
        Ok(c) => c,
        Err(e) => {
            errln!("config: {e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let templates = app::load_templates(&config);
    outln!("config          {source}")?;
    outln!("retry horizon   {}", format_duration(config.retry_policy().horizon()))?;
    outln!("dedupe window   {}", format_duration(config.dedupe_window))?;
    outln!(
        "retry-after max {} (a provider's Retry-After is a floor up to this; no retry is scheduled past the dedupe \
         window)",
        format_duration(config.retry.max_retry_after)
    )?;
    outln!("database        {}", app::redact_url(&config.database_url))?;
    outln!("routes          {}", config.routes.len())?;
    match templates {
        Ok(t) => outln!("templates       {}", t.ids().collect::<Vec<_>>().join(", "))?,
        Err(e) => {
            errln!("config: {e}");
            return Ok(ExitCode::FAILURE);
        }
    }
    outln!("ok")?;
    Ok(ExitCode::SUCCESS)
}

fn templates_check(dir: Option<PathBuf>, config: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    use herald::render::{TemplateSet, check};
    // The routes' needs when there is a config to read them from: the one
    // named, or the one that names the directory (neither a ./herald.toml
    // nor the embedded default's route when only a directory is given).
    let source = ConfigSource::locate(config.as_deref());
    let config = match (&dir, source.is_explicit()) {
        (Some(_), false) => None,
        _ => Some(source.load()?),
    };
    let needs = config.as_ref().map(|c| check::route_needs(&c.routes)).unwrap_or_default();
    let set = match (dir, config.and_then(|c| c.templates_dir)) {
        (Some(d), _) | (None, Some(d)) => TemplateSet::load_dir(&d),
        (None, None) => Ok(TemplateSet::built_in()),
    };
    let set = match set {
        Ok(s) => s,
        Err(e) => {
            errln!("templates: {e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let rows = check::check_with(&set, &needs);
    output::out(format_args!("{}", check::report(&rows)))?;
    if rows.iter().any(|r| r.failed()) {
        return Ok(ExitCode::FAILURE);
    }
    outln!("\nall {} message(s) render within budget", rows.len())?;
    Ok(ExitCode::SUCCESS)
}

/// The tenant a command reads: `--tenant`; without it, `default` when auth is
/// off, and with tokens the one tenant they all name — said on stderr, so the
/// reader knows whose data they see. Tokens of several tenants need `--tenant`.
fn tenant_for(given: Option<String>, config: &Config) -> Result<String, String> {
    if let Some(tenant) = given {
        return Ok(tenant);
    }
    let mut tenants: Vec<&str> = config.auth.tokens.iter().map(|t| t.tenant.as_str()).collect();
    tenants.sort_unstable();
    tenants.dedup();
    match tenants.as_slice() {
        [] => Ok("default".into()),
        [only] => {
            errln!("herald: tenant {only} (the one tenant of the configured tokens; --tenant to choose another)");
            Ok(only.to_string())
        }
        many => Err(format!("--tenant is required: the configured tokens name tenants {}", many.join(", "))),
    }
}

/// The database as it is: a command that reads creates and migrates nothing.
/// Which one, and from which configuration, is said on stderr first: a
/// command that found no configuration reads the embedded default's
/// `./herald.db`, which is rarely the database meant.
async fn open_existing(
    config: &Config,
    source: &ConfigSource,
) -> anyhow::Result<std::sync::Arc<dyn herald::store::Store>> {
    let url = app::redact_url(&config.database_url);
    errln!("reading {url} (from {source})");
    herald::store::open_existing(&config.database_url).await.with_context(|| format!("cannot use {url}"))
}

/// A table as the CLI prints one: no borders, two spaces between columns,
/// each column as wide as its widest cell, whatever the values.
fn table(header: &[&str]) -> comfy_table::Table {
    let mut table = comfy_table::Table::new();
    table.load_style(comfy_table::presets::NOTHING).set_header(header.to_vec());
    for column in table.column_iter_mut() {
        column.set_padding((0, 2));
    }
    table
}

fn print_table(table: &comfy_table::Table) -> std::io::Result<()> {
    for line in table.lines() {
        outln!("{}", line.trim_end())?;
    }
    Ok(())
}

async fn why(
    entity: &str,
    recipient: &str,
    tenant: Option<String>,
    config: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    let Some((kind, id)) = entity.split_once(':').filter(|(k, i)| !k.is_empty() && !i.is_empty()) else {
        errln!("--entity: must be TYPE:ID, like purchase_order:PO-4482");
        return Ok(ExitCode::from(2));
    };
    let (config, source) = load_config(config.as_deref())?;
    let tenant = match tenant_for(tenant, &config) {
        Ok(t) => t,
        Err(usage) => {
            errln!("herald: {usage}");
            return Ok(ExitCode::from(2));
        }
    };
    let store = open_existing(&config, &source).await?;
    let history = herald::why::history(store.as_ref(), &tenant, (kind, id), recipient).await?;
    output::out(format_args!("{}", herald::why::timeline((kind, id), recipient, &history)))?;
    Ok(ExitCode::SUCCESS)
}

async fn shadow_report(since: Option<String>, until: Option<String>, scope: DlqScope) -> anyhow::Result<ExitCode> {
    use herald::ops::shadow_report;
    let (config, source) = load_config(scope.config.as_deref())?;
    let tenant = match tenant_for(scope.tenant, &config) {
        Ok(t) => t,
        Err(usage) => {
            errln!("herald: {usage}");
            return Ok(ExitCode::from(2));
        }
    };
    let now = jiff::Timestamp::now().as_microsecond();
    let (since, until) = match shadow_report::range(since.as_deref(), until.as_deref(), now) {
        Ok(r) => r,
        Err((field, message)) => {
            errln!("herald: --{field}: {message}");
            return Ok(ExitCode::from(2));
        }
    };
    let store = open_existing(&config, &source).await?;
    let report = shadow_report::build(store.as_ref(), Some(&tenant), since, until).await?;
    output::out(format_args!("{}", shadow_report::table(&report)))?;
    Ok(ExitCode::SUCCESS)
}

/// The mapping `--map` and the column flags name; an error names the flag
/// (or the mapping file's key).
fn compare_mapping(a: &CompareArgs) -> Result<herald::ops::shadow_compare::sends::Mapping, String> {
    use herald::ops::shadow_compare::sends::{Field, Mapping, TimeFormat};
    let mut mapping = match &a.map {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| format!("--map {}: {e}", path.display()))?;
            Mapping::from_toml(&text).map_err(|e| format!("--map {}: {e}", path.display()))?
        }
        None => Mapping::default(),
    };
    let columns = [
        (Field::Time, "--time-column", &a.time_column),
        (Field::Channel, "--channel-column", &a.channel_column),
        (Field::RecipientId, "--recipient-column", &a.recipient_column),
        (Field::Destination, "--destination-column", &a.destination_column),
        (Field::EntityType, "--entity-type-column", &a.entity_type_column),
        (Field::EntityId, "--entity-id-column", &a.entity_id_column),
        (Field::EventType, "--event-type-column", &a.event_type_column),
    ];
    for (field, flag, column) in columns {
        if let Some(column) = column {
            mapping.set_column(field, column).map_err(|e| format!("{flag}: {e}"))?;
        }
    }
    if let Some(t) = &a.time_format {
        mapping.time_format =
            TimeFormat::parse(t).ok_or_else(|| format!("--time-format: {t:?} must be rfc3339, unix or unix_ms"))?;
    }
    Ok(mapping)
}

async fn shadow_compare(a: CompareArgs) -> anyhow::Result<ExitCode> {
    use herald::ops::shadow_compare::{self, sends};
    let usage = |message: String| {
        errln!("herald: {message}");
        Ok(ExitCode::from(2))
    };
    let mapping = match compare_mapping(&a) {
        Ok(m) => m,
        Err(message) => return usage(message),
    };
    let window = match herald::config::parse_duration(&a.window) {
        Ok(w) => w,
        Err(m) => return usage(format!("--window: {m}")),
    };
    let stdin = a.sends.as_os_str() == "-";
    let format = match (&a.format, stdin) {
        (Some(f), _) => match sends::Format::parse(f) {
            Some(f) => f,
            None => return usage(format!("--format: {f:?} must be csv or jsonl")),
        },
        (None, false) => match sends::Format::of_path(&a.sends) {
            Some(f) => f,
            None => return usage(format!("--format: {} is neither .csv nor .jsonl; say which", a.sends.display())),
        },
        (None, true) => return usage("--format: say which the standard input is, csv or jsonl".into()),
    };
    let body = match stdin {
        true => {
            let mut buf = Vec::new();
            std::io::Read::read_to_end(&mut std::io::stdin(), &mut buf).context("reading standard input")?;
            buf
        }
        false => std::fs::read(&a.sends).with_context(|| format!("--sends {}", a.sends.display()))?,
    };
    let (config, source) = load_config(a.scope.config.as_deref())?;
    let tenant = match tenant_for(a.scope.tenant.clone(), &config) {
        Ok(t) => t,
        Err(message) => return usage(message),
    };
    let store = open_existing(&config, &source).await?;
    let key = herald::suppression::key_for_reading(&config, store.as_ref()).await?;
    let log = if stdin { "standard input".to_string() } else { a.sends.display().to_string() };
    let sends = match sends::read(&body, format, &mapping, &sends::Tagger { key: &key, tenant: &tenant }) {
        Ok(s) => s,
        Err(e) => return usage(e.naming(&log)),
    };
    drop(body);
    let now = jiff::Timestamp::now().as_microsecond();
    let (since_us, until_us) = match shadow_compare::range(a.since.as_deref(), a.until.as_deref(), &sends, window, now)
    {
        Ok(r) => r,
        Err((field, message)) => return usage(format!("--{field}: {message}")),
    };
    let request = shadow_compare::Request {
        tenant: &tenant,
        key: &key,
        sends,
        since_us,
        until_us,
        window,
        limit: a.limit.max(1),
    };
    let comparison = shadow_compare::compare(store.as_ref(), request).await?;
    match a.json {
        true => outln!("{}", serde_json::to_string_pretty(&comparison)?)?,
        false => output::out(format_args!("{}", shadow_compare::table(&comparison)))?,
    }
    Ok(ExitCode::SUCCESS)
}

async fn dlq(command: DlqCommand) -> anyhow::Result<ExitCode> {
    use herald::store::{DeadLetterFilter, Replay, ReplaySelector};
    let scope = match &command {
        DlqCommand::List { scope, .. } | DlqCommand::Show { scope, .. } | DlqCommand::Replay { scope, .. } => scope,
    };
    let (config, source) = load_config(scope.config.as_deref())?;
    let tenant = match tenant_for(scope.tenant.clone(), &config) {
        Ok(t) => t,
        Err(usage) => {
            errln!("herald: {usage}");
            return Ok(ExitCode::from(2));
        }
    };
    let store = open_existing(&config, &source).await?;
    // The same strict reader as the API's (and occurred_at's).
    let since_us = |s: &Option<String>| -> anyhow::Result<Option<i64>> {
        s.as_deref()
            .map(|s| herald::event::OccurredAt::parse(s).map(|t| t.timestamp().as_microsecond()))
            .transpose()
            .map_err(|m| anyhow::anyhow!("--since: {m}"))
    };
    match command {
        DlqCommand::List { reason, since, limit, .. } => {
            let filter =
                DeadLetterFilter { tenant: Some(tenant), reason, since_us: since_us(&since)?, cursor: None, limit };
            let page = store.dead_letters_list(filter).await?;
            let mut rows = table(&["ID", "CHANNEL", "REASON", "DIED", "ENTITY → RECIPIENT"]);
            for d in &page.items {
                let i = &d.intent;
                rows.add_row(vec![
                    i.key.to_string(),
                    i.channel.to_string(),
                    i.reason.as_deref().unwrap_or("-").to_string(),
                    herald::clock::rfc3339(i.updated_at).unwrap_or_default(),
                    format!("{}:{} → {}", i.entity_type, i.entity_id, i.recipient_id),
                ]);
            }
            print_table(&rows)?;
            if page.next.is_some() {
                outln!("(more: narrow with --reason or --since, or raise --limit)")?;
            }
        }
        DlqCommand::Show { id, .. } => {
            let Some(d) = store.intent_get(&tenant, &id).await? else {
                errln!("no intent {id:?} for tenant {tenant:?}");
                return Ok(ExitCode::FAILURE);
            };
            if d.intent.state != herald::intent::State::Dead {
                errln!("herald: {id} is not a dead letter (it is {}); shown as it stands", d.intent.state);
            }
            outln!("{}", serde_json::to_string_pretty(&herald::api::dead_letter_json(&d))?)?;
        }
        DlqCommand::Replay { ids, reason, since, .. } => {
            let selector = match reason {
                Some(reason) => ReplaySelector::Reason { reason, since_us: since_us(&since)? },
                None if !ids.is_empty() => ReplaySelector::Ids(ids),
                None => {
                    errln!("give --ids ID,ID or --reason R [--since T]");
                    return Ok(ExitCode::from(2));
                }
            };
            let now = jiff::Timestamp::now().as_microsecond();
            let replay = Replay {
                tenant,
                selector,
                now_us: now,
                requested_by: Some("cli".into()),
                limit: 10_000,
                traceparent: None,
            };
            // A caller's trace in `TRACEPARENT`, as OpenTelemetry passes one
            // to a process through its environment.
            let caller = std::env::var("TRACEPARENT").ok().as_deref().and_then(herald::ops::trace::TraceParent::parse);
            let results = herald::ops::replay::replay(store.as_ref(), replay, caller).await?;
            let mut queued = 0;
            let mut by_reason = std::collections::BTreeMap::<&str, usize>::new();
            for r in &results {
                match r.outcome.skipped() {
                    None => queued += 1,
                    Some((code, why)) => {
                        outln!("skipped {}: {code}: {why}", r.key)?;
                        *by_reason.entry(code).or_default() += 1;
                    }
                }
            }
            outln!("{queued} dead letter(s) back on the queue; a running herald sends them")?;
            if !by_reason.is_empty() {
                let counts: Vec<String> = by_reason.iter().map(|(code, n)| format!("{code}: {n}")).collect();
                outln!("{} skipped ({})", by_reason.values().sum::<usize>(), counts.join(", "))?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn suppressions(command: SuppressionsCommand) -> anyhow::Result<ExitCode> {
    let (SuppressionsCommand::List { scope, .. } | SuppressionsCommand::Remove { scope, .. }) = &command;
    let (mut config, source) = load_config(scope.config.as_deref())?;
    let tenant = match tenant_for(scope.tenant.clone(), &config) {
        Ok(t) => t,
        Err(usage) => {
            errln!("herald: {usage}");
            return Ok(ExitCode::from(2));
        }
    };
    let store = open_existing(&config, &source).await?;
    // The key, and the entries of the old scheme rekeyed and named, as
    // `serve` does at start-up.
    let key = herald::suppression::resolve(&mut config, store.as_ref()).await?;
    match command {
        SuppressionsCommand::List { limit, .. } => {
            let page = store.suppressions_list(&tenant, None, limit).await?;
            let mut rows = table(&["ID", "ADDRESS", "REASON", "SINCE", "SOURCE INTENT"]);
            for s in &page.items {
                rows.add_row(vec![
                    s.id.as_deref().unwrap_or("-").to_string(),
                    s.masked.to_string(),
                    s.reason.to_string(),
                    herald::clock::rfc3339(s.created_at).unwrap_or_default(),
                    s.source_intent.to_string(),
                ]);
            }
            print_table(&rows)?;
            if page.next.is_some() {
                outln!("(more: raise --limit)")?;
            }
        }
        SuppressionsCommand::Remove { address, .. } => {
            // An address is looked up under the key; anything else is an id.
            let kind = if address.contains('@') {
                Some(herald::recipient::Kind::Email)
            } else if address.starts_with('+') {
                Some(herald::recipient::Kind::Phone)
            } else {
                None
            };
            // Every entry the address has (one, unless an old-scheme entry
            // is still waiting to be rekeyed beside a new one).
            let ids: Vec<String> = match kind {
                Some(kind) => {
                    let lookups = key.lookups(&tenant, kind, &address);
                    store.suppressions_match(&tenant, &lookups).await?.into_iter().filter_map(|row| row.id).collect()
                }
                None => vec![address.clone()],
            };
            let mut removed = Vec::new();
            for id in ids {
                if store.suppression_remove(&tenant, &id).await? {
                    removed.push(id);
                }
            }
            if removed.is_empty() {
                errln!("no such address or entry on the suppression list of tenant {tenant:?}");
                return Ok(ExitCode::FAILURE);
            }
            outln!("removed {}", removed.join(", "))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn rejected(command: RejectedCommand) -> anyhow::Result<ExitCode> {
    let (RejectedCommand::List { scope, .. } | RejectedCommand::Show { scope, .. }) = &command;
    let (config, source) = load_config(scope.config.as_deref())?;
    let tenant = match tenant_for(scope.tenant.clone(), &config) {
        Ok(t) => t,
        Err(usage) => {
            errln!("herald: {usage}");
            return Ok(ExitCode::from(2));
        }
    };
    let store = open_existing(&config, &source).await?;
    match command {
        RejectedCommand::List { limit, .. } => {
            let page = store.rejected_list(Some(&tenant), None, limit).await?;
            let mut rows = table(&["ID", "AT", "STREAM", "SEQ", "CODE", "SUBJECT"]);
            for r in &page.items {
                rows.add_row(vec![
                    r.id.to_string(),
                    herald::clock::rfc3339(r.created_at).unwrap_or_default(),
                    r.stream.to_string(),
                    r.stream_seq.to_string(),
                    r.code.to_string(),
                    r.subject.to_string(),
                ]);
            }
            if let Some(seq) = rows.column_mut(3) {
                seq.set_cell_alignment(comfy_table::CellAlignment::Right);
            }
            print_table(&rows)?;
            if page.next.is_some() {
                outln!("(more: raise --limit)")?;
            }
        }
        RejectedCommand::Show { id, .. } => {
            let Some(r) = store.rejected_get(&tenant, &id).await? else {
                errln!("no rejected message {id:?} for tenant {tenant:?}");
                return Ok(ExitCode::FAILURE);
            };
            outln!(
                "{}",
                serde_json::to_string_pretty(&herald::api::rejected_json(&r, herald::api::RejectedBody::Masked))?
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::PURGE_DELAY;

    #[test]
    fn the_purge_delay_is_the_option_its_constant_names() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() || std::env::var_os("MIMALLOC_RESET_DELAY").is_some() {
            eprintln!("skipped: MIMALLOC_PURGE_DELAY is set, so the default cannot be told");
            assert!(std::env::var_os("CI").is_none(), "CI must not set MIMALLOC_PURGE_DELAY");
            return;
        }
        // SAFETY: reads one of the allocator's options.
        let delay = unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY) };
        assert_eq!(delay, 1000, "mimalloc's default purge delay is 1000 ms; option {PURGE_DELAY} is something else");
    }
}
