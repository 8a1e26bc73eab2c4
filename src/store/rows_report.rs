//! The values the shadow report and the shadow comparison cross the store
//! seam with: the ingest tally (posts by how they were answered), the counts
//! read back for a range, and the intents planned in one.

use super::Cursor;
use crate::event::Channel;
use crate::intent::{Decision, Mode, State};

/// How one post was answered, as the ingest tally counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TallyKind {
    /// A new request (it created intents, or found them all existing).
    New,
    /// The same request again: its stored answer.
    Replay,
    /// The same event under another `Idempotency-Key`: nothing created.
    AnotherKey,
    /// The same event posted again without a key: nothing created.
    Reemitted,
    /// A reused `Idempotency-Key` with another body (422).
    Mismatch,
    /// An accepted event key with other content (409).
    Conflict,
}

impl TallyKind {
    pub const ALL: [TallyKind; 6] = [
        TallyKind::New,
        TallyKind::Replay,
        TallyKind::AnotherKey,
        TallyKind::Reemitted,
        TallyKind::Mismatch,
        TallyKind::Conflict,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TallyKind::New => "new",
            TallyKind::Replay => "replay",
            TallyKind::AnotherKey => "another_key",
            TallyKind::Reemitted => "reemitted",
            TallyKind::Mismatch => "mismatch",
            TallyKind::Conflict => "conflict",
        }
    }

    pub fn parse(s: &str) -> Option<TallyKind> {
        TallyKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// `n` posts of one kind, for one tenant, in the minute starting at `minute_us`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TallyRow {
    pub tenant: String,
    pub minute_us: i64,
    pub kind: TallyKind,
    pub n: i64,
}

/// One tenant's (None: every tenant's) figures over [since, until).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportFilter {
    pub tenant: Option<String>,
    pub since_us: i64,
    pub until_us: i64,
}

/// Intents planned in the range with the same channel, decision, reason and state.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct IntentCount {
    pub channel: Channel,
    pub decision: Decision,
    pub reason: Option<String>,
    pub state: State,
    pub n: i64,
}

/// Shadowed or sent SMS of one encoding: how many, and the segments billed.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct SmsCount {
    pub encoding: Option<String>,
    pub messages: i64,
    pub segments: i64,
}

/// Renders that failed when planned, by template and reason.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct TemplateErrorCount {
    pub template_id: String,
    pub reason: String,
    pub n: i64,
}

/// What the shadow report is built from.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReportRows {
    pub tally: Vec<(TallyKind, i64)>,
    pub intents: Vec<IntentCount>,
    pub sms: Vec<SmsCount>,
    pub template_errors: Vec<TemplateErrorCount>,
    pub bus_rejected: i64,
}

/// One tenant's intents planned in [since, until), oldest first, `limit` at a
/// time after `after` (the last one's planning time and key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedFilter {
    pub tenant: String,
    pub since_us: i64,
    pub until_us: i64,
    pub after: Option<Cursor>,
    pub limit: u32,
}

/// An intent as the shadow comparison matches the old notifier's sends to
/// it: its event, channel and recipient (and destination, which the
/// comparison only tags), and what Herald decided and did.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct PlannedIntent {
    pub key: String,
    pub event_type: String,
    pub entity_type: String,
    pub entity_id: String,
    /// Canonical (`YYYY-MM-DDTHH:MM:SS.fffffffffZ`).
    pub occurred_at: String,
    pub channel: Channel,
    pub recipient_id: String,
    pub destination: Option<String>,
    pub decision: Decision,
    pub reason: Option<String>,
    pub detail: Option<String>,
    pub state: State,
    pub mode: Mode,
    /// When Herald planned it.
    pub created_at: i64,
}
