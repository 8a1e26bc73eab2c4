//! A scriptable fake HTTP provider (the SMS provider and the webhook receiver):
//! it speaks HTTP/1.1 with keep-alive, logs every call, and misbehaves on
//! command — latency, 429 with `Retry-After`, 5xx, accept-then-drop, never
//! answer. One that honours keys performs a key's effect once and answers a
//! repeat with the first answer; one that does not performs every call.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How the provider treats the calls that arrive while it is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Healthy,
    /// Acts at once, answers after this long (past Herald's timeout: `unknown`).
    Latency(Duration),
    /// `503`, nothing done.
    Unavailable,
    /// `429` with `Retry-After: n` seconds, nothing done.
    Throttled(u64),
    /// Acts, then closes the connection without an answer.
    DropAfterAccept,
    /// Acts, then never answers (until the client gives up).
    NeverReturn,
}

/// One call as the provider saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub provider: String,
    /// The idempotency key the call carried (`Idempotency-Key`, `webhook-id`,
    /// the `Message-ID`'s local part); empty when it carried none.
    pub key: String,
    /// The event's marker as found in the body (`evt~N~`).
    pub marker: String,
    /// Whether the provider acted on it (the message went out).
    pub effect: bool,
}

#[derive(Default)]
struct State {
    mode: Option<Mode>,
    calls: Vec<Call>,
    /// Keys already acted on, and the id answered: what an honouring provider replays.
    done: HashMap<String, String>,
}

#[derive(Clone)]
pub struct Provider {
    pub name: String,
    pub honours_keys: bool,
    pub addr: SocketAddr,
    key_header: &'static str,
    state: Arc<Mutex<State>>,
    /// Calls read and not yet answered (or dropped).
    in_flight: Arc<std::sync::atomic::AtomicUsize>,
}

impl Provider {
    /// `key_header`: lower-case name of the header carrying the key.
    pub async fn start(name: &str, honours_keys: bool, key_header: &'static str) -> anyhow::Result<Provider> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let provider = Provider {
            name: name.to_string(),
            honours_keys,
            addr: listener.local_addr()?,
            key_header,
            state: Arc::new(Mutex::new(State::default())),
            in_flight: Arc::default(),
        };
        let me = provider.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let me = me.clone();
                tokio::spawn(async move { me.serve(socket).await });
            }
        });
        Ok(provider)
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn set_mode(&self, mode: Mode) {
        self.state.lock().unwrap().mode = Some(mode);
    }

    pub fn calls(&self) -> Vec<Call> {
        self.state.lock().unwrap().calls.clone()
    }

    /// Whether a call is being handled right now: a kill now is mid-send.
    pub fn busy(&self) -> bool {
        self.in_flight.load(std::sync::atomic::Ordering::SeqCst) > 0
    }

    async fn serve(&self, mut socket: TcpStream) {
        let mut buf = Vec::new();
        loop {
            let Some((head, body)) = read_request(&mut socket, &mut buf).await else { return };
            self.in_flight.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let _done = Done(self.in_flight.clone());
            let key = header(&head, self.key_header).unwrap_or_default();
            let marker = marker(&body);
            let (mode, replay) = {
                let state = self.state.lock().unwrap();
                let replay = if self.honours_keys { state.done.get(&key).cloned() } else { None };
                (state.mode.unwrap_or(Mode::Healthy), replay)
            };
            let refuse = match mode {
                Mode::Unavailable => Some("HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n".to_string()),
                Mode::Throttled(s) => {
                    Some(format!("HTTP/1.1 429 Too Many Requests\r\nretry-after: {s}\r\ncontent-length: 0\r\n\r\n"))
                }
                _ => None,
            };
            if let Some(answer) = refuse {
                self.log(&key, &marker, false);
                if socket.write_all(answer.as_bytes()).await.is_err() {
                    return;
                }
                continue;
            }
            let id = match replay {
                Some(id) => {
                    self.log(&key, &marker, false);
                    id
                }
                None => self.act(&key, &marker),
            };
            match mode {
                Mode::DropAfterAccept => return,
                Mode::NeverReturn => {
                    let mut rest = [0u8; 1024];
                    while matches!(socket.read(&mut rest).await, Ok(n) if n > 0) {}
                    return;
                }
                Mode::Latency(d) => tokio::time::sleep(d).await,
                _ => {}
            }
            let body = format!("{{\"id\":\"{id}\"}}");
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            if socket.write_all(answer.as_bytes()).await.is_err() {
                return;
            }
        }
    }

    /// Performs the call's effect and logs it; returns the provider's id.
    fn act(&self, key: &str, marker: &str) -> String {
        let mut state = self.state.lock().unwrap();
        let id = format!("{}-{}", self.name, state.calls.len() + 1);
        state.calls.push(Call { provider: self.name.clone(), key: key.into(), marker: marker.into(), effect: true });
        if self.honours_keys && !key.is_empty() {
            state.done.insert(key.to_string(), id.clone());
        }
        id
    }

    fn log(&self, key: &str, marker: &str, effect: bool) {
        let mut state = self.state.lock().unwrap();
        state.calls.push(Call { provider: self.name.clone(), key: key.into(), marker: marker.into(), effect });
    }
}

