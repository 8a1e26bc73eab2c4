//! OpenTelemetry traces of one notification, across the queue.
//!
//! A request's trace is the caller's (a W3C `traceparent` header) or a new
//! one whose id is derived from the request identity, so a retried request
//! lands in the same trace and the log lines' `trace_id` is the trace's id.
//! The ingest span's context is stored with each job it queues; the worker's
//! attempt spans continue it, in whichever process claims the job, on every
//! retry.
//!
//! Spans: `ingest` → `plan` → `intent` (one per channel and recipient, with
//! its decision) → `render`; `store` (the request's part in the group
//! commit); then per attempt `claim`, `attempt` (the provider call) and
//! `record`. Attributes are keys, numbers and bounded names — never a
//! destination, a body or event data. Idempotency conflicts and mismatches,
//! `unknown` outcomes and terminal failures carry error status, so a
//! collector's tail sampling keeps them.
//!
//! Without an exporter no OpenTelemetry layer is installed: the spans are
//! disabled at their call sites and cost a branch each.
//!
//! A span may be exported a moment after the work it covers, and after spans
//! that follow it: SQLite's driver (sqlx) runs each statement on a thread of
//! its own and takes a clone of the current span along (for the directory
//! read, `plan`, a child of `ingest`), dropped there once it has answered.
//! When that clone is the last handle, `plan` closes on the driver's thread
//! and `ingest` with it — after the HTTP answer, sometimes after the worker's
//! attempt is exported. The times barely move: a span ends at its last
//! exit, which for `plan` is the driver's, as it finishes the statement;
//! `ingest` ends when the request does. The parent is closed through the closing thread's default
//! subscriber, which is why the subscriber must be the process's global
//! default, as `main` installs it: one set for a single thread would leave
//! such a parent open for good (tokio-rs/tracing#1656).
//!
//! The batch processor runs on Tokio. The SDK's default one exports from a
//! thread of its own with no runtime, where the async reqwest client cannot
//! send (every export fails, quietly unless its warnings are read); a
//! blocking client would need a second HTTP stack. Shutdown flushes it.

use opentelemetry::trace::{
    SpanContext, SpanId, Status, TraceContextExt, TraceFlags, TraceId, TraceState, Tracer, TracerProvider,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, Sampler, SdkTracerProvider};
use sha2::{Digest, Sha256};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The W3C header (and NATS message header) a caller's trace context comes in.
pub const TRACEPARENT: &str = "traceparent";

/// The instrumentation scope of every Herald span.
pub const SCOPE: &str = "herald";

/// Whether spans are exported: then the worker's `claim` and `record` spans,
/// written with the times of their batch, are worth building.
static EXPORTING: AtomicBool = AtomicBool::new(false);

/// A W3C trace context (`traceparent`), as received or as stored with a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    pub trace_id: TraceId,
    pub parent_id: SpanId,
    pub sampled: bool,
}

