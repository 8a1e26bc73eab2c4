//! The ingest pipeline, whatever the front door (the HTTP API today, an event
//! bus next): parse → identity → replay check → route → destinations →
//! directory → plan → render → store.
//!
//! A request already seen is answered before anything is planned: the Redis
//! fast path, else one indexed read of the request record. Only a new request
//! reads the directory, resolves webhook hosts, plans and renders, and only
//! the store's transaction decides — the read before it is an optimisation
//! that a concurrent request can outrun, never the authority.

use crate::channel::destination::DestinationPolicy;
use crate::clock::{Clock, micros};
use crate::config::{Config, Route};
use crate::event::identity::{Tenant, sha256_hex};
use crate::event::json::{JsonError, read_strict};
use crate::event::{Event, canonical_json, parse_event};
use crate::intent::State;
use crate::ops::fastpath::FastPath;
use crate::ops::log::{self, Duplicate, TemplateRef};
use crate::ops::metrics;
use crate::ops::trace::{self, TraceParent};
use crate::plan::{PlanInput, plan};
use crate::render::TemplateSet;
use crate::store::{
    DirectoryRead, Ingest, IngestOutcome, IngestResponse, IntentStatus, NewIntent, RequestLookup, RequestSeen, Store,
    StoreError, TallyKind,
};
use group::GroupCommit;
pub use load::IngestLoad;
use reads::Reads;
use std::collections::HashMap;
use std::sync::Arc;
use tally::Tally;
use tracing::Instrument;
use tracing::field::Empty;

pub mod group;
pub mod load;
pub mod nats;
pub mod order;
pub mod reads;
pub mod tally;

/// Transactions in flight at once on Postgres.
const POSTGRES_WRITERS: usize = 2;

/// Gathered reads of each kind in flight at once on Postgres. One: a read is a
/// single indexed statement, so the requests that arrive while it is out are
/// the next batch, and a second worker only splits them into two statements
/// (alternating runs at 32 connections: about 5 % more notifications a
/// second and 8 % less CPU per notification with one; docs/performance.md).
const POSTGRES_READERS: usize = 1;

/// Gathered request lookups in flight at once on SQLite (each runs on a read
/// connection of the store's own, on the thread of the task that reads it).
const SQLITE_READERS: usize = 2;

/// One request to ingest, as a front door hands it over: the caller's tenant,
/// its idempotency key (already checked for shape) and the raw body.
pub struct Request<'a> {
    pub tenant: &'a Tenant,
    pub idempotency_key: Option<&'a str>,
    pub body: &'a [u8],
    /// The caller's W3C trace context, when it sent a valid one.
    pub trace: Option<TraceParent>,
}

/// The answer to a request that was not refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The request created at least one intent (HTTP 202).
    Created(IngestResponse),
    /// A new request whose intents all existed already (HTTP 200).
    Existing(IngestResponse),
    /// The stored answer to an earlier request with this identity, its
    /// intents as they are now (HTTP 200, `Idempotent-Replayed: true`).
    Replayed(IngestResponse),
}

impl Answer {
    pub fn response(&self) -> &IngestResponse {
        match self {
            Answer::Created(r) | Answer::Existing(r) | Answer::Replayed(r) => r,
        }
    }
}

