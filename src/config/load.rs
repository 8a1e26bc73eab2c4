//! Layering (DESIGN §6, STYLE rule 7): the file — or the embedded default —
//! then `HERALD_SECTION__KEY` environment variables, read through figment so
//! that every value remembers which source set it. An error names the key and
//! that source, and never prints a secret's value.
//!
//! Environment values are typed by the field they set: they reach figment as
//! text, and `extract_lossy` reads text as a number or a boolean only where the
//! field is one, so `HERALD_CHANNELS__SMS__AUTH_TOKEN=123456` stays the string
//! it is. List fields also take the text of a TOML list (see [`list`]).

use super::{Config, ConfigError, EMBEDDED_DEFAULT, invalid};
use figment::error::Kind;
use figment::value::{Dict, Empty, Map, Value};
use figment::{Figment, Metadata, Profile, Provider};
use serde::Deserializer;
use serde::de::{DeserializeOwned, SeqAccess, Visitor};
use std::marker::PhantomData;
use std::path::Path;

/// `HERALD_…` variables that are not configuration keys: the tracing filter
/// (docs/observability.md, *Logs*), the file to read (`HERALD_CONFIG`, see
/// [`super::ConfigSource`]), the test suite's and the benchmarks' own settings.
fn is_reserved(name: &str) -> bool {
    name == "HERALD_LOG"
        || name == "HERALD_CONFIG"
        || name.starts_with("HERALD_TEST_")
        || name.starts_with("HERALD_BENCH_")
}

/// Keys whose values are never repeated in an error.
const SECRET_KEYS: [&str; 3] = ["secret", "auth_token", "token_sha256"];

/// The metadata name of the environment provider.
const ENVIRONMENT: &str = "environment";

pub(super) fn load(path: Option<&Path>, env_vars: &[(String, String)]) -> Result<Config, ConfigError> {
    let mut file = FileSource::read(path)?;
    let env = EnvSource::parse(env_vars)?;
    file.give_way_to(&env);
    let figment = Figment::new().merge(&file).merge(&env);
    let mut config: Config = figment.extract_lossy().map_err(|e| {
        let lines: Vec<String> = e.into_iter().map(|e| describe(&e, &env)).collect();
        ConfigError::Invalid(lines.join("\n"))
    })?;
    config.validate().map_err(|e| match e {
        ConfigError::Invalid(msg) => ConfigError::Invalid(with_origin(msg, &figment, &env)),
        other => other,
    })?;
    config.log.from_env = log_filter_from(env_vars)?;
    config.origins = Origins { figment, env };
    Ok(config)
}

/// Where each key was set, kept for the checks made once the configuration
/// meets something else: a route's template is looked for when the templates
/// are loaded, and its error names the source of the route as a load error would.
#[derive(Clone)]
pub struct Origins {
    figment: Figment,
    env: EnvSource,
}

impl Origins {
    /// `msg`, which begins with the key it is about (`routes[0].template: …`),
    /// with where that key was set added.
    pub fn add_to(&self, msg: String) -> String {
        with_origin(msg, &self.figment, &self.env)
    }
}

impl Default for Origins {
    /// A configuration built by hand: its keys came from nowhere to name.
    fn default() -> Self {
        Origins { figment: Figment::new(), env: EnvSource { vars: Vec::new() } }
    }
}

/// Where a key came from is not a setting: two configurations that set the
/// same values from different files print the same.
impl std::fmt::Debug for Origins {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Origins")
    }
}

/// `HERALD_LOG`, checked like `log.level`; an empty one is as good as none.
fn log_filter_from(env: &[(String, String)]) -> Result<Option<String>, ConfigError> {
    let Some((_, filter)) = env.iter().rev().find(|(name, value)| name == "HERALD_LOG" && !value.trim().is_empty())
    else {
        return Ok(None);
    };
    super::check_log_filter(filter).map_err(|m| invalid(format!("environment variable HERALD_LOG: {m}")))?;
    Ok(Some(filter.clone()))
}

/// Keys of which a channel takes exactly one: where the messages go.
const ONE_OF: [(&str, [&str; 2]); 2] = [("channels.email", ["smtp_url", "sink"]), ("channels.sms", ["url", "sink"])];

/// The TOML file, or the embedded default when there is none.
struct FileSource {
    label: String,
    table: toml::Table,
}