impl TraceParent {
    /// `version-traceid-parentid-flags`; None for anything the W3C
    /// recommendation says to ignore (a receiver then starts a new trace).
    /// A later version is read by its first four fields, as the
    /// recommendation asks.
    pub fn parse(header: &str) -> Option<TraceParent> {
        let header = header.trim();
        let mut parts = header.splitn(5, '-');
        let (version, trace, parent, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let rest = parts.next();
        let lower_hex =
            |s: &str, len: usize| s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if !lower_hex(version, 2) || version == "ff" || (version == "00" && rest.is_some()) {
            return None;
        }
        if !lower_hex(trace, 32) || !lower_hex(parent, 16) || !lower_hex(flags, 2) {
            return None;
        }
        let trace_id = TraceId::from_hex(trace).ok().filter(|t| *t != TraceId::INVALID)?;
        let parent_id = SpanId::from_hex(parent).ok().filter(|s| *s != SpanId::INVALID)?;
        let flags = u8::from_str_radix(flags, 16).ok()?;
        Some(TraceParent { trace_id, parent_id, sampled: flags & 1 == 1 })
    }

    /// A trace context derived from `seed` (a request identity): the same
    /// seed gives the same trace in every process.
    pub fn derived(seed: &str) -> TraceParent {
        // The first 16 bytes of SHA-256(seed) are the trace id, the next 8
        // the parent span id (what the first 32 and next 16 hex digits spell).
        let digest = Sha256::digest(seed.as_bytes());
        let (mut trace, mut parent) = ([0u8; 16], [0u8; 8]);
        trace.copy_from_slice(&digest[..16]);
        parent.copy_from_slice(&digest[16..24]);
        TraceParent { trace_id: TraceId::from_bytes(trace), parent_id: SpanId::from_bytes(parent), sampled: true }
    }

    /// The trace id as logs carry it: 32 lowercase hex characters.
    pub fn trace_id_hex(&self) -> String {
        format!("{:032x}", self.trace_id)
    }

    /// This context as a remote parent.
    pub fn context(&self) -> Context {
        Context::new().with_remote_span_context(self.span_context())
    }

    /// The span this context names, as a link or a remote parent sees it.
    pub fn span_context(&self) -> SpanContext {
        let flags = if self.sampled { TraceFlags::SAMPLED } else { TraceFlags::default() };
        SpanContext::new(self.trace_id, self.parent_id, flags, true, TraceState::default())
    }
}

/// The most links one span carries. A digest of many members links to the
/// traces of its first ones: a span is not the place for an unbounded list
/// (the intent view lists every member).
pub const MAX_LINKS: usize = 32;

/// Trace contexts as a job stores the links of its attempts: each valid one
/// once, in order, at most [`MAX_LINKS`], separated by spaces. None for none.
pub fn links_text<'a>(links: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let mut kept: Vec<TraceParent> = Vec::new();
    for tp in links.into_iter().filter_map(TraceParent::parse) {
        if kept.len() == MAX_LINKS {
            break;
        }
        if !kept.contains(&tp) {
            kept.push(tp);
        }
    }
    let text: Vec<String> = kept.iter().map(TraceParent::to_string).collect();
    (!text.is_empty()).then(|| text.join(" "))
}

/// The links stored with a job (see [`links_text`]); what does not parse is
/// left out.
pub fn parse_links(text: Option<&str>) -> Vec<TraceParent> {
    text.unwrap_or_default().split_whitespace().filter_map(TraceParent::parse).take(MAX_LINKS).collect()
}

/// Links `span` (not started yet, so before [`continue_trace`] reads it) to
/// other traces: the work it continues was caused there too.
pub fn link(span: &Span, links: &[TraceParent]) {
    for tp in links {
        span.add_link(tp.span_context());
    }
}

impl std::fmt::Display for TraceParent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "00-{:032x}-{:016x}-{:02x}", self.trace_id, self.parent_id, u8::from(self.sampled))
    }
}

/// Makes `span` (not entered yet) a child of `parent`, a span of another
/// process or of another moment: the caller's, or the ingest's read back
/// from a job. With a parent, the parent's sampling decision stands.
pub fn continue_trace(span: &Span, parent: &TraceParent) {
    let _ = span.set_parent(parent.context());
}

/// Starts `span` (not entered yet) as the root of the trace `trace_id`.
pub fn start_trace(span: &Span, trace_id: TraceId) {
    NEXT_TRACE_ID.with(|next| next.set(Some(trace_id)));
    // Builds the span now, on this thread, so the id generator reads the id.
    let _ = span.context();
    NEXT_TRACE_ID.with(|next| next.set(None));
}

/// The trace context that work `span` causes later should continue: the
/// span's own when it is exported, else `fallback` (the caller's context, or
/// the derived one), so a process that exports continues the same trace.
pub fn traceparent_of(span: &Span, fallback: TraceParent) -> TraceParent {
    let cx = span.context();
    let own = cx.span().span_context().clone();
    if !own.is_valid() {
        return fallback;
    }
    TraceParent { trace_id: own.trace_id(), parent_id: own.span_id(), sampled: own.is_sampled() }
}