/// Why a request was refused. Each names what the sender has to change.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error(transparent)]
    Json(#[from] JsonError),
    #[error("{field}: {message}")]
    InvalidField { field: String, message: String },
    #[error("type: no route is configured for event type {0:?}")]
    UnknownEventType(String),
    /// The identity was used before with another request.
    #[error("this Idempotency-Key was used before with a different request body")]
    IdempotencyMismatch,
    /// The event key was accepted before with other content.
    #[error("this event was accepted before with other data or entity.version")]
    EventConflict,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What ingest needs of the deployment, and the group commit in front of
/// the store.
pub struct Ingestor {
    store: Arc<dyn Store>,
    config: Arc<Config>,
    templates: Arc<TemplateSet>,
    routes: Arc<HashMap<String, Route>>,
    clock: Arc<dyn Clock>,
    fastpath: Option<Arc<FastPath>>,
    destinations: Arc<DestinationPolicy>,
    commits: GroupCommit,
    reads: Reads,
    tally: Arc<Tally>,
    load: Arc<IngestLoad>,
}

/// A parsed request and who it is.
struct Identified {
    event: Event,
    identity: String,
    fingerprint: String,
    event_key: String,
    canonical: serde_json::Value,
    event_body: String,
}

impl Ingestor {
    /// Starts the group commit's writers: on Postgres a few, so one batch is
    /// gathered while another commits; on SQLite one, as there is one writer
    /// connection. The reads before planning are gathered too: on SQLite the
    /// request lookups only (see `reads`).
    pub fn new(
        store: Arc<dyn Store>,
        config: Arc<Config>,
        templates: Arc<TemplateSet>,
        routes: Arc<HashMap<String, Route>>,
        clock: Arc<dyn Clock>,
        fastpath: Option<Arc<FastPath>>,
        destinations: Arc<DestinationPolicy>,
    ) -> Ingestor {
        let (commits, reads) = match crate::store::is_postgres(&config.database_url) {
            true => {
                let reads = Reads::gathered(store.clone(), POSTGRES_READERS, fastpath.clone());
                (GroupCommit::start(store.clone(), POSTGRES_WRITERS), reads)
            }
            false => {
                let reads = Reads::requests_gathered(store.clone(), SQLITE_READERS, fastpath.clone());
                (GroupCommit::start(store.clone(), 1), reads)
            }
        };
        let tally = Tally::start(store.clone(), clock.clone());
        let load = Arc::default();
        Ingestor { store, config, templates, routes, clock, fastpath, destinations, commits, reads, tally, load }
    }

    /// The requests this ingestor is serving: the worker of this process
    /// gives way to them while they queue.
    pub fn load(&self) -> Arc<IngestLoad> {
        self.load.clone()
    }

    /// One request, in the `ingest` span: the caller's trace continued, or a
    /// trace derived from the request identity (so a retried request joins
    /// the trace of the first, and its log lines carry the trace's id).
    pub async fn ingest(&self, request: Request<'_>) -> Result<Answer, IngestError> {
        let _serving = self.load.serving();
        let span = tracing::info_span!(parent: None, "ingest", otel.kind = "server", herald.outcome = Empty, herald.intents = Empty);
        let identified = self.identify(&request);
        let derived = (identified.as_ref().ok())
            .map(|(_, new)| TraceParent::derived(&format!("{}|{}", request.tenant.as_str(), new.identity)));
        match (request.trace, derived) {
            (Some(caller), _) => trace::continue_trace(&span, &caller),
            (None, Some(own)) => trace::start_trace(&span, own.trace_id),
            (None, None) => {}
        }
        let answer = match identified {
            Ok((route, new)) => {
                let context = request.trace.or(derived).map(|fallback| trace::traceparent_of(&span, fallback));
                self.ingest_identified(&request, route, new, context).instrument(span.clone()).await
            }
            Err(e) => Err(e),
        };
        let outcome = match &answer {
            Ok(Answer::Created(r)) | Ok(Answer::Existing(r)) | Ok(Answer::Replayed(r)) => {
                span.record("herald.intents", r.intents.len());
                match &answer {
                    Ok(Answer::Created(_)) => "created",
                    Ok(Answer::Existing(_)) => "existing",
                    _ => "replayed",
                }
            }
            Err(IngestError::IdempotencyMismatch) => {
                trace::fail(&span, "idempotency key mismatch");
                "mismatch"
            }
            Err(IngestError::EventConflict) => {
                trace::fail(&span, "event conflict");
                "conflict"
            }
            Err(IngestError::Store(_)) => {
                trace::fail(&span, "the store failed");
                "failed"
            }
            Err(_) => "invalid",
        };
        span.record("herald.outcome", outcome);
        answer
    }

    async fn ingest_identified(
        &self,
        request: &Request<'_>,
        route: &Route,
        new: Identified,
        context: Option<TraceParent>,
    ) -> Result<Answer, IngestError> {
        let tenant = request.tenant.as_str();
        let trace_id = context.map(|c| c.trace_id_hex()).unwrap_or_default();
        if let Some(seen) = self.seen(tenant, &new.identity, &new.fingerprint).await? {
            return match seen {
                RequestSeen::Replay(response) => {
                    metrics::idempotency_conflict("duplicate");
                    self.tally.count(tenant, TallyKind::Replay);
                    let template = self.template_of(route);
                    for i in &response.intents {
                        log::intent(&trace_id, i, template, Some(Duplicate::Replay));
                    }
                    Ok(Answer::Replayed(response))
                }
                RequestSeen::Mismatch => {
                    metrics::idempotency_conflict("mismatch");
                    self.tally.count(tenant, TallyKind::Mismatch);
                    refused(&trace_id, &new.event_key, "mismatch");
                    Err(IngestError::IdempotencyMismatch)
                }
            };
        }
        self.check_destinations(&new.event).await?;
        let duplicate = if request.idempotency_key.is_some() { Duplicate::AnotherKey } else { Duplicate::Reemitted };
        let mut ingest = (self.prepare(request.tenant, route, new, Suppressions::Consulted))
            .instrument(tracing::info_span!("plan"))
            .await?;
        ingest.traceparent = context.map(|c| c.to_string());
        self.store(ingest, &trace_id, duplicate).await
    }

    /// Parse, route and identity: what every request goes through first.
    fn identify(&self, request: &Request<'_>) -> Result<(&Route, Identified), IngestError> {
        let json = read_strict(request.body)?;
        let event = parse_event(&json).map_err(|e| IngestError::InvalidField { field: e.field, message: e.message })?;
        // A map lookup: an unknown type answers as such before any I/O.
        let route = self
            .routes
            .get(&event.event_type)
            .ok_or_else(|| IngestError::UnknownEventType(event.event_type.clone()))?;
        let event_key = event.event_key(request.tenant);
        // The canonical form is built once: its JSON is the stored body, its
        // hash the fingerprint, and without the audience the content digest.
        let canonical = event.canonical();
        let event_body = canonical_json(&canonical);
        let fingerprint = sha256_hex(event_body.as_bytes());
        let identity = match request.idempotency_key {
            Some(k) => format!("key:{k}"),
            // Without a key the request is the event with its audience: an exact
            // repeat replays, another audience is a new request, and other content
            // is refused by the event's own record (409).
            None => format!("event:{event_key}#{fingerprint}"),
        };
        Ok((route, Identified { event, identity, fingerprint, event_key, canonical, event_body }))
    }

    /// A dry run: the same checks, plan and render as [`Ingestor::ingest`],
    /// answered with what a real post would record — and nothing written, not
    /// a request record, an intent, a job, a payload or a Redis key. It reads
    /// the database (the request record, the event's record, the intents that
    /// exist) so that it refuses what a real post would refuse. It does not
    /// read the suppression list: each address is planned as if no entry
    /// matched (the answer says so), or a free, traceless dry run would
    /// confirm guesses at a masked number one candidate at a time.
    pub async fn dry_run(&self, request: Request<'_>) -> Result<DryRun, IngestError> {
        // A trace of its own (or the caller's), so its plan is not a stray root.
        let span = tracing::info_span!(parent: None, "dry_run", otel.kind = "server");
        if let Some(caller) = &request.trace {
            trace::continue_trace(&span, caller);
        }
        self.dry_run_in(request).instrument(span).await
    }

    async fn dry_run_in(&self, request: Request<'_>) -> Result<DryRun, IngestError> {
        let (route, new) = self.identify(&request)?;
        let tenant = request.tenant.as_str();
        let replay = match self.store.request_find(tenant, &new.identity, &new.fingerprint).await? {
            Some(RequestSeen::Mismatch) => return Err(IngestError::IdempotencyMismatch),
            Some(RequestSeen::Replay(_)) => true,
            None => false,
        };
        let content_digest = Event::content_digest_of(new.canonical.clone());
        if !replay {
            use crate::store::decide::{self, Record, Verdict};
            let accepted = self.store.event_digest(&new.event_key).await?;
            let event = match &accepted {
                Some(content_digest) => decide::Event::Accepted { content_digest },
                None => decide::Event::New,
            };
            let request = decide::Request { fingerprint: &new.fingerprint, content_digest: &content_digest };
            if decide::decide(request, Record::Absent, event) == Verdict::Conflict {
                return Err(IngestError::EventConflict);
            }
        }
        self.check_destinations(&new.event).await?;
        // Not the suppression list: an answer that wrote nothing, cost
        // nothing and left no trace would confirm guesses at a masked number.
        let ingest = self.prepare(request.tenant, route, new, Suppressions::NotConsulted).await?;
        let keys: Vec<String> = ingest.intents.iter().map(|i| i.key.clone()).collect();
        let existing = self.store.intents_status(tenant, &keys).await?;
        Ok(DryRun { event_key: ingest.event_key, replay, intents: ingest.intents, existing })
    }

    fn template_of<'r>(&'r self, route: &'r Route) -> TemplateRef<'r> {
        TemplateRef { id: &route.template, revision: self.templates.meta(&route.template).map(|m| m.revision.as_str()) }
    }

    /// The answer already given to this identity, if any: from Redis when it
    /// holds an exact repeat, else from the request record (one indexed read),
    /// both gathered with the concurrent requests' ([`reads`]).
    async fn seen(&self, tenant: &str, identity: &str, fingerprint: &str) -> Result<Option<RequestSeen>, IngestError> {
        let lookup =
            RequestLookup { tenant: tenant.into(), identity: identity.into(), fingerprint: fingerprint.into() };
        Ok(self.reads.request(lookup).await?)
    }

    /// Webhook URLs given inline must not point inside the deployment (a name
    /// is resolved for that, so only a new request pays for it).
    async fn check_destinations(&self, event: &Event) -> Result<(), IngestError> {
        let urls: Vec<(String, String)> = (event.recipients.iter().enumerate())
            .filter_map(|(i, r)| Some((format!("recipients[{i}].webhook_url"), r.webhook_url.clone()?)))
            .collect();
        if urls.is_empty() {
            return Ok(());
        }
        self.destinations
            .check_input(&urls)
            .await
            .map_err(|(field, message)| IngestError::InvalidField { field, message })
    }

    /// Directory, plan and render: everything the transaction will write.
    async fn prepare(
        &self,
        tenant: &Tenant,
        route: &Route,
        new: Identified,
        list: Suppressions,
    ) -> Result<Ingest, IngestError> {
        let Identified { event, identity, fingerprint, event_key, canonical, event_body } = new;
        let ids: Vec<String> = event.recipients.iter().map(|r| r.id.clone()).collect();
        // The directory and the suppression entries of the addresses given
        // inline in one read; the entries of addresses only the directory has
        // in a second, when there are any.
        let key = self.config.suppression.settled()?;
        let inline = match list {
            Suppressions::Consulted => crate::suppression::inline_lookups(key, tenant, &event),
            Suppressions::NotConsulted => Vec::new(),
        };
        let read = DirectoryRead { tenant: tenant.as_str().into(), ids, hashes: inline.clone() };
        let (entries, found) = self.reads.directory(read).await?;
        let directory: HashMap<_, _> = entries.into_iter().map(|r| (r.id.clone(), r)).collect();
        let now = self.clock.now();
        let configured = |c| self.config.channel_configured(c);
        let suppressions = match list {
            Suppressions::Consulted => {
                crate::suppression::entries_for(key, self.store.as_ref(), tenant, &event, &directory, &inline, found)
                    .await?
            }
            Suppressions::NotConsulted => HashMap::new(),
        };
        let mut intents = plan(&PlanInput {
            tenant,
            event: &event,
            route,
            templates: &self.templates,
            directory: &directory,
            configured: &configured,
            suppressions: &suppressions,
            caps: &self.config.caps,
            now,
        });
        // Shadow or live is decided now and stored with each intent: a later
        // change of configuration only affects what is planned after it.
        for intent in &mut intents {
            intent.mode = self.config.mode_for(route, intent.channel);
        }
        Ok(Ingest {
            tenant: tenant.as_str().to_string(),
            identity,
            content_digest: Event::content_digest_of(canonical),
            event_body,
            fingerprint,
            event_key,
            event_type: event.event_type,
            entity_type: event.entity.kind,
            entity_id: event.entity.id,
            entity_version: event.entity.version.map(|v| v as i64),
            occurred_at: event.occurred_at.canonical(),
            intents,
            now_us: micros(now),
            traceparent: None,
        })
    }

    /// The transaction decides; its outcome becomes the answer, is logged and
    /// counted, and a replayed answer is remembered in Redis (see `remember`).
    async fn store(&self, ingest: Ingest, trace_id: &str, duplicate: Duplicate) -> Result<Answer, IngestError> {
        let (tenant, identity, fingerprint) =
            (ingest.tenant.clone(), ingest.identity.clone(), ingest.fingerprint.clone());
        let templates: HashMap<String, (String, Option<String>)> = (ingest.intents.iter())
            .map(|i| (i.key.clone(), (i.template_id.clone(), i.template_revision.clone())))
            .collect();
        let event_key = ingest.event_key.clone();
        let outcome = self.commits.ingest(ingest).instrument(tracing::info_span!("store")).await?;
        match outcome {
            IngestOutcome::Accepted { response, any_created } => {
                record(trace_id, &response, &templates, duplicate);
                if !any_created {
                    metrics::idempotency_conflict("duplicate");
                }
                self.tally.count(
                    &tenant,
                    match (any_created, duplicate) {
                        (true, _) => TallyKind::New,
                        (false, Duplicate::Reemitted) => TallyKind::Reemitted,
                        (false, _) => TallyKind::AnotherKey,
                    },
                );
                Ok(if any_created { Answer::Created(response) } else { Answer::Existing(response) })
            }
            IngestOutcome::Replayed { response } => {
                metrics::idempotency_conflict("duplicate");
                self.tally.count(&tenant, TallyKind::Replay);
                record(trace_id, &response, &templates, Duplicate::Replay);
                self.remember(&tenant, &identity, &fingerprint, &response).await;
                Ok(Answer::Replayed(response))
            }
            IngestOutcome::Mismatch => {
                metrics::idempotency_conflict("mismatch");
                self.tally.count(&tenant, TallyKind::Mismatch);
                refused(trace_id, &event_key, "mismatch");
                Err(IngestError::IdempotencyMismatch)
            }
            IngestOutcome::Conflict => {
                metrics::idempotency_conflict("conflict");
                self.tally.count(&tenant, TallyKind::Conflict);
                refused(trace_id, &event_key, "conflict");
                Err(IngestError::EventConflict)
            }
        }
    }

    /// Keeps a replayed answer in Redis, so the next exact repeat is answered
    /// there ([`reads::remember`]).
    async fn remember(&self, tenant: &str, identity: &str, fingerprint: &str, response: &IngestResponse) {
        if let Some(fast) = &self.fastpath {
            let lookup =
                RequestLookup { tenant: tenant.into(), identity: identity.into(), fingerprint: fingerprint.into() };
            reads::remember(fast, &lookup, response).await;
        }
    }
}

/// Whether planning reads the tenant's suppression list. A real post does
/// (its decision is recorded as an intent, a trail an operator sees); a dry
/// run does not, and plans every address as if no entry matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Suppressions {
    Consulted,
    NotConsulted,
}

