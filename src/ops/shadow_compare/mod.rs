//! The shadow comparison: the old notifier's send log beside Herald's
//! intents over the same range, notification by notification — sent by both,
//! sent only by the old notifier (with Herald's reason for not sending), would
//! be sent only by Herald, and the old notifier's duplicates, worst first.
//! Served by `POST /v1/shadow/compare`, printed by `herald shadow compare`,
//! shown by the console's comparison page.
//!
//! [`sends`] reads the log; [`matching`] matches it (pure, over the intents
//! it is offered); [`compare`] pages through the store's intents into it;
//! [`table`] prints the result. Destinations are matched by their keyed tag
//! (HMAC under the deployment's suppression key) and shown masked with a
//! short prefix of that tag; the log is never stored.

pub mod matching;
pub mod sends;
mod table;

pub use table::table;

use crate::ops::shadow_report;
use crate::recipient::keyed::SuppressionKey;
use crate::store::{Cursor, PlannedFilter, StoreResult, ViewStore};
use matching::Matcher;
use sends::Send;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// How far apart a send and Herald's event may be by default.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(600);
/// Notifications listed in each list by default (the counts are complete).
pub const DEFAULT_LIMIT: usize = 100;
/// Intents read from the store at a time.
const PAGE: u32 = 5_000;

/// Who a notification went to, as an output may show them: the recipient id
/// when the log or Herald's intent has one, else the masked destination and
/// the first digits of its keyed tag.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, utoipa::ToSchema)]
pub struct Who {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Masked, as every output shows a destination (`a***@example.com`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub destination: Option<String>,
    /// The first 12 hex digits of the destination's keyed hash: two
    /// addresses that mask alike are told apart by it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
}

impl fmt::Display for Who {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.id, &self.destination, &self.hash) {
            (Some(id), _, _) => f.write_str(id),
            (None, Some(d), Some(h)) => write!(f, "{d} #{h}"),
            (None, d, _) => f.write_str(d.as_deref().unwrap_or("?")),
        }
    }
}

/// The entity a notification is about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, utoipa::ToSchema)]
pub struct Entity {
    #[serde(rename = "type")]
    pub kind: String,
    pub id: String,
}

impl fmt::Display for Entity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.kind, self.id)
    }
}

/// Herald's intent for a notification, as the comparison shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct HeraldIntent {
    /// Its id (`GET /v1/intents/{id}`, `herald why`).
    pub key: String,
    pub decision: String,
    pub state: String,
    pub reason: Option<String>,
    pub mode: String,
    #[schema(format = DateTime)]
    pub planned_at: Option<String>,
}

/// One notification as the old notifier sent it: its sends of the same
/// (event, channel, recipient), Herald's intent for it if there is one, and,
/// where Herald would not have sent it, why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct OldNotification {
    pub channel: String,
    pub entity: Entity,
    /// Null when the log has no event type.
    pub event_type: Option<String>,
    pub recipient: Who,
    /// How many times the old notifier sent it.
    pub sends: usize,
    #[schema(format = DateTime)]
    pub first_at: Option<String>,
    #[schema(format = DateTime)]
    pub last_at: Option<String>,
    pub herald: Option<HeraldIntent>,
    /// Why Herald would not have sent it: its intent's reason (`opted_out`,
    /// `quiet_hours`, `superseded`, `address_bounced`, …), `digest` for one
    /// waiting for its digest, or `no_route` when Herald has no intent for it.
    /// Null when Herald sends it too.
    pub reason: Option<String>,
    /// The decision's detail (the preference that decided, the quiet-hours
    /// window), or for `no_route` whether Herald planned the event at all.
    pub detail: Option<String>,
}

/// An intent Herald would send that the old notifier did not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct HeraldOnly {
    pub key: String,
    pub channel: String,
    pub entity: Entity,
    pub event_type: String,
    pub recipient: Who,
    pub decision: String,
    pub state: String,
    pub mode: String,
    #[schema(format = DateTime)]
    pub planned_at: Option<String>,
    pub detail: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct SendCounts {
    /// Rows in the log.
    pub read: usize,
    /// Rows whose time is in [since, until): the ones compared.
    pub in_range: usize,
    pub outside_range: usize,
}

/// Notifications the old notifier sent and Herald sends (or would, in shadow).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Both {
    pub notifications: usize,
    pub by_channel: BTreeMap<String, usize>,
    /// Of those, held by Herald for quiet hours first (sent when they ended).
    pub held_first: usize,
    /// Of those, told by Herald in a digest rather than on their own.
    pub in_digest: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct ReasonCount {
    pub reason: String,
    pub notifications: usize,
}

/// Notifications the old notifier sent and Herald would not have.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct OnlyOld {
    pub notifications: usize,
    /// Most first.
    pub by_reason: Vec<ReasonCount>,
    /// Oldest first, at most `limit`.
    pub listed: Vec<OldNotification>,
}

