//! `occurred_at`: the sender's instant, read as strict RFC 3339 and kept as one
//! canonical UTC form. Strict because the canonical form is part of every key
//! (DESIGN §3): whatever a lenient reader folds together (a leap second onto
//! :59) or reads past (a bracketed time zone) would let two different events
//! share a key, or one event get two.

use jiff::Timestamp;
use jiff::civil::DateTime;
use jiff::tz::{Offset, TimeZone};

/// The sender's timestamp. Required, never defaulted to our clock: a re-emitted
/// event with a new `occurred_at` is a new event, the same instant written with
/// another offset is the same one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct OccurredAt(Timestamp);

const EXAMPLE: &str = "like 2026-11-29T10:15:00+05:45";

impl OccurredAt {
    /// The earliest instant accepted: the canonical form has a four-digit year.
    pub fn min() -> Timestamp {
        Timestamp::from_second(-62_167_219_200).unwrap_or(Timestamp::MIN) // 0000-01-01T00:00:00Z
    }

    /// RFC 3339 `date-time` (`Z` or `±HH:MM`, up to nine fractional digits), and
    /// nothing else: no leap second, no offset past ±23:59, no RFC 9557
    /// `[time-zone]` suffix, and only instants the canonical form can write.
    pub fn parse(s: &str) -> Result<OccurredAt, String> {
        let fields = Fields::read(s)?;
        if fields.second == 60 {
            return Err(second_60(s, &fields));
        }
        let out_of_range = || {
            format!(
                "{s:?} is out of range: Herald accepts instants from {} to {} (UTC)",
                OccurredAt::min(),
                Timestamp::MAX
            )
        };
        let dt = DateTime::new(
            fields.year,
            fields.month,
            fields.day,
            fields.hour,
            fields.minute,
            fields.second,
            fields.nanos,
        )
        .map_err(|_| format!("{s:?} is not a valid date and time"))?;
        let offset = Offset::from_seconds(fields.offset_seconds).map_err(|_| out_of_range())?;
        let ts = offset.to_timestamp(dt).map_err(|_| out_of_range())?;
        if ts < OccurredAt::min() {
            return Err(out_of_range());
        }
        Ok(OccurredAt(ts))
    }

    pub fn from_timestamp(ts: Timestamp) -> OccurredAt {
        OccurredAt(ts)
    }

    pub fn timestamp(self) -> Timestamp {
        self.0
    }

    /// `YYYY-MM-DDTHH:MM:SS.fffffffffZ`, always UTC and nine fractional digits.
    pub fn canonical(self) -> String {
        let dt = self.0.to_zoned(TimeZone::UTC).datetime();
        format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:09}Z",
            dt.year(),
            dt.month(),
            dt.day(),
            dt.hour(),
            dt.minute(),
            dt.second(),
            dt.subsec_nanosecond()
        )
    }
}

/// Why second 60 is refused. A leap second is only ever 23:59:60 UTC (at the
/// end of a June or December), which UTC timestamps cannot tell apart from
/// second 59: the hint then names the instants on either side, written the
/// way the sender wrote the offset. At any other time second 60 is no time at
/// all, and there is nothing to suggest.
fn second_60(s: &str, f: &Fields) -> String {
    let at_59 = DateTime::new(f.year, f.month, f.day, f.hour, f.minute, 59, 0).ok().and_then(|dt| {
        let offset = Offset::from_seconds(f.offset_seconds).ok()?;
        Some((offset, offset.to_timestamp(dt).ok()?))
    });
    let Some((offset, ts)) = at_59 else { return format!("{s:?} is not a valid date and time") };
    let utc = ts.to_zoned(TimeZone::UTC).datetime();
    if (utc.hour(), utc.minute()) != (23, 59) {
        return format!(
            "{s:?} is not a valid time: second 60 exists only in a leap second, which falls at 23:59:60 UTC"
        );
    }
    let written_offset = &s[f.offset_at..];
    let next = offset.to_datetime(ts + jiff::SignedDuration::from_secs(1));
    format!(
        "{s:?} names a leap second (second 60), which UTC timestamps cannot tell apart from second 59; \
         send {}59.999999999{written_offset} or the next second, {}{written_offset}",
        &s[..17],
        next.strftime("%Y-%m-%dT%H:%M:%S")
    )
}

