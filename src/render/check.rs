//! `herald templates check`: render every template × locale × channel against
//! its fixtures, and name what fails — a render error, a missing fixture
//! variable, or an SMS over its segment budget with the characters that forced
//! it into UCS-2. The command a team puts in its CI so a translation cannot
//! quietly turn every alert into three segments.

use super::sms::{Culprit, analyse};
use super::{MissingFile, TemplateSet};
use crate::config::Route;
use crate::event::Channel;
use serde_json::{Map, Value, json};
use std::fmt::Write;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Ok,
    /// Over budget, but the template says to send it anyway.
    OverBudgetAllowed,
    Fail(String),
}

#[derive(Debug, Clone)]
pub struct CheckRow {
    pub template: String,
    pub locale: String,
    pub channel: Channel,
    pub encoding: Option<String>,
    pub segments: Option<u32>,
    pub budget: Option<u32>,
    pub verdict: Verdict,
    pub culprits: Vec<Culprit>,
    /// The message as rendered from the fixtures (the console shows it, with
    /// the culprits marked); None when it did not render.
    pub subject: Option<String>,
    pub body: Option<String>,
}

impl CheckRow {
    pub fn failed(&self) -> bool {
        matches!(self.verdict, Verdict::Fail(_))
    }
}

/// The template context a fixture stands for.
fn fixture_context(template: &str, fixtures: &Value, locale: &str) -> Value {
    let mut ctx: Map<String, Value> = fixtures.get("data").and_then(Value::as_object).cloned().unwrap_or_default();
    let entity = fixtures.get("entity").cloned().unwrap_or_else(|| json!({"type": "fixture", "id": "fixture"}));
    let mut entity = entity.as_object().cloned().unwrap_or_default();
    entity.entry("version").or_insert(Value::Null);
    ctx.insert("entity".into(), Value::Object(entity));
    let event = fixtures.get("event").cloned().unwrap_or_else(|| json!({"type": template}));
    let mut event = event.as_object().cloned().unwrap_or_default();
    event.entry("occurred_at").or_insert_with(|| json!("2026-01-01T00:00:00.000000000Z"));
    ctx.insert("event".into(), Value::Object(event));
    ctx.insert("recipient".into(), json!({"id": "fixture-recipient", "locale": locale}));
    Value::Object(ctx)
}

/// A channel a route sends with a template, which must have its files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Need {
    /// Who needs it: `routes[0]`, `routes[0].digest`.
    pub by: String,
    pub template: String,
    pub channel: Channel,
}

/// What the routes send with which template: each route's channels, and its
/// digest's through the digest template.
pub fn route_needs(routes: &[Route]) -> Vec<Need> {
    let mut needs = Vec::new();
    for (i, route) in routes.iter().enumerate() {
        for &channel in &route.channels {
            needs.push(Need { by: format!("routes[{i}]"), template: route.template.clone(), channel });
        }
        if let Some(d) = &route.digest {
            for channel in Channel::ALL.into_iter().filter(|c| d.batches(route, *c)) {
                needs.push(Need { by: format!("routes[{i}].digest"), template: d.template.clone(), channel });
            }
        }
    }
    needs
}

/// Every file missing for a channel some locale of a template has, or one
/// of `needs` names, each once with what it is missing for. A message would
/// otherwise die `template_error` at runtime; `herald serve` and `config
/// check` refuse the routes' ones, and `templates check` fails on all.
pub fn missing_files(set: &TemplateSet, needs: &[Need]) -> Vec<(MissingFile, String)> {
    let mut pairs: Vec<(String, Channel, Option<&str>)> =
        needs.iter().map(|n| (n.template.clone(), n.channel, Some(n.by.as_str()))).collect();
    for id in set.ids() {
        pairs.extend(set.channels_with_files(id).into_iter().map(|c| (id.to_string(), c, None)));
    }
    let mut out: Vec<(MissingFile, String)> = Vec::new();
    for (id, channel, by) in pairs {
        let default = set.meta(&id).map(|m| m.default_locale.clone()).unwrap_or_default();
        for m in set.missing_files(&id, channel) {
            if out.iter().any(|(seen, _)| seen.path == m.path) {
                continue;
            }
            let why = match by {
                _ if m.locale != default => format!("locale {} has {channel}'s other files", m.locale),
                Some(by) => format!("{by} sends {channel} with {id}, whose default locale is {default}"),
                None => format!("another locale has {channel}, and {default} is where every locale falls back to"),
            };
            let message = format!("{} is missing ({why})", m.path.display());
            out.push((m, message));
        }
    }
    out
}

pub fn check(set: &TemplateSet) -> Vec<CheckRow> {
    check_with(set, &[])
}