impl FileSource {
    /// The environment wins over the file key by key, and for keys of which
    /// a channel takes exactly one it wins over the pair: a provider's URL set
    /// by a variable replaces the file's `sink` (and a `sink` the URL), so
    /// `HERALD_CHANNELS__SMS__URL` alone turns the embedded default's sink
    /// into a real provider.
    fn give_way_to(&mut self, env: &EnvSource) {
        for var in env.vars.iter().filter(|v| !v.value.is_empty()) {
            let (leaf, section) = var.path.split_last().expect("parse refuses an empty path");
            let Some((_, pair)) =
                ONE_OF.iter().find(|(s, pair)| *s == section.join(".") && pair.contains(&leaf.as_str()))
            else {
                continue;
            };
            let mut table = Some(&mut self.table);
            for part in section {
                table = table.and_then(|t| t.get_mut(part.as_str())).and_then(toml::Value::as_table_mut);
            }
            if let Some(table) = table {
                table.retain(|key, _| key == leaf || !pair.contains(&key));
            }
        }
    }

    fn read(path: Option<&Path>) -> Result<FileSource, ConfigError> {
        let (label, text) = match path {
            Some(p) => {
                let text =
                    std::fs::read_to_string(p).map_err(|cause| ConfigError::Read { path: p.to_path_buf(), cause })?;
                (p.display().to_string(), text)
            }
            None => ("the embedded default".to_string(), EMBEDDED_DEFAULT.to_string()),
        };
        // The message and position only: toml's own rendering quotes the line,
        // which may hold a secret.
        let table = toml::from_str(&text).map_err(|e: toml::de::Error| {
            let at = e.span().map(|s| line_and_column(&text, s.start)).unwrap_or_default();
            invalid(format!("{label}{at}: {}", e.message()))
        })?;
        Ok(FileSource { label, table })
    }
}

fn line_and_column(text: &str, offset: usize) -> String {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    format!(", line {line}, column {column}")
}

impl Provider for &FileSource {
    fn metadata(&self) -> Metadata {
        Metadata::named(self.label.clone())
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        let dict = Value::serialize(&self.table)?.into_dict().unwrap_or_default();
        Ok(Profile::Default.collect(dict))
    }
}

/// One `HERALD_SECTION__KEY=value`.
#[derive(Clone)]
struct EnvVar {
    name: String,
    path: Vec<String>,
    value: String,
}

#[derive(Clone)]
struct EnvSource {
    vars: Vec<EnvVar>,
}

impl EnvSource {
    fn parse(env: &[(String, String)]) -> Result<EnvSource, ConfigError> {
        let mut vars: Vec<EnvVar> = Vec::new();
        for (name, value) in env {
            let Some(rest) = name.strip_prefix("HERALD_") else { continue };
            if is_reserved(name) {
                continue;
            }
            let path: Vec<String> = rest.split("__").map(str::to_ascii_lowercase).collect();
            if path.iter().any(String::is_empty) {
                return Err(invalid(format!(
                    "environment variable {name}: not a configuration key; \
                     write HERALD_KEY or HERALD_SECTION__KEY, like HERALD_RETRY__ATTEMPTS"
                )));
            }
            if let Some(other) = vars.iter().find(|v| v.path.starts_with(&path) || path.starts_with(&v.path)) {
                return Err(invalid(format!(
                    "environment variables {} and {name} both set {}: one is a section the other replaces",
                    other.name,
                    key_of(if other.path.len() < path.len() { &other.path } else { &path }),
                )));
            }
            vars.push(EnvVar { name: name.clone(), path, value: value.clone() });
        }
        Ok(EnvSource { vars })
    }

    /// The variable that set `path` or a value inside it (the longest match).
    fn var_for(&self, path: &[String]) -> Option<&str> {
        let inside = self.vars.iter().filter(|v| path.starts_with(&v.path)).max_by_key(|v| v.path.len());
        let below = || self.vars.iter().find(|v| v.path.starts_with(path));
        inside.or_else(below).map(|v| v.name.as_str())
    }
}