/// What a dry run found: the intents a real post would record, and those of
/// them that exist already (a real post would report them as they stand).
#[derive(Debug, Clone)]
pub struct DryRun {
    pub event_key: String,
    /// This request was seen before: a real post would replay its answer.
    pub replay: bool,
    pub intents: Vec<NewIntent>,
    pub existing: Vec<IntentStatus>,
}

/// A request refused for its identity: always logged, whatever the sampling.
fn refused(trace_id: &str, event_key: &str, kind: &'static str) {
    tracing::warn!(trace_id, event_key, outcome = kind, "request refused: idempotency {kind}");
}

/// One log line per intent a request named, and the counters per intent it created.
fn record(
    trace_id: &str,
    response: &IngestResponse,
    templates: &HashMap<String, (String, Option<String>)>,
    duplicate: Duplicate,
) {
    for i in &response.intents {
        let (id, revision) = templates.get(&i.key).map_or(("", None), |(id, r)| (id.as_str(), r.as_deref()));
        let template = TemplateRef { id, revision };
        let duplicate = match duplicate {
            Duplicate::Replay => Some(Duplicate::Replay),
            other => (!i.created).then_some(other),
        };
        log::intent(trace_id, i, template, duplicate);
        if duplicate.is_none() && i.created {
            metrics::intent_created(i.channel, i.decision, i.reason.as_deref(), template);
            if i.state == State::Dead {
                metrics::dead_letter(i.reason.as_deref().unwrap_or("unknown"));
            }
        }
    }
}

