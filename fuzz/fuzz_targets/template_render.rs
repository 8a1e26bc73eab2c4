//! Template rendering with hostile data: whatever the event's data holds —
//! template syntax (`{{ 7*7 }}`, `{% include %}`), HTML, control characters,
//! invalid surrogates written as text — is only ever data. Each rendered
//! channel is compared with the same template filled in by plain string
//! substitution, so any evaluation of data as template source shows up as a
//! difference, as would a panic.
#![no_main]

use herald::event::{Channel, RecipientSpec, parse_event};
use herald::render::TemplateSet;
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};
use std::sync::OnceLock;

#[derive(Arbitrary, Debug)]
struct Input {
    number: String,
    name: String,
    total: String,
    /// Extra keys and values in `data` the templates do not use.
    extra: Vec<(String, String)>,
    nepali: bool,
}

fn templates() -> &'static TemplateSet {
    static SET: OnceLock<TemplateSet> = OnceLock::new();
    SET.get_or_init(TemplateSet::built_in)
}

/// HTML escaping as minijinja does it for `.html.j2`.
fn html(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#x27;"),
            '/' => out.push_str("&#x2f;"),
            c => out.push(c),
        }
    }
    out
}

fuzz_target!(|input: Input| {
    let mut data = serde_json::Map::new();
    for (k, v) in &input.extra {
        if !["po", "approver", "event", "entity", "recipient"].contains(&k.as_str()) {
            data.insert(k.clone(), Value::String(v.clone()));
        }
    }
    data.insert("po".into(), json!({"number": input.number, "total": input.total}));
    data.insert("approver".into(), json!({"name": input.name}));
    let body = json!({
        "type": "purchase_order.approved",
        "entity": {"type": "purchase_order", "id": "PO-1", "version": 1},
        "occurred_at": "2026-11-29T10:15:00Z",
        "data": data,
        "recipients": [{"id": "u-1"}],
    });
    let event = parse_event(&body).expect("a valid event");
    let locale = if input.nepali { "ne" } else { "en" };
    let recipient = RecipientSpec { id: "u-1".into(), locale: Some(locale.into()), ..Default::default() };
    let (n, a, t) = (&input.number, &input.name, &input.total);
    for channel in Channel::ALL {
        let rendered = templates()
            .render("po_approved", channel, &event, &recipient, Some(locale))
            .unwrap_or_else(|e| panic!("{channel}: hostile data failed the render: {e}"));
        let c = rendered.content;
        match (channel, rendered.locale.as_str()) {
            (Channel::Sms, "en") => {
                assert_eq!(c.body, format!("{n} approved by {a} (total {t}).").trim(), "sms");
            }
            (Channel::Email, "en") => {
                assert_eq!(c.subject.as_deref(), Some(format!("{n} was approved by {a}").trim()), "subject");
                let text = format!("Hello,\n\nPurchase order {n} (total {t}) was approved by {a}.\n\n— Herald");
                assert_eq!(c.body, text, "email text");
                let want = format!(
                    "<p>Hello,</p>\n<p>Purchase order <strong>{}</strong> (total {}) was approved by {}.</p>",
                    html(n),
                    html(t),
                    html(a)
                );
                assert_eq!(c.html.as_deref(), Some(want.as_str()), "email html");
            }
            (Channel::InApp, "en") => {
                assert_eq!(c.body, format!("{n} was approved by {a}.").trim(), "in-app");
            }
            (Channel::Webhook, _) => {
                // The default webhook body is the event as JSON: the data
                // comes back as it went in.
                let v: Value = serde_json::from_str(&c.body).expect("the webhook body is JSON");
                assert_eq!(v["data"], body["data"], "webhook");
            }
            // Other locales: the data still appears literally.
            (_, _) => {
                let all = format!("{} {}", c.subject.unwrap_or_default(), c.body);
                assert!(all.contains(n.trim()) && all.contains(a.trim()), "{channel} {locale}: {all}");
            }
        }
    }
});