impl Provider for &EnvSource {
    fn metadata(&self) -> Metadata {
        Metadata::named(ENVIRONMENT)
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        let mut root = Dict::new();
        for var in &self.vars {
            let (leaf, sections) = var.path.split_last().expect("parse refuses an empty path");
            let mut dict = &mut root;
            for section in sections {
                let entry = dict.entry(section.clone()).or_insert_with(|| Value::from(Dict::new()));
                if !matches!(entry, Value::Dict(..)) {
                    *entry = Value::from(Dict::new());
                }
                let Value::Dict(_, inner) = entry else { unreachable!("made a dict just above") };
                dict = inner;
            }
            // An empty value unsets the key: an optional one is then absent,
            // whatever the file says (`describe` explains the others).
            let value = match var.value.is_empty() {
                true => Value::from(Empty::None),
                false => Value::from(var.value.clone()),
            };
            dict.insert(leaf.clone(), value);
        }
        Ok(Profile::Default.collect(root))
    }
}

/// `routes.0.channels.1` → `routes[0].channels[1]`, the way validation names keys.
fn key_of(path: &[String]) -> String {
    let mut out = String::new();
    for part in path {
        if part.bytes().all(|b| b.is_ascii_digit()) && !out.is_empty() {
            out.push_str(&format!("[{part}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(part);
        }
    }
    out
}

/// `(from environment variable HERALD_RETRY__ATTEMPTS)` or `(from ./herald.toml)`.
fn origin(md: Option<&Metadata>, path: &[String], env: &EnvSource) -> String {
    match md {
        Some(md) if md.name == ENVIRONMENT => match env.var_for(path) {
            Some(var) => format!(" (from environment variable {var})"),
            None => " (from the environment)".into(),
        },
        Some(md) => format!(" (from {})", md.name),
        None => String::new(),
    }
}

fn describe(e: &figment::Error, env: &EnvSource) -> String {
    let mut path = e.path.clone();
    let from = origin(e.metadata.as_ref(), &path, env);
    let secret = path.last().is_some_and(|k| SECRET_KEYS.contains(&k.as_str()));
    let detail = match &e.kind {
        Kind::UnknownField(_, expected) => {
            let field = path.last().cloned().unwrap_or_default();
            let near = closest(&field, expected).map(|k| {
                let mut key = path[..path.len() - 1].to_vec();
                key.push(k.to_string());
                let var = format!("HERALD_{}", key.join("__").to_ascii_uppercase());
                match e.metadata.as_ref().is_some_and(|md| md.name == ENVIRONMENT) {
                    true => format!("; did you mean {} ({var})?", key_of(&key)),
                    false => format!("; did you mean {}?", key_of(&key)),
                }
            });
            format!("not a configuration key{}", near.unwrap_or_default())
        }
        Kind::MissingField(field) => {
            path.push(field.to_string());
            "is required".to_string()
        }
        Kind::InvalidType(figment::error::Actual::Option | figment::error::Actual::Unit, _)
            if e.metadata.as_ref().is_some_and(|md| md.name == ENVIRONMENT) =>
        {
            "cannot be unset: it is not optional (an empty variable unsets only optional keys); \
             give it a value, or remove the variable to keep the file's"
                .to_string()
        }
        Kind::InvalidType(_, expected) | Kind::InvalidValue(_, expected) if secret => {
            format!("invalid value (expected {expected})")
        }
        kind => kind.to_string(),
    };
    let key = if path.is_empty() { "the configuration".to_string() } else { key_of(&path) };
    format!("{key}: {detail}{from}")
}

/// The known name nearest to a misspelt one, if any is near enough.
pub(crate) fn closest<'a>(field: &str, known: &[&'a str]) -> Option<&'a str> {
    known
        .iter()
        .map(|k| (strsim::levenshtein(field, k), *k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 4))
        .min()
        .map(|(_, k)| k)
}

/// Validation messages begin with the key they are about (`retry.attempts: …`);
/// this adds where that key was set.
fn with_origin(msg: String, figment: &Figment, env: &EnvSource) -> String {
    let Some((key, _)) = msg.split_once(": ") else { return msg };
    if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.[]".contains(&b)) {
        return msg;
    }
    // Values inside a list share the list's source.
    let lookup = key.split('[').next().unwrap_or(key);
    let path: Vec<String> = lookup.split('.').map(String::from).collect();
    match figment.find_metadata(lookup) {
        Some(md) => format!("{msg}{}", origin(Some(md), &path, env)),
        None => msg,
    }
}

