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
];

fn environment() -> &'static Environment<'static> {
    static ENV: OnceLock<Environment<'static>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Environment::new();
        env.set_undefined_behavior(minijinja::UndefinedBehavior::SemiStrict);
        for (name, source) in TEMPLATES {
            if let Err(e) = env.add_template(name, source) {
                tracing::error!(template = name, error = %e, "console: a page template does not parse");
            }
        }
        env
    })
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
