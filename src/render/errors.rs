//! What a render error says. An intent's `detail` is shown to every reader of
//! the intent, so the message names the variable as the template wrote it,
//! the file and the line, and never a value: minijinja's own text may quote
//! one (`unable to calculate 9223372036854775807 + 1`), and that is kept as
//! the cause for `templates check`, which renders fixtures, not events.
//!
//! minijinja says only "undefined value" and points at a span that is
//! sometimes the variable, sometimes the filter applied to it or the whole
//! expression; the variable is found by reading the paths written in the tag
//! around that span and walking each through the context.

use super::RenderError;
use serde_json::Value;

/// The error as an intent may show it: `undefined value po.totl in
/// po_approved/en/email.subject.j2:1`. `source` is the failing template's
/// text (the one `e.name()` names), `ctx` the context it was rendered with.
pub fn render_error(e: &minijinja::Error, source: Option<&str>, ctx: &Value) -> RenderError {
    let place = match (e.name(), e.line()) {
        (Some(name), Some(line)) => format!(" in {name}:{line}"),
        (Some(name), None) => format!(" in {name}"),
        _ => String::new(),
    };
    let message = match e.kind() {
        minijinja::ErrorKind::UndefinedError => {
            let path = source.zip(e.range()).and_then(|(src, range)| undefined_path(src, range, ctx));
            match path {
                Some(p) => format!("undefined value {p}{place}"),
                None => format!("undefined value{place}"),
            }
        }
        kind => format!("{kind}{place}"),
    };
    RenderError::Template { message, cause: e.detail().map(str::to_string) }
}

#[derive(Debug, Clone, PartialEq)]
enum Segment {
    Key(String),
    Index(i64),
}

/// A variable path as written: `po.total`, `lines[0].qty`, `po['total']`.
#[derive(Debug)]
struct Written {
    start: usize,
    end: usize,
    root: String,
    segments: Vec<Segment>,
}

impl Written {
    fn show(&self, n: usize) -> String {
        let mut out = self.root.clone();
        for s in &self.segments[..n] {
            match s {
                Segment::Key(k) if is_identifier(k) => out.push_str(&format!(".{k}")),
                Segment::Key(k) => out.push_str(&format!("[{k:?}]")),
                Segment::Index(i) => out.push_str(&format!("[{i}]")),
            }
        }
        out
    }
}

/// Where a written path stops resolving in the context.
enum Resolution {
    Defined,
    /// Its first `n` segments resolve, the next does not.
    MissingAfter(usize),
    /// Its root is not in the context (a loop variable, a `set`, or undefined).
    NoRoot,
}

fn resolve(ctx: &Value, w: &Written) -> Resolution {
    let Some(mut at) = ctx.get(&w.root) else {
        return Resolution::NoRoot;
    };
    for (n, s) in w.segments.iter().enumerate() {
        let next = match (s, at) {
            (Segment::Key(k), Value::Object(m)) => m.get(k),
            (Segment::Index(i), Value::Array(a)) => {
                let i = if *i < 0 { a.len() as i64 + i } else { *i };
                usize::try_from(i).ok().and_then(|i| a.get(i))
            }
            _ => None,
        };
        match next {
            Some(v) => at = v,
            None => return Resolution::MissingAfter(n),
        }
    }
    Resolution::Defined
}

/// The undefined variable of the tag around `range`: one whose root is in the
/// context and a later segment is not; else one whose root is nowhere,
/// neither in the context nor bound by the template; else one rooted in a
/// loop variable, shown whole. Paths the span covers are tried first.
fn undefined_path(source: &str, range: std::ops::Range<usize>, ctx: &Value) -> Option<String> {
    let (tag_start, tag) = enclosing_tag(source, range.start)?;
    let bound = bound_names(source);
    let mut paths = written_paths(tag, tag_start);
    let overlaps = |w: &Written| w.start < range.end && range.start < w.end;
    paths.sort_by_key(|w| !overlaps(w));
    if let Some(p) = paths.iter().find_map(|w| match resolve(ctx, w) {
        Resolution::MissingAfter(n) => Some(w.show(n + 1)),
        _ => None,
    }) {
        return Some(p);
    }
    let unresolved = |w: &&Written| matches!(resolve(ctx, w), Resolution::NoRoot);
    let free = paths.iter().filter(unresolved).find(|w| !bound.contains(&w.root));
    free.map(|w| w.show(0)).or_else(|| paths.iter().find(unresolved).map(|w| w.show(w.segments.len())))
}

/// The `{{ … }}` or `{% … %}` holding byte `at`: its start and inner text.
fn enclosing_tag(source: &str, at: usize) -> Option<(usize, &str)> {
    let before = source.get(..at.min(source.len()))?;
    let open = before.rfind("{{").into_iter().chain(before.rfind("{%")).max()? + 2;
    let rest = &source[open..];
    let close = rest.find("}}").into_iter().chain(rest.find("%}")).min().unwrap_or(rest.len());
    Some((open, &rest[..close]))
}