/// A list field: a list in the file, or in an environment variable the text of
/// a TOML list (`HERALD_ROUTES='[{event = "a.b", template = "t", channels = ["sms"]}]'`).
pub(super) fn list<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned,
{
    struct ListVisitor<T>(PhantomData<T>);

    impl<'de, T: DeserializeOwned> Visitor<'de> for ListVisitor<T> {
        type Value = Vec<T>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a list")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Vec<T>, A::Error> {
            serde::Deserialize::deserialize(serde::de::value::SeqAccessDeserializer::new(seq))
        }

        fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Vec<T>, E> {
            let bad = |e: toml::de::Error| E::custom(format!("not a TOML list: {}", e.message()));
            let mut table: toml::Table = toml::from_str(&format!("v = {text}")).map_err(bad)?;
            let value = table.remove("v").unwrap_or(toml::Value::Array(Vec::new()));
            if !value.is_array() {
                return Err(E::custom("not a TOML list, like [\"a\", \"b\"] or [{ key = \"value\" }]"));
            }
            serde::Deserialize::deserialize(value).map_err(|e: toml::de::Error| E::custom(e.message()))
        }
    }

    d.deserialize_seq(ListVisitor(PhantomData))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn load(text: &str, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("herald.toml");
        std::fs::write(&path, text).unwrap();
        let env: Vec<_> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Config::load_with_env(Some(&path), &env)
    }

    #[test]
    fn environment_overrides_the_file() {
        let c = load("[retry]\nattempts = 4\n", &[("HERALD_RETRY__ATTEMPTS", "8"), ("HERALD_WORKER__LEASE", "45s")])
            .unwrap();
        assert_eq!(c.retry.attempts, 8);
        assert_eq!(c.worker.lease, Duration::from_secs(45));
    }

    #[test]
    fn herald_log_is_the_tracing_filter_not_a_config_key() {
        let c = load("", &[("HERALD_LOG", "debug"), ("HERALD_TEST_REDIS_URL", "redis://x")]).unwrap();
        assert_eq!(c.log.level, "info");
        assert_eq!(c.log_filter(), "debug", "HERALD_LOG replaces log.level");
        let c = load("[log]\nlevel = \"herald=debug,sqlx=warn\"\n", &[]).unwrap();
        assert_eq!(c.log_filter(), "herald=debug,sqlx=warn");
    }

    #[test]
    fn log_sampling_is_a_share_between_none_and_all() {
        assert_eq!(load("", &[]).unwrap().log.sample_accepted, 1.0);
        assert_eq!(load("[log]\nsample_accepted = 0.1\n", &[]).unwrap().log.sample_accepted, 0.1);
        assert_eq!(load("", &[("HERALD_LOG__SAMPLE_ACCEPTED", "0")]).unwrap().log.sample_accepted, 0.0);
        for bad in ["1.5", "-0.1", "nan"] {
            let e = load(&format!("[log]\nsample_accepted = {bad}\n"), &[]).unwrap_err().to_string();
            assert!(e.contains("log.sample_accepted"), "{bad}: {e}");
        }
        assert_eq!(load("deployment = \"shadow-eu\"\n", &[]).unwrap().deployment, "shadow-eu");
        assert!(load("deployment = \"\"\n", &[]).unwrap_err().to_string().contains("deployment"));
    }

    #[test]
    fn a_bad_log_filter_is_refused_naming_where_it_came_from() {
        let e = load("", &[("HERALD_LOG", "verbose")]).unwrap_err().to_string();
        assert!(e.contains("HERALD_LOG") && e.contains("verbose"), "{e}");
        let e = load("", &[("HERALD_LOG", "herald=loud")]).unwrap_err().to_string();
        assert!(e.contains("HERALD_LOG") && e.contains("herald=loud"), "{e}");
        let e = load("", &[("HERALD_LOG__LEVEL", "verbose")]).unwrap_err().to_string();
        assert!(e.contains("log.level") && e.contains("HERALD_LOG__LEVEL"), "{e}");
        let e = load("[log]\nlevel = \"debug,herald=\"\n", &[]).unwrap_err().to_string();
        assert!(e.contains("log.level") && e.contains("herald.toml"), "{e}");
        for ok in ["warn", "INFO", "off", "herald=debug,sqlx=warn", "info,herald::deliver=trace"] {
            assert!(load("", &[("HERALD_LOG", ok)]).is_ok(), "{ok}");
        }
    }

    #[test]
    fn an_environment_value_is_typed_by_the_field_it_sets() {
        let c = load(
            "[channels.sms]\nurl = \"http://127.0.0.1:9/sms\"\n",
            &[
                ("HERALD_CHANNELS__SMS__AUTH_TOKEN", "123456"),
                ("HERALD_RETRY__ATTEMPTS", "8"),
                ("HERALD_WORKER__DISABLED", "true"),
                ("HERALD_ROUTES", r#"[{event = "a.b", template = "t", channels = ["sms"]}]"#),
            ],
        )
        .unwrap();
        assert_eq!(c.channels.sms.unwrap().auth_token.as_deref(), Some("123456"));
        assert_eq!(c.retry.attempts, 8);
        assert!(c.worker.disabled);
        assert_eq!(c.routes[0].channels, vec![crate::event::Channel::Sms]);
        // a string field keeps what looks like a boolean or a list, as written
        let c = load(
            "[channels.sms]\nurl = \"http://127.0.0.1:9/sms\"\n",
            &[("HERALD_CHANNELS__SMS__AUTH_TOKEN", "true"), ("HERALD_REDIS_URL", "[x]")],
        )
        .unwrap();
        assert_eq!(c.channels.sms.unwrap().auth_token.as_deref(), Some("true"));
        assert_eq!(c.redis_url.as_deref(), Some("[x]"));
    }

    fn default_with(env: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let env: Vec<_> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Config::load_with_env(None, &env)
    }

    #[test]
    fn an_environment_provider_replaces_the_files_sink() {
        let c = default_with(&[("HERALD_CHANNELS__SMS__URL", "http://127.0.0.1:9/sms")]).unwrap();
        let sms = c.channels.sms.unwrap();
        assert_eq!((sms.url.as_deref(), sms.sink), (Some("http://127.0.0.1:9/sms"), None));
        let c = default_with(&[("HERALD_CHANNELS__EMAIL__SMTP_URL", "smtp://127.0.0.1:2525")]).unwrap();
        let email = c.channels.email.unwrap();
        assert_eq!((email.smtp_url.as_deref(), email.sink), (Some("smtp://127.0.0.1:2525"), None));
        // and the other way round: a sink from the environment replaces the file's provider
        let c = load("[channels.sms]\nurl = \"http://127.0.0.1:9/sms\"\n", &[("HERALD_CHANNELS__SMS__SINK", "out")])
            .unwrap();
        let sms = c.channels.sms.unwrap();
        assert_eq!((sms.url, sms.sink), (None, Some("out".into())));
        // both from the environment is still one too many
        let e = default_with(&[("HERALD_CHANNELS__SMS__URL", "http://x/sms"), ("HERALD_CHANNELS__SMS__SINK", "out")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("channels.sms") && e.contains("exactly one"), "{e}");
    }

    #[test]
    fn an_empty_environment_value_unsets_an_optional_key() {
        let c =
            default_with(&[("HERALD_CHANNELS__SMS__SINK", ""), ("HERALD_CHANNELS__SMS__URL", "http://x/sms")]).unwrap();
        assert_eq!(c.channels.sms.unwrap().sink, None);
        let c = default_with(&[("HERALD_CHANNELS__SMS", "")]).unwrap();
        assert!(c.channels.sms.is_none(), "a whole section can be unset: the channel is off");
        let c = load("redis_url = \"redis://127.0.0.1:6379\"\n", &[("HERALD_REDIS_URL", "")]).unwrap();
        assert_eq!(c.redis_url, None);
        // a key that cannot be absent says so, naming the variable
        let e = default_with(&[("HERALD_LISTEN", "")]).unwrap_err().to_string();
        assert!(e.contains("listen") && e.contains("HERALD_LISTEN") && e.contains("cannot be unset"), "{e}");
        // an empty variable that is no key is still an error naming it
        let e = default_with(&[("HERALD_LISTN", "")]).unwrap_err().to_string();
        assert!(e.contains("HERALD_LISTN") && e.contains("not a configuration key"), "{e}");
    }

    #[test]
    fn a_type_error_names_the_key_and_the_source_that_set_it() {
        let e =
            Config::load_with_env(None, &[("HERALD_RETRY__ATTEMPTS".into(), "abc".into())]).unwrap_err().to_string();
        assert!(e.contains("retry.attempts") && e.contains("environment variable HERALD_RETRY__ATTEMPTS"), "{e}");
        assert!(!e.contains("embedded default"), "{e}");
        let e = load("[retry]\nattempts = \"many\"\n", &[]).unwrap_err().to_string();
        assert!(e.contains("retry.attempts") && e.contains("herald.toml"), "{e}");
        let e = load("[worker]\nlease = \"soon\"\n", &[]).unwrap_err().to_string();
        assert!(e.contains("worker.lease") && e.contains("herald.toml") && e.contains("soon"), "{e}");
    }

    #[test]
    fn a_validation_error_names_the_source_of_the_key() {
        let e = load("", &[("HERALD_RETRY__ATTEMPTS", "0")]).unwrap_err().to_string();
        assert!(e.contains("retry.attempts") && e.contains("HERALD_RETRY__ATTEMPTS"), "{e}");
        let e = load("[retry]\nattempts = 0\n", &[]).unwrap_err().to_string();
        assert!(e.contains("retry.attempts") && e.contains("herald.toml"), "{e}");
    }

    #[test]
    fn an_unknown_herald_variable_is_an_error_that_names_it() {
        let e = load("", &[("HERALD_LISTN", "127.0.0.1:9000")]).unwrap_err().to_string();
        assert!(e.contains("HERALD_LISTN") && e.contains("listen"), "{e}");
        let e = load("", &[("HERALD_RETRY__ATEMPTS", "3")]).unwrap_err().to_string();
        assert!(e.contains("HERALD_RETRY__ATEMPTS") && e.contains("retry.attempts"), "{e}");
        // the test suite's own variables are not config keys
        assert!(load("", &[("HERALD_TEST_DATABASE_URL", "postgres://x")]).is_ok());
    }

    #[test]
    fn the_benchmarks_variables_are_not_config_keys() {
        // docs/performance.md sends `cargo bench --bench ingest` to it; the herald it
        // starts inherits the environment.
        assert!(load("", &[("HERALD_BENCH_DATABASE_URL", "postgres://x")]).is_ok());
    }

    #[test]
    fn an_unknown_key_in_the_file_names_the_file() {
        let e = load("[retry]\nattempt = 3\n", &[]).unwrap_err().to_string();
        assert!(e.contains("retry.attempt") && e.contains("herald.toml") && e.contains("attempts"), "{e}");
    }

    #[test]
    fn a_secret_is_never_printed_in_an_error() {
        let e = load("", &[("HERALD_CHANNELS__WEBHOOK__SECRET", "hunter2hunter2")]).unwrap_err().to_string();
        assert!(e.contains("channels.webhook.secret") && !e.contains("hunter2"), "{e}");
    }

    #[test]
    fn a_missing_file_says_so_once() {
        let e = Config::load_with_env(Some(Path::new("/nonexistent/herald.toml")), &[]).unwrap_err();
        let chain = format!("{:#}", anyhow::Error::from(e));
        assert_eq!(chain.matches("os error 2").count(), 1, "{chain}");
        assert!(chain.contains("/nonexistent/herald.toml"), "{chain}");
    }

    #[test]
    fn keys_are_written_the_way_validation_writes_them() {
        let path: Vec<String> = ["routes", "0", "channels", "1"].iter().map(|s| s.to_string()).collect();
        assert_eq!(key_of(&path), "routes[0].channels[1]");
    }

    #[test]
    fn a_near_miss_is_suggested_and_a_far_one_is_not() {
        let known = ["listen", "database_url", "retry"];
        assert_eq!(closest("listn", &known), Some("listen"));
        assert_eq!(closest("databse_url", &known), Some("database_url"));
        assert_eq!(closest("colour", &known), None);
    }

    #[test]
    fn two_variables_that_set_one_key_twice_are_refused_naming_both() {
        let env = [("HERALD_RETRY".to_string(), "x".to_string()), ("HERALD_RETRY__ATTEMPTS".into(), "3".into())];
        let e = EnvSource::parse(&env).err().unwrap().to_string();
        assert!(e.contains("HERALD_RETRY ") && e.contains("HERALD_RETRY__ATTEMPTS"), "{e}");
    }

    #[test]
    fn a_toml_syntax_error_gives_the_position_but_not_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("herald.toml");
        std::fs::write(&path, "[channels.webhook]\nsecret = \"whsec_abc\n").unwrap();
        let e = Config::load_with_env(Some(&path), &[]).unwrap_err().to_string();
        assert!(e.contains("herald.toml, line 2") && !e.contains("whsec_abc"), "{e}");
    }
}
