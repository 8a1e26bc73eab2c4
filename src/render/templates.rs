//! The template directory (DESIGN §6a), loaded into one minijinja environment.

use super::sms::analyse;
use super::{Content, RenderError, Rendered, default_webhook_body, files_for, required_files};
use crate::event::{Channel, Event, RecipientSpec};
use minijinja::{AutoEscape, Environment, UndefinedBehavior};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// What to do with an SMS that renders over its segment budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OverBudgetPolicy {
    /// Record the intent as dead (`sms_too_long`) instead of paying for more segments.
    #[default]
    Dead,
    Send,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverBudget {
    pub segments: u32,
    pub budget: u32,
    pub send_anyway: bool,
}

/// `template.toml`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemplateMeta {
    pub revision: String,
    pub default_locale: String,
    #[serde(default = "one")]
    pub sms_max_segments: u32,
    #[serde(default)]
    pub sms_over_budget: OverBudgetPolicy,
}

fn one() -> u32 {
    1
}

/// A template file a channel needs that is not there (see
/// [`TemplateSet::missing_files`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingFile {
    pub template: String,
    pub locale: String,
    pub channel: Channel,
    /// Under the template directory, as it was given.
    pub path: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum TemplateSetError {
    #[error("cannot read {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

struct Template {
    meta: TemplateMeta,
    /// locale → the file names present in it.
    locales: BTreeMap<String, BTreeSet<String>>,
    fixtures: Option<Value>,
}

/// Every template, parsed once at start-up: a syntax error stops the process
/// with the file's name instead of failing each event later.
pub struct TemplateSet {
    /// Where the files were read from, to name a missing one.
    root: PathBuf,
    env: Environment<'static>,
    templates: BTreeMap<String, Template>,
    /// Digest key expressions, compiled once at start-up and named by their
    /// own source (a separate environment: no file name to collide with, and
    /// never HTML-escaped).
    keys: Environment<'static>,
}

/// The built-in example templates (the repository's `templates/` directory).
const BUILT_IN: &[(&str, &str)] = &[
    ("po_approved/template.toml", include_str!("../../templates/po_approved/template.toml")),
    ("po_approved/fixtures.json", include_str!("../../templates/po_approved/fixtures.json")),
    ("po_approved/en/email.subject.j2", include_str!("../../templates/po_approved/en/email.subject.j2")),
    ("po_approved/en/email.txt.j2", include_str!("../../templates/po_approved/en/email.txt.j2")),
    ("po_approved/en/email.html.j2", include_str!("../../templates/po_approved/en/email.html.j2")),
    ("po_approved/en/sms.j2", include_str!("../../templates/po_approved/en/sms.j2")),
    ("po_approved/en/in_app.j2", include_str!("../../templates/po_approved/en/in_app.j2")),
    ("po_approved/ne/email.subject.j2", include_str!("../../templates/po_approved/ne/email.subject.j2")),
    ("po_approved/ne/email.txt.j2", include_str!("../../templates/po_approved/ne/email.txt.j2")),
    ("po_approved/ne/sms.j2", include_str!("../../templates/po_approved/ne/sms.j2")),
    ("po_approved/ne/in_app.j2", include_str!("../../templates/po_approved/ne/in_app.j2")),
];

fn new_env() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    // HTML is escaped in `.html.j2` only: escaping an SMS would send `&amp;`.
    env.set_auto_escape_callback(|name| if name.ends_with(".html.j2") { AutoEscape::Html } else { AutoEscape::None });
    env.set_keep_trailing_newline(false);
    env
}

impl TemplateSet {
    pub fn built_in() -> TemplateSet {
        let files = BUILT_IN.iter().map(|(p, s)| (PathBuf::from(p), s.to_string())).collect();
        // The built-in set is checked by a unit test; failing here is a build defect.
        TemplateSet::from_files(Path::new("<built-in>"), files).expect("built-in templates are valid")
    }

    pub fn load_dir(dir: &Path) -> Result<TemplateSet, TemplateSetError> {
        let mut files = Vec::new();
        collect(dir, dir, &mut files)?;
        TemplateSet::from_files(dir, files)
    }

