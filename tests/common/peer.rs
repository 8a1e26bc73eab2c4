//! Raw TCP peers that misbehave the ways a provider's network can: one that
//! accepts and never answers, one that drops the connection once it has read
//! the request, and an address whose connects never complete.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Misbehaviour {
    /// Accepts the connection, reads nothing, answers nothing.
    AcceptAndHang,
    /// Reads the whole HTTP request, then holds the connection without a word.
    ReadThenHang,
    /// Reads the whole HTTP request, then closes the connection.
    ReadThenDrop,
}

#[derive(Clone)]
pub struct Peer {
    pub addr: SocketAddr,
    requests: Arc<AtomicUsize>,
    held_for: Arc<Mutex<Vec<Duration>>>,
}

impl Peer {
    pub async fn start(how: Misbehaviour) -> Peer {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let requests = Arc::new(AtomicUsize::new(0));
        let held_for = Arc::new(Mutex::new(Vec::new()));
        let (counted, held) = (requests.clone(), held_for.clone());
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let (counted, held) = (counted.clone(), held.clone());
                tokio::spawn(async move {
                    let began = Instant::now();
                    if how != Misbehaviour::AcceptAndHang && read_request(&mut socket).await {
                        counted.fetch_add(1, Ordering::SeqCst);
                    }
                    if how == Misbehaviour::ReadThenDrop {
                        let _ = socket.shutdown().await;
                        return;
                    }
                    // Silent until the client gives up and closes.
                    let mut rest = [0u8; 1024];
                    while matches!(socket.read(&mut rest).await, Ok(n) if n > 0) {}
                    held.lock().unwrap().push(began.elapsed());
                });
            }
        });
        Peer { addr, requests, held_for }
    }

    /// How long each silent connection was held before the client gave up.
    pub fn held_for(&self) -> Vec<Duration> {
        self.held_for.lock().unwrap().clone()
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Complete HTTP requests read so far.
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

/// Reads one HTTP/1.1 request (headers and a `Content-Length` body).
async fn read_request(socket: &mut TcpStream) -> bool {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = match socket.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else { continue };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        if buf.len() >= end + 4 + length {
            return true;
        }
    }
}

/// An address whose connects never complete: a listener with a full accept
/// queue (Linux drops further SYNs). Keep the guard alive while it is used.
pub struct Blackhole {
    pub addr: SocketAddr,
    _listener: TcpListener,
    _fillers: Vec<TcpStream>,
}

impl Blackhole {
    pub async fn start() -> Blackhole {
        let socket = TcpSocket::new_v4().expect("socket");
        socket.bind("127.0.0.1:0".parse().unwrap()).expect("bind");
        let listener = socket.listen(0).expect("listen");
        let addr = listener.local_addr().expect("addr");
        let mut fillers = Vec::new();
        loop {
            match tokio::time::timeout(Duration::from_millis(200), TcpStream::connect(addr)).await {
                Ok(Ok(s)) => fillers.push(s),
                Ok(Err(e)) => panic!("cannot fill the accept queue of {addr}: {e}"),
                Err(_) => break,
            }
            assert!(fillers.len() < 64, "the accept queue of {addr} never filled");
        }
        Blackhole { addr, _listener: listener, _fillers: fillers }
    }
}
