//! The directory sink of the embedded default: each message is written to
//! `herald-outbox/KEY.CHANNEL.txt`, so a newcomer sees what would have gone
//! out. Named by key and written atomically, so a retry overwrites the same
//! file with the same bytes: exactly once in effect.

use super::{Delivery, Outcome, Provider, short_error};
use crate::event::Channel;
use crate::intent::Reason;
use async_trait::async_trait;
use std::path::PathBuf;
use std::time::Duration;

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
        self.dir.join(format!("{key}.{}.txt", self.channel))
    }

    fn render(&self, d: &Delivery) -> String {
        let mut out = String::new();
        out.push_str(&format!("Key: {}\n", d.key));
        out.push_str(&format!("Channel: {}\n", self.channel));
        out.push_str(&format!("To: {}\n", d.destination.as_deref().unwrap_or("-")));
        out.push_str(&format!("Recipient: {}\n", d.recipient_id));
        out.push_str(&format!("Entity: {}:{}", d.entity_type, d.entity_id));
        if let Some(v) = d.entity_version {
            out.push_str(&format!(" v{v}"));
        }
        out.push('\n');
        if let Some(subject) = &d.content.subject {
            out.push_str(&format!("Subject: {subject}\n"));
        }
        if let (Some(enc), Some(seg)) = (&d.content.encoding, d.content.segments) {
            out.push_str(&format!("Encoding: {enc}, {seg} segment(s)\n"));
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
        match write.await {
            Ok(()) => Outcome::Accepted { status: None, message_id: Some(path.display().to_string()) },
            Err(e) => Outcome::Retryable {
                class: Reason::Unreachable,
                status: None,
                error: short_error(&format!("cannot write {}: {e}", path.display())),
                retry_after: None,
            },
        }
    }
}
