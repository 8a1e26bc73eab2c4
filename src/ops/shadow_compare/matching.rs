//! Matching the old notifier's sends to Herald's intents. Pure: the intents
//! are offered one at a time (in planning order, as the store pages them),
//! and [`Matcher::finish`] says what differs.
//!
//! The log has no notification key, so a send is matched by what it says:
//! the same entity, channel and recipient (by id, or by the destination's
//! keyed tag), the same event type when the log names one, and the intent
//! whose event time or planning time is nearest the send's, within the
//! window. Sends matched to one intent are one notification; a send matched
//! to none joins the notification of the previous send of the same (event,
//! channel, recipient) when it came within the window of it — a notifier
//! stuck sending one message goes on being one notification — and starts one
//! of its own otherwise. A notification sent more than once is a duplicate.

use super::sends::{Recipient, Send, Tagger};
use super::{
    Both, Comparison, DuplicateSends, Entity, HeraldIntent, HeraldOnly, OldNotification, OnlyHerald, OnlyOld,
    ReasonCount, RecipientDuplicates, Request, SendCounts, Who,
};
use crate::clock::rfc3339;
use crate::config::format_duration;
use crate::event::Channel;
use crate::intent::{Decision, State};
use crate::recipient::Kind;
use crate::store::PlannedIntent;
use crate::suppression::named_detail;
use std::collections::{BTreeMap, HashMap, HashSet};

/// How many hex digits of a destination's tag an output shows.
const TAG_SHOWN: usize = 12;

/// What happened to an intent, as far as the recipient is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// Sent, or on its way (queued, sending, unknown), or shadowed: what
    /// live would have sent.
    Sends,
    /// Told in a digest.
    InDigest,
    /// Still held: for quiet hours, or for its digest to close.
    Waits,
    /// Suppressed, or dead.
    NotSent,
}

fn verdict(state: State) -> Verdict {
    match state {
        State::Sent | State::Shadowed | State::Queued | State::Sending | State::Unknown => Verdict::Sends,
        State::Digested => Verdict::InDigest,
        State::Held => Verdict::Waits,
        State::Suppressed | State::Dead => Verdict::NotSent,
    }
}

/// The sends of one (entity, event type, channel, recipient), oldest first.
struct Group {
    entity: Entity,
    event_type: Option<String>,
    channel: Channel,
    recipient: Recipient,
    sends: Vec<usize>,
}

/// Where a group is found: (entity type, entity id, channel, and the
/// recipient's id or the destination's tag). Its event type is checked apart,
/// since a log without one matches any.
type GroupKey = (String, String, Channel, String);

/// An intent's event, kept for the log's entities: did Herald plan the event
/// of a send it has no intent for?
struct Seen {
    event_type: String,
    occurred_us: i64,
    created_us: i64,
}

pub struct Matcher<'a> {
    tagger: Tagger<'a>,
    since_us: i64,
    until_us: i64,
    window_us: i64,
    limit: usize,
    read: usize,
    sends: Vec<Send>,
    groups: Vec<Group>,
    by_id: HashMap<GroupKey, Vec<usize>>,
    by_tag: HashMap<GroupKey, Vec<usize>>,
    /// (entity type, entity id, channel) of the groups known by address: only
    /// their intents' destinations need tagging.
    by_address: HashSet<(String, String, Channel)>,
    seen: HashMap<(String, String), Vec<Seen>>,
    /// Per send: the nearest intent so far (distance, index in `kept`).
    best: Vec<Option<(i64, usize)>>,
    /// Intents near some send.
    kept: Vec<PlannedIntent>,
    only_herald: OnlyHerald,
}

/// How far a send is from an intent's event: from its time, or from when
/// Herald planned it, whichever is nearer.
fn distance(at_us: i64, intent: &PlannedIntent) -> i64 {
    let occurred = occurred_us(intent);
    (at_us - occurred).abs().min((at_us - intent.created_at).abs())
}

