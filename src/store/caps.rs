//! The frequency cap, decided in the transaction that writes the intents it
//! caps, so that no two transactions — in one process or in two — can both
//! let the eleventh message through.
//!
//! The planner marks each intent to be sent (or held for quiet hours) with the
//! cap its route and channel are held to ([`CapCheck`]). Before a batch is
//! written, the transaction takes a lock per (tenant, recipient, channel) it
//! caps — an advisory lock on Postgres, taken in one global order; the
//! database's one write lock on SQLite, taken at `BEGIN IMMEDIATE` — counts the
//! recipient's messages on that channel planned within the cap's period, and
//! decides each capped intent in the batch's order: under the cap it goes as
//! planned and counts toward the next; over it, it is suppressed with reason
//! `frequency_cap`, or joins its route's digest where the route batches the
//! channel, with the cap and the count in its `detail`.
//!
//! What counts is a message the recipient was (or, in shadow mode, would
//! have been) sent: an intent decided `send` or `hold`, whatever its route,
//! uncapped routes included, unless it never went — suppressed, or dead at
//! planning (a template that failed, an SMS over budget). A digest counts as
//! one message when it closes; its members do not. The intents are the count:
//! there is no counter of their own to drift from them, and the period reaches
//! back no further than `retention.intents` (the configuration refuses a
//! longer one).

use super::{CapCheck, Ingest, NewIntent, StoreResult};
use crate::event::Channel;
use crate::intent::{Decision, Reason, State};
use sqlx::Transaction;
use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};

/// Whose messages a cap counts: one recipient's, on one channel.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Recipient<'a> {
    pub tenant: &'a str,
    pub recipient_id: &'a str,
    pub channel: Channel,
}

impl<'a> Recipient<'a> {
    fn of(ingest: &'a Ingest, intent: &'a NewIntent) -> Recipient<'a> {
        Recipient { tenant: &ingest.tenant, recipient_id: &intent.recipient_id, channel: intent.channel }
    }

    /// The text its lock is named by.
    pub fn lock_name(&self) -> String {
        format!("herald cap|{}|{}|{}", self.tenant, self.recipient_id, self.channel.as_str())
    }
}

/// The two statements a backend runs for the cap.
pub(super) trait CapStatements {
    type Db: sqlx::Database;

    /// Holds these recipients (given in one global order) until the
    /// transaction ends: another transaction deciding a cap for one of them
    /// waits here, and then counts what this one wrote.
    async fn lock(&self, tx: &mut Transaction<'_, Self::Db>, recipients: &[Recipient<'_>]) -> StoreResult<()>;

    /// How many of the recipient's messages on the channel count toward a
    /// cap, planned after `since_us`, leaving out `keys` (this batch's own
    /// intents, which are counted as the batch is decided: an event posted
    /// again may have them stored already).
    async fn recent(
        &self,
        tx: &mut Transaction<'_, Self::Db>,
        recipient: &Recipient<'_>,
        since_us: i64,
        keys: &[&str],
    ) -> StoreResult<i64>;
}

/// Whether any intent in the batch is capped: a batch without one is
/// written as it was planned, with no lock and no count.
pub fn any(batch: &[Ingest]) -> bool {
    batch.iter().flat_map(|r| &r.intents).any(|i| i.cap.is_some() && counts(i))
}

/// The messages a cap counts among the stored intents, as the SQL of both
/// backends: [`counts`] as it stands since — planned to go, and neither
/// suppressed since (superseded) nor dead at planning; one dead after its
/// attempts counts, since it was attempted.
macro_rules! counted_sql {
    () => {
        "decision IN ('send', 'hold') AND state <> 'suppressed'
         AND NOT (state = 'dead' AND reason IN ('template_error', 'sms_too_long'))"
    };
}
pub(super) use counted_sql;

/// A message the recipient is to be sent, as planned.
fn counts(intent: &NewIntent) -> bool {
    matches!(intent.decision, Decision::Send | Decision::Hold) && matches!(intent.state, State::Queued | State::Held)
}

