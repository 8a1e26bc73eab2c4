//! The values that cross the store seam: a small params struct per operation,
//! and row types shared by both backends (`FromRow` is generic over the row).
//! Times are microseconds since the Unix epoch in both databases.

use super::{StoreError, StoreResult, SuppressionRow};
use crate::event::Channel;
use crate::intent::{Decision, Mode, OutcomeClass, Reason, State};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct RecipientRow {
    pub tenant: String,
    pub id: String,
    pub email: Option<String>,
    pub phone: Option<String>,
    pub locale: Option<String>,
    pub timezone: Option<String>,
    pub webhook_url: Option<String>,
    /// JSON.
    pub preferences: String,
    pub preferences_version: i64,
    pub updated_at: i64,
}

#[derive(Debug, Clone)]
pub struct RecipientPut {
    pub tenant: String,
    pub id: String,
    pub email: Option<String>,
    pub phone: Option<String>,
    pub locale: Option<String>,
    pub timezone: Option<String>,
    pub webhook_url: Option<String>,
    pub preferences: String,
    pub now_us: i64,
}

/// One intent as the planner made it, before the transaction decides whether it
/// is new.
#[derive(Debug, Clone, PartialEq)]
pub struct NewIntent {
    pub key: String,
    pub channel: Channel,
    pub recipient_id: String,
    pub destination: Option<String>,
    pub locale: Option<String>,
    pub template_id: String,
    pub template_revision: Option<String>,
    /// (digest, canonical JSON) of the frozen content.
    pub payload: Option<(String, String)>,
    pub decision: Decision,
    pub reason: Option<Reason>,
    /// Free text for an operator (a template error's message).
    pub detail: Option<String>,
    pub state: State,
    /// When set and the intent is new, a job is queued to run at this time.
    pub run_at: Option<i64>,
    /// The recipient's preferences version that took part in the decision.
    pub preferences_version: Option<i64>,
    /// For a digest member: the digest window it joins (its key is the link).
    pub digest: Option<NewDigest>,
    /// Live or shadow, as configured for its route and channel when planned.
    pub mode: Mode,
    /// The frequency cap the transaction that writes it holds it to (see
    /// [`super::caps`]); None when no cap applies or it is not to be sent.
    pub cap: Option<CapCheck>,
}

/// A frequency cap on one intent, as the planner found it: at most `max`
/// messages to its recipient on its channel per `per_us`.
#[derive(Debug, Clone, PartialEq)]
pub struct CapCheck {
    pub max: u32,
    pub per_us: i64,
    /// The period as configured (`1h`), for the detail.
    pub per: String,
    /// The key it was set at (`caps.sms`, `caps.sms of route po.approved`).
    pub source: String,
    /// Where its route batches this channel: the digest window it joins
    /// instead when over the cap, and when that window closes (told as a
    /// held intent's due time is). Else an intent over the cap is suppressed.
    pub fold: Option<(NewDigest, String)>,
}

/// A digest window a member intent joins; created by the first member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewDigest {
    pub key: String,
    pub event_type: String,
    pub channel: Channel,
    pub recipient_id: String,
    pub group_key: String,
    pub destination: Option<String>,
    pub locale: Option<String>,
    pub window_start: i64,
    pub closes_at: i64,
}

/// An intent's decision, reason and state, as a request's answer gives them.
pub type SummaryStatus = (Decision, Option<String>, State);

impl NewIntent {
    /// Its decision, reason and state as planned.
    pub fn planned(&self) -> SummaryStatus {
        (self.decision, self.reason.map(|r| r.as_str().to_string()), self.state)
    }

    /// This intent in a request's answer, with the status it has there: as
    /// planned when the request created it, else as the stored one stands.
    pub fn summary(&self, created: bool, status: SummaryStatus) -> IntentSummary {
        // Why planning killed it (a template error names the variable and
        // file), for the status it planned, not one the store holds. Other
        // notes stay with the intent, for the readers of intents.
        let dead_at_planning = created && self.state == State::Dead && status == self.planned();
        let detail = self.detail.clone().filter(|_| dead_at_planning);
        let (decision, reason, state) = status;
        IntentSummary {
            id: self.key.clone(),
            key: self.key.clone(),
            channel: self.channel,
            recipient_id: self.recipient_id.clone(),
            decision,
            reason,
            state,
            created,
            detail,
        }
    }
}

