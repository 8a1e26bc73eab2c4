//! A recipient's preferences (DESIGN §4): per-channel opt-out, quiet hours in
//! the recipient's own time zone, and whether their messages may be batched
//! into digests. Parsed once at the edge; every change is a new version.

use crate::event::Channel;
use jiff::civil::Time;
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Preferences {
    /// `false` opts the recipient out of a channel; absent means allowed.
    pub channels: BTreeMap<Channel, bool>,
    pub quiet_hours: Option<QuietHours>,
    /// `false`: never batch this recipient's messages into a digest.
    pub digest: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuietHours {
    pub start: Time,
    pub end: Time,
    /// The channels held during the window; email and SMS when not given.
    pub channels: Vec<Channel>,
}

/// The channels quiet hours hold when a recipient does not say which.
pub const DEFAULT_QUIET_CHANNELS: [Channel; 2] = [Channel::Email, Channel::Sms];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct PreferencesError {
    pub field: String,
    pub message: String,
}

fn err(field: &str, message: impl Into<String>) -> PreferencesError {
    PreferencesError { field: format!("preferences.{field}"), message: message.into() }
}

fn parse_time(v: Option<&Value>, field: &str) -> Result<Time, PreferencesError> {
    let s = v.and_then(Value::as_str).ok_or_else(|| err(field, "is required, as HH:MM"))?;
    let ok = s.len() == 5 && s.as_bytes()[2] == b':';
    let t = ok.then(|| s.parse::<Time>().ok()).flatten();
    t.ok_or_else(|| err(field, format!("{s:?} is not a time like 21:00")))
}

fn parse_channel_name(name: &str, field: &str) -> Result<Channel, PreferencesError> {
    Channel::parse(name)
        .ok_or_else(|| err(field, format!("unknown channel {name:?}; expected email, sms, in_app or webhook")))
}

impl Preferences {
    /// From the JSON a client sends (`PUT /v1/recipients/{id}`).
    pub fn parse(v: &Value) -> Result<Preferences, PreferencesError> {
        let empty = Map::new();
        let obj = match v {
            Value::Null => &empty,
            Value::Object(o) => o,
            _ => {
                return Err(PreferencesError { field: "preferences".into(), message: "must be an object".into() });
            }
        };
        let mut prefs = Preferences::default();
        for (key, value) in obj {
            match key.as_str() {
                "channels" => {
                    let map =
                        value.as_object().ok_or_else(|| err("channels", "must be an object like {\"sms\": false}"))?;
                    for (name, on) in map {
                        let field = format!("channels.{name}");
                        let ch = parse_channel_name(name, &field)?;
                        let on = on.as_bool().ok_or_else(|| err(&field, "must be true or false"))?;
                        prefs.channels.insert(ch, on);
                    }
                }
                "quiet_hours" if value.is_null() => {}
                "quiet_hours" => {
                    let q =
                        value.as_object().ok_or_else(|| err("quiet_hours", "must be an object with start and end"))?;
                    if let Some(k) = q.keys().find(|k| !["start", "end", "channels"].contains(&k.as_str())) {
                        return Err(err(&format!("quiet_hours.{k}"), "unknown field; expected start, end, channels"));
                    }
                    let start = parse_time(q.get("start"), "quiet_hours.start")?;
                    let end = parse_time(q.get("end"), "quiet_hours.end")?;
                    if start == end {
                        return Err(err("quiet_hours.end", "must differ from start"));
                    }
                    let channels = match q.get("channels") {
                        None | Some(Value::Null) => DEFAULT_QUIET_CHANNELS.to_vec(),
                        Some(Value::Array(items)) => items
                            .iter()
                            .enumerate()
                            .map(|(i, c)| {
                                parse_channel_name(
                                    c.as_str().unwrap_or_default(),
                                    &format!("quiet_hours.channels[{i}]"),
                                )
                            })
                            .collect::<Result<_, _>>()?,
                        Some(_) => {
                            return Err(err("quiet_hours.channels", "must be a list of channel names"));
                        }
                    };
                    prefs.quiet_hours = Some(QuietHours { start, end, channels });
                }
                "digest" => prefs.digest = Some(value.as_bool().ok_or_else(|| err("digest", "must be true or false"))?),
                other => {
                    return Err(err(other, "unknown field; expected channels, quiet_hours, digest"));
                }
            }
        }
        Ok(prefs)
    }

    /// The canonical JSON form that is stored and versioned.
    pub fn to_json(&self) -> Value {
        let mut out = Map::new();
        if !self.channels.is_empty() {
            let channels: Map<String, Value> =
                self.channels.iter().map(|(c, on)| (c.as_str().to_string(), Value::Bool(*on))).collect();
            out.insert("channels".into(), Value::Object(channels));
        }
        if let Some(q) = &self.quiet_hours {
            out.insert(
                "quiet_hours".into(),
                json!({
                    "start": q.start.strftime("%H:%M").to_string(),
                    "end": q.end.strftime("%H:%M").to_string(),
                    "channels": q.channels.iter().map(|c| c.as_str()).collect::<Vec<_>>(),
                }),
            );
        }
        if let Some(d) = self.digest {
            out.insert("digest".into(), Value::Bool(d));
        }
        Value::Object(out)
    }

    pub fn opted_out(&self, channel: Channel) -> bool {
        self.channels.get(&channel) == Some(&false)
    }
}

impl QuietHours {
    /// When `now` falls inside the window in `tz`, the instant the window ends.
    /// A window whose start is after its end crosses midnight. An end that
    /// falls in a DST gap is moved forward by the gap's length (02:30 on a
    /// spring-forward night becomes 03:30), as RFC 5545 and Temporal do; an end
    /// that happens twice (fall-back) is its first occurrence, or its second
    /// when the first is already past.
    pub fn holds_until(&self, tz: &TimeZone, now: Timestamp) -> Option<Timestamp> {
        let local = now.to_zoned(tz.clone());
        let t = local.time();
        let today = local.date();
        let end_date = if self.start < self.end {
            (self.start <= t && t < self.end).then_some(today)?
        } else if t >= self.start {
            today.checked_add(1.day()).ok()?
        } else if t < self.end {
            today
        } else {
            return None;
        };
        // On a fall-back night the end may happen twice; in the second pass of
        // the repeated hour the first one is already behind us.
        let end = tz.to_ambiguous_zoned(end_date.to_datetime(self.end));
        let first = end.clone().compatible().ok()?.timestamp();
        if first > now {
            return Some(first);
        }
        end.later().ok().map(|z| z.timestamp()).filter(|t| *t > now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qh(start: &str, end: &str) -> QuietHours {
        QuietHours {
            start: start.parse().unwrap(),
            end: end.parse().unwrap(),
            channels: DEFAULT_QUIET_CHANNELS.to_vec(),
        }
    }

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn tz(name: &str) -> TimeZone {
        TimeZone::get(name).unwrap()
    }

    #[test]
    fn a_daytime_window_holds_until_its_end() {
        let q = qh("12:00", "14:00");
        assert_eq!(q.holds_until(&TimeZone::UTC, at("2026-06-01T13:00:00Z")), Some(at("2026-06-01T14:00:00Z")));
        assert_eq!(q.holds_until(&TimeZone::UTC, at("2026-06-01T14:00:00Z")), None, "the end is exclusive");
        assert_eq!(q.holds_until(&TimeZone::UTC, at("2026-06-01T11:59:59Z")), None);
        assert_eq!(q.holds_until(&TimeZone::UTC, at("2026-06-01T12:00:00Z")), Some(at("2026-06-01T14:00:00Z")));
    }

    #[test]
    fn a_window_crossing_midnight_holds_on_both_sides() {
        let q = qh("21:00", "07:00");
        let kathmandu = tz("Asia/Kathmandu"); // UTC+05:45
        // 23:00 local on the 1st → 07:00 local on the 2nd
        assert_eq!(q.holds_until(&kathmandu, at("2026-06-01T17:15:00Z")), Some(at("2026-06-02T01:15:00Z")));
        // 03:00 local on the 2nd → 07:00 the same day
        assert_eq!(q.holds_until(&kathmandu, at("2026-06-01T21:15:00Z")), Some(at("2026-06-02T01:15:00Z")));
        // 12:00 local: outside
        assert_eq!(q.holds_until(&kathmandu, at("2026-06-02T06:15:00Z")), None);
    }

    #[test]
    fn dst_spring_forward_gap_in_new_york() {
        // 2026-03-08: 02:00 → 03:00 in America/New_York. A window ending at
        // 02:30 (which does not exist that night) ends at 03:30 EDT.
        let q = qh("22:00", "02:30");
        let ny = tz("America/New_York");
        let now = at("2026-03-08T04:00:00Z"); // 23:00 EST on the 7th
        assert_eq!(q.holds_until(&ny, now), Some(at("2026-03-08T07:30:00Z")));
        // a wall-clock time inside the gap never happens, so "now" is always
        // on one side of it: 03:10 EDT is inside a 02:00–04:00 window
        let q = qh("02:00", "04:00");
        assert_eq!(q.holds_until(&ny, at("2026-03-08T07:10:00Z")), Some(at("2026-03-08T08:00:00Z")));
    }

    #[test]
    fn dst_fall_back_overlap_in_berlin() {
        // 2026-10-25: 03:00 CEST → 02:00 CET in Europe/Berlin; 02:30 happens twice.
        let q = qh("01:00", "02:30");
        let berlin = tz("Europe/Berlin");
        // 01:30 CEST (23:30 UTC the 24th): ends at the first 02:30, CEST = 00:30 UTC
        assert_eq!(q.holds_until(&berlin, at("2026-10-24T23:30:00Z")), Some(at("2026-10-25T00:30:00Z")));
        // the second 02:15 (CET, 01:15 UTC): inside 01:00–02:30 by the clock on
        // the wall, and held until the second 02:30 (CET = 01:30 UTC), not released
        assert_eq!(q.holds_until(&berlin, at("2026-10-25T01:15:00Z")), Some(at("2026-10-25T01:30:00Z")));
    }

    #[test]
    fn a_window_over_the_sydney_dst_change() {
        // 2026-10-04: Australia/Sydney springs forward 02:00 → 03:00.
        let q = qh("22:00", "08:00");
        let sydney = tz("Australia/Sydney");
        // 23:00 AEST on the 3rd (13:00 UTC) → 08:00 AEDT on the 4th (21:00 UTC on the 3rd)
        assert_eq!(q.holds_until(&sydney, at("2026-10-03T13:00:00Z")), Some(at("2026-10-03T21:00:00Z")));
    }

    #[test]
    fn parsing_names_the_field() {
        let e = Preferences::parse(&json!({"channels": {"fax": false}})).unwrap_err();
        assert_eq!(e.field, "preferences.channels.fax");
        let e = Preferences::parse(&json!({"quiet_hours": {"start": "9pm", "end": "07:00"}})).unwrap_err();
        assert_eq!(e.field, "preferences.quiet_hours.start");
        let e =
            Preferences::parse(&json!({"quiet_hours": {"start": "21:00", "end": "07:00", "channels": ["sms", "x"]}}))
                .unwrap_err();
        assert_eq!(e.field, "preferences.quiet_hours.channels[1]");
        let e = Preferences::parse(&json!({"mood": 1})).unwrap_err();
        assert_eq!(e.field, "preferences.mood");
    }

    #[test]
    fn preferences_round_trip_through_their_stored_form() {
        let v = json!({"channels": {"sms": false}, "quiet_hours": {"start": "21:00", "end": "07:00"}, "digest": false});
        let p = Preferences::parse(&v).unwrap();
        assert!(p.opted_out(Channel::Sms) && !p.opted_out(Channel::Email));
        assert_eq!(p.quiet_hours.as_ref().unwrap().channels, DEFAULT_QUIET_CHANNELS.to_vec());
        assert_eq!(Preferences::parse(&p.to_json()).unwrap(), p);
    }
}