/// The batch with every capped intent decided, in the caller's transaction.
pub(super) async fn decide<'b, S: CapStatements>(
    statements: &S,
    tx: &mut Transaction<'_, S::Db>,
    batch: &'b [Ingest],
) -> StoreResult<Cow<'b, [Ingest]>> {
    if !any(batch) {
        return Ok(Cow::Borrowed(batch));
    }
    let capped: BTreeSet<Recipient<'_>> = (batch.iter())
        .flat_map(|r| r.intents.iter().filter(|i| i.cap.is_some() && counts(i)).map(move |i| Recipient::of(r, i)))
        .collect();
    let recipients: Vec<Recipient<'_>> = capped.into_iter().collect();
    statements.lock(tx, &recipients).await?;
    let mut keys: HashMap<Recipient<'_>, Vec<&str>> = HashMap::new();
    for r in batch {
        for i in &r.intents {
            keys.entry(Recipient::of(r, i)).or_default().push(&i.key);
        }
    }
    let mut stored = HashMap::new();
    for r in batch {
        for i in r.intents.iter().filter(|i| counts(i)) {
            let Some(cap) = &i.cap else { continue };
            let who = Recipient::of(r, i);
            let since_us = r.now_us.saturating_sub(cap.per_us);
            if !stored.contains_key(&(who.clone(), since_us)) {
                let n = statements.recent(tx, &who, since_us, &keys[&who]).await?;
                stored.insert((who, since_us), n);
            }
        }
    }
    Ok(Cow::Owned(apply(batch, &stored)))
}

