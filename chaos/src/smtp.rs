//! A scriptable fake SMTP peer: plain SMTP (no TLS, no AUTH), logs every
//! message as a [`Call`] keyed by the `Message-ID`'s local part (Herald's
//! intent key), and can stall the dialogue at a chosen point. One that
//! honours `Message-ID` delivers a message id once, as a mail system that
//! drops repeats does; one that does not delivers every message.

use crate::provider::{Call, marker};
use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmtpMode {
    Healthy,
    /// Accepts the connection and never greets.
    StallGreeting,
    /// Goes silent at `DATA`, before its 354: nothing can have been sent.
    StallAtData,
    /// Reads the whole message, delivers it, and never answers the final dot.
    StallAfterMessage,
    /// `451` to `MAIL FROM`: try again later.
    Busy,
}

#[derive(Default)]
struct State {
    mode: Option<SmtpMode>,
    calls: Vec<Call>,
    delivered: HashSet<String>,
}

#[derive(Clone)]
pub struct SmtpPeer {
    pub honours_message_id: bool,
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
}

impl SmtpPeer {
    pub async fn start(honours_message_id: bool) -> anyhow::Result<SmtpPeer> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let peer = SmtpPeer { honours_message_id, addr: listener.local_addr()?, state: Arc::default() };
        let me = peer.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let me = me.clone();
                tokio::spawn(async move { me.serve(socket).await });
            }
        });
        Ok(peer)
    }

    pub fn url(&self) -> String {
        format!("smtp://{}", self.addr)
    }

    pub fn set_mode(&self, mode: SmtpMode) {
        self.state.lock().unwrap().mode = Some(mode);
    }

    fn mode(&self) -> SmtpMode {
        self.state.lock().unwrap().mode.unwrap_or(SmtpMode::Healthy)
    }

    pub fn calls(&self) -> Vec<Call> {
        self.state.lock().unwrap().calls.clone()
    }

    async fn serve(&self, socket: TcpStream) {
        let (read, mut write) = socket.into_split();
        let mut lines = BufReader::new(read);
        if self.mode() == SmtpMode::StallGreeting {
            return hold(lines).await;
        }
        if write.write_all(b"220 chaos.test ESMTP\r\n").await.is_err() {
            return;
        }
        let mut line = String::new();
        loop {
            line.clear();
            match lines.read_line(&mut line).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            let verb = line.split_whitespace().next().unwrap_or_default().to_ascii_uppercase();
            let reply: &[u8] = match verb.as_str() {
                "EHLO" => b"250-chaos.test\r\n250 8BITMIME\r\n",
                "HELO" | "RSET" | "NOOP" | "RCPT" => b"250 OK\r\n",
                "MAIL" if self.mode() == SmtpMode::Busy => b"451 4.3.2 busy, try again later\r\n",
                "MAIL" => b"250 OK\r\n",
                "QUIT" => {
                    let _ = write.write_all(b"221 bye\r\n").await;
                    return;
                }
                "DATA" => {
                    if self.mode() == SmtpMode::StallAtData {
                        return hold(lines).await;
                    }
                    if write.write_all(b"354 go ahead\r\n").await.is_err() {
                        return;
                    }
                    let Some(message) = read_message(&mut lines).await else { return };
                    self.deliver(&message);
                    if self.mode() == SmtpMode::StallAfterMessage {
                        return hold(lines).await;
                    }
                    b"250 2.0.0 queued\r\n"
                }
                _ => b"502 not implemented\r\n",
            };
            if write.write_all(reply).await.is_err() {
                return;
            }
        }
    }

    fn deliver(&self, message: &str) {
        let key = message_id_key(message);
        let mut state = self.state.lock().unwrap();
        let effect = !(self.honours_message_id && !key.is_empty() && state.delivered.contains(&key));
        state.delivered.insert(key.clone());
        state.calls.push(Call { provider: "email".into(), key, marker: marker(message), effect });
    }
}

/// Silent until the client gives up and closes.
async fn hold(mut lines: BufReader<tokio::net::tcp::OwnedReadHalf>) {
    let mut rest = [0u8; 1024];
    while matches!(lines.read(&mut rest).await, Ok(n) if n > 0) {}
}

/// The message up to its final `.` line, dot-unstuffed.
async fn read_message(lines: &mut BufReader<tokio::net::tcp::OwnedReadHalf>) -> Option<String> {
    let mut message = String::new();
    let mut line = String::new();
    loop {
        line.clear();
        if lines.read_line(&mut line).await.ok()? == 0 {
            return None;
        }
        if line == ".\r\n" || line == ".\n" {
            return Some(message);
        }
        message.push_str(line.strip_prefix('.').unwrap_or(&line));
    }
}

/// The local part of the `Message-ID` header: Herald's intent key.
pub fn message_id_key(message: &str) -> String {
    let head = message.split("\r\n\r\n").next().unwrap_or_default();
    head.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim().eq_ignore_ascii_case("message-id").then(|| v.trim().to_string())
        })
        .and_then(|v| v.trim_start_matches('<').split('@').next().map(str::to_string))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_the_message_ids_local_part() {
        let m = "From: a@b\r\nMessage-ID: <0123abcd@chaos.test>\r\nSubject: x\r\n\r\nbody evt~3~\r\n";
        assert_eq!(message_id_key(m), "0123abcd");
        assert_eq!(message_id_key("Subject: none\r\n\r\nbody"), "");
    }

    async fn send(peer: &SmtpPeer, id: &str) -> String {
        let mut s = TcpStream::connect(peer.addr).await.unwrap();
        let script = format!(
            "EHLO me\r\nMAIL FROM:<a@b>\r\nRCPT TO:<c@d>\r\nDATA\r\nMessage-ID: <{id}@x>\r\n\r\n..evt~1~\r\n.\r\nQUIT\r\n"
        );
        s.write_all(script.as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn a_peer_delivers_and_dedupes_by_message_id_only_when_it_honours_it() {
        for honours in [true, false] {
            let peer = SmtpPeer::start(honours).await.unwrap();
            assert!(send(&peer, "k1").await.contains("250 2.0.0 queued"));
            send(&peer, "k1").await;
            let calls = peer.calls();
            assert_eq!(calls.len(), 2);
            assert_eq!(calls[0].key, "k1");
            assert_eq!(calls[0].marker, "evt~1~");
            assert_eq!(calls.iter().filter(|c| c.effect).count(), if honours { 1 } else { 2 });
        }
    }
}
