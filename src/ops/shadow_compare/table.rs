//! The comparison as `herald shadow compare` prints it: the counts first, then
//! the old notifier's duplicates (worst first), what only the old notifier
//! sent (with Herald's reason), and what only Herald would send.

use super::{Comparison, HeraldIntent, OldNotification};
use std::fmt::Write;

/// A table as the CLI prints one: no borders, two spaces between columns.
fn grid(header: &[&str]) -> comfy_table::Table {
    let mut table = comfy_table::Table::new();
    table.load_style(comfy_table::presets::NOTHING).set_header(header.to_vec());
    for column in table.column_iter_mut() {
        column.set_padding((0, 2));
    }
    table
}

fn push(out: &mut String, table: &comfy_table::Table) {
    for line in table.lines() {
        let _ = writeln!(out, "  {}", line.trim_end());
    }
}

fn more(out: &mut String, total: usize, listed: usize) {
    if total > listed {
        let _ = writeln!(out, "  ({} more: raise --limit, or --json)", total - listed);
    }
}

fn at(t: &Option<String>) -> String {
    t.clone().unwrap_or_else(|| "?".into())
}

fn herald(h: &Option<HeraldIntent>) -> String {
    match h {
        Some(h) => format!("{} {}", h.state, h.key),
        None => "-".into(),
    }
}

fn event(n: &OldNotification) -> String {
    n.event_type.clone().unwrap_or_else(|| "(any)".into())
}

pub fn table(c: &Comparison) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "shadow comparison, tenant {}, {} → {}, window {}",
        c.tenant,
        at(&c.since),
        at(&c.until),
        c.window
    );
    let _ = writeln!(
        out,
        "sends in the log: {} ({} in the range, {} outside it)\n",
        c.sends.read, c.sends.in_range, c.sends.outside_range
    );
    let channels = |by: &std::collections::BTreeMap<String, usize>| {
        by.iter().map(|(c, n)| format!("{c} {n}")).collect::<Vec<_>>().join(", ")
    };
    let mut counts = grid(&["NOTIFICATIONS", "", ""]);
    counts.add_row(vec![
        "sent by both".to_string(),
        c.both.notifications.to_string(),
        format!(
            "{}{}{}",
            channels(&c.both.by_channel),
            if c.both.held_first > 0 {
                format!("; {} held for quiet hours first", c.both.held_first)
            } else {
                String::new()
            },
            if c.both.in_digest > 0 { format!("; {} in a digest", c.both.in_digest) } else { String::new() }
        ),
    ]);
    let reasons: Vec<String> =
        c.only_old.by_reason.iter().map(|r| format!("{} {}", r.reason, r.notifications)).collect();
    counts.add_row(vec![
        "sent only by the old notifier".to_string(),
        c.only_old.notifications.to_string(),
        reasons.join(", "),
    ]);
    counts.add_row(vec![
        "would be sent only by Herald".to_string(),
        c.only_herald.intents.to_string(),
        channels(&c.only_herald.by_channel),
    ]);
    counts.add_row(vec![
        "sent more than once by the old notifier".to_string(),
        c.duplicates.notifications.to_string(),
        if c.duplicates.notifications > 0 {
            format!("{} extra send{}", c.duplicates.extra_sends, if c.duplicates.extra_sends == 1 { "" } else { "s" })
        } else {
            String::new()
        },
    ]);
    if let Some(n) = counts.column_mut(1) {
        n.set_cell_alignment(comfy_table::CellAlignment::Right);
    }
    push(&mut out, &counts);

    if !c.duplicates.listed.is_empty() {
        let _ = writeln!(out, "\nthe old notifier's duplicates, worst first");
        let mut t = grid(&["SENDS", "CHANNEL", "RECIPIENT", "EVENT", "ENTITY", "FIRST", "LAST", "HERALD"]);
        for n in &c.duplicates.listed {
            t.add_row(vec![
                n.sends.to_string(),
                n.channel.clone(),
                n.recipient.to_string(),
                event(n),
                n.entity.to_string(),
                at(&n.first_at),
                at(&n.last_at),
                n.reason.as_ref().map_or_else(|| herald(&n.herald), |r| format!("not sent: {r}")),
            ]);
        }
        push(&mut out, &t);
        more(&mut out, c.duplicates.notifications, c.duplicates.listed.len());

        let _ = writeln!(out, "\nduplicates by recipient, most extra sends first");
        let mut t = grid(&["RECIPIENT", "CHANNEL", "NOTIFICATIONS", "SENDS", "EXTRA", "MOST"]);
        for r in &c.duplicates.by_recipient {
            t.add_row(vec![
                r.recipient.to_string(),
                r.channel.clone(),
                r.notifications.to_string(),
                r.sends.to_string(),
                r.extra_sends.to_string(),
                r.most.to_string(),
            ]);
        }
        push(&mut out, &t);
    }

    if !c.only_old.listed.is_empty() {
        let _ = writeln!(out, "\nsent only by the old notifier, and why Herald would not have");
        let mut t = grid(&["SENT", "CHANNEL", "RECIPIENT", "EVENT", "ENTITY", "REASON", "HERALD", "DETAIL"]);
        for n in &c.only_old.listed {
            t.add_row(vec![
                at(&n.first_at),
                n.channel.clone(),
                n.recipient.to_string(),
                event(n),
                n.entity.to_string(),
                n.reason.clone().unwrap_or_default(),
                herald(&n.herald),
                n.detail.clone().unwrap_or_default(),
            ]);
        }
        push(&mut out, &t);
        more(&mut out, c.only_old.notifications, c.only_old.listed.len());
    }

    if !c.only_herald.listed.is_empty() {
        let _ = writeln!(out, "\nwould be sent only by Herald");
        let mut t = grid(&["PLANNED", "CHANNEL", "RECIPIENT", "EVENT", "ENTITY", "STATE", "INTENT"]);
        for i in &c.only_herald.listed {
            t.add_row(vec![
                at(&i.planned_at),
                i.channel.clone(),
                i.recipient.to_string(),
                i.event_type.clone(),
                i.entity.to_string(),
                i.state.clone(),
                i.key.clone(),
            ]);
        }
        push(&mut out, &t);
        more(&mut out, c.only_herald.intents, c.only_herald.listed.len());
    }
    out
}
