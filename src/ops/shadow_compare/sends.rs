//! The old notifier's send log, read for the comparison: CSV with a header
//! row, JSON Lines, or (over the API) `{"sends": [...]}`, its columns named by
//! a [`Mapping`]. Each row becomes a [`Send`]: when, on which channel, about
//! which entity and event type, to whom — by recipient id when the row has
//! one, else by its destination's keyed tag and masked form. The destination
//! itself goes no further than the row it was read from: the log is never
//! stored, and nothing Herald prints shows an address in clear.

use crate::event::{Channel, OccurredAt};
use crate::recipient::keyed::SuppressionKey;
use crate::recipient::{Kind, mask};
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;

/// How the log is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// A header row naming the columns, then one send a row.
    Csv,
    /// One JSON object a line.
    JsonLines,
    /// `{"sends": [{...}, ...]}` (the API's `application/json` body).
    Json,
}

impl Format {
    /// `--format` / `format=`: `csv` or `jsonl`.
    pub fn parse(s: &str) -> Option<Format> {
        match s {
            "csv" => Some(Format::Csv),
            "jsonl" | "ndjson" => Some(Format::JsonLines),
            _ => None,
        }
    }

    /// By the file's extension: `.csv`, `.jsonl` or `.ndjson`.
    pub fn of_path(path: &std::path::Path) -> Option<Format> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        Format::parse(&ext)
    }
}

/// How the time column is written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeFormat {
    /// RFC 3339 with an offset, read as strictly as `occurred_at`.
    #[default]
    Rfc3339,
    /// Seconds since the Unix epoch (a fraction allowed).
    Unix,
    /// Milliseconds since the Unix epoch.
    UnixMs,
}

impl TimeFormat {
    pub fn parse(s: &str) -> Option<TimeFormat> {
        match s {
            "rfc3339" => Some(TimeFormat::Rfc3339),
            "unix" => Some(TimeFormat::Unix),
            "unix_ms" => Some(TimeFormat::UnixMs),
            _ => None,
        }
    }
}

/// What a column holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    Time,
    Channel,
    RecipientId,
    Destination,
    EntityType,
    EntityId,
    EventType,
}

impl Field {
    pub const ALL: [Field; 7] = [
        Field::Time,
        Field::Channel,
        Field::RecipientId,
        Field::Destination,
        Field::EntityType,
        Field::EntityId,
        Field::EventType,
    ];

    /// The column's name when the mapping names none, and its key in the
    /// mapping file's `[columns]`.
    pub fn name(self) -> &'static str {
        match self {
            Field::Time => "time",
            Field::Channel => "channel",
            Field::RecipientId => "recipient_id",
            Field::Destination => "destination",
            Field::EntityType => "entity_type",
            Field::EntityId => "entity_id",
            Field::EventType => "event_type",
        }
    }

    /// The CLI flag and the API's query parameter that name its column.
    fn option(self) -> &'static str {
        match self {
            Field::Time => "--time-column or time_column",
            Field::Channel => "--channel-column or channel_column",
            Field::RecipientId => "--recipient-column or recipient_column",
            Field::Destination => "--destination-column or destination_column",
            Field::EntityType => "--entity-type-column or entity_type_column",
            Field::EntityId => "--entity-id-column or entity_id_column",
            Field::EventType => "--event-type-column or event_type_column",
        }
    }

    /// A send needs these; the recipient needs one of `recipient_id` and
    /// `destination`; `event_type`, when the log has none, matches any.
    fn required(self) -> bool {
        matches!(self, Field::Time | Field::Channel | Field::EntityType | Field::EntityId)
    }
}

/// Which column holds what, how times are written, and the old notifier's
/// names for Herald's channels. Defaults: each column named as its field
/// (`time`, `channel`, `recipient_id`, `destination`, `entity_type`,
/// `entity_id`, `event_type`), RFC 3339 times, Herald's channel names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mapping {
    columns: BTreeMap<&'static str, String>,
    pub time_format: TimeFormat,
    /// The old notifier's name (lowercase) → Herald's channel.
    channels: BTreeMap<String, Channel>,
}

/// The mapping file, as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct MappingFile {
    #[serde(default)]
    columns: BTreeMap<String, String>,
    time_format: Option<String>,
    #[serde(default)]
    channels: BTreeMap<String, String>,
}