fn occurred_us(intent: &PlannedIntent) -> i64 {
    intent.occurred_at.parse::<jiff::Timestamp>().map_or(intent.created_at, |t| t.as_microsecond())
}

impl<'a> Matcher<'a> {
    pub fn new(request: Request<'a>) -> Matcher<'a> {
        let Request { tenant, key, sends, since_us, until_us, window, limit } = request;
        let window_us = crate::clock::duration_us(window);
        let read = sends.len();
        let mut sends: Vec<Send> = sends.into_iter().filter(|s| s.at_us >= since_us && s.at_us < until_us).collect();
        sends.sort_by_key(|s| s.at_us);
        let mut groups: Vec<Group> = Vec::new();
        let mut index: HashMap<(String, String, Channel, Recipient, Option<String>), usize> = HashMap::new();
        for (i, s) in sends.iter().enumerate() {
            let key =
                (s.entity_type.clone(), s.entity_id.clone(), s.channel, s.recipient.clone(), s.event_type.clone());
            let g = *index.entry(key).or_insert_with(|| {
                groups.push(Group {
                    entity: Entity { kind: s.entity_type.clone(), id: s.entity_id.clone() },
                    event_type: s.event_type.clone(),
                    channel: s.channel,
                    recipient: s.recipient.clone(),
                    sends: Vec::new(),
                });
                groups.len() - 1
            });
            groups[g].sends.push(i);
        }
        let (mut by_id, mut by_tag) = (HashMap::<GroupKey, Vec<usize>>::new(), HashMap::<GroupKey, Vec<usize>>::new());
        let mut by_address = HashSet::new();
        let mut seen = HashMap::new();
        for (g, group) in groups.iter().enumerate() {
            let (kind, id, channel) = (group.entity.kind.clone(), group.entity.id.clone(), group.channel);
            match &group.recipient {
                Recipient::Id(r) => by_id.entry((kind.clone(), id.clone(), channel, r.clone())).or_default().push(g),
                Recipient::Address { tag, .. } => {
                    by_tag.entry((kind.clone(), id.clone(), channel, tag.clone())).or_default().push(g);
                    by_address.insert((kind.clone(), id.clone(), channel));
                }
            }
            seen.entry((kind, id)).or_insert_with(Vec::new);
        }
        Matcher {
            tagger: Tagger { key, tenant },
            since_us,
            until_us,
            window_us,
            limit,
            read,
            best: vec![None; sends.len()],
            sends,
            groups,
            by_id,
            by_tag,
            by_address,
            seen,
            kept: Vec::new(),
            only_herald: OnlyHerald::default(),
        }
    }

    /// One intent, in planning order.
    pub fn offer(&mut self, intent: PlannedIntent) {
        let entity = (intent.entity_type.clone(), intent.entity_id.clone());
        if let Some(seen) = self.seen.get_mut(&entity) {
            seen.push(Seen {
                event_type: intent.event_type.clone(),
                occurred_us: occurred_us(&intent),
                created_us: intent.created_at,
            });
        }
        let mut groups: Vec<usize> = Vec::new();
        let by_id = (entity.0.clone(), entity.1.clone(), intent.channel, intent.recipient_id.clone());
        groups.extend(self.by_id.get(&by_id).into_iter().flatten());
        let by_address = (entity.0, entity.1, intent.channel);
        if let (Some(kind), Some(destination)) = (Kind::of_channel(intent.channel), intent.destination.as_deref())
            && self.by_address.contains(&by_address)
        {
            let (kind_of_entity, id, channel) = by_address;
            let by_tag = (kind_of_entity, id, channel, self.tagger.tag(kind, destination));
            groups.extend(self.by_tag.get(&by_tag).into_iter().flatten());
        }
        let index = self.kept.len();
        let mut near = false;
        for g in groups {
            let group = &self.groups[g];
            if group.event_type.as_ref().is_some_and(|t| *t != intent.event_type) {
                continue;
            }
            for &s in &group.sends {
                let d = distance(self.sends[s].at_us, &intent);
                if d > self.window_us {
                    continue;
                }
                near = true;
                if self.best[s].is_none_or(|(best, _)| d < best) {
                    self.best[s] = Some((d, index));
                }
            }
        }
        if near {
            self.kept.push(intent);
        } else {
            self.herald_only(&intent);
        }
    }

    /// Counts an intent the old notifier did not send, when Herald sends it
    /// (or will) and it was planned in the range.
    fn herald_only(&mut self, intent: &PlannedIntent) {
        let in_range = intent.created_at >= self.since_us && intent.created_at < self.until_us;
        if !in_range || verdict(intent.state) == Verdict::NotSent {
            return;
        }
        let only = &mut self.only_herald;
        only.intents += 1;
        *only.by_channel.entry(intent.channel.as_str().to_string()).or_default() += 1;
        if only.listed.len() < self.limit {
            only.listed.push(HeraldOnly {
                key: intent.key.clone(),
                channel: intent.channel.as_str().to_string(),
                entity: Entity { kind: intent.entity_type.clone(), id: intent.entity_id.clone() },
                event_type: intent.event_type.clone(),
                recipient: Who { id: Some(intent.recipient_id.clone()), destination: None, hash: None },
                decision: intent.decision.as_str().to_string(),
                state: intent.state.as_str().to_string(),
                mode: intent.mode.as_str().to_string(),
                planned_at: rfc3339(intent.created_at),
                detail: intent.detail.as_deref().map(|d| named_detail(self.tagger.tenant, d).into_owned()),
            });
        }
    }

    /// Whether Herald planned `group`'s event (any channel, any recipient)
    /// near `at_us`.
    fn event_planned(&self, group: &Group, at_us: i64) -> bool {
        let seen = self.seen.get(&(group.entity.kind.clone(), group.entity.id.clone()));
        seen.into_iter().flatten().any(|s| {
            group.event_type.as_ref().is_none_or(|t| *t == s.event_type)
                && (at_us - s.occurred_us).abs().min((at_us - s.created_us).abs()) <= self.window_us
        })
    }

    pub fn finish(mut self) -> Comparison {
        // The intents near a send that no send chose.
        let chosen: HashSet<usize> = self.best.iter().flatten().map(|(_, k)| *k).collect();
        let unchosen: Vec<PlannedIntent> =
            (0..self.kept.len()).filter(|k| !chosen.contains(k)).map(|k| self.kept[k].clone()).collect();
        for intent in &unchosen {
            self.herald_only(intent);
        }
        self.only_herald.listed.sort_by(|a, b| (&a.planned_at, &a.key).cmp(&(&b.planned_at, &b.key)));
        self.only_herald.listed.truncate(self.limit);

        let notifications = self.notifications();
        let mut both = Both::default();
        let mut only_old = OnlyOld::default();
        let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
        let mut duplicates = DuplicateSends::default();
        let mut per_recipient: BTreeMap<(Who, String), RecipientDuplicates> = BTreeMap::new();
        let mut duplicated = Vec::new();
        for n in notifications {
            match &n.reason {
                None => {
                    both.notifications += 1;
                    *both.by_channel.entry(n.channel.clone()).or_default() += 1;
                }
                Some(reason) => {
                    only_old.notifications += 1;
                    *reasons.entry(reason.clone()).or_default() += 1;
                    only_old.listed.push(n.clone());
                }
            }
            if n.sends > 1 {
                duplicates.notifications += 1;
                duplicates.sends += n.sends;
                duplicates.extra_sends += n.sends - 1;
                let r = per_recipient.entry((n.recipient.clone(), n.channel.clone())).or_insert_with(|| {
                    RecipientDuplicates {
                        recipient: n.recipient.clone(),
                        channel: n.channel.clone(),
                        notifications: 0,
                        sends: 0,
                        extra_sends: 0,
                        most: 0,
                    }
                });
                r.notifications += 1;
                r.sends += n.sends;
                r.extra_sends += n.sends - 1;
                r.most = r.most.max(n.sends);
                duplicated.push(n);
            }
        }
        for intent in self.chosen_intents() {
            match (verdict(intent.state), intent.decision) {
                (Verdict::Sends, Decision::Hold) => both.held_first += 1,
                (Verdict::InDigest, _) => both.in_digest += 1,
                _ => {}
            }
        }
        only_old.by_reason =
            reasons.into_iter().map(|(reason, notifications)| ReasonCount { reason, notifications }).collect();
        only_old.by_reason.sort_by(|a, b| b.notifications.cmp(&a.notifications).then(a.reason.cmp(&b.reason)));
        only_old.listed.sort_by(|a, b| (&a.first_at, &a.entity).cmp(&(&b.first_at, &b.entity)));
        only_old.listed.truncate(self.limit);
        duplicated.sort_by(|a, b| b.sends.cmp(&a.sends).then((&a.first_at, &a.entity).cmp(&(&b.first_at, &b.entity))));
        duplicated.truncate(self.limit);
        duplicates.listed = duplicated;
        duplicates.by_recipient = per_recipient.into_values().collect();
        duplicates.by_recipient.sort_by(|a, b| {
            b.extra_sends.cmp(&a.extra_sends).then_with(|| (&a.recipient, &a.channel).cmp(&(&b.recipient, &b.channel)))
        });
        duplicates.by_recipient.truncate(self.limit);
        let in_range = self.sends.len();
        Comparison {
            since: rfc3339(self.since_us),
            until: rfc3339(self.until_us),
            tenant: self.tagger.tenant.to_string(),
            window: format_duration(std::time::Duration::from_micros(self.window_us.max(0) as u64)),
            sends: SendCounts { read: self.read, in_range, outside_range: self.read - in_range },
            both,
            only_old,
            only_herald: self.only_herald,
            duplicates,
            limit: self.limit,
        }
    }

    /// The intents some send was matched to, each once.
    fn chosen_intents(&self) -> Vec<&PlannedIntent> {
        let chosen: std::collections::BTreeSet<usize> = self.best.iter().flatten().map(|(_, k)| *k).collect();
        chosen.into_iter().map(|k| &self.kept[k]).collect()
    }

    /// The old notifier's notifications: sends matched to one intent are
    /// one; a send matched to none joins the previous send of its group when
    /// within the window of it.
    fn notifications(&self) -> Vec<OldNotification> {
        struct Gathered {
            intent: Option<usize>,
            group: usize,
            sends: Vec<usize>,
        }
        let mut gathered: Vec<Gathered> = Vec::new();
        let mut of_intent: HashMap<usize, usize> = HashMap::new();
        for (g, group) in self.groups.iter().enumerate() {
            let mut previous: Option<(i64, usize)> = None;
            for &s in &group.sends {
                let at = self.sends[s].at_us;
                let n = match self.best[s] {
                    Some((_, k)) => *of_intent.entry(k).or_insert_with(|| {
                        gathered.push(Gathered { intent: Some(k), group: g, sends: Vec::new() });
                        gathered.len() - 1
                    }),
                    None => match previous {
                        Some((before, n)) if at - before <= self.window_us => n,
                        _ => {
                            gathered.push(Gathered { intent: None, group: g, sends: Vec::new() });
                            gathered.len() - 1
                        }
                    },
                };
                gathered[n].sends.push(s);
                previous = Some((at, n));
            }
        }
        gathered
            .into_iter()
            .map(|n| {
                let group = &self.groups[n.group];
                let times: Vec<i64> = n.sends.iter().map(|&s| self.sends[s].at_us).collect();
                let (first, last) =
                    (times.iter().min().copied().unwrap_or(0), times.iter().max().copied().unwrap_or(0));
                let shown = |recipient: &Recipient| match recipient {
                    Recipient::Id(id) => Who { id: Some(id.clone()), destination: None, hash: None },
                    Recipient::Address { tag, masked } => Who {
                        id: None,
                        destination: Some(masked.clone()),
                        hash: Some(tag.chars().take(TAG_SHOWN).collect()),
                    },
                };
                let mut out = OldNotification {
                    channel: group.channel.as_str().to_string(),
                    entity: group.entity.clone(),
                    event_type: group.event_type.clone(),
                    recipient: shown(&group.recipient),
                    sends: n.sends.len(),
                    first_at: rfc3339(first),
                    last_at: rfc3339(last),
                    herald: None,
                    reason: None,
                    detail: None,
                };
                match n.intent.map(|k| &self.kept[k]) {
                    Some(i) => {
                        out.event_type = Some(i.event_type.clone());
                        out.recipient = Who { id: Some(i.recipient_id.clone()), destination: None, hash: None };
                        out.herald = Some(HeraldIntent {
                            key: i.key.clone(),
                            decision: i.decision.as_str().to_string(),
                            state: i.state.as_str().to_string(),
                            reason: i.reason.clone(),
                            mode: i.mode.as_str().to_string(),
                            planned_at: rfc3339(i.created_at),
                        });
                        let detail = || i.detail.as_deref().map(|d| named_detail(self.tagger.tenant, d).into_owned());
                        match verdict(i.state) {
                            Verdict::Sends | Verdict::InDigest => {}
                            Verdict::Waits => {
                                let digest = (i.decision == Decision::Digest).then(|| "digest".to_string());
                                out.reason = i.reason.clone().or(digest).or_else(|| Some(i.state.as_str().into()));
                                out.detail = detail();
                            }
                            Verdict::NotSent => {
                                out.reason = i.reason.clone().or_else(|| Some(i.state.as_str().into()));
                                out.detail = detail();
                            }
                        }
                    }
                    None => {
                        out.reason = Some("no_route".into());
                        out.detail = Some(if self.event_planned(group, first) {
                            format!("Herald planned this event, but no {} intent for this recipient", group.channel)
                        } else {
                            "Herald planned nothing for this event: no route for its type, or it never reached Herald"
                                .into()
                        });
                    }
                }
                out
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intent::Mode;
    use crate::recipient::keyed::SuppressionKey;
    use crate::recipient::mask;

    const MIN: i64 = 60_000_000;
    /// 2026-11-29T10:00:00Z
    const T10: i64 = 1_795_946_400_000_000;

    fn key() -> SuppressionKey {
        SuppressionKey::new(vec![9; 32]).unwrap()
    }

    fn intent(key: &str, entity: &str, channel: Channel, recipient: &str, state: State, at: i64) -> PlannedIntent {
        PlannedIntent {
            key: key.into(),
            event_type: "purchase_order.approved".into(),
            entity_type: "purchase_order".into(),
            entity_id: entity.into(),
            occurred_at: rfc3339(at).unwrap(),
            channel,
            recipient_id: recipient.into(),
            destination: None,
            decision: if state == State::Suppressed { Decision::Suppress } else { Decision::Send },
            reason: None,
            detail: None,
            state,
            mode: Mode::Shadow,
            created_at: at,
        }
    }

    fn send(entity: &str, channel: Channel, to: Recipient, at: i64) -> Send {
        Send {
            at_us: at,
            channel,
            entity_type: "purchase_order".into(),
            entity_id: entity.into(),
            event_type: Some("purchase_order.approved".into()),
            recipient: to,
        }
    }

    fn id(r: &str) -> Recipient {
        Recipient::Id(r.into())
    }

    fn address(kind: Kind, a: &str) -> Recipient {
        Recipient::Address { tag: key().tag("t", kind, a), masked: mask(kind, a) }
    }

    fn compare(sends: Vec<Send>, intents: Vec<PlannedIntent>, range: (i64, i64), limit: usize) -> Comparison {
        let key = key();
        let request = Request {
            tenant: "t",
            key: &key,
            sends,
            since_us: range.0,
            until_us: range.1,
            window: std::time::Duration::from_secs(600),
            limit,
        };
        let mut m = Matcher::new(request);
        let mut intents = intents;
        intents.sort_by(|a, b| (a.created_at, &a.key).cmp(&(b.created_at, &b.key)));
        for i in intents {
            m.offer(i);
        }
        m.finish()
    }

    #[test]
    fn each_send_finds_its_category_and_the_old_notifiers_duplicates_are_counted() {
        let mut opted_out = intent("b", "PO-2", Channel::Sms, "u-2", State::Suppressed, T10);
        opted_out.reason = Some("opted_out".into());
        opted_out.detail = Some("\"channels\": {\"sms\": false} in preferences v4".into());
        let mut by_address = intent("e", "PO-5", Channel::Email, "u-5", State::Shadowed, T10);
        by_address.destination = Some("asha@example.com".into());
        let intents = vec![
            intent("a", "PO-1", Channel::Email, "u-1", State::Shadowed, T10),
            opted_out,
            intent("c", "PO-4", Channel::InApp, "u-4", State::Shadowed, T10 + MIN),
            intent("d", "PO-1", Channel::Sms, "u-1", State::Shadowed, T10),
            by_address,
            // Two events of one entity five minutes apart: two notifications.
            intent("f1", "PO-6", Channel::Email, "u-6", State::Sent, T10 + 60 * MIN),
            intent("f2", "PO-6", Channel::Email, "u-6", State::Sent, T10 + 65 * MIN),
        ];
        let phone = "+9779800000003";
        let sends = vec![
            // PO-1 by email to u-1: four times, the last two chained past the window of Herald's event.
            send("PO-1", Channel::Email, id("u-1"), T10 + MIN / 12),
            send("PO-1", Channel::Email, id("u-1"), T10 + MIN / 2),
            send("PO-1", Channel::Email, id("u-1"), T10 + 7 * MIN),
            send("PO-1", Channel::Email, id("u-1"), T10 + 16 * MIN),
            send("PO-2", Channel::Sms, id("u-2"), T10 + MIN),
            // No route: twice to a number Herald never planned for.
            send("PO-3", Channel::Sms, address(Kind::Phone, phone), T10 + 2 * MIN),
            send("PO-3", Channel::Sms, address(Kind::Phone, phone), T10 + 3 * MIN),
            // PO-1's event is Herald's, but not on SMS to u-9.
            send("PO-1", Channel::Sms, id("u-9"), T10 + MIN),
            send("PO-5", Channel::Email, address(Kind::Email, "Asha@Example.com"), T10 + MIN),
            send("PO-6", Channel::Email, id("u-6"), T10 + 60 * MIN + MIN / 6),
            send("PO-6", Channel::Email, id("u-6"), T10 + 65 * MIN + MIN / 6),
            // Outside the range.
            send("PO-7", Channel::Email, id("u-7"), T10 + 200 * MIN),
        ];
        let c = compare(sends, intents, (T10, T10 + 120 * MIN), 10);
        assert_eq!((c.sends.read, c.sends.in_range, c.sends.outside_range), (12, 11, 1));
        assert_eq!(c.both.notifications, 4, "{:#?}", c);
        assert_eq!(c.both.by_channel, BTreeMap::from([("email".into(), 4)]));

        assert_eq!(c.only_old.notifications, 3);
        let reasons: Vec<(&str, usize)> =
            c.only_old.by_reason.iter().map(|r| (r.reason.as_str(), r.notifications)).collect();
        assert_eq!(reasons, [("no_route", 2), ("opted_out", 1)]);
        let opted = c.only_old.listed.iter().find(|n| n.reason.as_deref() == Some("opted_out")).unwrap();
        assert_eq!(opted.herald.as_ref().map(|h| h.key.as_str()), Some("b"));
        assert_eq!(opted.detail.as_deref(), Some("\"channels\": {\"sms\": false} in preferences v4"));
        let unrouted: Vec<&OldNotification> = c.only_old.listed.iter().filter(|n| n.herald.is_none()).collect();
        assert_eq!(unrouted.len(), 2);
        assert!(unrouted[0].detail.as_deref().unwrap().starts_with("Herald planned this event, but no sms intent"));
        assert_eq!(unrouted[0].recipient.id.as_deref(), Some("u-9"));
        assert!(unrouted[1].detail.as_deref().unwrap().starts_with("Herald planned nothing for this event"));
        assert_eq!(unrouted[1].recipient.destination.as_deref(), Some("+97798******03"));
        assert_eq!(unrouted[1].recipient.hash.as_ref().map(String::len), Some(12));
        assert_eq!(unrouted[1].sends, 2);

        let only: Vec<&str> = c.only_herald.listed.iter().map(|i| i.key.as_str()).collect();
        assert_eq!(only, ["d", "c"], "oldest first");
        assert_eq!(c.only_herald.intents, 2);

        assert_eq!((c.duplicates.notifications, c.duplicates.sends, c.duplicates.extra_sends), (2, 6, 4));
        let worst = &c.duplicates.listed[0];
        assert_eq!((worst.sends, worst.recipient.id.as_deref(), worst.reason.as_deref()), (4, Some("u-1"), None));
        assert_eq!(worst.herald.as_ref().map(|h| h.key.as_str()), Some("a"));
        assert_eq!(c.duplicates.by_recipient[0].recipient.id.as_deref(), Some("u-1"));
        assert_eq!((c.duplicates.by_recipient[0].extra_sends, c.duplicates.by_recipient[0].most), (3, 4));
        // The address matched by its tag is shown by the intent's recipient id.
        assert!(c.duplicates.listed.iter().chain(&c.only_old.listed).all(|n| n.recipient.to_string() != "u-5"));
        let text = format!("{c:?}{}", super::super::table(&c));
        assert!(!text.contains("asha@") && !text.contains(phone), "no address in clear: {text}");
    }

    #[test]
    fn a_held_intent_and_a_digest_member_say_how_herald_tells_the_recipient() {
        let mut held = intent("h", "PO-1", Channel::Sms, "u-1", State::Held, T10);
        (held.decision, held.reason) = (Decision::Hold, Some("quiet_hours".into()));
        held.detail = Some("quiet hours 21:00–07:00 in Asia/Kathmandu; due …".into());
        let mut woke = intent("w", "PO-2", Channel::Sms, "u-1", State::Shadowed, T10);
        (woke.decision, woke.reason) = (Decision::Hold, Some("quiet_hours".into()));
        let mut member = intent("m", "PO-3", Channel::Email, "u-1", State::Digested, T10);
        member.decision = Decision::Digest;
        let mut waiting = intent("x", "PO-4", Channel::Email, "u-1", State::Held, T10);
        waiting.decision = Decision::Digest;
        let sends = ["PO-1", "PO-2", "PO-3", "PO-4"]
            .iter()
            .map(|po| send(po, if *po < "PO-3" { Channel::Sms } else { Channel::Email }, id("u-1"), T10 + MIN))
            .collect();
        let c = compare(sends, vec![held, woke, member, waiting], (T10, T10 + 60 * MIN), 10);
        assert_eq!((c.both.notifications, c.both.held_first, c.both.in_digest), (2, 1, 1), "{c:#?}");
        let reasons: Vec<&str> = c.only_old.by_reason.iter().map(|r| r.reason.as_str()).collect();
        assert_eq!(reasons, ["digest", "quiet_hours"]);
    }

    #[test]
    fn the_lists_are_cut_at_the_limit_and_the_counts_are_not() {
        let sends: Vec<Send> = (0..5)
            .flat_map(|n| (0..=n).map(move |k| send(&format!("PO-{n}"), Channel::Sms, id("u-1"), T10 + k * MIN)))
            .collect();
        let c = compare(sends, vec![], (T10, T10 + 60 * MIN), 2);
        assert_eq!((c.only_old.notifications, c.only_old.listed.len()), (5, 2));
        assert_eq!((c.duplicates.notifications, c.duplicates.extra_sends), (4, 10));
        let worst: Vec<usize> = c.duplicates.listed.iter().map(|n| n.sends).collect();
        assert_eq!(worst, [5, 4], "the worst first");
        assert_eq!(c.duplicates.by_recipient.len(), 1);
    }
}