fn is_identifier(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Jinja's words that are not variables.
const KEYWORDS: &str = "and or not in is if else elif endif for endfor set endset true false none True False None \
     recursive with endwith filter endfilter macro endmacro call endcall block endblock extends include import from \
     as ignore missing context without autoescape endautoescape raw endraw loop continue break do";

fn is_keyword(word: &str) -> bool {
    KEYWORDS.split_whitespace().any(|k| k == word)
}

/// Names the template binds itself, read from its `{% … %}` tags: loop
/// targets (every word between `for` and `in`) and the name after `set`,
/// `macro` or `with`. They are not the event's data.
fn bound_names(source: &str) -> Vec<String> {
    let mut statements = String::new();
    let mut rest = source;
    while let Some(open) = rest.find("{%") {
        let after = &rest[open + 2..];
        let close = after.find("%}").unwrap_or(after.len());
        statements.push_str(&after[..close]);
        statements.push(' ');
        rest = &after[close..];
    }
    let words = words(&statements);
    let mut bound = vec!["loop".to_string()];
    let mut i = 0;
    while i < words.len() {
        match words[i].as_str() {
            "for" => {
                let mut j = i + 1;
                while j < words.len() && words[j] != "in" {
                    bound.push(words[j].clone());
                    j += 1;
                }
                i = j;
            }
            "set" | "macro" | "with" => {
                if let Some(w) = words.get(i + 1) {
                    bound.push(w.clone());
                }
            }
            _ => {}
        }
        i += 1;
    }
    bound
}

fn words(source: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for c in source.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            current.push(c);
        } else if !current.is_empty() {
            out.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// The variable paths written in a tag's text (`offset`: where the text
/// starts in the template), leaving out string literals, keywords, filter and
/// test names, attributes of something other than a name, and functions
/// called by name.
fn written_paths(tag: &str, offset: usize) -> Vec<Written> {
    let b = tag.as_bytes();
    let skip_ws = |mut j: usize| {
        while j < b.len() && b[j].is_ascii_whitespace() {
            j += 1;
        }
        j
    };
    let mut out = Vec::new();
    let mut i = 0;
    // The last byte before a word that is not white space, and the two words
    // before it (`x is not defined`), cleared by anything else in between.
    let mut prev_byte = 0u8;
    let mut words: [String; 2] = Default::default();
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if !(c.is_ascii_alphabetic() || c == b'_') {
            i = if c == b'"' || c == b'\'' {
                string_end(b, i)
            } else if c.is_ascii_digit() {
                let mut j = i;
                while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'.' || b[j] == b'_') {
                    j += 1;
                }
                j
            } else {
                i + 1
            };
            prev_byte = c;
            words = Default::default();
            continue;
        }
        let start = i;
        let root = identifier(b, &mut i);
        let mut segments = Vec::new();
        loop {
            let j = skip_ws(i);
            if j < b.len() && b[j] == b'.' {
                let k = skip_ws(j + 1);
                if k < b.len() && (b[k].is_ascii_alphabetic() || b[k] == b'_') {
                    i = k;
                    segments.push(Segment::Key(identifier(b, &mut i)));
                    continue;
                }
                if k < b.len() && b[k].is_ascii_digit() {
                    let mut m = k;
                    while m < b.len() && b[m].is_ascii_digit() {
                        m += 1;
                    }
                    segments.push(Segment::Index(tag[k..m].parse().unwrap_or(i64::MAX)));
                    i = m;
                    continue;
                }
            }
            if j < b.len()
                && b[j] == b'['
                && let Some((segment, after)) = subscript(tag, j)
            {
                segments.push(segment);
                i = after;
                continue;
            }
            break;
        }
        let called = {
            let j = skip_ws(i);
            j < b.len() && b[j] == b'('
        };
        // a function by name, or a method: neither is the data's
        let function = called && segments.is_empty();
        if called {
            segments.pop();
        }
        let test = words[1] == "is" || (words[1] == "not" && words[0] == "is");
        let name_of_something_else = prev_byte == b'|' || prev_byte == b'.' || test;
        let keyword = segments.is_empty() && is_keyword(&root);
        if !name_of_something_else && !keyword && !function {
            out.push(Written { start: offset + start, end: offset + i, root: root.clone(), segments });
        }
        words = [std::mem::take(&mut words[1]), root];
        prev_byte = b'a';
    }
    out
}

fn identifier(b: &[u8], i: &mut usize) -> String {
    let start = *i;
    while *i < b.len() && (b[*i].is_ascii_alphanumeric() || b[*i] == b'_') {
        *i += 1;
    }
    String::from_utf8_lossy(&b[start..*i]).into_owned()
}

/// The byte after a string literal opening at `start`.
fn string_end(b: &[u8], start: usize) -> usize {
    let quote = b[start];
    let mut i = start + 1;
    while i < b.len() && b[i] != quote {
        i += if b[i] == b'\\' { 2 } else { 1 };
    }
    (i + 1).min(b.len())
}

/// `['key']`, `["key"]` or `[3]` at `open`: the segment and the byte after `]`.
fn subscript(tag: &str, open: usize) -> Option<(Segment, usize)> {
    let b = tag.as_bytes();
    let mut i = open + 1;
    while i < b.len() && b[i].is_ascii_whitespace() {
        i += 1;
    }
    let (segment, mut after) = match b.get(i)? {
        b'"' | b'\'' => {
            let end = string_end(b, i);
            let inner = tag.get(i + 1..end.saturating_sub(1))?;
            (Segment::Key(inner.to_string()), end)
        }
        c if c.is_ascii_digit() || *c == b'-' => {
            let mut j = i + 1;
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            (Segment::Index(tag[i..j].parse().ok()?), j)
        }
        _ => return None,
    };
    while after < b.len() && b[after].is_ascii_whitespace() {
        after += 1;
    }
    (b.get(after) == Some(&b']')).then_some((segment, after + 1))
}
