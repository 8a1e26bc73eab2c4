//! A small SMTP server for the tests: plain text, no TLS or AUTH, records each
//! message, can refuse chosen recipients with a scripted reply, and can stall a
//! session at a chosen point of the dialogue.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

#[derive(Debug, Clone)]
pub struct Mail {
    pub to: Vec<String>,
    pub raw: String,
    /// The id the server answered the message with, when it answers like SES.
    pub ses_id: Option<String>,
}

impl Mail {
    /// A header's value (unfolded), by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<String> {
        let head = self.raw.split("\r\n\r\n").next().unwrap_or_default();
        let mut out: Option<String> = None;
        let mut current = false;
        for line in head.split("\r\n") {
            if line.starts_with([' ', '\t']) {
                if current && let Some(v) = out.as_mut() {
                    v.push(' ');
                    v.push_str(line.trim());
                }
                continue;
            }
            current = false;
            if let Some((k, v)) = line.split_once(':')
                && k.eq_ignore_ascii_case(name)
            {
                out = Some(v.trim().to_string());
                current = true;
            }
        }
        out
    }
}

impl Mail {
    /// A header's value as a mail reader shows it: unfolded, and its RFC 2047
    /// encoded words (`=?utf-8?b?…?=`, `=?utf-8?q?…?=`) decoded — so a CR or LF
    /// hidden inside an encoded word shows up here.
    pub fn decoded_header(&self, name: &str) -> Option<String> {
        // Unfolding removes the line breaks only (RFC 5322 §2.2.3).
        let head = self.raw.split("\r\n\r\n").next().unwrap_or_default();
        let mut value: Option<String> = None;
        for line in head.split("\r\n") {
            match (&mut value, line.starts_with([' ', '\t'])) {
                (Some(v), true) => v.push_str(line),
                (Some(_), false) => break,
                (None, _) => {
                    if let Some((k, v)) = line.split_once(':')
                        && k.eq_ignore_ascii_case(name)
                    {
                        value = Some(v.trim_start().to_string());
                    }
                }
            }
        }
        Some(decode_words(&value?))
    }
}

fn decode_words(value: &str) -> String {
    use base64::Engine;
    let mut out = String::new();
    let mut rest = value;
    let mut after_word = false;
    while !rest.is_empty() {
        let Some(start) = rest.find("=?") else {
            out.push_str(rest);
            break;
        };
        let (before, word) = rest.split_at(start);
        // White space between two encoded words is not part of the text.
        if !(after_word && before.trim().is_empty()) {
            out.push_str(before);
        }
        let parts: Vec<&str> = word[2..].splitn(3, '?').collect();
        let (Some(encoding), Some(tail)) = (parts.get(1), parts.get(2)) else {
            out.push_str(word);
            break;
        };
        let Some(end) = tail.find("?=") else {
            out.push_str(word);
            break;
        };
        let text = &tail[..end];
        let bytes = match encoding.to_ascii_lowercase().as_str() {
            "b" => base64::engine::general_purpose::STANDARD.decode(text).unwrap_or_default(),
            _ => q_decode(text),
        };
        out.push_str(&String::from_utf8_lossy(&bytes));
        after_word = true;
        rest = &tail[end + 2..];
    }
    out
}

fn q_decode(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'_' => out.push(b' '),
            b'=' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                out.push(u8::from_str_radix(hex, 16).unwrap_or(b'?'));
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    out
}

/// Where a session goes silent, holding the connection open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SilentAfter {
    /// After the 220 greeting: EHLO is never answered.
    Greeting,
    /// After the DATA command: the 354 never comes, so no message is sent.
    DataCommand,
    /// After the message and its final dot (it is recorded): the 250 never comes.
    Message,
}

#[derive(Default)]
struct State {
    mails: Vec<Mail>,
    /// address → replies to RCPT TO, in order; the last repeats.
    refuse: HashMap<String, Vec<String>>,
    /// One per new session, in order; sessions after these behave.
    stalls: VecDeque<SilentAfter>,
    sessions: usize,
    /// How long each stalled session lasted before the client hung up.
    stalled_for: Vec<Duration>,
    /// Close the connection after each message, as a server that drops
    /// idle clients does.
    hang_up_after_message: bool,
    /// Answer each message as Amazon SES does: `250 Ok <id>`.
    like_ses: bool,
}

#[derive(Clone)]
pub struct FakeSmtp {
    pub url: String,
    state: Arc<Mutex<State>>,
}