impl Mapping {
    /// A mapping file (TOML):
    ///
    /// ```toml
    /// time_format = "rfc3339"     # or "unix", "unix_ms"
    /// [columns]
    /// time = "sent_at"
    /// recipient_id = "user"
    /// [channels]
    /// mail = "email"
    /// ```
    pub fn from_toml(text: &str) -> Result<Mapping, String> {
        let file: MappingFile = toml::from_str(text).map_err(|e| e.message().to_string())?;
        let mut mapping = Mapping::default();
        for (key, column) in file.columns {
            let field = Field::ALL.into_iter().find(|f| f.name() == key).ok_or_else(|| {
                let names: Vec<&str> = Field::ALL.iter().map(|f| f.name()).collect();
                format!("columns.{key}: not a field of a send; the fields are {}", names.join(", "))
            })?;
            mapping.set_column(field, &column).map_err(|m| format!("columns.{key}: {m}"))?;
        }
        if let Some(t) = file.time_format {
            mapping.time_format = TimeFormat::parse(&t)
                .ok_or_else(|| format!("time_format: {t:?} must be \"rfc3339\", \"unix\" or \"unix_ms\""))?;
        }
        for (alias, channel) in file.channels {
            mapping.set_channel(&alias, &channel).map_err(|m| format!("channels.{alias}: {m}"))?;
        }
        Ok(mapping)
    }

    /// Names the column that holds `field`.
    pub fn set_column(&mut self, field: Field, column: &str) -> Result<(), String> {
        let column = column.trim();
        if column.is_empty() {
            return Err("a column name must not be empty".into());
        }
        self.columns.insert(field.name(), column.to_string());
        Ok(())
    }

    /// The old notifier's name `alias` for Herald's `channel`.
    pub fn set_channel(&mut self, alias: &str, channel: &str) -> Result<(), String> {
        let herald = Channel::parse(channel)
            .ok_or_else(|| format!("{channel:?} is not a channel of Herald's ({})", channels()))?;
        self.channels.insert(alias.trim().to_lowercase(), herald);
        Ok(())
    }

    /// `mail:email,text:sms`, as the API's `channel_aliases` takes them.
    pub fn set_channels(&mut self, list: &str) -> Result<(), String> {
        for pair in list.split(',').filter(|p| !p.trim().is_empty()) {
            let (alias, channel) =
                pair.split_once(':').ok_or_else(|| format!("{pair:?} must be NAME:CHANNEL, like mail:email"))?;
            self.set_channel(alias, channel.trim())?;
        }
        Ok(())
    }

    fn column(&self, field: Field) -> &str {
        self.columns.get(field.name()).map_or(field.name(), String::as_str)
    }

    fn named(&self, field: Field) -> bool {
        self.columns.contains_key(field.name())
    }

    fn channel(&self, text: &str) -> Result<Channel, String> {
        let lower = text.to_lowercase();
        if let Some(c) = self.channels.get(&lower).copied().or_else(|| Channel::parse(&lower)) {
            return Ok(c);
        }
        Err(format!(
            "{text:?} is not a channel of Herald's ({}); name the old notifier's channels with [channels] in the \
             mapping file (or channel_aliases=NAME:CHANNEL over the API)",
            channels()
        ))
    }
}

fn channels() -> String {
    Channel::ALL.iter().map(|c| c.as_str()).collect::<Vec<_>>().join(", ")
}

/// Whom a send went to, as the comparison knows them.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Recipient {
    Id(String),
    /// A destination, known by its keyed tag and shown masked.
    Address {
        tag: String,
        masked: String,
    },
}

/// One row of the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Send {
    pub at_us: i64,
    pub channel: Channel,
    pub entity_type: String,
    pub entity_id: String,
    /// None when the log has no event type: any of the entity's events matches.
    pub event_type: Option<String>,
    pub recipient: Recipient,
}

/// Where in the log a row is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Row {
    /// A line of a CSV or JSON Lines log (1 is the first, a CSV's header).
    Line(u64),
    /// An element of `{"sends": [...]}`.
    Index(usize),
}

/// A log Herald cannot read, naming the row and the column.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct SendsError {
    pub row: Row,
    /// The column as the log names it.
    pub column: Option<String>,
    pub message: String,
}

