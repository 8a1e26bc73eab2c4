//! The directory sink of the embedded default: each message is written to
//! `herald-outbox/KEY.CHANNEL.txt`, so a newcomer sees what would have gone
//! out. Named by key and written atomically, so a retry overwrites the same
//! file with the same bytes: exactly once in effect.

use super::{Delivery, Outcome, Provider, header_value, short_error};
use crate::event::Channel;
use crate::intent::Reason;
use async_trait::async_trait;
use std::path::PathBuf;
use std::time::Duration;

/// An attempt's provider message id as every view shows it. The sink once
/// recorded the file's full path on the server (`/var/lib/herald/outbox/
/// KEY.email.txt`); a row stored then still holds it, so an absolute path to
/// a `.txt` file, from the sink (or an attempt that names no provider, as
/// the oldest rows do), is shown by its file name only. Anything else is
/// shown as stored.
pub fn shown_message_id<'a>(provider: Option<&str>, id: &'a str) -> &'a str {
    let from_sink = matches!(provider, None | Some("sink"));
    let absolute = id.starts_with('/') || id.starts_with('\\') || id.get(1..3).is_some_and(|d| d == ":\\" || d == ":/");
    match id.rsplit(['/', '\\']).next() {
        Some(name) if from_sink && absolute && name.ends_with(".txt") => name,
        _ => id,
    }
}

pub struct DirectorySink {
    dir: PathBuf,
    channel: Channel,
    timeout: Duration,
}

impl DirectorySink {
    /// `timeout` bounds each write like any provider call.
    pub fn new(dir: PathBuf, channel: Channel, timeout: Duration) -> DirectorySink {
        DirectorySink { dir, channel, timeout }
    }

    pub fn path_for(&self, key: &str) -> PathBuf {
        self.dir.join(self.file_name(key))
    }

    /// What the attempt records and shows: the file's name, never the
    /// server's directory (every reader of the intent sees it).
    fn file_name(&self, key: &str) -> String {
        format!("{key}.{}.txt", self.channel)
    }

    /// The header lines, then the body. Every header value goes through
    /// [`header_value`]: event data reaches the subject, and a CR/LF in it
    /// must not write a line of its own.
    fn render(&self, d: &Delivery) -> String {
        let mut headers: Vec<(&str, String)> = vec![
            ("Key", d.key.clone()),
            ("Channel", self.channel.to_string()),
            ("To", d.destination.clone().unwrap_or_else(|| "-".into())),
            ("Recipient", d.recipient_id.clone()),
        ];
        let version = d.entity_version.map(|v| format!(" v{v}")).unwrap_or_default();
        headers.push(("Entity", format!("{}:{}{version}", d.entity_type, d.entity_id)));
        if let Some(subject) = &d.content.subject {
            headers.push(("Subject", subject.clone()));
        }
        if let (Some(enc), Some(seg)) = (&d.content.encoding, d.content.segments) {
            headers.push(("Encoding", format!("{enc}, {seg} segment(s)")));
        }
        let mut out = String::new();
        for (name, value) in headers {
            out.push_str(&format!("{name}: {}\n", header_value(&value)));
        }
        out.push('\n');
        out.push_str(&d.content.body);
        if !d.content.body.ends_with('\n') {
            out.push('\n');
        }
        if let Some(html) = &d.content.html {
            out.push_str("\n--- HTML part ---\n");
            out.push_str(html);
            out.push('\n');
        }
        out
    }
}

#[async_trait]
impl Provider for DirectorySink {
    fn name(&self) -> &str {
        "sink"
    }

    /// A retry overwrites the same file with the same bytes.
    fn dedupes_retries(&self) -> bool {
        true
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }

    async fn send(&self, d: &Delivery) -> Outcome {
        let path = self.path_for(&d.key);
        let tmp = self.dir.join(format!(".{}.{}.tmp", d.key, self.channel));
        let text = self.render(d);
        let write = async {
            tokio::fs::create_dir_all(&self.dir).await?;
            tokio::fs::write(&tmp, text.as_bytes()).await?;
            tokio::fs::rename(&tmp, &path).await
        };
        let name = self.file_name(&d.key);
        match write.await {
            Ok(()) => Outcome::Accepted { status: None, message_id: Some(name) },
            Err(e) => Outcome::Retryable {
                class: Reason::Unreachable,
                status: None,
                error: short_error(&format!("cannot write {name} in the sink's directory: {e}")),
                retry_after: None,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_old_rows_server_path_is_shown_as_its_file_name() {
        let old = "/var/lib/herald/herald-outbox/0123abcd.email.txt";
        assert_eq!(shown_message_id(Some("sink"), old), "0123abcd.email.txt");
        assert_eq!(shown_message_id(None, old), "0123abcd.email.txt");
        assert_eq!(shown_message_id(Some("sink"), r"C:\herald\outbox\k.sms.txt"), "k.sms.txt");
        assert_eq!(shown_message_id(Some("sink"), "0123abcd.email.txt"), "0123abcd.email.txt");
        assert_eq!(shown_message_id(Some("twilio"), old), old, "another provider's id is its own");
        assert_eq!(shown_message_id(Some("sink"), "/var/lib/herald/outbox/"), "/var/lib/herald/outbox/");
    }
}