/// The event key of a request's body when it parses as an event, for
/// [`order::identities`]; nothing else (route, destinations) is checked.
fn identify_for_order(request: &Request<'_>) -> Option<String> {
    let json = read_strict(request.body).ok()?;
    let event = parse_event(&json).ok()?;
    Some(event.event_key(request.tenant))
}

#[cfg(test)]
mod order_tests {
    use super::*;

    fn identities_of(key: Option<&str>, body: &str) -> Vec<String> {
        let tenant = Tenant::new("default");
        order::identities(&Request { tenant: &tenant, idempotency_key: key, body: body.as_bytes(), trace: None })
    }

    fn event(occurred_at: &str, total: &str) -> String {
        serde_json::json!({
            "type": "purchase_order.approved",
            "entity": {"type": "purchase_order", "id": "PO-1"},
            "occurred_at": occurred_at,
            "data": {"po": {"total": total}},
            "recipients": [{"id": "u-1"}]
        })
        .to_string()
    }

    /// Two requests are ordered when they share an identity: the same key,
    /// or the same event whatever its data and however its time is written.
    #[test]
    fn a_message_waits_under_its_key_and_its_event() {
        let first = identities_of(Some("k-1"), &event("2026-11-29T10:15:00+05:45", "1"));
        let second = identities_of(Some("k-1"), &event("2026-11-30T10:15:00Z", "2"));
        assert_eq!(first[0], second[0], "the same key");
        assert_ne!(first[1], second[1], "another event");
        let same_instant = identities_of(None, &event("2026-11-29T04:30:00Z", "2"));
        assert_eq!(same_instant, vec![first[1].clone()], "the same event, with other data");
        assert_eq!(identities_of(Some("k-2"), "{\"type\": "), vec!["default|key:k-2".to_string()], "no event key");
        assert!(identities_of(None, "[]").is_empty());
    }
}