/// Everything one `POST /v1/events` writes.
#[derive(Debug, Clone)]
pub struct Ingest {
    pub tenant: String,
    /// `key:` and the `Idempotency-Key`, or `event:` and the event key with
    /// the fingerprint (see [`IngestOutcome`]).
    pub identity: String,
    /// Of the whole request: the event and its audience.
    pub fingerprint: String,
    pub event_key: String,
    /// Of the event's content alone (type, entity with version, occurred_at,
    /// data): frozen once the event key is accepted.
    pub content_digest: String,
    pub event_type: String,
    pub entity_type: String,
    pub entity_id: String,
    pub entity_version: Option<i64>,
    pub occurred_at: String,
    /// The canonical event, stored once under its fingerprint.
    pub event_body: String,
    pub intents: Vec<NewIntent>,
    pub now_us: i64,
    /// The W3C trace context the request's jobs continue (see
    /// [`crate::ops::trace`]); stored with each job it queues, and with
    /// each intent it creates (the trace later work links to).
    pub traceparent: Option<String>,
}

impl Ingest {
    /// The event body to write in the row of this request's one intent, when
    /// it planned exactly one (migration 0066); `None` when the body goes in a
    /// payload row instead, stored once for all of a broadcast's intents.
    /// Every intent a request inserts finds its body one way or the other:
    /// with one planned intent, that intent carries it; with any other number,
    /// the payload row is written in the same transaction.
    pub fn inline_body(&self) -> Option<&str> {
        (self.intents.len() == 1).then_some(self.event_body.as_str())
    }

    /// Whether this request's body is stored as a payload row (see
    /// [`Ingest::inline_body`]).
    pub fn body_payload(&self) -> bool {
        self.inline_body().is_none()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IntentSummary {
    pub id: String,
    pub key: String,
    pub channel: Channel,
    pub recipient_id: String,
    pub decision: Decision,
    pub reason: Option<String>,
    pub state: State,
    pub created: bool,
    /// Why planning made it dead (`template_error` names the variable, file
    /// and line; `sms_too_long` the segments), for an intent this request
    /// created. Answers stored before it was given have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IngestResponse {
    pub event_key: String,
    pub replayed: bool,
    pub intents: Vec<IntentSummary>,
}

impl IngestResponse {
    /// The intents as they are now, for a replay; `created` stays as the
    /// original answer gave it (that request created them, or not). An intent
    /// no longer stored keeps what the original answer said.
    pub fn refresh(&mut self, now: &[IntentStatus]) {
        let now: std::collections::HashMap<&str, &IntentStatus> = now.iter().map(|s| (s.key.as_str(), s)).collect();
        for i in &mut self.intents {
            if let Some(s) = now.get(i.key.as_str()) {
                i.decision = s.decision;
                i.reason.clone_from(&s.reason);
                i.state = s.state;
            }
        }
    }

    pub fn intent_keys(&self) -> Vec<String> {
        self.intents.iter().map(|i| i.key.clone()).collect()
    }
}

/// An intent's decision, reason and state as they are now.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct IntentStatus {
    pub key: String,
    pub decision: Decision,
    pub reason: Option<String>,
    pub state: State,
    pub mode: Mode,
}

/// What the database holds for a request identity that was seen before.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestSeen {
    /// The same fingerprint: the stored answer (marked replayed), its intents
    /// as they are now.
    Replay(IngestResponse),
    /// Another request used this identity.
    Mismatch,
}

impl RequestSeen {
    /// What a request record (its fingerprint and stored response) says to a
    /// request with `fingerprint`: another request's identity, nothing yet (a
    /// record without a response), or the stored answer marked replayed —
    /// its intents' states as they were then, for the caller to refresh.
    pub(crate) fn of_record(
        fingerprint: &str,
        stored: &str,
        response: Option<&str>,
    ) -> StoreResult<Option<RequestSeen>> {
        use super::decide::{Event, Record, Request, Verdict, decide};
        // The event is not read here: only a replay or a mismatch is known
        // from the record alone.
        let request = Request { fingerprint, content_digest: "" };
        let record = Record::Taken { fingerprint: stored, answered: response.is_some() };
        let text = match (decide(request, record, Event::Unread), response) {
            (Verdict::Mismatch, _) => return Ok(Some(RequestSeen::Mismatch)),
            (Verdict::Replay, Some(text)) => text,
            _ => return Ok(None),
        };
        let mut response: IngestResponse =
            serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("stored response: {e}")))?;
        response.replayed = true;
        Ok(Some(RequestSeen::Replay(response)))
    }
}