/// Counts a call as finished however its handling ends.
struct Done(Arc<std::sync::atomic::AtomicUsize>);

impl Drop for Done {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The event markers the driver puts in every event's data (`evt~N~`), in
/// the order found, joined by spaces: one for a message, its members' for a digest.
pub fn marker(body: &str) -> String {
    let mut found: Vec<String> = Vec::new();
    let mut rest = body;
    while let Some(at) = rest.find("evt~") {
        rest = &rest[at + 4..];
        let Some(end) = rest.find('~') else { break };
        let m = format!("evt~{}~", &rest[..end]);
        if !found.contains(&m) {
            found.push(m);
        }
        rest = &rest[end + 1..];
    }
    found.join(" ")
}

fn header(head: &str, name: &str) -> Option<String> {
    head.lines().skip(1).find_map(|line| {
        let (k, v) = line.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim().to_string())
    })
}

/// Reads one HTTP/1.1 request (headers and a `Content-Length` body) off a
/// keep-alive connection; `buf` keeps what was read past it.
async fn read_request(socket: &mut TcpStream, buf: &mut Vec<u8>) -> Option<(String, String)> {
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_string();
            let length: usize = header(&head, "content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
            if buf.len() >= end + 4 + length {
                let body = String::from_utf8_lossy(&buf[end + 4..end + 4 + length]).to_string();
                buf.drain(..end + 4 + length);
                return Some((head, body));
            }
        }
        match socket.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_marker_is_found_in_json_and_text() {
        assert_eq!(marker(r#"{"data":{"ref":"evt~42~"}}"#), "evt~42~");
        assert_eq!(marker("Order o-1 v3 evt~7~ done"), "evt~7~");
        assert_eq!(marker("nothing here"), "");
        assert_eq!(marker("evt~1~, evt~2~ and evt~1~"), "evt~1~ evt~2~");
    }

    #[tokio::test]
    async fn an_honouring_provider_acts_once_per_key_and_a_plain_one_every_time() {
        let client = reqwest::Client::new();
        for honours in [true, false] {
            let p = Provider::start("sms", honours, "idempotency-key").await.unwrap();
            for _ in 0..2 {
                let r = client.post(p.url("/sms")).header("Idempotency-Key", "k1").body("evt~1~").send().await.unwrap();
                assert_eq!(r.status(), 200);
            }
            let effects = p.calls().iter().filter(|c| c.effect).count();
            assert_eq!(effects, if honours { 1 } else { 2 });
            p.set_mode(Mode::Unavailable);
            let r = client.post(p.url("/sms")).header("Idempotency-Key", "k2").body("evt~2~").send().await.unwrap();
            assert_eq!(r.status(), 503);
            assert!(!p.calls().last().unwrap().effect);
        }
    }
}