/// [`check`], and a failure for each file a route needs that is missing
/// (`needs`: from the config's routes, see [`route_needs`]).
pub fn check_with(set: &TemplateSet, needs: &[Need]) -> Vec<CheckRow> {
    let mut rows = Vec::new();
    let missing = missing_files(set, needs);
    for id in set.ids() {
        let Some(meta) = set.meta(id) else { continue };
        for locale in set.locales(id) {
            for channel in Channel::ALL {
                if !set.has_channel(id, locale, channel) {
                    continue;
                }
                // reported below as the file it lacks
                if missing.iter().any(|(m, _)| m.template == id && m.locale == locale && m.channel == channel) {
                    continue;
                }
                let mut row = CheckRow {
                    template: id.to_string(),
                    locale: locale.to_string(),
                    channel,
                    encoding: None,
                    segments: None,
                    budget: (channel == Channel::Sms).then_some(meta.sms_max_segments),
                    verdict: Verdict::Ok,
                    culprits: Vec::new(),
                    subject: None,
                    body: None,
                };
                let Some(fixtures) = set.fixtures(id) else {
                    row.verdict = Verdict::Fail("no fixtures.json to render with".into());
                    rows.push(row);
                    continue;
                };
                let ctx = fixture_context(id, fixtures, locale);
                match set.render_context(id, channel, locale, &ctx) {
                    Err(e) => row.verdict = Verdict::Fail(format!("render error: {}", e.with_cause())),
                    Ok(r) => {
                        row.encoding = r.content.encoding.clone();
                        row.segments = r.content.segments;
                        if channel == Channel::Sms {
                            row.culprits = analyse(&r.content.body).culprits;
                        }
                        row.subject = r.content.subject;
                        row.body = Some(r.content.body);
                        if let Some(b) = r.over_budget {
                            row.verdict = if b.send_anyway {
                                Verdict::OverBudgetAllowed
                            } else {
                                Verdict::Fail(format!("{} segments over a budget of {}", b.segments, b.budget))
                            };
                        }
                    }
                }
                rows.push(row);
            }
        }
    }
    for n in needs.iter().filter(|n| !set.contains(&n.template)) {
        rows.push(failed(&n.template, "-", n.channel, {
            let known: Vec<&str> = set.ids().collect();
            let near = crate::config::closest(&n.template, &known).map(|t| format!("; did you mean {t}?"));
            format!("{} names template {}, which is not here{}", n.by, n.template, near.unwrap_or_default())
        }));
    }
    for (m, message) in missing {
        rows.push(failed(&m.template, &m.locale, m.channel, message));
    }
    rows
}

fn failed(template: &str, locale: &str, channel: Channel, why: String) -> CheckRow {
    CheckRow {
        template: template.to_string(),
        locale: locale.to_string(),
        channel,
        encoding: None,
        segments: None,
        budget: None,
        verdict: Verdict::Fail(why),
        culprits: Vec::new(),
        subject: None,
        body: None,
    }
}

/// The table, then one paragraph per failure.
pub fn report(rows: &[CheckRow]) -> String {
    let mut out = String::new();
    let dash = || "-".to_string();
    let table: Vec<[String; 7]> = rows
        .iter()
        .map(|r| {
            [
                r.template.clone(),
                r.locale.clone(),
                r.channel.to_string(),
                r.encoding.clone().unwrap_or_else(dash),
                r.segments.map_or_else(dash, |s| s.to_string()),
                r.budget.map_or_else(dash, |b| b.to_string()),
                match &r.verdict {
                    Verdict::Ok => "ok".into(),
                    Verdict::OverBudgetAllowed => "over budget (sent anyway)".into(),
                    Verdict::Fail(_) => "FAIL".into(),
                },
            ]
        })
        .collect();
    let header = ["TEMPLATE", "LOCALE", "CHANNEL", "ENCODING", "SEGMENTS", "BUDGET", "VERDICT"].map(String::from);
    let mut widths = header.clone().map(|h| h.len());
    for row in &table {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for row in std::iter::once(&header).chain(table.iter()) {
        let line: Vec<String> = row.iter().zip(widths).map(|(c, w)| format!("{c:<w$}")).collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    let failures: Vec<&CheckRow> = rows.iter().filter(|r| r.failed()).collect();
    if !failures.is_empty() {
        let _ = writeln!(out, "\n{} failure(s):", failures.len());
    }
    for r in failures {
        let Verdict::Fail(why) = &r.verdict else {
            continue;
        };
        let enc = r.encoding.as_deref().map(|e| format!(" ({e})")).unwrap_or_default();
        let _ = writeln!(out, "- {} locale {} {}{enc}: {why}", r.template, r.locale, r.channel);
        if !r.culprits.is_empty() {
            let _ = writeln!(out, "  forced to UCS-2 by: {}", culprit_list(&r.culprits));
        }
    }
    out
}

/// Each distinct character once: `U+2019 '’' at 12`, with a count when repeated.
pub fn culprit_list(culprits: &[Culprit]) -> String {
    let mut seen: Vec<(char, usize, usize)> = Vec::new();
    for c in culprits {
        match seen.iter_mut().find(|(ch, _, _)| *ch == c.ch) {
            Some(entry) => entry.2 += 1,
            None => seen.push((c.ch, c.position, 1)),
        }
    }
    let shown: Vec<String> = seen
        .iter()
        .take(12)
        .map(|(ch, pos, n)| {
            let code = Culprit { ch: *ch, position: *pos }.code_point();
            let times = if *n > 1 { format!(" (×{n})") } else { String::new() };
            format!("{code} '{ch}' at {pos}{times}")
        })
        .collect();
    let more = if seen.len() > 12 { format!(", and {} more", seen.len() - 12) } else { String::new() };
    format!("{}{more}", shown.join(", "))
}