impl fmt::Display for SendsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.row, &self.column) {
            (Row::Line(n), Some(c)) => write!(f, "sends line {n}: {c}: {}", self.message),
            (Row::Line(n), None) => write!(f, "sends line {n}: {}", self.message),
            (Row::Index(i), Some(c)) => write!(f, "sends[{i}].{c}: {}", self.message),
            (Row::Index(i), None) => write!(f, "sends[{i}]: {}", self.message),
        }
    }
}

impl SendsError {
    /// The error with the log called `log` (a file's name) where the API
    /// says `sends`.
    pub fn naming(&self, log: &str) -> String {
        let text = self.to_string();
        match text.strip_prefix("sends") {
            Some(rest) => format!("{log}{rest}"),
            None => text,
        }
    }
}

/// Tags destinations under the deployment's suppression key, per tenant.
pub struct Tagger<'a> {
    pub key: &'a SuppressionKey,
    pub tenant: &'a str,
}

impl Tagger<'_> {
    pub fn tag(&self, kind: Kind, address: &str) -> String {
        self.key.tag(self.tenant, kind, address)
    }
}

/// Every send of the log, in the order written.
pub fn read(body: &[u8], format: Format, mapping: &Mapping, tagger: &Tagger<'_>) -> Result<Vec<Send>, SendsError> {
    match format {
        Format::Csv => read_csv(body, mapping, tagger),
        Format::JsonLines => read_json_lines(body, mapping, tagger),
        Format::Json => read_json(body, mapping, tagger),
    }
}

fn read_csv(body: &[u8], mapping: &Mapping, tagger: &Tagger<'_>) -> Result<Vec<Send>, SendsError> {
    let mut reader = csv::ReaderBuilder::new().has_headers(true).trim(csv::Trim::All).from_reader(body);
    let at = |e: &csv::Error| Row::Line(e.position().map_or(1, |p| p.line()));
    let header = reader.headers().map_err(|e| SendsError { row: at(&e), column: None, message: csv_error(&e) })?;
    let header: Vec<String> = header.iter().map(String::from).collect();
    let index: BTreeMap<&str, usize> = header.iter().enumerate().map(|(i, h)| (h.as_str(), i)).collect();
    // Every column the mapping needs is in the header, or the log is refused
    // before its first row.
    let missing = |field: Field| SendsError {
        row: Row::Line(1),
        column: None,
        message: format!(
            "no column {:?} for the {} (the header has {}); name its column with {}",
            mapping.column(field),
            field.name(),
            header.join(", "),
            field.option()
        ),
    };
    for field in Field::ALL {
        let present = index.contains_key(mapping.column(field));
        if !present && (field.required() || mapping.named(field)) {
            return Err(missing(field));
        }
    }
    if ![Field::RecipientId, Field::Destination].iter().any(|f| index.contains_key(mapping.column(*f))) {
        return Err(missing(Field::RecipientId));
    }
    let mut sends = Vec::new();
    for record in reader.records() {
        let record = record.map_err(|e| SendsError { row: at(&e), column: None, message: csv_error(&e) })?;
        let line = record.position().map_or(0, |p| p.line());
        let cell = |column: &str| -> Result<Option<String>, String> {
            Ok(index.get(column).and_then(|&i| record.get(i)).filter(|v| !v.is_empty()).map(String::from))
        };
        let send = send_of(&cell, mapping, tagger).map_err(|(column, message)| SendsError {
            row: Row::Line(line),
            column: Some(column),
            message,
        })?;
        sends.push(send);
    }
    Ok(sends)
}

fn csv_error(e: &csv::Error) -> String {
    match e.kind() {
        csv::ErrorKind::UnequalLengths { expected_len, len, .. } => {
            format!("has {len} fields where the header has {expected_len}")
        }
        csv::ErrorKind::Utf8 { .. } => "is not UTF-8 text".into(),
        _ => e.to_string(),
    }
}

fn read_json_lines(body: &[u8], mapping: &Mapping, tagger: &Tagger<'_>) -> Result<Vec<Send>, SendsError> {
    let text = std::str::from_utf8(body).map_err(|e| {
        let line = body[..e.valid_up_to()].iter().filter(|b| **b == b'\n').count() as u64 + 1;
        SendsError { row: Row::Line(line), column: None, message: "is not UTF-8 text".into() }
    })?;
    let mut sends = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let row = Row::Line(n as u64 + 1);
        if line.trim().is_empty() {
            continue;
        }
        let value: Value = serde_json::from_str(line).map_err(|e| SendsError {
            row,
            column: None,
            message: format!("is not JSON: {e}"),
        })?;
        sends.push(json_send(&value, row, mapping, tagger)?);
    }
    Ok(sends)
}