/// Marks `span` failed, for tail sampling (`status_code: ERROR`).
/// `description` is a fixed phrase, never a provider's text.
pub fn fail(span: &Span, description: &'static str) {
    span.set_status(Status::error(description));
}

/// Whether this process exports spans (the batch spans are built only then).
pub fn exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

/// The OpenTelemetry context of `span`, to parent spans written later.
pub fn context_of(span: &Span) -> Context {
    if exporting() { span.context() } else { Context::new() }
}

/// A span of a batch that served many notifications (a claim, a recording),
/// written into one notification's trace with the batch's own times.
pub fn batch_span(
    name: &'static str,
    parent: &Context,
    (start, end): (SystemTime, SystemTime),
    attributes: Vec<KeyValue>,
    error: Option<&'static str>,
) {
    if !exporting() || !parent.span().span_context().is_valid() {
        return;
    }
    let tracer = opentelemetry::global::tracer(SCOPE);
    let mut span = tracer
        .span_builder(name)
        .with_start_time(start)
        .with_attributes(attributes)
        .start_with_context(&tracer, parent);
    if let Some(description) = error {
        opentelemetry::trace::Span::set_status(&mut span, Status::error(description));
    }
    opentelemetry::trace::Span::end_with_timestamp(&mut span, end);
}

thread_local! {
    /// The id the next root span built on this thread takes (see [`start_trace`]).
    static NEXT_TRACE_ID: Cell<Option<TraceId>> = const { Cell::new(None) };
}

/// Random ids, except a root trace id chosen by [`start_trace`].
#[derive(Debug, Default)]
struct ChosenIds(RandomIdGenerator);

impl IdGenerator for ChosenIds {
    fn new_trace_id(&self) -> TraceId {
        NEXT_TRACE_ID.with(|next| next.take()).unwrap_or_else(|| self.0.new_trace_id())
    }
    fn new_span_id(&self) -> SpanId {
        self.0.new_span_id()
    }
}

/// The collector URL for traces: `base` with `/v1/traces` added, unless it
/// ends in it already.
pub fn traces_url(base: &str) -> Result<String, String> {
    let url =
        url::Url::parse(base.trim()).map_err(|e| format!("{base:?} is not a URL like http://127.0.0.1:4318: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("{base:?} must be an http:// or https:// URL (OTLP over HTTP, protobuf)"));
    }
    let text = url.as_str().trim_end_matches('/');
    Ok(if text.ends_with("/v1/traces") { text.to_string() } else { format!("{text}/v1/traces") })
}

/// Where spans go, when anywhere: `[tracing] otlp_endpoint`, else the
/// standard `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / `OTEL_EXPORTER_OTLP_ENDPOINT`
/// (which the exporter reads itself, with `OTEL_EXPORTER_OTLP_HEADERS` and
/// `_TIMEOUT`). `OTEL_SDK_DISABLED=true` turns it all off.
pub enum Export {
    Off,
    /// The URL from the config file, resolved.
    Config(String),
    /// From the standard variables.
    Environment,
}

impl Export {
    pub fn of(config: &crate::config::TracingConfig) -> Result<Export, String> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        if var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return Ok(Export::Off);
        }
        if let Some(protocol) = var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL").or_else(|| var("OTEL_EXPORTER_OTLP_PROTOCOL"))
            && protocol.trim() != "http/protobuf"
        {
            return Err(format!(
                "OTEL_EXPORTER_OTLP_PROTOCOL: {protocol:?}; Herald exports OTLP over HTTP with protobuf (http/protobuf) only"
            ));
        }
        if let Some(url) = &config.otlp_endpoint {
            return Ok(Export::Config(traces_url(url).map_err(|m| format!("tracing.otlp_endpoint: {m}"))?));
        }
        if var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some() || var("OTEL_EXPORTER_OTLP_ENDPOINT").is_some() {
            return Ok(Export::Environment);
        }
        Ok(Export::Off)
    }
}