/// The batch decided on these counts of stored messages (by recipient and
/// the start of the period counted): in the batch's order, each message to
/// be sent counts toward the caps of those after it, and each capped one
/// over its cap is suppressed or folded into its digest.
///
/// A request of the batch that turns out to write nothing (a concurrent
/// duplicate of another in flight: a replay, a conflict) has still counted
/// here. The error is on the safe side — at worst a later message of the same
/// batch is capped one early — and needs two posts of one event racing in
/// one group commit beside new messages to the same recipient.
fn apply(batch: &[Ingest], stored: &HashMap<(Recipient<'_>, i64), i64>) -> Vec<Ingest> {
    let mut decided = batch.to_vec();
    // This batch's messages so far, by recipient, with when each was planned.
    let mut sent: HashMap<Recipient<'_>, Vec<i64>> = HashMap::new();
    for (r, out) in batch.iter().zip(decided.iter_mut()) {
        for (i, intent) in r.intents.iter().zip(out.intents.iter_mut()) {
            if !counts(i) {
                continue;
            }
            let who = Recipient::of(r, i);
            if let Some(cap) = &i.cap {
                let since_us = r.now_us.saturating_sub(cap.per_us);
                let earlier = sent.get(&who).map_or(0, |at| at.iter().filter(|&&t| t > since_us).count());
                let used = stored.get(&(who.clone(), since_us)).copied().unwrap_or(0) + earlier as i64;
                if used >= i64::from(cap.max) {
                    over(intent, cap, used);
                    continue;
                }
            }
            sent.entry(who).or_default().push(r.now_us);
        }
    }
    decided
}

/// An intent over its cap: suppressed, or a member of its route's digest.
fn over(intent: &mut NewIntent, cap: &CapCheck, used: i64) {
    let reached = format!(
        "frequency cap: {used} {} message(s) to this recipient in the last {}; at most {} ({})",
        intent.channel.as_str(),
        cap.per,
        cap.max,
        cap.source
    );
    intent.reason = Some(Reason::FrequencyCap);
    intent.run_at = None;
    match &cap.fold {
        Some((window, closes)) => {
            intent.decision = Decision::Digest;
            intent.state = State::Held;
            intent.detail =
                Some(format!("{reached}; in the digest {} instead, due when it closes {closes}", window.key));
            intent.digest = Some(window.clone());
        }
        None => {
            intent.decision = Decision::Suppress;
            intent.state = State::Suppressed;
            intent.detail = Some(reached);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intent::Mode;
    use crate::store::NewDigest;

    const HOUR: i64 = 3_600_000_000;
    const T0: i64 = 1_780_000_000_000_000;

    fn cap(max: u32) -> CapCheck {
        CapCheck { max, per_us: HOUR, per: "1h".into(), source: "caps.sms".into(), fold: None }
    }

    fn intent(key: &str, recipient: &str, cap: Option<CapCheck>) -> NewIntent {
        NewIntent {
            key: key.into(),
            channel: Channel::Sms,
            recipient_id: recipient.into(),
            destination: Some("+9779800000001".into()),
            locale: None,
            template_id: "po_approved".into(),
            template_revision: None,
            payload: None,
            decision: Decision::Send,
            reason: None,
            detail: None,
            state: State::Queued,
            run_at: Some(T0),
            preferences_version: None,
            digest: None,
            mode: Mode::Live,
            cap,
        }
    }

    fn request(n: i64, intents: Vec<NewIntent>) -> Ingest {
        Ingest {
            tenant: "default".into(),
            identity: format!("event:{n}"),
            fingerprint: format!("f{n}"),
            event_key: format!("e{n}"),
            content_digest: format!("c{n}"),
            event_type: "purchase_order.approved".into(),
            entity_type: "purchase_order".into(),
            entity_id: format!("PO-{n}"),
            entity_version: None,
            occurred_at: "2026-06-01T00:00:00Z".into(),
            event_body: "{}".into(),
            intents,
            now_us: T0 + n,
            traceparent: None,
        }
    }

    fn states(batch: &[Ingest]) -> Vec<(Decision, Option<Reason>)> {
        batch.iter().flat_map(|r| &r.intents).map(|i| (i.decision, i.reason)).collect()
    }

    fn stored(n: i64) -> HashMap<(Recipient<'static>, i64), i64> {
        let who = Recipient { tenant: "default", recipient_id: "u-1", channel: Channel::Sms };
        (0..5).map(|k| ((who.clone(), T0 + k - HOUR), n)).collect()
    }

    #[test]
    fn messages_go_until_the_cap_and_the_rest_are_suppressed_naming_it() {
        let batch: Vec<Ingest> =
            (0..4).map(|n| request(n, vec![intent(&format!("k{n}"), "u-1", Some(cap(3)))])).collect();
        let out = apply(&batch, &stored(1));
        let send = (Decision::Send, None);
        let capped = (Decision::Suppress, Some(Reason::FrequencyCap));
        assert_eq!(states(&out), vec![send, send, capped, capped]);
        let last = &out[3].intents[0];
        assert_eq!((last.state, last.run_at), (State::Suppressed, None));
        assert_eq!(
            last.detail.as_deref(),
            Some("frequency cap: 3 sms message(s) to this recipient in the last 1h; at most 3 (caps.sms)")
        );
    }

    #[test]
    fn uncapped_messages_are_never_held_back_but_count_and_other_recipients_are_their_own() {
        let batch = vec![
            request(0, vec![intent("k0", "u-1", None)]),
            request(1, vec![intent("k1", "u-1", None)]),
            request(2, vec![intent("k2", "u-1", Some(cap(2))), intent("k3", "u-2", Some(cap(2)))]),
        ];
        let out = apply(&batch, &stored(0));
        let send = (Decision::Send, None);
        assert_eq!(states(&out), vec![send, send, (Decision::Suppress, Some(Reason::FrequencyCap)), send]);
    }

    #[test]
    fn what_was_not_to_be_sent_does_not_count() {
        let mut opted_out = intent("k0", "u-1", None);
        (opted_out.decision, opted_out.state) = (Decision::Suppress, State::Suppressed);
        let mut broken = intent("k1", "u-1", Some(cap(1)));
        broken.state = State::Dead;
        let batch = vec![
            request(0, vec![opted_out]),
            request(1, vec![broken]),
            request(2, vec![intent("k2", "u-1", Some(cap(1)))]),
        ];
        let out = apply(&batch, &stored(0));
        assert_eq!(out[2].intents[0].decision, Decision::Send);
    }

    #[test]
    fn over_the_cap_on_a_digest_route_joins_the_digest() {
        let window = NewDigest {
            key: "w1".into(),
            event_type: "purchase_order.approved".into(),
            channel: Channel::Sms,
            recipient_id: "u-1".into(),
            group_key: "purchase_order.approved".into(),
            destination: None,
            locale: None,
            window_start: T0,
            closes_at: T0 + HOUR,
        };
        let folding = CapCheck { fold: Some((window.clone(), "2026-06-01T01:00:00Z (…)".into())), ..cap(1) };
        let batch = vec![request(0, vec![intent("k0", "u-1", Some(folding))])];
        let out = apply(&batch, &stored(1));
        let i = &out[0].intents[0];
        assert_eq!((i.decision, i.state, i.reason), (Decision::Digest, State::Held, Some(Reason::FrequencyCap)));
        assert_eq!(i.digest.as_ref(), Some(&window));
        assert!(
            i.detail
                .as_deref()
                .unwrap()
                .ends_with("in the digest w1 instead, due when it closes 2026-06-01T01:00:00Z (…)")
        );
    }
}