/// A request identity to look up before the request is planned
/// ([`super::IngestStore::requests_find`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestLookup {
    pub tenant: String,
    pub identity: String,
    pub fingerprint: String,
}

/// What a new request reads before it is planned: its recipients' directory
/// entries and the tenant's suppression entries among these address hashes
/// ([`super::DirectoryStore::directories_read`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectoryRead {
    pub tenant: String,
    pub ids: Vec<String>,
    pub hashes: Vec<String>,
}

/// The directory entries and suppression entries a [`DirectoryRead`] found.
pub type DirectoryRows = (Vec<RecipientRow>, Vec<SuppressionRow>);

/// How one request fared. The request identity is decided first (a reused
/// `Idempotency-Key` with another body is a mismatch), then the event's
/// content (another content under an accepted event key is a conflict), then
/// the audience (intents that do not exist yet are created).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IngestOutcome {
    /// This request was new. `any_created` is false when every intent existed
    /// already (the same event under another request identity).
    Accepted { response: IngestResponse, any_created: bool },
    /// The same identity and fingerprint were seen before: the stored
    /// response, its intents as they are now.
    Replayed { response: IngestResponse },
    /// The same identity arrived with another event.
    Mismatch,
    /// The event key was accepted with other content; nothing was written.
    Conflict,
}

#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct IntentRow {
    pub key: String,
    pub tenant: String,
    pub event_type: String,
    pub entity_type: String,
    pub entity_id: String,
    pub entity_version: Option<i64>,
    pub occurred_at: String,
    pub channel: Channel,
    pub recipient_id: String,
    pub destination: Option<String>,
    pub locale: Option<String>,
    pub template_id: String,
    pub template_revision: Option<String>,
    pub event_digest: String,
    pub payload_digest: Option<String>,
    pub decision: Decision,
    pub reason: Option<String>,
    pub detail: Option<String>,
    pub state: State,
    pub attempts: i64,
    pub created_at: i64,
    pub updated_at: i64,
    pub preferences_version: Option<i64>,
    /// The newer intent that superseded this one, or the digest it joined.
    pub link_key: Option<String>,
    /// `attempts` when the intent was last replayed from the dead letters: the
    /// retry policy counts the tries since then.
    pub retry_base: i64,
    /// Live or shadow, fixed when it was planned.
    pub mode: Mode,
}

#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct AttemptRow {
    pub intent_key: String,
    pub n: i64,
    pub started_at: i64,
    pub finished_at: Option<i64>,
    pub outcome: Option<OutcomeClass>,
    pub error_class: Option<String>,
    pub provider_status: Option<i64>,
    pub provider_message_id: Option<String>,
    pub error: Option<String>,
    /// The provider's `Retry-After` as honoured (up to `retry.max_retry_after`), in µs.
    pub retry_after: Option<i64>,
    /// When the next try was scheduled, if this attempt led to one.
    pub retry_at: Option<i64>,
    /// The provider the attempt went to (its configured name); None for an
    /// attempt whose worker died before recording it.
    pub provider: Option<String>,
    /// The call came after an `unknown` attempt on a provider that cannot
    /// recognise a retry, so the recipient may have been told twice.
    pub possible_duplicate: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntentDetail {
    pub intent: IntentRow,
    /// The frozen content (JSON), when the intent has any.
    pub content: Option<String>,
    /// The event as it was accepted (canonical JSON), until retention prunes it.
    pub event_body: Option<String>,
    pub attempts: Vec<AttemptRow>,
    /// What the provider reported after accepting it, oldest first.
    pub receipts: Vec<super::ReceiptRow>,
    /// Each time it was replayed from the dead letters, oldest first.
    pub replays: Vec<ReplayRow>,
}