/// The tracer provider of a process that exports; flushed by [`Tracing::shutdown`].
pub struct Tracing {
    provider: SdkTracerProvider,
}

/// The provider for `export` (None when off), built inside the Tokio runtime
/// its batch processor runs on.
pub fn provider(export: Export, sample_ratio: f64, deployment: &str) -> Result<Option<SdkTracerProvider>, String> {
    use opentelemetry_otlp::{Protocol, WithExportConfig};
    let builder = opentelemetry_otlp::SpanExporter::builder().with_http().with_protocol(Protocol::HttpBinary);
    let exporter = match export {
        Export::Off => return Ok(None),
        Export::Config(url) => builder.with_endpoint(url).build(),
        Export::Environment => builder.build(),
    }
    .map_err(|e| format!("the OTLP exporter: {e}"))?;
    let processor = opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor::builder(
        exporter,
        opentelemetry_sdk::runtime::Tokio,
    )
    .build();
    Ok(Some(provider_builder(sample_ratio, deployment).with_span_processor(processor).build()))
}

/// Everything of a provider but where its spans go: the sampler, the ids
/// (see [`start_trace`]) and the resource. Tests add an in-memory exporter.
pub fn provider_builder(sample_ratio: f64, deployment: &str) -> opentelemetry_sdk::trace::TracerProviderBuilder {
    SdkTracerProvider::builder()
        .with_sampler(sampler(sample_ratio))
        .with_id_generator(ChosenIds::default())
        .with_resource(resource(deployment))
}

/// Head sampling by trace id: a notification's spans are kept or dropped
/// together, and a trace that comes with a decision keeps it.
pub fn sampler(ratio: f64) -> Sampler {
    Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(ratio)))
}

/// `service.name` (`herald`, or `OTEL_SERVICE_NAME`), the version and the deployment.
fn resource(deployment: &str) -> opentelemetry_sdk::Resource {
    let mut builder = opentelemetry_sdk::Resource::builder();
    if std::env::var("OTEL_SERVICE_NAME").is_err() {
        builder = builder.with_service_name("herald");
    }
    builder
        .with_attributes([
            KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
            KeyValue::new("deployment.environment.name", deployment.to_string()),
        ])
        .build()
}

/// The subscriber layer that turns Herald's spans (and nothing else: no log
/// events, no other crate's spans) into OpenTelemetry spans of `provider`,
/// which also becomes the global provider the batch spans use.
pub fn layer<S>(provider: &SdkTracerProvider) -> impl tracing_subscriber::Layer<S> + use<S>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    use tracing_subscriber::Layer;
    opentelemetry::global::set_tracer_provider(provider.clone());
    EXPORTING.store(true, Ordering::Relaxed);
    tracing_opentelemetry::layer()
        .with_tracer(provider.tracer(SCOPE))
        .with_location(false)
        .with_target(false)
        .with_threads(false)
        .with_level(false)
        .with_tracked_inactivity(false)
        .with_error_events_to_status(false)
        .with_error_events_to_exceptions(false)
        .with_filter(tracing_subscriber::filter::filter_fn(|m| m.is_span() && m.target().starts_with("herald")))
}

impl Tracing {
    pub fn new(provider: SdkTracerProvider) -> Tracing {
        Tracing { provider }
    }