    /// `files` are (path relative to the root, text).
    fn from_files(root: &Path, files: Vec<(PathBuf, String)>) -> Result<TemplateSet, TemplateSetError> {
        let mut env = new_env();
        let mut metas: BTreeMap<String, TemplateMeta> = BTreeMap::new();
        let mut fixtures: BTreeMap<String, Value> = BTreeMap::new();
        let mut locales: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
        for (rel, text) in files {
            let parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
            let bad = |message: String| TemplateSetError::Invalid { path: root.join(&rel), message };
            match parts.as_slice() {
                [id, f] if f == "template.toml" => {
                    let meta: TemplateMeta = toml::from_str(&text).map_err(|e| bad(e.message().to_string()))?;
                    metas.insert(id.clone(), meta);
                }
                [id, f] if f == "fixtures.json" => {
                    let v: Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
                    fixtures.insert(id.clone(), v);
                }
                [id, locale, file] if file.ends_with(".j2") => {
                    let name = format!("{id}/{locale}/{file}");
                    env.add_template_owned(name, text).map_err(|e| bad(describe(&e)))?;
                    locales.entry(id.clone()).or_default().entry(locale.clone()).or_default().insert(file.clone());
                }
                _ => {}
            }
        }
        let mut templates = BTreeMap::new();
        for (id, locs) in locales {
            let meta = metas.remove(&id).ok_or_else(|| TemplateSetError::Invalid {
                path: root.join(&id).join("template.toml"),
                message: "missing: every template directory needs a template.toml with revision and default_locale"
                    .into(),
            })?;
            if !locs.contains_key(&meta.default_locale) {
                return Err(TemplateSetError::Invalid {
                    path: root.join(&id),
                    message: format!("default_locale {:?} has no directory", meta.default_locale),
                });
            }
            templates.insert(id.clone(), Template { meta, locales: locs, fixtures: fixtures.remove(&id) });
        }
        let mut keys = new_env();
        keys.set_auto_escape_callback(|_| AutoEscape::None);
        Ok(TemplateSet { root: root.to_path_buf(), env, templates, keys })
    }

