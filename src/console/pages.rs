//! The console's templates and stylesheet, compiled in. HTML is auto-escaped
//! (the templates' names end in `.html`), so event data, provider text and
//! frozen email HTML are shown as text or, for the email, as a `srcdoc`
//! attribute of a sandboxed frame.

use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use minijinja::Environment;
use serde::Serialize;
use std::sync::OnceLock;

pub const STYLESHEET: &str = include_str!("pages/console.css");

const TEMPLATES: &[(&str, &str)] = &[
    ("layout.html", include_str!("pages/layout.html")),
    ("error.html", include_str!("pages/error.html")),
    ("sign_in.html", include_str!("pages/sign_in.html")),
    ("search.html", include_str!("pages/search.html")),
    ("intent.html", include_str!("pages/intent.html")),
    ("dead_letters.html", include_str!("pages/dead_letters.html")),
    ("replay_confirm.html", include_str!("pages/replay_confirm.html")),
    ("replay_result.html", include_str!("pages/replay_result.html")),
    ("templates.html", include_str!("pages/templates.html")),
    ("health.html", include_str!("pages/health.html")),
    ("shadow_compare.html", include_str!("pages/shadow_compare.html")),
];

fn environment() -> &'static Environment<'static> {
    static ENV: OnceLock<Environment<'static>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Environment::new();
        env.set_undefined_behavior(minijinja::UndefinedBehavior::SemiStrict);
        env.add_filter("when", when);
        for (name, source) in TEMPLATES {
            if let Err(e) = env.add_template(name, source) {
                tracing::error!(template = name, error = %e, "console: a page template does not parse");
            }
        }
        env
    })
}

/// `{{ t|when(zone, now) }}`: an RFC 3339 time as people read it — to the
/// second, in `zone` (an IANA name, or UTC), with how long ago it was (or how
/// soon it will be) beside it; the exact instant stays in `datetime` and the
/// tooltip. Anything that is not a time is shown as it came.
fn when(at: String, zone: Option<String>, now: Option<String>) -> minijinja::Value {
    use minijinja::Value;
    let Ok(t) = at.parse::<jiff::Timestamp>() else { return Value::from(at) };
    let tz = zone.as_deref().and_then(|z| jiff::tz::TimeZone::get(z).ok()).unwrap_or(jiff::tz::TimeZone::UTC);
    let shown = match tz.iana_name() {
        Some("UTC") | None => t.strftime("%Y-%m-%d %H:%M:%S UTC").to_string(),
        Some(name) => format!("{} {name}", t.to_zoned(tz.clone()).strftime("%Y-%m-%d %H:%M:%S %:z")),
    };
    let age = now.and_then(|n| n.parse::<jiff::Timestamp>().ok()).map(|n| relative(t, n)).unwrap_or_default();
    let esc = |s: &str| s.replace('&', "&amp;").replace('<', "&lt;").replace('"', "&quot;");
    Value::from_safe_string(format!(
        "<time datetime=\"{iso}\" title=\"{iso}\">{shown}</time>{age}",
        iso = esc(&t.to_string()),
        shown = esc(&shown),
        age = if age.is_empty() { String::new() } else { format!(" <span class=\"ago\">({age})</span>") }
    ))
}

/// "just now", "3 min ago", "in 2 h 5 min", "4 d ago": the distance from `now`.
fn relative(t: jiff::Timestamp, now: jiff::Timestamp) -> String {
    let secs = now.as_second() - t.as_second();
    let (n, future) = (secs.unsigned_abs(), secs < 0);
    let span = match n {
        0..=9 => return "just now".into(),
        10..=59 => format!("{n} s"),
        60..=3599 => format!("{} min", n / 60),
        3600..=86_399 if n % 3600 >= 60 => format!("{} h {} min", n / 3600, n % 3600 / 60),
        3600..=86_399 => format!("{} h", n / 3600),
        _ => format!("{} d", n / 86_400),
    };
    if future { format!("in {span}") } else { format!("{span} ago") }
}

/// A page, or a plain 500 when its template fails (a defect, logged).
pub fn render<S: Serialize>(name: &str, ctx: S) -> Response {
    match environment().get_template(name).and_then(|t| t.render(ctx)) {
        Ok(html) => Html(html).into_response(),
        Err(e) => {
            tracing::error!(template = name, error = %e, "console: a page failed to render");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                Html("<!doctype html><title>Error</title><p>Herald could not render this page."),
            )
                .into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_is_shown_to_the_second_in_the_chosen_zone_with_its_age() {
        let now = Some("2026-12-03T09:05:00Z".to_string());
        let utc = when("2026-12-03T09:02:00.123Z".into(), None, now.clone()).to_string();
        assert_eq!(
            utc,
            "<time datetime=\"2026-12-03T09:02:00.123Z\" title=\"2026-12-03T09:02:00.123Z\">2026-12-03 09:02:00 UTC</time> \
             <span class=\"ago\">(3 min ago)</span>"
        );
        let local = when("2026-12-04T01:15:00Z".into(), Some("Asia/Kathmandu".into()), now).to_string();
        assert!(local.contains(">2026-12-04 07:00:00 +05:45 Asia/Kathmandu</time>"), "{local}");
        assert!(local.contains("(in 16 h 10 min)"), "{local}");
        assert_eq!(when("not a time".into(), None, None).to_string(), "not a time");
        let t: jiff::Timestamp = "2026-12-03T09:00:00Z".parse().unwrap();
        let at = |s: &str| relative(t, s.parse().unwrap());
        assert_eq!(
            [at("2026-12-03T09:00:05Z"), at("2026-12-03T09:00:42Z"), at("2026-12-06T09:00:00Z")],
            ["just now", "42 s ago", "3 d ago"]
        );
    }

    #[test]
    fn every_page_template_parses() {
        for (name, source) in TEMPLATES {
            let mut env = Environment::new();
            for (n, s) in TEMPLATES {
                env.add_template(n, s).unwrap_or_else(|e| panic!("{n}: {e}"));
            }
            assert!(env.get_template(name).is_ok(), "{name} ({} bytes)", source.len());
        }
    }
}