/// The fields of an RFC 3339 `date-time`, read without judging their ranges
/// beyond what the grammar fixes (two digits, four digits).
struct Fields {
    year: i16,
    month: i8,
    day: i8,
    hour: i8,
    minute: i8,
    second: i8,
    nanos: i32,
    offset_seconds: i32,
    /// Where the offset (`Z`, `+05:45`) begins in the text.
    offset_at: usize,
}

impl Fields {
    fn read(s: &str) -> Result<Fields, String> {
        let shape = || format!("must be an RFC 3339 timestamp with an offset, {EXAMPLE}; got {s:?}");
        let mut r = Reader { bytes: s.as_bytes(), at: 0 };
        let year = r.digits(4).ok_or_else(shape)?;
        r.byte(b'-').ok_or_else(shape)?;
        let month = r.digits(2).ok_or_else(shape)?;
        r.byte(b'-').ok_or_else(shape)?;
        let day = r.digits(2).ok_or_else(shape)?;
        r.one_of(b"Tt ").ok_or_else(shape)?;
        let hour = r.digits(2).ok_or_else(shape)?;
        r.byte(b':').ok_or_else(shape)?;
        let minute = r.digits(2).ok_or_else(shape)?;
        r.byte(b':').ok_or_else(shape)?;
        let second = r.digits(2).ok_or_else(shape)?;
        let mut nanos = 0;
        if r.byte(b'.').is_some() {
            let start = r.at;
            while r.one_of(b"0123456789").is_some() {}
            let frac = &s[start..r.at];
            if frac.is_empty() {
                return Err(shape());
            }
            if frac.len() > 9 {
                return Err(format!("{s:?} has more than nine fractional digits (nanoseconds are the finest unit)"));
            }
            nanos = format!("{frac:0<9}").parse().map_err(|_| shape())?;
        }
        let offset_at = r.at;
        let offset_seconds = match r.one_of(b"Zz+-").ok_or_else(shape)? {
            b'Z' | b'z' => 0,
            sign => {
                let h = r.digits(2).ok_or_else(shape)?;
                r.byte(b':').ok_or_else(shape)?;
                let m = r.digits(2).ok_or_else(shape)?;
                if h > 23 {
                    return Err(format!("{s:?} has an offset outside -23:59 … +23:59: its hours run 00 to 23"));
                }
                if m > 59 {
                    return Err(format!("{s:?} has an offset whose minutes are {m:02}: minutes run 00 to 59"));
                }
                let seconds = (h * 3600 + m * 60) as i32;
                if sign == b'-' { -seconds } else { seconds }
            }
        };
        if let Some(rest) = s.get(r.at..).filter(|rest| !rest.is_empty()) {
            if rest.starts_with('[') {
                return Err(format!(
                    "{s:?} carries a time-zone suffix ({rest}); send the instant with its offset alone, {EXAMPLE}"
                ));
            }
            return Err(shape());
        }
        if hour > 23 || minute > 59 || second > 60 {
            return Err(format!("{s:?} is not a valid time of day"));
        }
        let small = |n: u32| i8::try_from(n).map_err(|_| shape());
        Ok(Fields {
            year: i16::try_from(year).map_err(|_| shape())?,
            month: small(month)?,
            day: small(day)?,
            hour: small(hour)?,
            minute: small(minute)?,
            second: small(second)?,
            nanos,
            offset_seconds,
            offset_at,
        })
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn digits(&mut self, n: usize) -> Option<u32> {
        let chunk = self.bytes.get(self.at..self.at + n)?;
        if !chunk.iter().all(u8::is_ascii_digit) {
            return None;
        }
        self.at += n;
        Some(chunk.iter().fold(0, |acc, b| acc * 10 + u32::from(b - b'0')))
    }

    fn byte(&mut self, want: u8) -> Option<()> {
        self.one_of(&[want]).map(|_| ())
    }

    fn one_of(&mut self, set: &[u8]) -> Option<u8> {
        let b = *self.bytes.get(self.at)?;
        set.contains(&b).then(|| {
            self.at += 1;
            b
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Channel, NotificationKey};
    use proptest::prelude::*;

    #[test]
    fn the_same_instant_in_any_offset_is_one_canonical_time() {
        let a = OccurredAt::parse("2026-11-29T10:15:00+05:45").unwrap();
        let b = OccurredAt::parse("2026-11-29T04:30:00Z").unwrap();
        assert_eq!(a.canonical(), "2026-11-29T04:30:00.000000000Z");
        assert_eq!(a.canonical(), b.canonical());
        let c = OccurredAt::parse("2026-11-28t23:30:00-05:00").unwrap();
        assert_eq!(c.canonical(), a.canonical());
    }

    #[test]
    fn canonical_time_keeps_nine_fractional_digits() {
        let t = OccurredAt::parse("2026-01-02T03:04:05.123456789-01:00").unwrap();
        assert_eq!(t.canonical(), "2026-01-02T04:04:05.123456789Z");
        let t = OccurredAt::parse("2026-01-02T03:04:05.5Z").unwrap();
        assert_eq!(t.canonical(), "2026-01-02T03:04:05.500000000Z");
        assert!(OccurredAt::parse("2026-01-02T03:04:05.1234567891Z").unwrap_err().contains("nine"));
    }

    #[test]
    fn a_time_without_offset_or_in_words_is_refused() {
        for s in ["2026-11-29T10:15:00", "yesterday", "", "2026-11-29", "2026-11-29T10:15Z", "20261129T101500Z"] {
            let err = OccurredAt::parse(s).unwrap_err();
            assert!(err.contains("RFC 3339"), "{s}: {err}");
        }
    }

    #[test]
    fn a_leap_second_is_refused_rather_than_merged_with_second_59() {
        let err = OccurredAt::parse("2016-12-31T23:59:60Z").unwrap_err();
        assert!(err.contains("leap second"), "{err}");
        assert!(OccurredAt::parse("2026-11-29T04:30:60Z").is_err(), "no such leap second either");
        assert!(OccurredAt::parse("2026-11-29T04:30:61Z").unwrap_err().contains("time of day"));
    }

    #[test]
    fn second_60_is_explained_for_what_it_is() {
        // A leap second can only be 23:59:60 UTC: the hint names the instants around it.
        let err = OccurredAt::parse("2016-12-31T23:59:60Z").unwrap_err();
        assert!(err.contains("leap second") && err.contains("2016-12-31T23:59:59.999999999Z"), "{err}");
        let err = OccurredAt::parse("2017-01-01T05:44:60+05:45").unwrap_err();
        assert!(err.contains("leap second") && err.contains("05:44:59.999999999+05:45"), "{err}");
        // Anywhere else second 60 is no time at all, and nothing to round to.
        let err = OccurredAt::parse("2026-11-29T04:30:60Z").unwrap_err();
        assert!(err.contains("not a valid time") && err.contains("23:59:60 UTC"), "{err}");
        assert!(!err.contains("59.999999999"), "{err}");
    }

    #[test]
    fn an_offset_with_60_minutes_says_the_minutes_are_wrong() {
        let err = OccurredAt::parse("2026-11-29T10:15:00+05:60").unwrap_err();
        assert!(err.contains("minutes") && err.contains("00 to 59"), "{err}");
        assert!(!err.contains("-23:59"), "{err}");
    }

    #[test]
    fn an_instant_beyond_the_supported_range_says_so() {
        let err = OccurredAt::parse("9999-12-31T23:59:59Z").unwrap_err();
        assert!(err.contains("range"), "{err}");
        assert!(!err.contains("offset"), "{err}");
        assert!(OccurredAt::parse("0000-01-01T00:30:00+01:00").unwrap_err().contains("range"));
        assert!(OccurredAt::parse("0000-01-01T00:00:00Z").is_ok());
        assert!(OccurredAt::parse("9999-12-30T22:00:00Z").is_ok());
    }

    #[test]
    fn an_offset_of_24_hours_is_refused() {
        let err = OccurredAt::parse("2026-11-29T10:15:00+24:00").unwrap_err();
        assert!(err.contains("offset"), "{err}");
        assert!(OccurredAt::parse("2026-11-29T10:15:00-00:60").is_err());
        assert!(OccurredAt::parse("2026-11-29T10:15:00+23:59").is_ok());
    }

    #[test]
    fn a_bracketed_time_zone_suffix_is_refused() {
        let err = OccurredAt::parse("2026-11-29T10:15:00+05:45[America/New_York]").unwrap_err();
        assert!(err.contains("[America/New_York]"), "{err}");
        assert!(OccurredAt::parse("2026-11-29T10:15:00+05:45[Asia/Kathmandu]").is_err());
        assert!(OccurredAt::parse("2026-11-29T10:15:00Z[u-ca=iso8601]").is_err());
    }

    #[test]
    fn a_day_that_does_not_exist_is_refused() {
        assert!(OccurredAt::parse("2026-02-29T10:15:00Z").unwrap_err().contains("not a valid date"));
        assert!(OccurredAt::parse("2028-02-29T10:15:00Z").is_ok());
    }

    fn instant() -> impl Strategy<Value = Timestamp> {
        let (lo, hi) = (OccurredAt::min().as_nanosecond(), Timestamp::MAX.as_nanosecond());
        prop_oneof![
            (lo..=hi).prop_map(|n| Timestamp::from_nanosecond(n).unwrap()),
            // Near one another, where a lossy form would merge them.
            (1_700_000_000_000_000_000_i128..1_700_000_000_000_000_100)
                .prop_map(|n| Timestamp::from_nanosecond(n).unwrap()),
        ]
    }

    /// Writes `ts` as RFC 3339 at `offset_minutes`, the way a sender might;
    /// None when the local year has no four-digit form.
    fn written(ts: Timestamp, offset_minutes: i32) -> Option<String> {
        let dt = Offset::from_seconds(offset_minutes * 60).unwrap().to_datetime(ts);
        if !(0..=9999).contains(&dt.year()) {
            return None;
        }
        let sign = if offset_minutes < 0 { '-' } else { '+' };
        let m = offset_minutes.abs();
        Some(format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:09}{sign}{:02}:{:02}",
            dt.year(),
            dt.month(),
            dt.day(),
            dt.hour(),
            dt.minute(),
            dt.second(),
            dt.subsec_nanosecond(),
            m / 60,
            m % 60
        ))
    }

    proptest! {
        #[test]
        fn two_different_instants_never_share_a_key(a in instant(), b in instant()) {
            let (ca, cb) = (OccurredAt(a).canonical(), OccurredAt(b).canonical());
            prop_assert_eq!(a == b, ca == cb, "{} / {}", ca, cb);
            let key = |c: &str| NotificationKey::derive(&format!("t|e|x|1|{c}"), Channel::Sms, "u-1");
            prop_assert_eq!(a == b, key(&ca) == key(&cb));
        }

        #[test]
        fn any_offset_reads_back_the_same_instant(ts in instant(), offset in -1439_i32..=1439) {
            let text = written(ts, offset);
            prop_assume!(text.is_some());
            let text = text.unwrap();
            let parsed = OccurredAt::parse(&text);
            prop_assert!(parsed.is_ok(), "{}: {:?}", text, parsed);
            let parsed = parsed.unwrap();
            prop_assert_eq!(parsed.timestamp(), ts, "{}", text);
            prop_assert_eq!(OccurredAt::parse(&parsed.canonical()).unwrap(), parsed);
        }
    }
}