    pub fn contains(&self, id: &str) -> bool {
        self.templates.contains_key(id)
    }

    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.templates.keys().map(String::as_str)
    }

    pub fn meta(&self, id: &str) -> Option<&TemplateMeta> {
        self.templates.get(id).map(|t| &t.meta)
    }

    pub fn fixtures(&self, id: &str) -> Option<&Value> {
        self.templates.get(id).and_then(|t| t.fixtures.as_ref())
    }

    pub fn locales(&self, id: &str) -> Vec<&str> {
        self.templates.get(id).map(|t| t.locales.keys().map(String::as_str).collect()).unwrap_or_default()
    }

    /// Whether `locale` of template `id` has its own files for `channel`.
    pub fn has_channel(&self, id: &str, locale: &str, channel: Channel) -> bool {
        let first = files_for(channel)[0];
        self.templates.get(id).and_then(|t| t.locales.get(locale)).is_some_and(|f| f.contains(first))
    }

    /// The files `channel` needs from template `id` that are not there: in
    /// its default locale, where every recipient's message falls back to, and
    /// in any other locale that has some of them (an email with a subject and
    /// no body fails for that locale's recipients). An optional file (a
    /// webhook's, an email's HTML part) is never missing.
    pub fn missing_files(&self, id: &str, channel: Channel) -> Vec<MissingFile> {
        let Some(t) = self.templates.get(id) else {
            return Vec::new();
        };
        let needed = required_files(channel);
        let mut missing = Vec::new();
        for (locale, files) in &t.locales {
            let default = *locale == t.meta.default_locale;
            if !default && !needed.iter().any(|f| files.contains(*f)) {
                continue;
            }
            for file in needed.iter().filter(|f| !files.contains(**f)) {
                missing.push(MissingFile {
                    template: id.to_string(),
                    locale: locale.clone(),
                    channel,
                    path: self.root.join(id).join(locale).join(file),
                });
            }
        }
        missing
    }

    /// The channels some locale of template `id` has a file for.
    pub fn channels_with_files(&self, id: &str) -> Vec<Channel> {
        let Some(t) = self.templates.get(id) else {
            return Vec::new();
        };
        Channel::ALL
            .into_iter()
            .filter(|c| t.locales.values().any(|files| required_files(*c).iter().any(|f| files.contains(*f))))
            .collect()
    }

    /// The recipient's locale when the template has it for this channel, else
    /// the template's default locale.
    pub fn resolve_locale(&self, id: &str, wanted: Option<&str>, channel: Channel) -> Option<String> {
        let t = self.templates.get(id)?;
        match wanted {
            Some(l) if self.has_channel(id, l, channel) => Some(l.to_string()),
            _ => Some(t.meta.default_locale.clone()),
        }
    }

    /// Renders one message. `wanted_locale` is the recipient's.
    pub fn render(
        &self,
        id: &str,
        channel: Channel,
        event: &Event,
        recipient: &RecipientSpec,
        wanted_locale: Option<&str>,
    ) -> Result<Rendered, RenderError> {
        let t = self.templates.get(id).ok_or_else(|| RenderError::UnknownTemplate(id.to_string()))?;
        let locale = self.resolve_locale(id, wanted_locale, channel).unwrap_or_else(|| t.meta.default_locale.clone());
        let ctx = super::context(event, recipient, &locale);
        self.render_with(id, t, channel, &locale, &ctx, || default_webhook_body(event))
    }

    /// Compiles a key expression (a digest route's `key`) once, so that a
    /// syntax error stops start-up instead of killing every event of the
    /// route, and planning does not parse it again per member.
    pub fn add_key(&mut self, source: &str) -> Result<(), RenderError> {
        if self.keys.get_template(source).is_ok() {
            return Ok(());
        }
        self.keys
            .add_template_owned(source.to_string(), source.to_string())
            .map_err(|e| RenderError::Template { message: describe(&e), cause: None })
    }

    /// Renders a key expression with strict undefined: the compiled one when
    /// [`TemplateSet::add_key`] saw it, else compiled for this call. A control
    /// character the event's data brought into the key is written as its
    /// escape (`\u{0}`): still a key of its own, and one the database stores
    /// (Postgres refuses a NUL) and a page shows.
    pub fn render_key(&self, source: &str, ctx: &impl Serialize) -> Result<String, RenderError> {
        let rendered = match self.keys.get_template(source) {
            Ok(t) => t.render(ctx),
            Err(_) => self.keys.render_str(source, ctx),
        };
        let key = rendered.map_err(|e| render_error(&e, Some(source), ctx))?;
        let key = key.trim();
        if !key.contains(char::is_control) {
            return Ok(key.to_string());
        }
        Ok(key.chars().map(|c| if c.is_control() { c.escape_unicode().to_string() } else { c.to_string() }).collect())
    }

    /// Renders one message from a fixture context (`templates check`).
    pub fn render_context(
        &self,
        id: &str,
        channel: Channel,
        locale: &str,
        ctx: &Value,
    ) -> Result<Rendered, RenderError> {
        let t = self.templates.get(id).ok_or_else(|| RenderError::UnknownTemplate(id.to_string()))?;
        self.render_with(id, t, channel, locale, ctx, || crate::event::canonical_json(ctx))
    }

    fn render_with(
        &self,
        id: &str,
        t: &Template,
        channel: Channel,
        locale: &str,
        ctx: &impl Serialize,
        webhook_default: impl FnOnce() -> String,
    ) -> Result<Rendered, RenderError> {
        let render_file = |file: &str| -> Result<Option<String>, RenderError> {
            if !t.locales.get(locale).is_some_and(|f| f.contains(file)) {
                return Ok(None);
            }
            let tpl =
                self.env.get_template(&format!("{id}/{locale}/{file}")).map_err(|e| render_error(&e, None, ctx))?;
            tpl.render(ctx).map(Some).map_err(|e| {
                // the file that failed: an included one names itself
                let failed = e.name().and_then(|n| self.env.get_template(n).ok());
                render_error(&e, failed.as_ref().map(|t| t.source()), ctx)
            })
        };
        let required = |file: &str| -> Result<String, RenderError> {
            render_file(file)?.ok_or_else(|| RenderError::MissingFile {
                template: id.to_string(),
                locale: locale.to_string(),
                file: file.to_string(),
            })
        };
        let mut content = Content { subject: None, body: String::new(), html: None, encoding: None, segments: None };
        let mut over_budget = None;
        match channel {
            Channel::Email => {
                content.subject = Some(required("email.subject.j2")?.trim().to_string());
                content.body = required("email.txt.j2")?;
                content.html = render_file("email.html.j2")?;
            }
            Channel::Sms => {
                content.body = required("sms.j2")?.trim().to_string();
                let a = analyse(&content.body);
                content.encoding = Some(a.encoding.as_str().to_string());
                content.segments = Some(a.segments);
                if a.segments > t.meta.sms_max_segments {
                    over_budget = Some(OverBudget {
                        segments: a.segments,
                        budget: t.meta.sms_max_segments,
                        send_anyway: t.meta.sms_over_budget == OverBudgetPolicy::Send,
                    });
                }
            }
            Channel::InApp => content.body = required("in_app.j2")?.trim().to_string(),
            Channel::Webhook => content.body = render_file("webhook.j2")?.unwrap_or_else(webhook_default),
        }
        Ok(Rendered { locale: locale.to_string(), revision: t.meta.revision.clone(), content, over_budget })
    }
}