/// Intents planned in the range that Herald sends (or would, in shadow, or
/// holds to send later) and the old notifier did not send.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct OnlyHerald {
    pub intents: usize,
    pub by_channel: BTreeMap<String, usize>,
    /// Oldest first, at most `limit`.
    pub listed: Vec<HeraldOnly>,
}

/// One recipient's duplicates on one channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct RecipientDuplicates {
    pub recipient: Who,
    pub channel: String,
    /// Notifications sent to them more than once.
    pub notifications: usize,
    /// Every send of those notifications.
    pub sends: usize,
    /// The sends beyond the first of each.
    pub extra_sends: usize,
    /// The most times one of them was sent.
    pub most: usize,
}

/// The same notification (event, channel, recipient) sent more than once by
/// the old notifier.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct DuplicateSends {
    pub notifications: usize,
    pub sends: usize,
    pub extra_sends: usize,
    /// Most extra sends first, at most `limit`.
    pub by_recipient: Vec<RecipientDuplicates>,
    /// Most sends first, at most `limit`.
    pub listed: Vec<OldNotification>,
}

/// The comparison of a send log with one tenant's intents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Comparison {
    #[schema(format = DateTime)]
    pub since: Option<String>,
    #[schema(format = DateTime)]
    pub until: Option<String>,
    pub tenant: String,
    /// How far a send may be from Herald's event (its `occurred_at`, or when
    /// Herald planned it) and still be the same notification, e.g. `10m`.
    pub window: String,
    pub sends: SendCounts,
    pub both: Both,
    pub only_old: OnlyOld,
    pub only_herald: OnlyHerald,
    pub duplicates: DuplicateSends,
    /// The most notifications each list holds; the counts are complete.
    pub limit: usize,
}

/// The range compared: `since` and `until` as the shadow report reads them
/// when either is given. Otherwise the log's own span, begun a window before
/// its first send (an event comes before its sends: Herald planned the first
/// one's up to a window earlier) and ended just after its last; the last
/// day for an empty log.
pub fn range(
    since: Option<&str>,
    until: Option<&str>,
    sends: &[Send],
    window: Duration,
    now_us: i64,
) -> Result<(i64, i64), (&'static str, String)> {
    let span = sends.iter().map(|s| s.at_us).min().zip(sends.iter().map(|s| s.at_us).max());
    match (since, until, span) {
        (None, None, Some((first, last))) => {
            Ok((first.saturating_sub(crate::clock::duration_us(window)), last.saturating_add(1)))
        }
        _ => shadow_report::range(since, until, now_us),
    }
}

/// What to compare.
pub struct Request<'a> {
    pub tenant: &'a str,
    pub key: &'a SuppressionKey,
    pub sends: Vec<Send>,
    pub since_us: i64,
    pub until_us: i64,
    pub window: Duration,
    pub limit: usize,
}

/// The comparison: Herald's intents planned in the range (widened by the
/// window on both sides, so a send near an edge still finds its intent),
/// read a page at a time and matched as they come, so memory grows with the
/// log and the lists, not with the tenant's traffic.
pub async fn compare(store: &dyn ViewStore, r: Request<'_>) -> StoreResult<Comparison> {
    let window_us = crate::clock::duration_us(r.window);
    let (tenant, since_us, until_us) = (r.tenant, r.since_us, r.until_us);
    let mut matcher = Matcher::new(r);
    let mut after: Option<Cursor> = None;
    loop {
        let page = store
            .intents_planned(PlannedFilter {
                tenant: tenant.to_string(),
                since_us: since_us.saturating_sub(window_us),
                until_us: until_us.saturating_add(window_us),
                after: after.take(),
                limit: PAGE,
            })
            .await?;
        let full = page.len() == PAGE as usize;
        after = page.last().map(|i| Cursor::new(i.created_at, &i.key));
        for intent in page {
            matcher.offer(intent);
        }
        if !full {
            break;
        }
    }
    Ok(matcher.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Channel;
    use sends::Recipient;

    fn at(us: i64) -> Send {
        Send {
            at_us: us,
            channel: Channel::Sms,
            entity_type: "po".into(),
            entity_id: "1".into(),
            event_type: None,
            recipient: Recipient::Id("u".into()),
        }
    }

    #[test]
    fn the_range_is_the_logs_span_from_a_window_before_its_first_send_unless_one_is_given() {
        let now = 1_800_000_000_000_000;
        let sends = [at(5_000_000_000), at(9_000_000_000), at(7_000_000_000)];
        let window = Duration::from_secs(600);
        assert_eq!(range(None, None, &sends, window, now), Ok((5_000_000_000 - 600_000_000, 9_000_000_001)));
        let (since, until) = range(Some("2026-11-29T00:00:00Z"), None, &sends, window, now).unwrap();
        assert_eq!((until, since), (now, 1_795_910_400_000_000), "as the shadow report reads them");
        assert_eq!(range(None, None, &[], window, now), Ok((now - 86_400_000_000, now)), "the last day");
        assert_eq!(range(Some("soon"), None, &sends, window, now).unwrap_err().0, "since");
    }
}
