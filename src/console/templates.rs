//! Templates as they will go out: `herald templates check` in a browser.
//! Every template × locale × channel is rendered against its fixtures by the
//! same code the command runs ([`crate::render::check`]), with each SMS's
//! encoding, segments and budget, the verdict, and the characters that forced
//! it into UCS-2 marked in the rendered text.
//!
//! Templates belong to the deployment (`templates_dir`), not to a tenant, as
//! the command's do: every operator sees the same set, rendered from the
//! templates' own fixtures — no tenant's data is shown.

use super::error::ConsoleError;
use super::pages;
use super::search::operator_context;
use super::session::Operator;
use crate::api::AppState;
use crate::render::check::{self, CheckRow, Verdict};
use crate::render::sms::Culprit;
use axum::extract::State;
use axum::response::Response;
use minijinja::context;
use serde::Serialize;

/// A run of the rendered text: plain, or characters that forced UCS-2.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub(super) struct Piece {
    text: String,
    /// The run's code points (`U+0938 U+094D`) when it forced UCS-2; None for plain text.
    culprit: Option<String>,
}

/// The text cut where the culprits are, so a page can mark them. Culprits
/// next to each other share one mark: a Devanagari letter and the vowel sign
/// or virama after it are drawn as one glyph only when they stay together.
pub(super) fn pieces(text: &str, culprits: &[Culprit]) -> Vec<Piece> {
    let mut out: Vec<Piece> = Vec::new();
    let mut next = culprits.iter().map(|c| c.position).peekable();
    for (i, ch) in text.chars().enumerate() {
        let forced = next.peek() == Some(&i);
        if forced {
            next.next();
        }
        let code = forced.then(|| Culprit { ch, position: i }.code_point());
        match (out.last_mut(), code) {
            (Some(Piece { text, culprit: Some(codes) }), Some(code)) => {
                text.push(ch);
                codes.push(' ');
                codes.push_str(&code);
            }
            (Some(Piece { text, culprit: None }), None) => text.push(ch),
            (_, culprit) => out.push(Piece { text: ch.to_string(), culprit }),
        }
    }
    out
}

#[derive(Debug, Serialize)]
struct Row {
    id: String,
    template: String,
    locale: String,
    channel: String,
    encoding: Option<String>,
    segments: Option<u32>,
    budget: Option<u32>,
    /// `ok`, `over budget (sent anyway)` or `FAIL`, as the command prints it.
    verdict: &'static str,
    why: Option<String>,
    failed: bool,
    subject: Option<String>,
    pieces: Vec<Piece>,
    culprits: Option<String>,
}

fn row(r: &CheckRow) -> Row {
    let (verdict, why) = match &r.verdict {
        Verdict::Ok => ("ok", None),
        Verdict::OverBudgetAllowed => ("over budget (sent anyway)", None),
        Verdict::Fail(why) => ("FAIL", Some(why.clone())),
    };
    Row {
        id: format!("{}-{}-{}", r.template, r.locale, r.channel),
        template: r.template.clone(),
        locale: r.locale.clone(),
        channel: r.channel.to_string(),
        encoding: r.encoding.clone(),
        segments: r.segments,
        budget: r.budget,
        verdict,
        why,
        failed: r.failed(),
        subject: r.subject.clone(),
        pieces: r.body.as_deref().map(|b| pieces(b, &r.culprits)).unwrap_or_default(),
        culprits: (!r.culprits.is_empty()).then(|| check::culprit_list(&r.culprits)),
    }
}

pub async fn templates(State(app): State<AppState>, op: Operator) -> Result<Response, ConsoleError> {
    let rows: Vec<Row> = check::check(&app.templates).iter().map(row).collect();
    let failures = rows.iter().filter(|r| r.failed).count();
    let source = app
        .config
        .templates_dir
        .as_ref()
        .map_or_else(|| "the built-in templates".to_string(), |d| d.display().to_string());
    Ok(pages::render(
        "templates.html",
        context! { op => operator_context(&op), rows, failures, source, page => "templates" },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::sms::analyse;

    fn plain(text: &str) -> Piece {
        Piece { text: text.into(), culprit: None }
    }

    #[test]
    fn culprits_side_by_side_share_a_mark_and_plain_text_runs_together() {
        let text = "It’s a “test”";
        let got = pieces(text, &analyse(text).culprits);
        let mark = |ch: &str, code: &str| Piece { text: ch.into(), culprit: Some(code.into()) };
        assert_eq!(
            got,
            vec![
                plain("It"),
                mark("’", "U+2019"),
                plain("s a "),
                mark("“", "U+201C"),
                plain("test"),
                mark("”", "U+201D")
            ]
        );
        let ne = "PO-1 स्वी: Asha";
        assert_eq!(
            pieces(ne, &analyse(ne).culprits),
            vec![plain("PO-1 "), mark("स्वी", "U+0938 U+094D U+0935 U+0940"), plain(": Asha")],
            "a run of culprits is one mark"
        );
        assert_eq!(pieces("plain GSM", &[]), vec![plain("plain GSM")]);
        assert!(pieces("", &[]).is_empty());
    }
}