/// A render error as an intent may show it (see [`super::errors`]); the
/// context is turned into JSON only when rendering failed.
fn render_error(e: &minijinja::Error, source: Option<&str>, ctx: &impl Serialize) -> RenderError {
    let ctx = serde_json::to_value(ctx).unwrap_or(Value::Null);
    super::errors::render_error(e, source, &ctx)
}

/// A minijinja error with its cause chain, and the template line where known.
fn describe(e: &minijinja::Error) -> String {
    let mut msg = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        msg.push_str(&format!(": {s}"));
        source = s.source();
    }
    msg
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<(PathBuf, String)>) -> Result<(), TemplateSetError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| TemplateSetError::Io { path, source }
    };
    let mut entries: Vec<_> = std::fs::read_dir(dir).map_err(io(dir))?.collect::<Result<_, _>>().map_err(io(dir))?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        if path.is_dir() {
            collect(root, &path, out)?;
        } else if let Ok(rel) = path.strip_prefix(root) {
            let text = std::fs::read_to_string(&path).map_err(io(&path))?;
            out.push((rel.to_path_buf(), text));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::parse_event;
    use serde_json::json;

    fn event(data: Value) -> Event {
        parse_event(&json!({
            "type": "purchase_order.approved",
            "entity": {"type": "purchase_order", "id": "PO-1", "version": 2},
            "occurred_at": "2026-11-29T10:15:00Z",
            "data": data,
            "recipients": [{"id": "u-1"}]
        }))
        .unwrap()
    }

    fn set(files: &[(&str, &str)]) -> TemplateSet {
        let files = files.iter().map(|(p, s)| (PathBuf::from(p), s.to_string())).collect();
        TemplateSet::from_files(Path::new("t"), files).unwrap()
    }

    fn recipient() -> RecipientSpec {
        RecipientSpec { id: "u-1".into(), ..Default::default() }
    }

    #[test]
    fn the_built_in_templates_render_every_channel_and_locale() {
        let set = TemplateSet::built_in();
        let ev = event(json!({"po": {"number": "PO-1", "total": "9"}, "approver": {"name": "Asha"}}));
        for locale in ["en", "ne"] {
            for ch in [Channel::Email, Channel::Sms, Channel::InApp] {
                let r = set.render("po_approved", ch, &ev, &recipient(), Some(locale)).unwrap();
                assert_eq!(r.locale, locale);
                assert!(r.content.body.contains("PO-1"), "{ch} {locale}: {:?}", r.content);
                assert!(r.over_budget.is_none());
            }
        }
    }

    #[test]
    fn a_missing_variable_is_an_error_not_an_empty_string() {
        let set = set(&[
            ("a/template.toml", "revision = \"1\"\ndefault_locale = \"en\""),
            ("a/en/sms.j2", "Hi {{ who.name }}"),
        ]);
        let e = set.render("a", Channel::Sms, &event(json!({})), &recipient(), None).unwrap_err();
        assert!(matches!(e, RenderError::Template { .. }), "{e:?}");
    }

    /// What a render error says is the variable as the template wrote it,
    /// the file and the line: enough to fix the template, and never a value
    /// of the event's data (an intent's detail is shown to every reader).
    #[test]
    fn a_missing_variable_is_named_by_its_path_file_and_line_never_by_a_value() {
        let cases = [
            ("Hi {{ po.totl }}", "undefined value po.totl in a/en/sms.j2:1"),
            ("Hi {{ who.name }}", "undefined value who in a/en/sms.j2:1"),
            ("Hi {{ who }}", "undefined value who in a/en/sms.j2:1"),
            ("Hi {{ po.totl | upper }}", "undefined value po.totl in a/en/sms.j2:1"),
            ("Hi {{ po['totl'] }}", "undefined value po.totl in a/en/sms.j2:1"),
            ("{{ po.number ~ po.totl }}", "undefined value po.totl in a/en/sms.j2:1"),
            ("{{ 'po.x' ~ po.number ~ po . totl }}", "undefined value po.totl in a/en/sms.j2:1"),
            ("one\n{% if po.totl %}x{% endif %}", "undefined value po.totl in a/en/sms.j2:2"),
            ("{% for x in po.items %}{{ x }}{% endfor %}", "undefined value po.items in a/en/sms.j2:1"),
            ("{{ po.number.deep.er }}", "undefined value po.number.deep in a/en/sms.j2:1"),
            ("{{ lines[5].qty }}", "undefined value lines[5] in a/en/sms.j2:1"),
            ("{% for l in lines %}\n{{ l.price }}{% endfor %}", "undefined value l.price in a/en/sms.j2:2"),
            ("{{ entity.idx }}", "undefined value entity.idx in a/en/sms.j2:1"),
            ("Set for who in line: {{ who.name }}", "undefined value who in a/en/sms.j2:1"),
            (
                "{% if po.number is not defined %}{% endif %}{{ po.number | replace('PO', po.x) }}",
                "undefined value po.x in a/en/sms.j2:1",
            ),
            ("{{ po.number + 1 }}", "invalid operation in a/en/sms.j2:1"),
            ("{{ po.number | int }}", "invalid operation in a/en/sms.j2:1"),
        ];
        let ev = event(json!({"po": {"number": "PO-SECRET"}, "lines": [{"qty": 1}]}));
        for (source, said) in cases {
            let set = set(&[("a/template.toml", "revision = \"1\"\ndefault_locale = \"en\""), ("a/en/sms.j2", source)]);
            let e = set.render("a", Channel::Sms, &ev, &recipient(), None).unwrap_err();
            assert_eq!(e.to_string(), said, "{source:?}");
            assert!(!format!("{e:?}").contains("SECRET"), "{source:?}: {e:?}");
        }
    }

    #[test]
    fn a_file_a_channel_needs_is_named_by_its_path_and_an_optional_one_never_is() {
        let set = set(&[
            ("a/template.toml", "revision = \"1\"\ndefault_locale = \"en\""),
            ("a/en/email.subject.j2", "s"),
            ("a/en/email.txt.j2", "b"),
            ("a/ne/email.subject.j2", "s"),
            ("a/ne/sms.j2", "x"),
            ("a/ne/webhook.j2", "{}"),
        ]);
        let paths = |c| set.missing_files("a", c).into_iter().map(|m| m.path).collect::<Vec<_>>();
        // the default locale, where every recipient falls back to; and a
        // locale with half an email
        assert_eq!(paths(Channel::Email), [PathBuf::from("t/a/ne/email.txt.j2")]);
        assert_eq!(paths(Channel::Sms), [PathBuf::from("t/a/en/sms.j2")]);
        assert_eq!(paths(Channel::InApp), [PathBuf::from("t/a/en/in_app.j2")]);
        assert!(paths(Channel::Webhook).is_empty(), "a webhook falls back to the event");
        assert_eq!(set.channels_with_files("a"), [Channel::Email, Channel::Sms]);
        assert!(TemplateSet::built_in().missing_files("po_approved", Channel::Email).is_empty());
    }

    #[test]
    fn a_key_compiled_once_renders_as_one_compiled_per_call() {
        let mut set = TemplateSet::built_in();
        let ev = event(json!({"po": {"number": "PO-7 <b>"}}));
        let who = recipient();
        let ctx = super::super::context(&ev, &who, "en");
        let source = "  {{ entity.id }}/{{ po.number }} ";
        let per_call = set.render_key(source, &ctx).unwrap();
        set.add_key(source).unwrap();
        set.add_key(source).unwrap();
        assert_eq!(set.render_key(source, &ctx).unwrap(), per_call);
        assert_eq!(per_call, "PO-1/PO-7 <b>", "trimmed, never HTML-escaped");
        let ev = event(json!({"po": {"number": "PO-7\u{0}\n"}}));
        let nul = super::super::context(&ev, &who, "en");
        assert_eq!(set.render_key(source, &nul).unwrap(), "PO-1/PO-7\\u{0}", "escaped, and trimmed as ever");
        let e = set.render_key("{{ missing.field }}", &ctx).unwrap_err();
        assert!(matches!(e, RenderError::Template { .. }), "strict undefined: {e:?}");
        let e = set.add_key("{{ entity.id ").unwrap_err();
        assert!(matches!(e, RenderError::Template { .. }), "{e:?}");
    }

    #[test]
    fn html_is_escaped_and_text_is_not() {
        let set = set(&[
            ("a/template.toml", "revision = \"1\"\ndefault_locale = \"en\""),
            ("a/en/email.subject.j2", "  {{ x }}  \n"),
            ("a/en/email.txt.j2", "{{ x }}"),
            ("a/en/email.html.j2", "<p>{{ x }}</p>"),
        ]);
        let r = set.render("a", Channel::Email, &event(json!({"x": "<b>&"})), &recipient(), None).unwrap();
        assert_eq!(r.content.subject.as_deref(), Some("<b>&"));
        assert_eq!(r.content.body, "<b>&");
        assert_eq!(r.content.html.as_deref(), Some("<p>&lt;b&gt;&amp;</p>"));
    }

    #[test]
    fn a_missing_locale_falls_back_to_the_default() {
        let set = TemplateSet::built_in();
        let ev = event(json!({"po": {"number": "PO-1", "total": "9"}, "approver": {"name": "Asha"}}));
        let r = set.render("po_approved", Channel::Sms, &ev, &recipient(), Some("fr")).unwrap();
        assert_eq!(r.locale, "en");
    }

    #[test]
    fn reserved_names_are_in_the_context() {
        let set = set(&[
            ("a/template.toml", "revision = \"3\"\ndefault_locale = \"en\""),
            ("a/en/in_app.j2", "{{ event.type }} {{ entity.id }} v{{ entity.version }} for {{ recipient.id }}"),
        ]);
        let r = set.render("a", Channel::InApp, &event(json!({})), &recipient(), None).unwrap();
        assert_eq!(r.content.body, "purchase_order.approved PO-1 v2 for u-1");
        assert_eq!(r.revision, "3");
    }

    #[test]
    fn an_sms_over_budget_is_flagged_with_its_segments() {
        let set = set(&[("a/template.toml", "revision = \"1\"\ndefault_locale = \"en\""), ("a/en/sms.j2", "{{ x }}")]);
        let r = set.render("a", Channel::Sms, &event(json!({"x": "a".repeat(161)})), &recipient(), None).unwrap();
        assert_eq!(r.content.segments, Some(2));
        assert_eq!(r.over_budget, Some(OverBudget { segments: 2, budget: 1, send_anyway: false }));
    }

    #[test]
    fn a_syntax_error_names_the_file() {
        let files = vec![
            (PathBuf::from("a/template.toml"), "revision = \"1\"\ndefault_locale = \"en\"".to_string()),
            (PathBuf::from("a/en/sms.j2"), "{{ x ".to_string()),
        ];
        let e = TemplateSet::from_files(Path::new("t"), files).err().unwrap().to_string();
        assert!(e.contains("sms.j2"), "{e}");
    }

    #[test]
    fn a_webhook_without_template_carries_the_event() {
        let set = TemplateSet::built_in();
        let r = set.render("po_approved", Channel::Webhook, &event(json!({"k": 1})), &recipient(), None).unwrap();
        let body: Value = serde_json::from_str(&r.content.body).unwrap();
        assert_eq!(body["entity"]["id"], "PO-1");
        assert_eq!(body["data"]["k"], 1);
    }
}