    /// Exports the spans still queued, then stops (bounded: a collector
    /// that is down cannot hold the shutdown).
    pub async fn shutdown(self) {
        let provider = self.provider;
        let flush = tokio::task::spawn_blocking(move || provider.shutdown());
        match tokio::time::timeout(Duration::from_secs(10), flush).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => tracing::warn!(error = %e, "flushing spans at shutdown failed"),
            Ok(Err(_)) | Err(_) => tracing::warn!("flushing spans at shutdown did not finish; some spans are lost"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_is_read_as_the_recommendation_says() {
        let tp = TraceParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        assert_eq!(tp.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert!(tp.sampled);
        assert_eq!(tp.to_string(), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        let unsampled = TraceParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00").unwrap();
        assert!(!unsampled.sampled);
        // A later version: its first four fields, whatever follows.
        assert!(TraceParent::parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-next").is_some());
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0x",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_derived_trace_is_spelled_by_the_seeds_sha256() {
        // A retried request joins its original's trace across versions of
        // Herald: the ids stay the first 32 and next 16 hex digits.
        let seed = "default|key:k-1";
        let digest = crate::event::identity::sha256_hex(seed.as_bytes());
        let derived = TraceParent::derived(seed);
        assert_eq!(derived.trace_id_hex(), digest[..32]);
        assert_eq!(format!("{:016x}", derived.parent_id), digest[32..48]);
    }

    #[test]
    fn a_derived_trace_is_the_same_for_the_same_seed() {
        let a = TraceParent::derived("default|key:k-1");
        assert_eq!(a, TraceParent::derived("default|key:k-1"));
        assert_ne!(a.trace_id, TraceParent::derived("default|key:k-2").trace_id);
        assert_eq!(a.trace_id_hex().len(), 32);
        assert_eq!(TraceParent::parse(&a.to_string()), Some(a));
    }

    #[test]
    fn sampling_goes_by_trace_id_and_a_parent_decision_stands() {
        use opentelemetry::trace::{SamplingDecision, SpanKind};
        use opentelemetry_sdk::trace::ShouldSample;
        let decide = |sampler: &Sampler, parent: Option<&Context>, trace_id: TraceId| {
            sampler.should_sample(parent, trace_id, "ingest", &SpanKind::Server, &[], &[]).decision
        };
        let ids: Vec<TraceId> = (0..2000).map(|n| TraceParent::derived(&format!("r{n}")).trace_id).collect();
        let tenth = sampler(0.1);
        let kept = ids.iter().filter(|t| decide(&tenth, None, **t) == SamplingDecision::RecordAndSample).count();
        assert!((120..290).contains(&kept), "{kept} of 2000 kept at 0.1");
        // The same trace id, the same answer: in every process.
        for t in &ids {
            assert_eq!(decide(&tenth, None, *t), decide(&sampler(0.1), None, *t));
        }
        // A parent's decision is kept whatever the ratio.
        let sampled = TraceParent { sampled: true, ..TraceParent::derived("p") };
        let dropped = TraceParent { sampled: false, ..sampled };
        assert_eq!(decide(&sampler(0.0), Some(&sampled.context()), ids[0]), SamplingDecision::RecordAndSample);
        assert_eq!(decide(&sampler(1.0), Some(&dropped.context()), ids[0]), SamplingDecision::Drop);
    }

    #[test]
    fn links_are_kept_once_each_in_order_and_bounded() {
        let tps: Vec<String> = (0..MAX_LINKS + 5).map(|n| TraceParent::derived(&format!("m{n}")).to_string()).collect();
        let mut given: Vec<&str> = vec![tps[1].as_str(), "not a traceparent", tps[0].as_str(), tps[1].as_str()];
        given.extend(tps[2..].iter().map(String::as_str));
        let text = links_text(given).unwrap();
        let links = parse_links(Some(&text));
        assert_eq!(links.len(), MAX_LINKS);
        assert_eq!((links[0].to_string(), links[1].to_string()), (tps[1].clone(), tps[0].clone()));
        assert!(!links.iter().skip(1).any(|l| l.to_string() == tps[1]), "each once");
        assert_eq!(links_text(["", "00-bad"]), None);
        assert!(parse_links(None).is_empty());
    }

    #[test]
    fn the_collector_url_gets_the_traces_path_once() {
        assert_eq!(traces_url("http://127.0.0.1:4318").unwrap(), "http://127.0.0.1:4318/v1/traces");
        assert_eq!(traces_url("http://c:4318/").unwrap(), "http://c:4318/v1/traces");
        assert_eq!(traces_url("https://c/otlp/v1/traces").unwrap(), "https://c/otlp/v1/traces");
        assert!(traces_url("grpc://c:4317").unwrap_err().contains("http://"));
        assert!(traces_url("not a url").is_err());
    }
}