/// One replay of a dead letter: when, who asked, and the reason it had been
/// dead for (the reason group an operator replays by).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ReplayRow {
    pub replayed_at: i64,
    pub previous_reason: Option<String>,
    pub requested_by: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct IntentFilter {
    /// None: every tenant's (an `admin` in the console).
    pub tenant: Option<String>,
    pub entity: Option<(String, String)>,
    pub recipient_id: Option<String>,
    pub state: Option<State>,
    pub cursor: Option<Cursor>,
    pub limit: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next: Option<Cursor>,
}

/// Where the next page starts: the (time, id) of the last row returned, written
/// `TIME.ID` (microseconds, then the 32-hex id of an intent or a card).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    pub at: i64,
    pub id: String,
}

impl Cursor {
    pub fn new(at: i64, id: &str) -> Cursor {
        Cursor { at, id: id.to_string() }
    }

    /// Only what [`Cursor`]'s `Display` writes; anything else is None.
    pub fn parse(s: &str) -> Option<Cursor> {
        let (at, id) = s.split_once('.')?;
        let digits = at.strip_prefix('-').unwrap_or(at);
        let at_ok = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
        let id_ok = id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if !(at_ok && id_ok) {
            return None;
        }
        Some(Cursor { at: at.parse().ok()?, id: id.to_string() })
    }
}

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.at, self.id)
    }
}