fn read_json(body: &[u8], mapping: &Mapping, tagger: &Tagger<'_>) -> Result<Vec<Send>, SendsError> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Body {
        sends: Vec<Value>,
    }
    let whole = |message: String| SendsError { row: Row::Line(1), column: None, message };
    let body: Body = serde_json::from_slice(body)
        .map_err(|e| whole(format!("the body must be {{\"sends\": [{{…}}, …]}}, one object a send: {e}")))?;
    body.sends.iter().enumerate().map(|(i, value)| json_send(value, Row::Index(i), mapping, tagger)).collect()
}

fn json_send(value: &Value, row: Row, mapping: &Mapping, tagger: &Tagger<'_>) -> Result<Send, SendsError> {
    let Some(object) = value.as_object() else {
        return Err(SendsError { row, column: None, message: "is not a JSON object".into() });
    };
    let cell = |column: &str| -> Result<Option<String>, String> {
        match object.get(column) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.trim().to_string()).filter(|s| !s.is_empty())),
            Some(Value::Number(n)) => Ok(Some(n.to_string())),
            Some(_) => Err("must be a string or a number".into()),
        }
    };
    send_of(&cell, mapping, tagger).map_err(|(column, message)| SendsError { row, column: Some(column), message })
}

/// One send from its cells (`cell(column)`: the trimmed value, None when
/// empty or absent). An error names the column as the log does.
fn send_of(
    cell: &dyn Fn(&str) -> Result<Option<String>, String>,
    mapping: &Mapping,
    tagger: &Tagger<'_>,
) -> Result<Send, (String, String)> {
    let value = |field: Field| {
        let column = mapping.column(field);
        cell(column).map_err(|m| (column.to_string(), m))
    };
    let required = |field: Field| {
        value(field)?.ok_or_else(|| (mapping.column(field).to_string(), "is empty; every send needs one".to_string()))
    };
    let time = required(Field::Time)?;
    let at_us = read_time(&time, mapping.time_format).map_err(|m| (mapping.column(Field::Time).to_string(), m))?;
    let channel =
        mapping.channel(&required(Field::Channel)?).map_err(|m| (mapping.column(Field::Channel).into(), m))?;
    let entity_type = required(Field::EntityType)?;
    let entity_id = required(Field::EntityId)?;
    let event_type = value(Field::EventType)?;
    let recipient = match (value(Field::RecipientId)?, value(Field::Destination)?) {
        (Some(id), _) => Recipient::Id(id),
        (None, Some(address)) => {
            let Some(kind) = Kind::of_channel(channel) else {
                return Err((
                    mapping.column(Field::RecipientId).to_string(),
                    format!("is empty: an {channel} send is matched by recipient id (it has no destination)"),
                ));
            };
            Recipient::Address { tag: tagger.tag(kind, &address), masked: mask(kind, &address) }
        }
        (None, None) => {
            return Err((
                mapping.column(Field::RecipientId).to_string(),
                format!("is empty, and so is {}: a send needs one of them", mapping.column(Field::Destination)),
            ));
        }
    };
    Ok(Send { at_us, channel, entity_type, entity_id, event_type, recipient })
}