impl FakeSmtp {
    pub async fn start() -> FakeSmtp {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("smtp://{}", listener.local_addr().expect("addr"));
        let state = Arc::new(Mutex::new(State::default()));
        let shared = state.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(session(socket, shared.clone()));
            }
        });
        FakeSmtp { url, state }
    }

    /// Answer RCPT TO for `addr` with these replies in turn (`"550 5.1.1 no such user"`).
    pub fn refuse(&self, addr: &str, replies: &[&str]) {
        self.state.lock().unwrap().refuse.insert(addr.to_string(), replies.iter().map(|s| s.to_string()).collect());
    }

    /// The next sessions (one each, in order) go silent at these points.
    pub fn stall(&self, stalls: &[SilentAfter]) {
        self.state.lock().unwrap().stalls.extend(stalls.iter().copied());
    }

    /// Close each session after its message (the client is not told).
    pub fn hang_up_after_each_message(&self) {
        self.state.lock().unwrap().hang_up_after_message = true;
    }

    /// Answer each message as SES does, with the id its notifications use.
    pub fn answer_like_ses(&self) {
        self.state.lock().unwrap().like_ses = true;
    }

    /// How long each stalled session lasted until the client gave up on it.
    pub fn stalled_for(&self) -> Vec<Duration> {
        self.state.lock().unwrap().stalled_for.clone()
    }

    /// Connections accepted so far.
    pub fn sessions(&self) -> usize {
        self.state.lock().unwrap().sessions
    }

    pub fn to(&self, addr: &str) -> Vec<Mail> {
        self.state.lock().unwrap().mails.iter().filter(|m| m.to.iter().any(|t| t == addr)).cloned().collect()
    }
}

async fn session(socket: tokio::net::TcpStream, state: Arc<Mutex<State>>) {
    let began = Instant::now();
    let stall = {
        let mut s = state.lock().unwrap();
        s.sessions += 1;
        s.stalls.pop_front()
    };
    let (read, mut write) = socket.into_split();
    let mut lines = BufReader::new(read);
    let _ = write.write_all(b"220 fake ESMTP\r\n").await;
    if stall == Some(SilentAfter::Greeting) {
        return silent(lines, write, began, &state).await;
    }
    let mut rcpts: Vec<String> = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        if lines.read_line(&mut line).await.unwrap_or(0) == 0 {
            return;
        }
        let cmd = line.trim_end().to_string();
        let upper = cmd.to_ascii_uppercase();
        let reply = if upper.starts_with("EHLO") {
            "250-fake\r\n250-8BITMIME\r\n250-SMTPUTF8\r\n250 SIZE 10485760".to_string()
        } else if upper.starts_with("HELO") || upper.starts_with("NOOP") {
            "250 ok".into()
        } else if upper.starts_with("MAIL FROM") || upper.starts_with("RSET") {
            rcpts.clear();
            "250 ok".into()
        } else if upper.starts_with("RCPT TO") {
            let addr = cmd[8..].trim().trim_start_matches('<').split('>').next().unwrap_or_default().to_string();
            let refused = {
                let mut s = state.lock().unwrap();
                s.refuse.get_mut(&addr).map(|q| if q.len() > 1 { q.remove(0) } else { q[0].clone() })
            };
            match refused {
                Some(r) if !r.starts_with('2') => r,
                _ => {
                    rcpts.push(addr);
                    "250 ok".into()
                }
            }
        } else if upper == "DATA" {
            if stall == Some(SilentAfter::DataCommand) {
                return silent(lines, write, began, &state).await;
            }
            let _ = write.write_all(b"354 go ahead\r\n").await;
            let mut raw = String::new();
            loop {
                line.clear();
                if lines.read_line(&mut line).await.unwrap_or(0) == 0 {
                    return;
                }
                if line == ".\r\n" || line == ".\n" {
                    break;
                }
                raw.push_str(line.strip_prefix('.').filter(|_| line.starts_with("..")).unwrap_or(&line));
            }
            let answer = {
                let mut s = state.lock().unwrap();
                let ses_id = s.like_ses.then(|| format!("0100019{:09}-fake-ses-000000", s.mails.len() + 1));
                let answer = match &ses_id {
                    Some(id) => format!("250 Ok {id}"),
                    None => "250 queued".to_string(),
                };
                s.mails.push(Mail { to: rcpts.clone(), raw, ses_id });
                answer
            };
            if stall == Some(SilentAfter::Message) {
                return silent(lines, write, began, &state).await;
            }
            if state.lock().unwrap().hang_up_after_message {
                let _ = write.write_all(format!("{answer}\r\n").as_bytes()).await;
                return;
            }
            answer
        } else if upper == "QUIT" {
            let _ = write.write_all(b"221 bye\r\n").await;
            return;
        } else {
            "502 not implemented".into()
        };
        if write.write_all(format!("{reply}\r\n").as_bytes()).await.is_err() {
            return;
        }
    }
}

/// Holds the connection open and says nothing more (until the client leaves).
async fn silent(
    mut lines: BufReader<tokio::net::tcp::OwnedReadHalf>,
    write: tokio::net::tcp::OwnedWriteHalf,
    began: Instant,
    state: &Mutex<State>,
) {
    let mut sink = String::new();
    while lines.read_line(&mut sink).await.unwrap_or(0) > 0 {
        sink.clear();
    }
    state.lock().unwrap().stalled_for.push(began.elapsed());
    drop(write);
}