impl Serialize for Cursor {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[derive(Debug, Clone)]
pub struct Claim {
    /// The claimer's clock: jobs due by then are taken.
    pub now_us: i64,
    pub limit: u32,
    /// How long the lease lasts. Postgres sets and judges leases by the
    /// database's clock (`now()`), so processes whose clocks disagree never
    /// take each other's jobs; SQLite (one process) by `now_us`.
    pub lease_us: i64,
    /// The retry policy's `attempts`: a job rescued after its last try is dead.
    pub max_attempts: i64,
    /// The retry policy's dedupe window (None: chains unbounded by it): a job
    /// rescued after its chain's window has run out is dead (see
    /// [`crate::lifecycle::claim`]).
    pub dedupe_window_us: Option<i64>,
    /// Event types whose routes skip superseded versions.
    pub supersede_types: Vec<String>,
    /// Channels whose provider cannot recognise a retry after an `unknown`
    /// attempt (see [`crate::deliver::duplicate::repeats_unrecognised`]): an
    /// attempt there that lost its lease after an earlier `unknown` is
    /// recorded as a possible duplicate.
    pub repeats_unrecognised: Vec<Channel>,
}

#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct PreferencesVersion {
    pub version: i64,
    /// JSON.
    pub preferences: String,
    pub created_at: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct DigestRow {
    pub key: String,
    pub tenant: String,
    pub event_type: String,
    pub channel: Channel,
    pub recipient_id: String,
    pub group_key: String,
    pub destination: Option<String>,
    pub locale: Option<String>,
    pub window_start: i64,
    pub closes_at: i64,
    pub state: String,
    pub created_at: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct DigestMember {
    #[sqlx(flatten)]
    pub intent: IntentRow,
    /// The member's canonical event (JSON), unless retention took it.
    pub event_body: Option<String>,
    /// The member's own rendered content (JSON).
    pub content: Option<String>,
    /// The trace of the request that planned it.
    pub traceparent: Option<String>,
}

/// Everything closing a digest window writes.
#[derive(Debug, Clone)]
pub struct DigestClose {
    pub digest: DigestRow,
    /// The members the content was rendered from; if the window gained one
    /// since, nothing is written and the close is tried again.
    pub member_keys: Vec<String>,
    /// The digest intent (its key is the window's key).
    pub intent: NewIntent,
    /// Members planned in shadow, left out of a digest that went live (see
    /// [`crate::deliver::digest`]): they become `digested` like the others,
    /// with a detail saying so; if the digest could not be rendered they end
    /// `shadowed` on their own, where the others are queued on their own.
    pub shadow_members: Vec<String>,
    /// The closing's trace context, which the digest's job continues and its
    /// intent keeps; and the traces its attempts link to (its members'
    /// requests, see [`crate::ops::trace::links_text`]).
    pub traceparent: Option<String>,
    pub links: Option<String>,
    /// The digest's "event": the list of its members, stored like an event.
    pub event_digest: String,
    pub event_body: String,
    pub occurred_at: String,
    pub now_us: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DigestCloseOutcome {
    Closed,
    AlreadyClosed,
    MembersChanged,
}

/// A leased job as the claim finds it, before the rules in
/// [`crate::lifecycle::claim`] say what becomes of it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ClaimCandidate {
    #[sqlx(flatten)]
    pub intent: IntentRow,
    /// The frozen content (JSON).
    pub content: Option<String>,
    /// An attempt was left unfinished: the worker that made it lost its lease.
    pub lease_lapsed: bool,
    /// The trace context stored with the job.
    pub traceparent: Option<String>,
    /// The traces its attempts link to (see [`ClaimedJob::links`]).
    pub links: Option<String>,
}

impl ClaimCandidate {
    /// What the claim's rules read of it.
    pub fn job(&self) -> crate::lifecycle::claim::Job<'_> {
        let i = &self.intent;
        crate::lifecycle::claim::Job {
            key: &i.key,
            event_type: &i.event_type,
            entity_version: i.entity_version,
            mode: i.mode,
            attempts: i.attempts,
            retry_base: i.retry_base,
            created_at: i.created_at,
            lease_lapsed: self.lease_lapsed,
        }
    }
}

impl Claim {
    /// What the claim's rules read of it.
    pub fn terms(&self) -> crate::lifecycle::claim::Terms {
        crate::lifecycle::claim::Terms {
            now_us: self.now_us,
            max_attempts: self.max_attempts,
            dedupe_window_us: self.dedupe_window_us,
            supersede_types: self.supersede_types.clone(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ClaimedJob {
    #[sqlx(flatten)]
    pub intent: IntentRow,
    /// The frozen content (JSON).
    pub content: Option<String>,
    /// The trace the attempt continues: the W3C traceparent stored with the
    /// job by what queued it — the request that planned the intent, a
    /// dead-letter replay, a digest's closing.
    pub traceparent: Option<String>,
    /// Space-separated W3C traceparents the attempt's span links to: the
    /// original request of a replayed dead letter, the members' requests of
    /// a digest. None for a job that continues the request that planned it.
    pub links: Option<String>,
    /// The attempt (its `n`) this claim found unfinished under an expired
    /// lease and recorded `unknown`.
    #[sqlx(skip)]
    pub rescued: Option<i64>,
    /// The rescued attempt was recorded as a possible duplicate (see
    /// [`crate::lifecycle::claim::rescued_possible_duplicate`]).
    #[sqlx(skip)]
    pub rescued_duplicate: bool,
}

pub use crate::lifecycle::Transition;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinishedAttempt {
    pub key: String,
    pub n: i64,
    pub finished_at_us: i64,
    pub outcome: OutcomeClass,
    pub error_class: Option<Reason>,
    pub provider_status: Option<i64>,
    pub provider_message_id: Option<String>,
    pub error: Option<String>,
    /// The provider's `Retry-After` as honoured, when a retry was scheduled.
    pub retry_after_us: Option<i64>,
    pub transition: Transition,
    /// The provider the call went to (its configured name).
    pub provider: Option<String>,
    /// See [`AttemptRow::possible_duplicate`].
    pub possible_duplicate: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FinishReport {
    pub applied: usize,
    /// (key, n) of outcomes that arrived after their attempt had been rescued.
    pub stale: Vec<(String, i64)>,
}

#[derive(Debug, Clone)]
pub struct InboxDelivery {
    pub tenant: String,
    pub recipient_id: String,
    pub entity_type: String,
    pub entity_id: String,
    pub version: Option<i64>,
    pub occurred_at: String,
    pub intent_key: String,
    pub payload_digest: String,
    pub now_us: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct InboxCard {
    pub card_id: String,
    pub entity_type: String,
    pub entity_id: String,
    pub version: Option<i64>,
    pub intent_key: String,
    pub collapsed: i64,
    pub read_at: Option<i64>,
    pub updated_at: i64,
    /// The content of the card's intent (JSON).
    pub content: Option<String>,
}

/// One card per (tenant, recipient, entity).
pub fn inbox_card_id(tenant: &str, recipient_id: &str, entity_type: &str, entity_id: &str) -> String {
    let input = format!("inbox|{tenant}|{recipient_id}|{entity_type}|{entity_id}");
    crate::event::identity::sha256_hex(input.as_bytes())[..32].to_string()
}

#[derive(Debug, Clone, Default)]
pub struct DeadLetterFilter {
    /// One tenant's dead letters; `None` is every tenant's (the deployment
    /// operator's view).
    pub tenant: Option<String>,
    pub reason: Option<String>,
    pub since_us: Option<i64>,
    pub cursor: Option<Cursor>,
    pub limit: u32,
}

/// A dead intent with what an operator needs to read it: the original event
/// and the frozen content (attempts come separately).
/// Dead letters of one reason: how many, and when the oldest died.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct DeadLetterGroup {
    pub tenant: String,
    pub reason: String,
    pub count: i64,
    pub oldest_at: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct DeadLetter {
    #[sqlx(flatten)]
    pub intent: IntentRow,
    pub content: Option<String>,
    pub event_body: Option<String>,
}

#[derive(Debug, Clone)]
pub enum ReplaySelector {
    Ids(Vec<String>),
    Reason { reason: String, since_us: Option<i64> },
}

#[derive(Debug, Clone)]
pub struct Replay {
    pub tenant: String,
    pub selector: ReplaySelector,
    pub now_us: i64,
    pub requested_by: Option<String>,
    /// The most a reason-wide replay takes in one call.
    pub limit: i64,
    /// The replay request's trace context, which the replayed jobs continue
    /// (see [`crate::ops::replay`]).
    pub traceparent: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplayOutcome {
    Queued,
    NotFound,
    /// Not a dead letter (any more): its state.
    NotDead(State),
    /// Died before it had content (a template error): nothing to resend.
    NoContent(String),
    /// Its content was pruned by retention (`retention.payloads`): a replay
    /// would die again, as a template error, and could be replayed forever.
    ContentPruned(String),
}

impl ReplayOutcome {
    /// Why a dead letter was not replayed: a code (`content_pruned`, …) and
    /// a sentence for a person. None when it was queued.
    pub fn skipped(&self) -> Option<(&'static str, String)> {
        Some(match self {
            ReplayOutcome::Queued => return None,
            ReplayOutcome::NotFound => ("not_found", "no such intent".into()),
            ReplayOutcome::NotDead(state) => ("not_dead", format!("not a dead letter (it is {state})")),
            ReplayOutcome::NoContent(reason) => {
                ("no_content", format!("died before it had content ({reason}); nothing to resend"))
            }
            ReplayOutcome::ContentPruned(_) => (
                "content_pruned",
                "its content was pruned by retention (retention.payloads); nothing to resend: post the event again as a new one".into(),
            ),
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayResult {
    pub key: String,
    pub outcome: ReplayOutcome,
}

#[derive(Debug, Clone)]
pub struct OpsDigestClaim {
    pub slot: String,
    pub since_us: i64,
    pub until_us: i64,
    /// The claimer's clock: it judges the lease on SQLite (one process).
    /// Postgres judges and sets leases by the database's own clock.
    pub now_us: i64,
    pub lease_us: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueStats {
    /// Jobs due now.
    pub due: i64,
    /// Jobs in the queue, due or scheduled.
    pub total: i64,
    pub oldest_due_us: Option<i64>,
}

/// The last daily dead-letter digest posted: the range it covered, when it
/// went, and how many dead letters it counted.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct OpsDigestRow {
    pub slot: String,
    pub since: i64,
    pub until: i64,
    pub posted_at: i64,
    pub total: i64,
}

/// Retention, in the order it runs: verbose attempt text first, then content
/// bodies (their digests stay on the intents), then whole intents, then the
/// content records of events whose intents are all gone, then request records;
/// then what hung off intents that are gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PruneStep {
    AttemptDiagnostics,
    /// Rendered messages held in their intents' rows (`content`), at the
    /// `payloads` age; the intent's record stays.
    Contents,
    Payloads,
    Intents,
    Events,
    Requests,
    /// Closed digest windows whose digest intent is gone; never an open one.
    Digests,
    /// Inbox cards no intent of which is left (an open card stays).
    InboxCards,
    /// Records of dead-letter replays whose intent is gone, or that are old.
    DeadLetterReplays,
    /// Preference versions superseded long ago that no intent names; never
    /// a recipient's current version.
    PreferenceVersions,
    /// Rejected bus messages' bodies (the record stays).
    RejectedBodies,
    /// Whole rejected bus messages.
    RejectedMessages,
    /// The ingest tally's minutes.
    IngestTally,
    /// Status publications the bus has acknowledged (never an unpublished one).
    Publications,
}