fn read_time(text: &str, format: TimeFormat) -> Result<i64, String> {
    let epoch = |scale: f64, unit: &str| -> Result<i64, String> {
        let n: f64 = text.parse().map_err(|_| format!("{text:?} is not a number of {unit} since the Unix epoch"))?;
        let us = n * scale;
        let ts = (us.is_finite())
            .then(|| jiff::Timestamp::from_microsecond(us.round() as i64).ok())
            .flatten()
            .ok_or_else(|| format!("{text:?} is out of range"))?;
        Ok(ts.as_microsecond())
    };
    match format {
        TimeFormat::Rfc3339 => OccurredAt::parse(text).map(|t| t.timestamp().as_microsecond()).map_err(|m| {
            if text.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
                format!("{m} (a number? set time_format to \"unix\" or \"unix_ms\")")
            } else {
                m
            }
        }),
        TimeFormat::Unix => epoch(1e6, "seconds"),
        TimeFormat::UnixMs => epoch(1e3, "milliseconds"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> SuppressionKey {
        SuppressionKey::new(vec![5; 32]).unwrap()
    }

    fn read_with(body: &str, format: Format, mapping: &Mapping) -> Result<Vec<Send>, String> {
        let key = key();
        read(body.as_bytes(), format, mapping, &Tagger { key: &key, tenant: "t" }).map_err(|e| e.to_string())
    }

    fn csv(body: &str) -> Result<Vec<Send>, String> {
        read_with(body, Format::Csv, &Mapping::default())
    }

    const HEADER: &str = "time,channel,recipient_id,destination,entity_type,entity_id,event_type";

    #[test]
    fn a_csv_log_reads_each_row_with_its_recipient_by_id_or_by_tagged_address() {
        let body = format!(
            "\u{feff}{HEADER}\n2026-11-29T10:15:00Z,email,u-1,,purchase_order,PO-1,purchase_order.approved\n\
             \"2026-11-29T10:16:00+05:45\",SMS,, +9779800000001 ,purchase_order,\"PO-2, b\",\n"
        );
        let sends = csv(&body).unwrap();
        assert_eq!(sends.len(), 2);
        assert_eq!(sends[0].recipient, Recipient::Id("u-1".into()));
        assert_eq!(sends[0].at_us, "2026-11-29T10:15:00Z".parse::<jiff::Timestamp>().unwrap().as_microsecond());
        assert_eq!(
            (sends[1].channel, sends[1].entity_id.as_str(), sends[1].event_type.as_deref()),
            (Channel::Sms, "PO-2, b", None)
        );
        let Recipient::Address { tag, masked } = &sends[1].recipient else { panic!("{:?}", sends[1]) };
        assert_eq!(masked, "+97798******01");
        assert_eq!(tag, &key().tag("t", Kind::Phone, "+9779800000001"));
        assert!(!format!("{sends:?}").contains("9800000001"), "the address itself is kept nowhere");
    }

    #[test]
    fn a_bad_cell_is_named_by_its_line_and_column() {
        let bad =
            |row: &str| csv(&format!("{HEADER}\n2026-11-29T10:15:00Z,email,u-1,,po,PO-1,x\n{row}\n")).unwrap_err();
        let e = bad("yesterday,email,u-1,,po,PO-1,x");
        assert!(e.starts_with("sends line 3: time: must be an RFC 3339 timestamp"), "{e}");
        assert!(e.contains("\"yesterday\""), "{e}");
        let e = bad("2026-11-29T10:15:00Z,push,u-1,,po,PO-1,x");
        assert!(e.starts_with("sends line 3: channel: \"push\" is not a channel of Herald's"), "{e}");
        let e = bad("2026-11-29T10:15:00Z,email,,,po,PO-1,x");
        assert_eq!(e, "sends line 3: recipient_id: is empty, and so is destination: a send needs one of them");
        let e = bad("2026-11-29T10:15:00Z,in_app,,a@example.com,po,PO-1,x");
        assert!(
            e.starts_with("sends line 3: recipient_id: is empty: an in_app send is matched by recipient id"),
            "{e}"
        );
        assert!(!e.contains("a@example.com"), "{e}");
        assert_eq!(
            bad("2026-11-29T10:15:00Z,email,u-1,,,PO-1,x"),
            "sends line 3: entity_type: is empty; every send needs one"
        );
        assert_eq!(bad("2026-11-29T10:15:00Z,email,u-1"), "sends line 3: has 3 fields where the header has 7");
        let e = bad("1764411300,email,u-1,,po,PO-1,x");
        assert!(e.contains("set time_format to \"unix\""), "{e}");
    }

    #[test]
    fn a_quoted_field_over_two_lines_leaves_the_next_row_its_own_line_number() {
        let body = format!("{HEADER}\n2026-11-29T10:15:00Z,email,u-1,,po,\"PO\n1\",x\nnow,email,u-1,,po,PO-2,x\n");
        assert!(csv(&body).unwrap_err().starts_with("sends line 4: time:"));
    }

    #[test]
    fn a_column_the_mapping_needs_must_be_in_the_header() {
        let e = csv("sent_at,channel,recipient_id,entity_type,entity_id\n").unwrap_err();
        assert!(
            e.starts_with("sends line 1: no column \"time\" for the time (the header has sent_at, channel,"),
            "{e}"
        );
        assert!(e.contains("--time-column or time_column"), "{e}");
        let e = csv("time,channel,entity_type,entity_id\n").unwrap_err();
        assert!(e.contains("no column \"recipient_id\""), "{e}");
        // Without an event type column a send matches any of the entity's events.
        assert!(csv("time,channel,destination,entity_type,entity_id\n").unwrap().is_empty());
        // A column named on purpose must be there.
        let mut mapping = Mapping::default();
        mapping.set_column(Field::EventType, "template").unwrap();
        let e = read_with("time,channel,recipient_id,entity_type,entity_id\n", Format::Csv, &mapping).unwrap_err();
        assert!(e.contains("no column \"template\" for the event_type"), "{e}");
    }

    #[test]
    fn a_mapping_file_names_columns_time_format_and_channels() {
        let mapping = Mapping::from_toml(
            "time_format = \"unix_ms\"\n[columns]\ntime = \"sent_at\"\nrecipient_id = \"user\"\n[channels]\nMail = \"email\"\n",
        )
        .unwrap();
        let body = "sent_at,channel,user,entity_type,entity_id\n1764411300000,mail,u-1,po,PO-1\n";
        let sends = read_with(body, Format::Csv, &mapping).unwrap();
        assert_eq!((sends[0].channel, sends[0].at_us), (Channel::Email, 1_764_411_300_000_000));
        let e = read_with("sent_at,channel,user,entity_type,entity_id\nsoon,mail,u-1,po,PO-1\n", Format::Csv, &mapping)
            .unwrap_err();
        assert_eq!(e, "sends line 2: sent_at: \"soon\" is not a number of milliseconds since the Unix epoch");
        for (toml, wanted) in [
            ("[columns]\nwhen = \"t\"\n", "columns.when: not a field of a send"),
            ("[channels]\npush = \"pager\"\n", "channels.push: \"pager\" is not a channel of Herald's"),
            ("time_format = \"iso\"\n", "time_format: \"iso\" must be"),
            ("[colums]\n", "unknown field `colums`"),
        ] {
            let e = Mapping::from_toml(toml).unwrap_err();
            assert!(e.starts_with(wanted) || e.contains(wanted), "{toml}: {e}");
        }
    }

    #[test]
    fn json_lines_and_a_json_body_name_the_row_too() {
        let line = r#"{"time": "2026-11-29T10:15:00Z", "channel": "sms", "destination": "+9779800000001", "entity_type": "po", "entity_id": 42, "extra": true}"#;
        let sends = read_with(&format!("{line}\n\n{line}\n"), Format::JsonLines, &Mapping::default()).unwrap();
        assert_eq!((sends.len(), sends[1].entity_id.as_str()), (2, "42"));
        let e = read_with(&format!("{line}\n{{\"time\": 5}}\n"), Format::JsonLines, &Mapping::default()).unwrap_err();
        assert!(e.starts_with("sends line 2: time: must be an RFC 3339 timestamp"), "{e}");
        let e = read_with(&format!("{line}\n[1]\n"), Format::JsonLines, &Mapping::default()).unwrap_err();
        assert_eq!(e, "sends line 2: is not a JSON object");
        let e = read_with(&format!("{line}\n{{oops\n"), Format::JsonLines, &Mapping::default()).unwrap_err();
        assert!(e.starts_with("sends line 2: is not JSON:"), "{e}");
        let body = format!(
            r#"{{"sends": [{line}, {{"time": "2026-11-29T10:15:00Z", "channel": "sms", "entity_type": "po", "entity_id": "1", "recipient_id": ["u"]}}]}}"#
        );
        let e = read_with(&body, Format::Json, &Mapping::default()).unwrap_err();
        assert_eq!(e, "sends[1].recipient_id: must be a string or a number");
        let e = read_with(r#"{"rows": []}"#, Format::Json, &Mapping::default()).unwrap_err();
        assert!(e.starts_with("sends line 1: the body must be {\"sends\": "), "{e}");
    }

    #[test]
    fn the_format_is_known_by_name_or_extension() {
        assert_eq!(Format::of_path(std::path::Path::new("old/sends.CSV")), Some(Format::Csv));
        assert_eq!(Format::of_path(std::path::Path::new("sends.ndjson")), Some(Format::JsonLines));
        assert_eq!(Format::of_path(std::path::Path::new("sends.log")), None);
        assert_eq!(Format::parse("jsonl"), Some(Format::JsonLines));
    }
}
